//! The node layer's error type.

use std::time::Duration;

use protocol::Limit;

use crate::codes::system::{
    BAD_METADATA, BUSY, CANCELLED, DEADLINE_EXCEEDED, PANICKED, PAYLOAD_TOO_LARGE, SHUTTING_DOWN,
    TOO_MANY_STREAMS,
};
use crate::codes::{route, Code};

/// `" (at ROUTER)"` for an error a router reported, nothing for one seen here.
fn via(hop: &Option<String>) -> String {
    hop.as_deref()
        .map(|hop| format!(" (at router {hop:?})"))
        .unwrap_or_default()
}

/// A stable code for each error a caller may branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No joined node has that id.
    NodeNotFound,
    /// No joined node matches the filter.
    NoNodesMatchFilter,
    /// No reply within the deadline.
    RequestTimeout,
    /// A stream's next item did not come within its idle timeout.
    IdleTimeout,
    /// The remote handler (or its middleware) failed.
    HandlerError,
    /// The remote has no handler for the event.
    NoHandler,
    /// The peer left (stopped, timed out, disconnected) while the request was pending.
    PeerLeft,
    /// There is no connection to send on.
    NotConnected,
    /// The node is closed or closing.
    Closed,
    /// Another node already uses this id.
    DuplicateId,
    /// The peer speaks another protocol version.
    VersionMismatch,
    /// The handshake did not complete.
    HandshakeFailed,
    /// The peer refused the connection: security (CURVE key, allow-list, mechanism).
    Refused,
    /// The node has no CURVE key pair, or is not bound, for a security call.
    Security,
    /// A filter is malformed or cannot travel.
    InvalidFilter,
    /// The target does not fit the call (a request to all matches, a gather to an id).
    InvalidTarget,
    /// A forwarded message looped between routers or ran out of hops.
    RouteLoop,
    /// A router could not pass the message on to its next hop.
    HopFailed,
    /// An event name is reserved or malformed.
    InvalidEvent,
    /// A payload could not be encoded or decoded.
    Serialization,
    /// Binding, unbinding or connecting failed.
    Address,
    /// A received message was not valid.
    InvalidEnvelope,
    /// The layers below failed.
    Transport,
    /// The remote node's handlers were at their limit and it refused the request.
    Busy,
    /// The remote node is closing and takes no new requests.
    ShuttingDown,
    /// The remote node stopped the handler before it answered: its close grace ran out.
    /// Also a stream's sink, on the handler's side, once its caller gave up on the stream.
    Cancelled,
    /// The remote handler panicked.
    HandlerPanicked,
    /// A payload is larger than its receiver accepts.
    PayloadTooLarge,
    /// A stream was refused: its receiver had its most streams open.
    TooManyStreams,
    /// Metadata refused: a bad key, over the limits, or malformed.
    Metadata,
}

impl ErrorCode {
    /// The code as a stable string (`"NODE_NOT_FOUND"`, `"BUSY"`, ...): what a handler that
    /// passes an error of its own call on with `?` answers
    /// ([`HandlerError`](crate::HandlerError)'s `From<Error>`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NodeNotFound => "NODE_NOT_FOUND",
            ErrorCode::NoNodesMatchFilter => "NO_NODES_MATCH_FILTER",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::IdleTimeout => "IDLE_TIMEOUT",
            ErrorCode::HandlerError => "HANDLER_ERROR",
            ErrorCode::NoHandler => "NO_HANDLER",
            ErrorCode::PeerLeft => "PEER_LEFT",
            ErrorCode::NotConnected => "NOT_CONNECTED",
            ErrorCode::Closed => "CLOSED",
            ErrorCode::DuplicateId => "DUPLICATE_ID",
            ErrorCode::VersionMismatch => "VERSION_MISMATCH",
            ErrorCode::HandshakeFailed => "HANDSHAKE_FAILED",
            ErrorCode::Refused => "REFUSED",
            ErrorCode::Security => "SECURITY",
            ErrorCode::InvalidFilter => "INVALID_FILTER",
            ErrorCode::InvalidTarget => "INVALID_TARGET",
            ErrorCode::RouteLoop => "ROUTE_LOOP",
            ErrorCode::HopFailed => "HOP_FAILED",
            ErrorCode::InvalidEvent => "INVALID_EVENT",
            ErrorCode::Serialization => "SERIALIZATION",
            ErrorCode::Address => "ADDRESS",
            ErrorCode::InvalidEnvelope => "INVALID_ENVELOPE",
            ErrorCode::Transport => "TRANSPORT",
            ErrorCode::Busy => "BUSY",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::HandlerPanicked => "HANDLER_PANICKED",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::TooManyStreams => "TOO_MANY_STREAMS",
            ErrorCode::Metadata => "METADATA",
        }
    }
}

