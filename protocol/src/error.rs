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
///
/// What a framework error is about travels as fields beside the code, never inside the
/// message: the numbers of a limit ([`limit`](Self::limit)), the node it concerns
/// ([`peer`](Self::peer)), the router that made it ([`hop`](Self::hop)) and the bound that
/// ran out ([`timeout`](Self::timeout)). On the wire the reply is one MessagePack map
/// (PROTOCOL.md, "Error replies"):
///
/// | key | type | when |
/// |---|---|---|
/// | `code` | string | always |
/// | `message` | string | always: for people, never parsed |
/// | `system` | bool | the framework made it (absent: false) |
/// | `limit` | map, one key naming the limit | a refusal over a limit |
/// | `peer` | string | the node the outcome is about (the peer that left, the id not found) |
/// | `hop` | string | the id of the router that made the reply |
/// | `timeout_ms` | unsigned | the bound that ran out |
///
/// A reader ignores keys it does not know, and a limit it does not know (read as `None`),
/// so a newer node's reply is read by an older one and the reverse.
///
/// ```
/// use protocol::RemoteError;
/// use std::time::Duration;
///
/// let left = RemoteError::system_error("PEER_LEFT", "the node left before answering")
///     .with_peer("worker-3")
///     .with_hop("gateway");
/// let bytes = protocol::encode_value(&left).unwrap();
/// let read: RemoteError = protocol::decode_value(&bytes).unwrap();
/// assert_eq!(read.peer(), Some("worker-3"));
/// assert_eq!(read.hop(), Some("gateway"));
/// assert_eq!(read.timeout(), None::<Duration>);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "Wire")]
pub struct RemoteError {
    /// A machine-readable code.
    pub code: String,
    /// A human-readable message.
    pub message: String,
    /// Set when the framework (this crate or the node layer), not a user's handler, made the
    /// error: the code then has the meaning the framework documents for it. Absent on the
    /// wire when false (so a handler's error reply is `{code, message}` as before).
    pub system: bool,
    /// The fields of the code, when it has any. Boxed: they are rare, and every `Result`
    /// carrying an error would otherwise grow by their size.
    fields: Option<Box<Fields>>,
}

/// The fields an error reply may carry beside its code (all optional on the wire).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Fields {
    limit: Option<Limit>,
    peer: Option<String>,
    hop: Option<String>,
    timeout_ms: Option<u64>,
}

/// An error reply as it is written: one flat map, optional keys left out.
#[derive(Serialize)]
struct WireRef<'a> {
    code: &'a str,
    message: &'a str,
    #[serde(skip_serializing_if = "is_false")]
    system: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<&'a Limit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hop: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
}

/// An error reply as it is read: every key but `code` and `message` optional, unknown keys
/// ignored.
#[derive(Deserialize)]
struct Wire {
    code: String,
    message: String,
    #[serde(default)]
    system: bool,
    #[serde(default, deserialize_with = "known_limit")]
    limit: Option<Limit>,
    #[serde(default)]
    peer: Option<String>,
    #[serde(default)]
    hop: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

impl From<Wire> for RemoteError {
    fn from(wire: Wire) -> RemoteError {
        let fields = Fields {
            limit: wire.limit,
            peer: wire.peer,
            hop: wire.hop,
            timeout_ms: wire.timeout_ms,
        };
        RemoteError {
            code: wire.code,
            message: wire.message,
            system: wire.system,
            fields: (fields != Fields::default()).then(|| Box::new(fields)),
        }
    }
}

impl Serialize for RemoteError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = self.fields.as_deref();
        WireRef {
            code: &self.code,
            message: &self.message,
            system: self.system,
            limit: fields.and_then(|f| f.limit.as_ref()),
            peer: fields.and_then(|f| f.peer.as_deref()),
            hop: fields.and_then(|f| f.hop.as_deref()),
            timeout_ms: fields.and_then(|f| f.timeout_ms),
        }
        .serialize(serializer)
    }
}

