//! The rows of the report: for each layer, the server process's echo and the client
//! process's driver.
//!
//! Every server binds, prints the endpoint it really bound on one stdout line, then serves
//! until the process is killed. Every client connects, makes sure the connection is up, runs
//! one [`Plan`](crate::measure::Plan) and returns a [`Point`].
//!
//! Async servers and clients each run on a current-thread tokio runtime: with one socket
//! and one loop per process that gave the lowest latency here (no cross-thread wake-ups).
//! The exception is the server of the CPU-bound rows (`node-cpu-1`, `node-cpu-2`): a
//! multi-thread runtime with 1 or 2 worker threads, so that the two rows side by side show
//! whether the node spreads its handlers over the workers it is given.
//! All sockets use a high-water mark of 100,000 messages so that a window of 1000 never
//! meets backpressure.
//!
//! The peers' rows (`nats`, `moleculer`) are built only with the `peers` feature (see
//! `peers/`); they are not in [`Layer::ALL`] and are measured only when named in `--layers`,
//! as are the CPU-bound rows (a study of the node's handler scheduling, not of its cost).

mod floor;
mod node;
#[cfg(feature = "peers")]
mod peers;
mod protocol;
mod raw;
mod transport;

use std::fmt;
use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::measure::Point;

#[cfg(feature = "peers")]
pub(crate) use peers::PeerError;

/// High-water mark of every socket, in messages.
const HWM: i32 = 100_000;

/// Timeout of one request in the protocol and node rows: far above any latency measured,
/// so a timeout means something broke.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A row of the report.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    clap::ValueEnum,
    Serialize,
    Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Layer {
    /// Plain TCP, no messaging library: a length-prefixed echo on a blocking thread per
    /// connection, a blocking `std::net::TcpStream` client. The kernel's loopback alone, the
    /// floor any engine (libzmq or our own) is compared with.
    Floor,
    /// Plain `zmq` sockets in blocking threads, ROUTER echo and DEALER client: the limit.
    Raw,
    /// `transport::Router` echo and `transport::Dealer` client.
    Transport,
    /// The `transport` row on the native ZMTP engine (`Engine::Native`) on both sides.
    TransportNative,
    /// `protocol::Server` with an echo handler and `protocol::Client`.
    Protocol,
    /// A `Node` bound with a raw echo handler and a `Node` connected to it (`call(..).raw().send(..)`).
    Node,
    /// One-way ticks from node to node (`call(..).raw().tick(..)`), counted by the receiver.
    NodeTick,
    /// The `node` row over CURVE: both nodes with key pairs, `connect_with` the
    /// server's key (every message encrypted and authenticated).
    NodeCurve,
    /// The `node` row on the native ZMTP engine on both sides.
    NodeNative,
    /// The `node-curve` row on the native ZMTP engine (CURVE in Rust) on both sides.
    NodeNativeCurve,
    /// The `node-block-on` row on the native engine. Not in [`Layer::ALL`].
    NodeNativeBlockOn,
    /// The `node-tick` row on the native engine.
    NodeNativeTick,
    /// The `node` row with the client's request loop as the runtime's `block_on` future, as
    /// `#[tokio::main]` code runs it (the `node` row's loop is a spawned task). Not in
    /// [`Layer::ALL`].
    NodeBlockOn,
    /// The `node` row with the request context on: two short metadata entries on every
    /// request, `tracing` spans recorded (a subscriber with `zeronode=info`) and metrics
    /// recorded into a Prometheus recorder, on both sides. Not in [`Layer::ALL`].
    NodeCtx,
    /// The `node` row's requests sent through `Node::caller()` under tower's retry
    /// (`RetrySafe`), the node's `CallTimeoutLayer` (tower's timeout with
    /// `ZERONODE_CALLER_TIMEOUT=tower`) and tower's concurrency limit. Not in [`Layer::ALL`].
    NodeCaller,
    /// The `node-ctx` row on the native engine. Not in [`Layer::ALL`].
    NodeNativeCtx,
    /// The `node` row over `ipc://` (a Unix socket) instead of TCP. Not in [`Layer::ALL`].
    NodeIpc,
    /// The `node-native` row over `ipc://`. Not in [`Layer::ALL`].
    NodeNativeIpc,
    /// The `node-caller` row on the native engine. Not in [`Layer::ALL`].
    NodeNativeCaller,
    /// The `node` row with a handler that does a fixed CPU-bound job of about 200 µs per
    /// request before answering the payload back; the server on a multi-thread runtime with
    /// one worker thread. Not in [`Layer::ALL`].
    #[value(name = "node-cpu-1")]
    #[serde(rename = "node-cpu-1")]
    NodeCpu1,
    /// `node-cpu-1` with the server on two worker threads: a higher rate if the node runs
    /// handlers in parallel (at most twice, less the client's share of the cores), the same
    /// if they all run on one task. Not in [`Layer::ALL`].
    #[value(name = "node-cpu-2")]
    #[serde(rename = "node-cpu-2")]
    NodeCpu2,
    /// A peer: NATS request/reply through `nats-server`, async-nats on both sides (feature
    /// `peers`; not in [`Layer::ALL`]).
    Nats,
    /// A peer: Moleculer (Node.js) with its TCP transporter (feature `peers`; not in
    /// [`Layer::ALL`]).
    Moleculer,
}

