//! The transport layer's error type.

use std::io;

use crate::PeerId;

/// Everything that can go wrong in the transport layer.
///
/// Causes reported by libzmq are carried as [`io::Error`]s built from libzmq's errno, so no
/// `zmq` type leaks into the public API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A socket was created outside a tokio runtime; the transport needs its reactor.
    #[error("no tokio runtime: sockets must be created inside a tokio runtime")]
    NoRuntime,
    /// The endpoint string is not a valid ZeroMQ endpoint (`tcp://host:port`, `ipc://path`,
    /// `inproc://name`).
    #[error("invalid endpoint {endpoint:?}: {source}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why libzmq refused it.
        source: io::Error,
    },
    /// Binding failed (the address is in use, not local, not permitted, ...).
    #[error("cannot bind {endpoint}: {source}")]
    Bind {
        /// The endpoint as given.
        endpoint: String,
        /// Why it failed.
        source: io::Error,
    },
    /// Connecting failed before any network activity (libzmq connects in the background, so
    /// an unreachable peer is not an error here: it shows up as connection events).
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The endpoint as given.
        endpoint: String,
        /// Why it failed.
        source: io::Error,
    },
    /// `unbind` of an endpoint this socket is not bound to.
    #[error("not bound to {endpoint}")]
    NotBound {
        /// The endpoint as given.
        endpoint: String,
    },
    /// `disconnect` of an endpoint this socket is not connected to.
    #[error("not connected to {endpoint}")]
    NotConnected {
        /// The endpoint as given.
        endpoint: String,
    },
    /// A Router was asked to send to a routing id that has no connection (ROUTER_MANDATORY).
    #[error("unknown peer {peer}")]
    UnknownPeer {
        /// The routing id the message was addressed to.
        peer: PeerId,
    },
    /// The send high-water mark is reached and the socket is configured to fail rather than
    /// wait ([`Backpressure::Fail`](crate::Backpressure::Fail)).
    #[error("send queue full (high-water mark reached)")]
    QueueFull,
    /// A message with no frame cannot be sent.
    #[error("a message needs at least one frame")]
    EmptyMessage,
    /// The socket was closed.
    #[error("socket closed")]
    Closed,
    /// The connection-event stream of this socket was already taken.
    #[error("the event stream of this socket was already taken")]
    EventsTaken,
    /// A socket option was refused by libzmq.
    #[error("cannot set socket option {name}: {source}")]
    SetOption {
        /// The option's name.
        name: &'static str,
        /// Why libzmq refused it.
        source: io::Error,
    },
    /// A CURVE key is not 32 bytes (or, as text, not 40 characters of Z85).
    #[error("a CURVE key is 32 bytes or 40 Z85 characters, got {actual}")]
    KeyLength {
        /// The length given (bytes, or characters of text).
        actual: usize,
    },
    /// A CURVE key's text is not valid Z85 (a character outside the alphabet, or a group of
    /// five characters whose value does not fit in four bytes).
    #[error("invalid Z85 in a CURVE key at position {position}")]
    KeyEncoding {
        /// Byte offset of the first bad character (or of the overflowing group).
        position: usize,
    },
    /// CURVE was asked for on the libzmq engine, but the linked libzmq was built without it:
    /// zmq-sys is crates.io's, not the workspace's third_party/zmq-sys (which builds libzmq
    /// with libsodium). The native engine's CURVE does not need libzmq.
    #[error(
        "the linked libzmq has no CURVE support (crates.io's zmq-sys builds it without \
         libsodium): add `[patch.crates-io] zmq-sys = {{ path = \"<zeronode>/third_party/zmq-sys\" }}` \
         to your workspace's Cargo.toml (zeronode's README, \"Use it from your own project\"), \
         or use the native engine"
    )]
    CurveUnavailable,
    /// A socket was asked for on an engine this build does not have: the libzmq engine
    /// (`Options::engine`, `ZERONODE_ENGINE=libzmq`) without the `libzmq` feature.
    #[error(
        "the {engine} engine is not in this build: enable the `libzmq` feature of `node` (or \
         `transport`), or use the native engine"
    )]
    EngineUnavailable {
        /// The engine asked for.
        engine: crate::Engine,
    },
    /// An allow-list operation on a socket that is not a CURVE server.
    #[error("this socket is not a CURVE server (see Options::curve)")]
    NotCurveServer,
    /// An engine name that is neither `libzmq` nor `native`.
    #[error("unknown engine {name:?}: `libzmq` or `native`")]
    UnknownEngine {
        /// The name given.
        name: String,
    },
    /// Any other libzmq failure, with the operation that failed.
    #[error("{operation} failed: {source}")]
    Socket {
        /// What the transport was doing.
        operation: &'static str,
        /// libzmq's error.
        source: io::Error,
    },
}

/// The transport layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Turns a libzmq error into an [`io::Error`] carrying the same errno.
#[cfg(feature = "libzmq")]
pub(crate) fn os(err: zmq::Error) -> io::Error {
    io::Error::from_raw_os_error(err.to_raw())
}

/// Wraps a libzmq error as [`Error::Socket`].
#[cfg(feature = "libzmq")]
pub(crate) fn socket_error(operation: &'static str) -> impl FnOnce(zmq::Error) -> Error {
    move |err| Error::Socket {
        operation,
        source: os(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user who meets these errors reads the fix in the message itself.
    #[test]
    fn build_errors_name_their_fix() {
        let curve = Error::CurveUnavailable.to_string();
        assert!(
            curve.contains(
                "[patch.crates-io] zmq-sys = { path = \"<zeronode>/third_party/zmq-sys\" }"
            ),
            "{curve}"
        );
        assert!(curve.contains("native engine"), "{curve}");
        let engine = Error::EngineUnavailable {
            engine: crate::Engine::Libzmq,
        }
        .to_string();
        assert!(
            engine.starts_with("the libzmq engine is not in this build"),
            "{engine}"
        );
        assert!(engine.contains("`libzmq` feature of `node`"), "{engine}");
    }
}