/// A limit this build knows, or `None` for one it does not (a newer peer's): the error is
/// read either way.
fn known_limit<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Limit>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Maybe {
        Known(Limit),
        Unknown(serde::de::IgnoredAny),
    }
    Ok(match Option::<Maybe>::deserialize(deserializer)? {
        Some(Maybe::Known(limit)) => Some(limit),
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
            fields: None,
        }
    }

    /// The fields, made on first use.
    fn fields_mut(&mut self) -> &mut Fields {
        self.fields.get_or_insert_with(Box::default)
    }

    /// The same error carrying the numbers of the limit it reports.
    pub fn with_limit(mut self, limit: Limit) -> RemoteError {
        self.fields_mut().limit = Some(limit);
        self
    }

    /// The same error naming the node it is about: the peer that left before answering,
    /// the id no router could reach, the node a failed hop was to.
    pub fn with_peer(mut self, peer: impl Into<String>) -> RemoteError {
        self.fields_mut().peer = Some(peer.into());
        self
    }

    /// The same error naming the router that made it (where along the route it failed).
    /// A router sets it on the errors it makes and passes on unchanged those it relays.
    pub fn with_hop(mut self, hop: impl Into<String>) -> RemoteError {
        self.fields_mut().hop = Some(hop.into());
        self
    }

    /// The same error carrying the bound that ran out (whole milliseconds on the wire,
    /// rounded up so that a bound under a millisecond is not read as none).
    pub fn with_timeout(mut self, bound: Duration) -> RemoteError {
        let millis = bound.as_nanos().div_ceil(1_000_000);
        self.fields_mut().timeout_ms = Some(u64::try_from(millis).unwrap_or(u64::MAX));
        self
    }

    /// The numbers of the limit this error reports, if it reports one this build knows.
    pub fn limit(&self) -> Option<&Limit> {
        self.fields.as_deref()?.limit.as_ref()
    }

    /// The node this error is about, when it names one ([`with_peer`](Self::with_peer)).
    pub fn peer(&self) -> Option<&str> {
        self.fields.as_deref()?.peer.as_deref()
    }

    /// The router that made this error, when a router did ([`with_hop`](Self::with_hop)).
    pub fn hop(&self) -> Option<&str> {
        self.fields.as_deref()?.hop.as_deref()
    }

    /// The bound that ran out, when the error reports one ([`with_timeout`](Self::with_timeout)).
    pub fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_millis(self.fields.as_deref()?.timeout_ms?))
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
        assert_eq!(read.limit(), None);
        // A known one still comes through.
        let known = RemoteError::system_error("TOO_MANY_STREAMS", "full")
            .with_limit(Limit::Streams { max: 7 });
        let read: RemoteError = decode_value(&encode_value(&known).unwrap()).unwrap();
        assert_eq!(read.limit(), Some(&Limit::Streams { max: 7 }));
    }

    /// A newer node's reply: the fields this build knows, and one it does not.
    #[derive(Serialize)]
    struct NewerFields {
        code: &'static str,
        message: &'static str,
        system: bool,
        peer: &'static str,
        hop: &'static str,
        timeout_ms: u64,
        region: &'static str,
    }

    #[test]
    fn the_fields_travel_as_data_and_unknown_keys_are_ignored() {
        let sent = NewerFields {
            code: "PEER_LEFT",
            message: "left",
            system: true,
            peer: "worker-2",
            hop: "gateway",
            timeout_ms: 1500,
            region: "eu-west",
        };
        let read: RemoteError = decode_value(&encode_value(&sent).unwrap()).unwrap();
        assert!(read.is_system("PEER_LEFT"));
        assert_eq!(read.peer(), Some("worker-2"));
        assert_eq!(read.hop(), Some("gateway"));
        assert_eq!(read.timeout(), Some(Duration::from_millis(1500)));
        // Written again, the known fields come back the same.
        let again: RemoteError = decode_value(&encode_value(&read).unwrap()).unwrap();
        assert_eq!(again, read);
    }

    /// What an older node wrote and reads: code, message and the flag only.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Older {
        code: String,
        message: String,
        #[serde(default)]
        system: bool,
    }

    #[test]
    fn an_older_nodes_reply_reads_without_fields_and_it_reads_ours() {
        let old = Older {
            code: "PEER_LEFT".into(),
            message: "the node left before answering".into(),
            system: true,
        };
        let read: RemoteError = decode_value(&encode_value(&old).unwrap()).unwrap();
        assert!(read.is_system("PEER_LEFT"));
        assert_eq!((read.peer(), read.hop(), read.limit()), (None, None, None));
        let ours = RemoteError::system_error("TIMEOUT", "no answer in time")
            .with_hop("gateway")
            .with_timeout(Duration::from_micros(2_500_100));
        let by_old: Older = decode_value(&encode_value(&ours).unwrap()).unwrap();
        assert_eq!(by_old.code, "TIMEOUT");
        assert!(by_old.system);
        // Rounded up to whole milliseconds.
        let back: RemoteError = decode_value(&encode_value(&ours).unwrap()).unwrap();
        assert_eq!(back.timeout(), Some(Duration::from_millis(2501)));
    }

    #[test]
    fn a_handlers_reply_stays_a_two_key_map() {
        let bytes = encode_value(&RemoteError::new("NOT_FOUND", "no such key")).unwrap();
        let map: std::collections::BTreeMap<String, String> = decode_value(&bytes).unwrap();
        assert_eq!(map.len(), 2, "{map:?}");
        assert_eq!(map["code"], "NOT_FOUND");
    }
}
