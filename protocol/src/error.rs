//! The protocol layer's error types.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a received message is not a valid envelope. Every malformed input maps to one of
/// these; none panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message had no frame at all.
    #[error("empty message")]
    NoFrames,
    /// More frames than header + payload.
    #[error("{0} frames (at most 2: header and payload)")]
    TooManyFrames(usize),
    /// The header ends before a field it declares.
    #[error("truncated header: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed to read the next field.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// The first byte is not zeronode's magic: the peer is not a zeronode peer.
    #[error("bad magic byte {0:#04x}: not a zeronode peer")]
    BadMagic(u8),
    /// A zeronode peer speaking another envelope version.
    #[error("unsupported envelope version {0}")]
    UnsupportedVersion(u8),
    /// The kind byte is not one of request, reply, error, tick.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// Reserved flag bits are set.
    #[error("unknown flags {0:#010b}")]
    UnknownFlags(u8),
    /// The metadata length disagrees with the bytes that follow it.
    #[error("metadata declares {declared} bytes, {available} follow")]
    LengthMismatch {
        /// Length written in the header.
        declared: usize,
        /// Bytes actually there.
        available: usize,
    },
    /// The event name is not UTF-8.
    #[error("event name is not valid UTF-8")]
    InvalidUtf8,
    /// The system flag and the event's namespace disagree.
    #[error("system flag does not match the event namespace")]
    SystemFlagMismatch,
    /// The payload is larger than the configured maximum.
    #[error("payload of {size} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Payload size.
        size: usize,
        /// Configured maximum.
        max: usize,
    },
}

/// A stable code for each error a caller may branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No reply within the deadline.
    RequestTimeout,
    /// The remote handler failed; see [`RemoteError`].
    HandlerError,
    /// The remote has no handler for the event.
    NoHandler,
    /// There is no live connection to send on.
    NotConnected,
    /// The connection was lost while waiting.
    ConnectionLost,
    /// The client or server was closed.
    Closed,
    /// A received message was not a valid envelope.
    InvalidEnvelope,
    /// The event name is in the reserved `_system:` namespace.
    ReservedEvent,
    /// The event name is empty or too long.
    InvalidEvent,
    /// A payload could not be encoded or decoded.
    Serialization,
    /// The server refused the connection's handshake (security).
    Refused,
    /// The transport failed.
    Transport,
    /// The other end of a stream gave up on it (the caller dropped it or sent a cancel).
    Cancelled,
    /// A stream's next item did not come within its idle timeout.
    IdleTimeout,
    /// A peer broke the stream rules (credit, window, size, ids).
    ProtocolViolation,
}

/// An error reply: what a remote handler reported, carried back to the caller.
///
/// `code` is the handler's own code (a string, as in the JavaScript zeronode) or one of the
/// codes the framework itself uses ([`RemoteError::NO_HANDLER`], [`RemoteError::SHUTTING_DOWN`],
/// the node layer's routing and admission codes). Which of the two it is travels as data,
/// not as a reading of the code: [`system`](Self::system) is set only on the errors the
/// framework makes ([`RemoteError::system_error`]), so a handler may use any code, `NO_HANDLER`
/// or `TIMEOUT` included, and its caller still sees the handler's own error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteError {
    /// A machine-readable code.
    pub code: String,
    /// A human-readable message.
    pub message: String,
    /// Set when the framework (this crate or the node layer), not a user's handler, made the
    /// error: the code then has the meaning the framework documents for it. Absent on the
    /// wire when false (so a handler's error reply is `{code, message}` as before).
    #[serde(default, skip_serializing_if = "is_false")]
    pub system: bool,
    /// For a refusal over a limit: the numbers, as data (never written into the message
    /// and read back). Absent on the wire when `None`, and ignored by a receiver that does
    /// not know it, so the reply stays readable by older nodes. Boxed: it is rare, and
    /// every `Result` carrying an error would otherwise grow by its size.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "known_limit"
    )]
    pub limit: Option<Box<Limit>>,
}

/// A limit this build knows, or `None` for one it does not (a newer peer's): the error is
/// read either way.
fn known_limit<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Box<Limit>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Maybe {
        Known(Limit),
        Unknown(serde::de::IgnoredAny),
    }
    Ok(match Option::<Maybe>::deserialize(deserializer)? {
        Some(Maybe::Known(limit)) => Some(Box::new(limit)),
        Some(Maybe::Unknown(_)) | None => None,
    })
}

