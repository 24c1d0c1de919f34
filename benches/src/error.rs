//! The harness's one error type: everything that can stop a measurement point or a report.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// What went wrong in a server, a client, the orchestration or the report.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The plain libzmq sockets of the `raw` row failed.
    #[error("libzmq: {0}")]
    Zmq(#[from] zmq::Error),
    /// The transport crate failed.
    #[error("transport: {0}")]
    Transport(#[from] transport::Error),
    /// The protocol crate failed.
    #[error("protocol: {0}")]
    Protocol(#[from] protocol::Error),
    /// The node crate failed.
    #[error("node: {0}")]
    Node(#[from] node::Error),
    /// A call through the `node-caller` row's tower stack failed.
    #[error("caller: {0}")]
    Caller(String),
    /// Reading or writing a pipe, a process or a file failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A result line or file could not be encoded or decoded.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A reply did not carry the payload that was sent (an echo must).
    #[error("reply of {got} bytes to a request of {sent} bytes")]
    BadReply {
        /// Bytes sent.
        sent: usize,
        /// Bytes that came back.
        got: usize,
    },
    /// A `floor` row's length prefix announced more than the row ever sends.
    #[error("a message of {len} bytes, over the limit of {limit}")]
    TooLarge {
        /// Bytes announced.
        len: u64,
        /// The largest payload accepted.
        limit: usize,
    },
    /// An endpoint the `floor` row cannot use: it takes `tcp://host:port` only.
    #[error("endpoint {endpoint}: not tcp://host:port")]
    BadEndpoint {
        /// The endpoint given.
        endpoint: String,
    },
    /// A reply arrived with nothing in flight (the echo answered something never asked).
    #[error("a reply arrived with no request in flight")]
    UnexpectedReply,
    /// The bound node server has no address (cannot happen once `bind` succeeded).
    #[error("the node server has no bound address")]
    NotBound,
    /// A server process did not print its endpoint in time.
    #[error("{layer} server printed no endpoint within {waited:?}")]
    ServerStart {
        /// Which layer's server.
        layer: &'static str,
        /// How long we waited.
        waited: Duration,
    },
    /// A child process ended with a failure status.
    #[error("{what} exited with {status}")]
    ChildFailed {
        /// Which child ("raw client", ...).
        what: String,
        /// Its exit status.
        status: ExitStatus,
    },
    /// A client process did not finish in time and was killed.
    #[error("{what} did not finish within {waited:?} and was killed")]
    ChildTimeout {
        /// Which child.
        what: String,
        /// How long we waited.
        waited: Duration,
    },
    /// A client process exited successfully without a result line.
    #[error("{what} printed no result line")]
    NoResult {
        /// Which child.
        what: String,
    },
    /// A peer's row was asked for in a build without the `peers` feature.
    #[cfg(not(feature = "peers"))]
    #[error(
        "the {layer} row is not built in: build with `--features peers` \
         (benches/peers/run.sh does)"
    )]
    NotBuiltIn {
        /// The row.
        layer: &'static str,
    },
    /// A peer's row (NATS, Moleculer) failed.
    #[cfg(feature = "peers")]
    #[error("{0}")]
    Peer(#[from] crate::layers::PeerError),
    /// Not every peer of a scale run joined the hub in time.
    #[error("{joined} of {peers} peers joined the hub within {waited:?}")]
    JoinTimeout {
        /// Peers the hub counted.
        joined: usize,
        /// Peers started.
        peers: usize,
        /// How long we waited.
        waited: Duration,
    },
    /// The scale run would need more open files than the process may have.
    #[error(
        "the scale run needs about {needed} open files in one process, over the limit of \
         {limit}: raise it (ulimit -n) or lower --peers or --per-process"
    )]
    OpenFiles {
        /// Descriptors the largest process would hold.
        needed: u64,
        /// The soft limit.
        limit: u64,
    },
    /// A client's task panicked or was cancelled.
    #[error("client task: {0}")]
    ClientTask(#[from] tokio::task::JoinError),
    /// Drawing a chart failed.
    #[error("plot {path}: {cause}")]
    Plot {
        /// The SVG file being drawn.
        path: PathBuf,
        /// plotters' error, as text (its type is generic over the backend).
        cause: String,
    },
}

/// The harness's result type.
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