impl Layer {
    /// Every layer of zeronode, in report order, below them the floor of plain TCP: the
    /// default set. The CPU-bound rows and the
    /// peers' rows are measured only when named.
    pub(crate) const ALL: [Layer; 11] = [
        Layer::Floor,
        Layer::Raw,
        Layer::Transport,
        Layer::Protocol,
        Layer::Node,
        Layer::NodeTick,
        Layer::NodeCurve,
        Layer::TransportNative,
        Layer::NodeNative,
        Layer::NodeNativeCurve,
        Layer::NodeNativeTick,
    ];

    /// The name used on the command line and in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layer::Floor => "floor",
            Layer::Raw => "raw",
            Layer::Transport => "transport",
            Layer::TransportNative => "transport-native",
            Layer::Protocol => "protocol",
            Layer::Node => "node",
            Layer::NodeTick => "node-tick",
            Layer::NodeCurve => "node-curve",
            Layer::NodeNative => "node-native",
            Layer::NodeNativeCurve => "node-native-curve",
            Layer::NodeNativeBlockOn => "node-native-block-on",
            Layer::NodeNativeTick => "node-native-tick",
            Layer::NodeBlockOn => "node-block-on",
            Layer::NodeCtx => "node-ctx",
            Layer::NodeCaller => "node-caller",
            Layer::NodeNativeCtx => "node-native-ctx",
            Layer::NodeIpc => "node-ipc",
            Layer::NodeNativeIpc => "node-native-ipc",
            Layer::NodeNativeCaller => "node-native-caller",
            Layer::NodeCpu1 => "node-cpu-1",
            Layer::NodeCpu2 => "node-cpu-2",
            Layer::Nats => "nats",
            Layer::Moleculer => "moleculer",
        }
    }

    /// Whether the row is a one-way stream: one point per size, no window, no latency.
    pub(crate) fn is_stream(self) -> bool {
        matches!(self, Layer::NodeTick | Layer::NodeNativeTick)
    }

    /// The ZMTP engine the row's sockets run on, on both sides.
    pub(crate) fn engine(self) -> ::transport::Engine {
        match self {
            Layer::TransportNative
            | Layer::NodeNative
            | Layer::NodeNativeCurve
            | Layer::NodeNativeBlockOn
            | Layer::NodeNativeTick
            | Layer::NodeNativeCtx
            | Layer::NodeNativeCaller
            | Layer::NodeNativeIpc => ::transport::Engine::Native,
            _ => ::transport::Engine::Libzmq,
        }
    }

    /// Where the row's server binds: a free loopback port, or a fresh Unix socket path for
    /// the `ipc` rows.
    pub(crate) fn endpoint(self) -> &'static str {
        match self {
            Layer::NodeIpc | Layer::NodeNativeIpc => "ipc://*",
            _ => "tcp://127.0.0.1:0",
        }
    }

    /// Whether the row has the request context on (`node-ctx`, `node-native-ctx`).
    pub(crate) fn is_ctx(self) -> bool {
        matches!(self, Layer::NodeCtx | Layer::NodeNativeCtx)
    }

    /// Whether the row's server does a CPU-bound job per request (`node-cpu-N`): its rate is
    /// the job's, not the layer's cost, so it has no ratio to raw.
    pub(crate) fn is_cpu_bound(self) -> bool {
        matches!(self, Layer::NodeCpu1 | Layer::NodeCpu2)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a client process is asked to measure.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The row.
    pub(crate) layer: Layer,
    /// The server's endpoint, as it printed it.
    pub(crate) endpoint: String,
    /// Payload bytes per request.
    pub(crate) size: usize,
    /// Requests in flight (ignored by a stream).
    pub(crate) window: usize,
    /// Warm-up before the measured phase.
    pub(crate) warmup: Duration,
    /// Length of the measured phase.
    pub(crate) duration: Duration,
}