/// The numbers of a limit a message went over, carried in a [`RemoteError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Limit {
    /// A payload over the receiver's largest.
    Payload {
        /// The payload's size in bytes.
        size: u64,
        /// The most bytes the receiver accepts.
        max: u64,
    },
    /// A metadata section over the receiver's limits (user entries and their bytes,
    /// counted up to the first over).
    Metadata {
        /// Entries counted.
        entries: u64,
        /// Their bytes.
        bytes: u64,
        /// The most entries accepted.
        max_entries: u64,
        /// The most bytes accepted.
        max_bytes: u64,
    },
    /// The receiver's handlers were at their bound: the node's, or this caller's share.
    Handlers {
        /// The bound that was reached.
        max: u64,
        /// Whether it was the caller's own share (`max_handlers_per_peer`) rather than the
        /// node-wide bound.
        per_peer: bool,
    },
    /// The receiver had its most streams open on the connection.
    Streams {
        /// The most streams it keeps open.
        max: u64,
    },
}

/// For `skip_serializing_if`.
fn is_false(flag: &bool) -> bool {
    !*flag
}

impl RemoteError {
    /// Code sent when no handler matches the event.
    pub const NO_HANDLER: &'static str = "NO_HANDLER";
    /// Code used when a handler failed without giving a code (or panicked).
    pub const HANDLER_FAILED: &'static str = "HANDLER_ERROR";
    /// Code sent when the handler panicked (a system error: the framework caught it).
    pub const PANICKED: &'static str = "HANDLER_PANICKED";
    /// Code sent when the server is closing and refuses new requests.
    pub const SHUTTING_DOWN: &'static str = "SHUTTING_DOWN";
    /// Code sent for a request whose payload is over the receiver's limit (its numbers in
    /// [`limit`](Self::limit), [`Limit::Payload`]).
    pub const PAYLOAD_TOO_LARGE: &'static str = "PAYLOAD_TOO_LARGE";
    /// Code sent for a streamed request over the receiver's limit of open streams (its
    /// number in [`limit`](Self::limit), [`Limit::Streams`]).
    pub const TOO_MANY_STREAMS: &'static str = "TOO_MANY_STREAMS";
    /// Code sent when a handler that streams was called without a stream (or the reverse).
    pub const NOT_STREAMED: &'static str = "NOT_STREAMED";