/// The bound on a node's handlers that refused a request ([`Error::Busy`]), as the
/// refusing node sent it ([`Limit::Handlers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandlerBound {
    /// The most handlers it runs at once: node-wide, or for one caller.
    pub max: u32,
    /// Whether it was the caller's own share
    /// ([`Config::max_handlers_per_peer`](crate::Config::max_handlers_per_peer)) rather
    /// than the node-wide bound.
    pub per_peer: bool,
}

/// Everything that can go wrong in the node layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No joined node has this id.
    #[error("node {id:?} not found")]
    NodeNotFound {
        /// The id asked for.
        id: String,
    },
    /// No joined node matches the filter in the direction asked.
    #[error("no node matches the filter")]
    NoNodesMatchFilter,
    /// No reply arrived in time.
    #[error("request {event:?} timed out after {timeout:?}")]
    Timeout {
        /// The request's event.
        event: String,
        /// Its timeout.
        timeout: Duration,
    },
    /// A stream's next item did not come within its idle timeout
    /// ([`Items::idle_timeout`](crate::Items::idle_timeout)); the handler was cancelled.
    #[error("stream {event:?} had no item for {idle:?}")]
    IdleTimeout {
        /// The stream's event.
        event: String,
        /// The idle timeout it was given.
        idle: Duration,
    },
    /// The remote handler answered with an error (its code and message): what its
    /// [`HandlerError`](crate::HandlerError) said.
    ///
    /// ```
    /// # fn branch(err: node::Error) {
    /// use node::{Code, Error};
    /// match err {
    ///     Error::Handler { code: Code::NotFound, .. } => { /* create it */ }
    ///     Error::Handler { code: Code::Other(code), message } => eprintln!("{code}: {message}"),
    ///     other => eprintln!("{other}"),
    /// }
    /// # }
    /// ```
    #[error("handler error {code}: {message}")]
    Handler {
        /// The handler's code: a well-known one, or its own ([`Code::Other`]).
        code: Code,
        /// The handler's message.
        message: String,
    },
    /// The remote node has no handler for the event.
    #[error("no handler for {event:?}")]
    NoHandler {
        /// The event.
        event: String,
    },
    /// The peer left while the request was pending (the request fails at once instead of
    /// waiting for its timeout). Through routers, `peer` is still the node that left (the
    /// router names it, as data) and `hop` the router that saw it go.
    ///
    /// ```
    /// # fn f(err: node::Error) {
    /// if let node::Error::PeerLeft { peer, hop } = &err {
    ///     eprintln!("{peer} left before answering (seen by {})", hop.as_deref().unwrap_or("us"));
    /// }
    /// # }
    /// ```
    #[error("peer {peer:?} left{}", via(hop))]
    PeerLeft {
        /// The node that left: the id asked for, the node a filter picked, or the worker
        /// behind the routers. Empty only when a router of an older version did not say.
        peer: String,
        /// The router that saw it leave; `None` when this node saw it itself.
        hop: Option<String>,
    },
    /// A router could not complete its hop for a reason other than the node leaving (its
    /// connection to the next hop failed in another way). The message may have arrived:
    /// sending again is not retry-safe.
    #[error("the hop to {} failed{}: {message}", peer.as_deref().unwrap_or("the next node"), via(hop))]
    HopFailed {
        /// The router that failed to pass the message on (`None` from an older router).
        hop: Option<String>,
        /// The node it was passing the message to, when it had picked one.
        peer: Option<String>,
        /// What the router said (for people).
        message: String,
    },
    /// No connection to send on.
    #[error("not connected")]
    NotConnected,
    /// The node is closed or closing.
    #[error("node closed")]
    Closed,
    /// Another node already uses this id (refused on both sides of the handshake).
    #[error("duplicate node id {id:?}")]
    DuplicateId {
        /// The id in conflict.
        id: String,
    },
    /// The peer speaks another node protocol version.
    #[error("protocol version mismatch: ours {ours}, theirs {theirs}")]
    VersionMismatch {
        /// Our version.
        ours: u32,
        /// The peer's version.
        theirs: u32,
    },
    /// The handshake with `endpoint` did not complete in time.
    #[error("handshake with {endpoint} timed out")]
    HandshakeTimeout {
        /// The endpoint.
        endpoint: String,
    },
    /// The peer refused our handshake or sent an invalid one.
    #[error("handshake refused: {reason}")]
    HandshakeRefused {
        /// Why.
        reason: String,
    },
    /// The node at `endpoint` refused the connection during the security handshake: our key
    /// is not on its allow-list (or was revoked), the server key we gave is not its key,
    /// or one side speaks CURVE and the other plaintext. Returned at once by `connect`.
    #[error("{endpoint} refused the connection: {reason}")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// What libzmq reported.
        reason: transport::HandshakeFailure,
    },
    /// A security call on a node that has no CURVE key pair ([`NodeBuilder::curve`](crate::NodeBuilder::curve)).
    #[error("this node has no CURVE key pair")]
    NoKeys,
    /// A filter could not be built or parsed (bad operator, bad operand, bad regex).
    #[error("invalid filter: {reason}")]
    InvalidFilter {
        /// What is wrong with it.
        reason: String,
    },
    /// The target does not fit the call: a request (one reply) to `Target::all`, or a
    /// gather to an id. Nothing was sent.
    #[error("invalid target: {reason}")]
    InvalidTarget {
        /// Which call and which target.
        reason: &'static str,
    },
    /// A forwarded message came back to a router it had visited, or ran out of hops.
    #[error("route loop{}: {reason}", via(hop))]
    RouteLoop {
        /// What the router said (for people).
        reason: String,
        /// The router that refused it (`None` from an older router).
        hop: Option<String>,
    },
    /// A filter holding a Rust predicate cannot be sent to another node.
    #[error("a predicate filter cannot travel to another node")]
    PredicateNotSerializable,
    /// The node has no bound address (for `unbind`), or already has one (for `bind`).
    #[error("{0}")]
    Bind(&'static str),
    /// `disconnect` of an address this node is not connected to.
    #[error("not connected to {address}")]
    NotConnectedTo {
        /// The address.
        address: String,
    },
    /// The remote node's handlers were at their limit
    /// ([`Config::max_concurrent_handlers`](crate::Config::max_concurrent_handlers), or this
    /// caller's share, [`Config::max_handlers_per_peer`](crate::Config::max_handlers_per_peer))
    /// and its policy refused the request: nothing ran; it may be sent again later.
    #[error("the remote node is busy: {message}")]
    Busy {
        /// What the remote said.
        message: String,
        /// The bound that was reached, when the remote says it (a node of an older
        /// version does not).
        bound: Option<HandlerBound>,
    },
    /// The payload is larger than its receiver accepts (the limit its handshake gave, or
    /// ours for a message through routers): refused before anything was sent.
    #[error("a payload of {size} bytes is over the receiver's limit of {max}")]
    PayloadTooLarge {
        /// The payload's size.
        size: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// A stream was refused before its handler ran: the remote had `max` streams open on
    /// the connection (0 when it did not say).
    #[error("the remote has its most streams open ({max})")]
    TooManyStreams {
        /// The remote's most open streams.
        max: usize,
    },
    /// The remote node is closing and took no new request: nothing ran.
    #[error("the remote node is shutting down")]
    ShuttingDown,
    /// The remote node stopped the handler before it answered, because the node's close
    /// grace ([`Config::close_grace`](crate::Config::close_grace)) ran out while it ran. The
    /// handler may have had effects: sending again is not retry-safe.
    #[error("the remote node stopped the handler: its close grace ran out")]
    Cancelled,
    /// The remote handler (or its middleware) panicked before it answered. The handler may
    /// have had effects: sending again is not retry-safe.
    #[error("the remote handler panicked")]
    HandlerPanicked,
    /// The remote node stopped the handler because the request's deadline passed while it
    /// ran (or before it started): the time its caller gave it (or the time left of the
    /// request it was made in) ran out there. Usually the caller's own timer ends the call
    /// first ([`Error::Timeout`]); both are [`is_timeout`](Self::is_timeout).
    #[error("the remote node stopped the handler at the request's deadline")]
    DeadlineExceeded,
    /// Metadata refused: here before sending (a key that is empty, too long or reserved;
    /// over [`Config::max_metadata`](crate::Config::max_metadata)), or by the receiver
    /// (over its limits: nothing ran).
    #[error("metadata refused: {0}")]
    Metadata(protocol::MetaError),
    /// The receiver refused the request's metadata as malformed: nothing ran. (Over its
    /// limits, it is [`Error::Metadata`] with [`MetaError::TooLarge`](protocol::MetaError::TooLarge)
    /// and the receiver's numbers.)
    #[error("the receiver refused the metadata: {message}")]
    MetadataRefused {
        /// What the receiver said.
        message: String,
    },
    /// `connect` was given up: the node closed, or the connection to that address was
    /// dropped (`disconnect`) while it was being made.
    #[error("connecting to {address} was given up")]
    ConnectAbandoned {
        /// The address.
        address: String,
    },
    /// The layers below failed (transport, envelope, serialization).
    #[error(transparent)]
    Protocol(protocol::Error),
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::NodeNotFound { .. } => ErrorCode::NodeNotFound,
            Error::NoNodesMatchFilter => ErrorCode::NoNodesMatchFilter,
            Error::Timeout { .. } => ErrorCode::RequestTimeout,
            Error::IdleTimeout { .. } => ErrorCode::IdleTimeout,
            Error::Handler { .. } => ErrorCode::HandlerError,
            Error::NoHandler { .. } => ErrorCode::NoHandler,
            Error::PeerLeft { .. } => ErrorCode::PeerLeft,
            Error::NotConnected => ErrorCode::NotConnected,
            Error::Closed => ErrorCode::Closed,
            Error::DuplicateId { .. } => ErrorCode::DuplicateId,
            Error::VersionMismatch { .. } => ErrorCode::VersionMismatch,
            Error::HandshakeTimeout { .. } | Error::HandshakeRefused { .. } => {
                ErrorCode::HandshakeFailed
            }
            Error::Refused { .. } => ErrorCode::Refused,
            Error::NoKeys => ErrorCode::Security,
            Error::InvalidFilter { .. } | Error::PredicateNotSerializable => {
                ErrorCode::InvalidFilter
            }
            Error::InvalidTarget { .. } => ErrorCode::InvalidTarget,
            Error::Bind(_) | Error::NotConnectedTo { .. } | Error::ConnectAbandoned { .. } => {
                ErrorCode::Address
            }
            Error::Busy { .. } => ErrorCode::Busy,
            Error::ShuttingDown => ErrorCode::ShuttingDown,
            Error::Cancelled => ErrorCode::Cancelled,
            Error::HandlerPanicked => ErrorCode::HandlerPanicked,
            Error::DeadlineExceeded => ErrorCode::RequestTimeout,
            Error::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            Error::TooManyStreams { .. } => ErrorCode::TooManyStreams,
            Error::Metadata(_) | Error::MetadataRefused { .. } => ErrorCode::Metadata,
            Error::RouteLoop { .. } => ErrorCode::RouteLoop,
            Error::HopFailed { .. } => ErrorCode::HopFailed,
            Error::Protocol(e) => match e.code() {
                protocol::ErrorCode::ReservedEvent | protocol::ErrorCode::InvalidEvent => {
                    ErrorCode::InvalidEvent
                }
                protocol::ErrorCode::Serialization => ErrorCode::Serialization,
                protocol::ErrorCode::InvalidEnvelope | protocol::ErrorCode::ProtocolViolation => {
                    ErrorCode::InvalidEnvelope
                }
                protocol::ErrorCode::Closed => ErrorCode::Closed,
                protocol::ErrorCode::Cancelled => ErrorCode::Cancelled,
                protocol::ErrorCode::NotConnected | protocol::ErrorCode::ConnectionLost => {
                    ErrorCode::NotConnected
                }
                _ => ErrorCode::Transport,
            },
        }
    }

    /// Whether the request timed out: the caller's timer ([`Error::Timeout`]), the
    /// remote's stop at the deadline ([`Error::DeadlineExceeded`]), or a stream's wait for
    /// its next item ([`Error::IdleTimeout`]).
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. } | Error::DeadlineExceeded | Error::IdleTimeout { .. }
        )
    }

    /// Whether a stream ended because its next item did not come within its idle timeout.
    pub fn is_idle_timeout(&self) -> bool {
        matches!(self, Error::IdleTimeout { .. })
    }

    /// The remote handler's code, for a [`Error::Handler`].
    ///
    /// ```
    /// # fn f(err: node::Error) -> bool {
    /// err.handler_code().is_some_and(node::Code::is_not_found)
    /// # }
    /// ```
    pub fn handler_code(&self) -> Option<&Code> {
        match self {
            Error::Handler { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Whether the remote stopped the handler because its node closed
    /// ([`Error::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }

    /// Whether the remote handler panicked ([`Error::HandlerPanicked`]).
    pub fn is_panic(&self) -> bool {
        matches!(self, Error::HandlerPanicked)
    }

    /// Whether the call provably reached no handler, so sending it again cannot run a
    /// handler twice: no node found or matching, no connection, or the receiver refused it
    /// before running anything (busy, shutting down). A timeout, a peer that left mid-call
    /// or a handler's own error is not: the handler may have run.
    pub fn is_retry_safe(&self) -> bool {
        matches!(
            self,
            Error::NodeNotFound { .. }
                | Error::NoNodesMatchFilter
                | Error::NotConnected
                | Error::Busy { .. }
                | Error::ShuttingDown
        )
    }
}

impl From<protocol::Error> for Error {
    /// Errors of the layer below that a node user branches on get their own variant.
    fn from(e: protocol::Error) -> Error {
        match e {
            protocol::Error::Timeout { event, timeout } => Error::Timeout { event, timeout },
            protocol::Error::Remote(remote) => Error::from_remote(remote),
            protocol::Error::NoHandler { event } => Error::NoHandler { event },
            protocol::Error::NotConnected => Error::NotConnected,
            protocol::Error::Closed => Error::Closed,
            protocol::Error::Refused { endpoint, reason } => Error::Refused { endpoint, reason },
            protocol::Error::IdleTimeout { event, idle } => Error::IdleTimeout { event, idle },
            other => Error::Protocol(other),
        }
    }
}

impl Error {
    /// The caller's error for an error reply: a handler's own error (whatever its code) is
    /// [`Error::Handler`]; the framework's codes have typed variants, their fields read from
    /// the reply's fields (never from its message, except where a router of an older version
    /// put the id it could not reach there: `NOT_FOUND`).
    pub(crate) fn from_remote(remote: protocol::RemoteError) -> Error {
        if remote.system {
            let hop = remote.hop().map(str::to_owned);
            match remote.code.as_str() {
                route::PEER_LEFT => {
                    return Error::PeerLeft {
                        peer: remote.peer().unwrap_or_default().to_owned(),
                        hop,
                    }
                }
                route::HOP_FAILED => {
                    return Error::HopFailed {
                        peer: remote.peer().map(str::to_owned),
                        hop,
                        message: remote.message,
                    }
                }
                route::LOOP => {
                    return Error::RouteLoop {
                        reason: remote.message,
                        hop,
                    }
                }
                route::NO_MATCH => return Error::NoNodesMatchFilter,
                route::NOT_FOUND => {
                    return Error::NodeNotFound {
                        id: match remote.peer() {
                            Some(peer) => peer.to_owned(),
                            None => remote.message,
                        },
                    }
                }
                _ => {}
            }
            match (remote.code.as_str(), remote.limit().copied()) {
                (BUSY, limit) => {
                    let bound = match limit {
                        Some(Limit::Handlers { max, per_peer }) => Some(HandlerBound {
                            max: u32::try_from(max).unwrap_or(u32::MAX),
                            per_peer,
                        }),
                        _ => None,
                    };
                    return Error::Busy {
                        message: remote.message,
                        bound,
                    };
                }
                (SHUTTING_DOWN, _) => return Error::ShuttingDown,
                (TOO_MANY_STREAMS, limit) => {
                    let max = match limit {
                        Some(Limit::Streams { max }) => saturate(max),
                        _ => 0,
                    };
                    return Error::TooManyStreams { max };
                }
                (CANCELLED, _) => return Error::Cancelled,
                (PANICKED, _) => return Error::HandlerPanicked,
                (DEADLINE_EXCEEDED, _) => return Error::DeadlineExceeded,
                (
                    BAD_METADATA,
                    Some(Limit::Metadata {
                        entries,
                        bytes,
                        max_entries,
                        max_bytes,
                    }),
                ) => {
                    return Error::Metadata(protocol::MetaError::TooLarge {
                        entries: saturate(entries),
                        bytes: saturate(bytes),
                        max_entries: saturate(max_entries),
                        max_bytes: saturate(max_bytes),
                    })
                }
                (BAD_METADATA, _) => {
                    return Error::MetadataRefused {
                        message: remote.message,
                    }
                }
                (PAYLOAD_TOO_LARGE, Some(Limit::Payload { size, max })) => {
                    return Error::PayloadTooLarge {
                        size: saturate(size),
                        max: saturate(max),
                    }
                }
                _ => {}
            }
        }
        Error::Handler {
            code: Code::from(remote.code),
            message: remote.message,
        }
    }
}

/// A number from the wire as a `usize` (a 32-bit caller reads a larger one as its largest).
fn saturate(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

impl From<protocol::MetaError> for Error {
    fn from(e: protocol::MetaError) -> Error {
        Error::Metadata(e)
    }
}

impl From<transport::Error> for Error {
    fn from(e: transport::Error) -> Error {
        Error::Protocol(protocol::Error::Transport(e))
    }
}

/// The node layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::RemoteError;

    #[test]
    fn the_frameworks_codes_are_typed_and_a_handlers_are_its_own() {
        let busy = Error::from_remote(RemoteError::system_error("BUSY", "full"));
        assert!(matches!(busy, Error::Busy { .. }), "{busy:?}");
        let closing = Error::from_remote(RemoteError::system_error("SHUTTING_DOWN", ""));
        assert!(matches!(closing, Error::ShuttingDown));
        let big = Error::from_remote(
            RemoteError::system_error("PAYLOAD_TOO_LARGE", "too large")
                .with_limit(Limit::Payload { size: 9, max: 8 }),
        );
        assert!(
            matches!(big, Error::PayloadTooLarge { size: 9, max: 8 }),
            "{big:?}"
        );
        let streams = Error::from_remote(
            RemoteError::system_error("TOO_MANY_STREAMS", "full")
                .with_limit(Limit::Streams { max: 1024 }),
        );
        assert!(
            matches!(streams, Error::TooManyStreams { max: 1024 }),
            "{streams:?}"
        );
        assert_eq!(streams.code(), ErrorCode::TooManyStreams);
        let panicked = Error::from_remote(RemoteError::system_error("HANDLER_PANICKED", ""));
        assert!(panicked.is_panic(), "{panicked:?}");
        let late = Error::from_remote(RemoteError::system_error("DEADLINE_EXCEEDED", ""));
        assert!(late.is_timeout(), "{late:?}");
        // The same codes from a handler are the handler's.
        for code in [
            "BUSY",
            "SHUTTING_DOWN",
            "PAYLOAD_TOO_LARGE",
            "HANDLER_PANICKED",
        ] {
            let own = Error::from_remote(RemoteError::new(code, "mine"));
            assert!(
                matches!(&own, Error::Handler { code: c, .. } if c == code),
                "{own:?}"
            );
        }
    }

    #[test]
    fn a_routers_errors_are_read_from_their_fields() {
        let left = Error::from_remote(
            RemoteError::system_error("PEER_LEFT", "words nobody parses")
                .with_peer("w1")
                .with_hop("r2"),
        );
        assert!(
            matches!(&left, Error::PeerLeft { peer, hop: Some(hop) } if peer == "w1" && hop == "r2"),
            "{left:?}"
        );
        let failed = Error::from_remote(
            RemoteError::system_error("HOP_FAILED", "the socket broke")
                .with_peer("w1")
                .with_hop("r2"),
        );
        assert!(
            matches!(&failed, Error::HopFailed { peer: Some(p), hop: Some(h), .. } if p == "w1" && h == "r2"),
            "{failed:?}"
        );
        assert_eq!(failed.code(), ErrorCode::HopFailed);
        let missing = Error::from_remote(
            RemoteError::system_error("NOT_FOUND", "ghost")
                .with_peer("ghost")
                .with_hop("r1"),
        );
        assert!(matches!(&missing, Error::NodeNotFound { id } if id == "ghost"));
        // An older router: the id only in the message (NOT_FOUND), nobody named (PEER_LEFT).
        let older = Error::from_remote(RemoteError::system_error("NOT_FOUND", "ghost"));
        assert!(matches!(&older, Error::NodeNotFound { id } if id == "ghost"));
        let older = Error::from_remote(RemoteError::system_error(
            "PEER_LEFT",
            "the node left before answering",
        ));
        assert!(
            matches!(&older, Error::PeerLeft { peer, hop: None } if peer.is_empty()),
            "{older:?}"
        );
        // A handler's own PEER_LEFT is the handler's.
        let own = Error::from_remote(RemoteError::new("PEER_LEFT", "mine").with_peer("x"));
        assert!(matches!(own, Error::Handler { .. }));
    }

    #[test]
    fn every_code_has_a_distinct_name() {
        let codes = [
            ErrorCode::NodeNotFound,
            ErrorCode::NoNodesMatchFilter,
            ErrorCode::RequestTimeout,
            ErrorCode::IdleTimeout,
            ErrorCode::HandlerError,
            ErrorCode::NoHandler,
            ErrorCode::PeerLeft,
            ErrorCode::NotConnected,
            ErrorCode::Closed,
            ErrorCode::DuplicateId,
            ErrorCode::VersionMismatch,
            ErrorCode::HandshakeFailed,
            ErrorCode::Refused,
            ErrorCode::Security,
            ErrorCode::InvalidFilter,
            ErrorCode::InvalidTarget,
            ErrorCode::RouteLoop,
            ErrorCode::HopFailed,
            ErrorCode::InvalidEvent,
            ErrorCode::Serialization,
            ErrorCode::Address,
            ErrorCode::InvalidEnvelope,
            ErrorCode::Transport,
            ErrorCode::Busy,
            ErrorCode::ShuttingDown,
            ErrorCode::Cancelled,
            ErrorCode::HandlerPanicked,
            ErrorCode::PayloadTooLarge,
            ErrorCode::TooManyStreams,
            ErrorCode::Metadata,
        ];
        let names: std::collections::HashSet<_> = codes.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), codes.len());
    }
}