impl Job {
    /// The payload every request carries: `size` bytes of 0xab.
    fn payload(&self) -> bytes::Bytes {
        bytes::Bytes::from(vec![0xab; self.size])
    }

    /// Checks that an echo gave back as many bytes as were sent.
    fn check_reply(&self, got: usize) -> Result<()> {
        if got == self.size {
            Ok(())
        } else {
            Err(crate::error::Error::BadReply {
                sent: self.size,
                got,
            })
        }
    }
}

/// Serves `layer` on `endpoint` (`tcp://127.0.0.1:0` picks a port) until the process ends.
/// The bound endpoint is printed on stdout first.
pub(crate) fn serve(layer: Layer, endpoint: &str) -> Result<()> {
    set_engine(layer.engine());
    match layer {
        Layer::Floor => floor::serve(endpoint),
        Layer::Raw => raw::serve(endpoint),
        Layer::Transport | Layer::TransportNative => {
            runtime()?.block_on(transport::serve(endpoint))
        }
        Layer::Protocol => runtime()?.block_on(protocol::serve(endpoint)),
        // One node server answers both the request/reply and the tick rows.
        Layer::Node
        | Layer::NodeTick
        | Layer::NodeBlockOn
        | Layer::NodeCaller
        | Layer::NodeNativeCaller
        | Layer::NodeNative
        | Layer::NodeNativeBlockOn
        | Layer::NodeNativeTick
        | Layer::NodeIpc
        | Layer::NodeNativeIpc => runtime()?.block_on(node::serve(endpoint, false)),
        Layer::NodeCurve | Layer::NodeNativeCurve => {
            runtime()?.block_on(node::serve(endpoint, true))
        }
        Layer::NodeCtx | Layer::NodeNativeCtx => {
            node::observe_everything();
            runtime()?.block_on(node::serve_ctx(endpoint))
        }
        Layer::NodeCpu1 => multi_thread_runtime(1)?.block_on(node::serve_cpu(endpoint)),
        Layer::NodeCpu2 => multi_thread_runtime(2)?.block_on(node::serve_cpu(endpoint)),
        // Each peer binds where it can: its own free loopback port.
        #[cfg(feature = "peers")]
        Layer::Nats => runtime()?.block_on(peers::nats::serve()),
        #[cfg(feature = "peers")]
        Layer::Moleculer => peers::moleculer::serve(),
        #[cfg(not(feature = "peers"))]
        Layer::Nats | Layer::Moleculer => Err(not_built_in(layer)),
    }
}