    /// An error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> RemoteError {
        RemoteError {
            code: code.into(),
            message: message.into(),
            system: false,
            limit: None,
        }
    }

    /// The same error carrying the numbers of the limit it reports.
    pub fn with_limit(mut self, limit: Limit) -> RemoteError {
        self.limit = Some(Box::new(limit));
        self
    }

    /// An error the framework makes (not a handler): [`system`](Self::system) set.
    pub fn system_error(code: impl Into<String>, message: impl Into<String>) -> RemoteError {
        RemoteError {
            system: true,
            ..RemoteError::new(code, message)
        }
    }

    /// Whether the framework made this error with `code` (and not a handler that happened to
    /// use the same code).
    pub fn is_system(&self, code: &str) -> bool {
        self.system && self.code == code
    }

    /// A handler failure with the default code.
    pub fn handler(message: impl Into<String>) -> RemoteError {
        RemoteError::new(Self::HANDLER_FAILED, message)
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RemoteError {}

/// Everything that can go wrong in the protocol layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No reply arrived before the deadline.
    #[error("request {event:?} timed out after {timeout:?}")]
    Timeout {
        /// The request's event.
        event: String,
        /// The timeout it was given.
        timeout: Duration,
    },
    /// The remote handler answered with an error.
    #[error("remote error {0}")]
    Remote(RemoteError),
    /// The remote has no handler for this event (answered at once, not left to time out).
    #[error("no handler for {event:?} on the remote")]
    NoHandler {
        /// The event.
        event: String,
    },
    /// No live connection to send on.
    #[error("not connected")]
    NotConnected,
    /// The connection was lost while the request was pending.
    #[error("connection lost")]
    ConnectionLost,
    /// The client or server was closed.
    #[error("closed")]
    Closed,
    /// A received message was not a valid envelope.
    #[error("invalid envelope: {0}")]
    InvalidEnvelope(#[from] DecodeError),
    /// User code may not send events in the `_system:` namespace.
    #[error("event {0:?} is in the reserved `_system:` namespace")]
    ReservedEvent(String),
    /// The event name is empty or too long.
    #[error("invalid event name {0:?}")]
    InvalidEvent(String),
    /// A value could not be encoded as MessagePack.
    #[error("cannot encode payload: {0}")]
    Encode(String),
    /// A payload could not be decoded into the requested type.
    #[error("cannot decode payload: {0}")]
    Decode(String),
    /// Connecting did not complete in time.
    #[error("connecting to {endpoint} timed out")]
    ConnectTimeout {
        /// The endpoint.
        endpoint: String,
    },
    /// The server refused the connection during the security handshake: our key is not on
    /// its allow-list, we spoke plaintext to a CURVE server (or the reverse), or the server's
    /// public key we were given is not the server's. Returned by `connect` at once; libzmq
    /// does not retry an endpoint that refused it this way.
    #[error("{endpoint} refused the connection: {reason}")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// What libzmq reported.
        reason: transport::HandshakeFailure,
    },
    /// The transport layer failed.
    #[error(transparent)]
    Transport(#[from] transport::Error),
    /// The other end of a stream gave up on it: on the callee, the caller dropped its
    /// stream or sent a cancel; on either end, the stream was stopped by the peer leaving.
    #[error("stream cancelled")]
    Cancelled,
    /// A stream's next item did not come within its idle timeout.
    #[error("stream {event:?} idle for {idle:?}")]
    IdleTimeout {
        /// The stream's event.
        event: String,
        /// The idle timeout it was given.
        idle: Duration,
    },
    /// A peer broke the stream rules; the stream ended, the conversation goes on.
    #[error("stream protocol violation: {0}")]
    Violation(#[from] crate::credit::Violation),
}

impl Error {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Timeout { .. } => ErrorCode::RequestTimeout,
            Error::Remote(_) => ErrorCode::HandlerError,
            Error::NoHandler { .. } => ErrorCode::NoHandler,
            Error::NotConnected | Error::ConnectTimeout { .. } => ErrorCode::NotConnected,
            Error::ConnectionLost => ErrorCode::ConnectionLost,
            Error::Refused { .. } => ErrorCode::Refused,
            Error::Closed => ErrorCode::Closed,
            Error::InvalidEnvelope(_) => ErrorCode::InvalidEnvelope,
            Error::ReservedEvent(_) => ErrorCode::ReservedEvent,
            Error::InvalidEvent(_) => ErrorCode::InvalidEvent,
            Error::Encode(_) | Error::Decode(_) => ErrorCode::Serialization,
            Error::Transport(transport::Error::Closed) => ErrorCode::Closed,
            Error::Transport(_) => ErrorCode::Transport,
            Error::Cancelled => ErrorCode::Cancelled,
            Error::IdleTimeout { .. } => ErrorCode::IdleTimeout,
            Error::Violation(_) => ErrorCode::ProtocolViolation,
        }
    }

    /// Whether the request timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }
}

/// The protocol layer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::{decode_value, encode_value};

    /// What a newer node might send: the same error with a limit this build has no variant
    /// for.
    #[derive(Serialize)]
    struct Newer {
        code: String,
        message: String,
        system: bool,
        limit: NewerLimit,
    }

    #[derive(Serialize)]
    enum NewerLimit {
        Gigawatts { wanted: u64 },
    }

    #[test]
    fn an_unknown_limit_is_ignored_and_the_error_still_read() {
        let newer = Newer {
            code: "SOMETHING_NEW".into(),
            message: "over a limit we do not know".into(),
            system: true,
            limit: NewerLimit::Gigawatts { wanted: 121 },
        };
        let read: RemoteError = decode_value(&encode_value(&newer).unwrap()).unwrap();
        assert_eq!(read.code, "SOMETHING_NEW");
        assert!(read.system);
        assert_eq!(read.limit, None);
        // A known one still comes through.
        let known = RemoteError::system_error("TOO_MANY_STREAMS", "full")
            .with_limit(Limit::Streams { max: 7 });
        let read: RemoteError = decode_value(&encode_value(&known).unwrap()).unwrap();
        assert_eq!(read.limit.as_deref(), Some(&Limit::Streams { max: 7 }));
    }
}