/// Runs one measurement point against a server already serving `job.layer`.
pub(crate) fn client(job: &Job) -> Result<Point> {
    set_engine(job.layer.engine());
    match job.layer {
        Layer::Floor => floor::client(job),
        Layer::Raw => raw::client(job),
        Layer::Transport | Layer::TransportNative => runtime()?.block_on(transport::client(job)),
        // A task of their own (see `on_task`).
        Layer::Protocol => on_task(job, |job| async move { protocol::client(&job).await }),
        // The CPU-bound rows' client is the `node` row's, on a current-thread runtime.
        Layer::Node
        | Layer::NodeCurve
        | Layer::NodeNative
        | Layer::NodeNativeCurve
        | Layer::NodeCpu1
        | Layer::NodeCpu2
        | Layer::NodeIpc
        | Layer::NodeNativeIpc => on_task(job, |job| async move { node::client(&job).await }),
        Layer::NodeCaller | Layer::NodeNativeCaller => {
            on_task(job, |job| async move { node::caller_client(&job).await })
        }
        Layer::NodeTick | Layer::NodeNativeTick => runtime()?.block_on(node::tick_client(job)),
        Layer::NodeBlockOn | Layer::NodeNativeBlockOn => runtime()?.block_on(node::client(job)),
        Layer::NodeCtx | Layer::NodeNativeCtx => {
            node::observe_everything();
            on_task(job, |job| async move { node::client(&job).await })
        }
        #[cfg(feature = "peers")]
        Layer::Nats => on_task(job, |job| async move { peers::nats::client(&job).await }),
        #[cfg(feature = "peers")]
        Layer::Moleculer => peers::moleculer::client(job),
        #[cfg(not(feature = "peers"))]
        Layer::Nats | Layer::Moleculer => Err(not_built_in(job.layer)),
    }
}

/// Runs a client whose library has a driver task of its own (protocol, node) as a spawned
/// task, as a service's request loop usually is, not as the runtime's `block_on` future:
/// tokio checks for I/O without blocking (an extra `epoll_wait`) every time another task
/// wakes the `block_on` future, which here is once per reply (measured with `perf stat`,
/// protocol client, window 1: 5.8 `epoll_wait` per request against the transport client's
/// 3.9, whose replies wake it from the I/O driver directly).
fn on_task<F, Fut>(job: &Job, client: F) -> Result<Point>
where
    F: FnOnce(Job) -> Fut,
    Fut: std::future::Future<Output = Result<Point>> + Send + 'static,
{
    let task = client(job.clone());
    runtime()?.block_on(async move { tokio::spawn(task).await? })
}

/// The error for a peer's row in a build without the `peers` feature.
#[cfg(not(feature = "peers"))]
fn not_built_in(layer: Layer) -> crate::error::Error {
    crate::error::Error::NotBuiltIn {
        layer: layer.name(),
    }
}

/// The engine of this process's sockets: the row's (set by `serve` and `client`).
static ENGINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn set_engine(engine: ::transport::Engine) {
    ENGINE.store(
        engine == ::transport::Engine::Native,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The engine the row being served or measured runs on.
pub(crate) fn engine() -> ::transport::Engine {
    if ENGINE.load(std::sync::atomic::Ordering::Relaxed) {
        ::transport::Engine::Native
    } else {
        ::transport::Engine::Libzmq
    }
}

/// The current-thread runtime every async server and client runs on.
fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A multi-thread runtime with `workers` worker threads, for the CPU-bound rows' server.
///
/// The server's own future (build the node, announce, wait) runs on the thread that calls
/// `block_on`, not on a worker; the node's socket drivers, and whatever tasks the node
/// spawns for its handlers, are tasks and run on the workers.
fn multi_thread_runtime(workers: usize) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?)
}

/// Prints the bound endpoint as the process's first stdout line, for the orchestrator.
fn announce(endpoint: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{endpoint}")?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn every_layer_has_one_name_on_the_command_line_in_the_report_and_in_json() {
        for &layer in Layer::value_variants() {
            let value = layer.to_possible_value().unwrap();
            assert_eq!(value.get_name(), layer.name());
            let json = serde_json::to_string(&layer).unwrap();
            assert_eq!(json, format!("\"{}\"", layer.name()));
            let back: Layer = serde_json::from_str(&json).unwrap();
            assert_eq!(back, layer);
        }
    }
}
