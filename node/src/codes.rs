//! Every code that crosses the wire in an error reply, in one place.
//!
//! An error reply carries a string code and a flag saying who made it
//! ([`protocol::RemoteError::system`]). A handler's code is a [`Code`]: a well-known one
//! (`NOT_FOUND`, `UNAVAILABLE`, ...) or the handler's own string. The framework's codes
//! ([`system`]) are sent only with the flag set, so a handler may use any string, these
//! included, and its caller still sees the handler's error; the caller turns the framework's
//! codes into typed [`Error`](crate::Error) variants (`error.rs`). Numbers a refusal reports
//! (sizes and limits) travel beside the code as [`protocol::Limit`], never in the message.

use std::borrow::Cow;
use std::fmt;

/// A handler's error code: the well-known ones as variants (the way gRPC's status codes
/// are), any other string as [`Code::Other`].
///
/// On the wire a code is its string ([`as_str`](Self::as_str)): a node or a handler in
/// another language that sends `"NOT_FOUND"` is read as [`Code::NotFound`].
///
/// ```
/// use node::{Code, HandlerError};
///
/// let missing = HandlerError::new(Code::NotFound, "no such key");
/// assert_eq!(missing.code(), &Code::NotFound);
/// let custom = HandlerError::new("E_QUOTA", "over quota");
/// assert_eq!(custom.code(), &Code::Other("E_QUOTA".into()));
/// assert_eq!(Code::from("NOT_FOUND"), Code::NotFound);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// The handler failed without saying why more precisely (`HANDLER_ERROR`): what any
    /// error that is not a [`HandlerError`](crate::HandlerError) becomes.
    Unknown,
    /// The request is malformed or its arguments are wrong (`INVALID_ARGUMENT`; a payload
    /// that does not decode; this framework sent `BAD_REQUEST` before).
    InvalidArgument,
    /// The handler ran out of time: its own timeout, such as `tower::timeout`
    /// (`DEADLINE_EXCEEDED`; this framework sent `TIMEOUT` before).
    DeadlineExceeded,
    /// What was asked for does not exist (`NOT_FOUND`).
    NotFound,
    /// What was to be created exists already (`ALREADY_EXISTS`).
    AlreadyExists,
    /// The caller is known but may not do this (`PERMISSION_DENIED`).
    PermissionDenied,
    /// The caller did not say who it is, or not validly (`UNAUTHENTICATED`).
    Unauthenticated,
    /// A quota or a resource ran out (`RESOURCE_EXHAUSTED`).
    ResourceExhausted,
    /// The system is not in the state the request needs (`FAILED_PRECONDITION`).
    FailedPrecondition,
    /// The operation was aborted, typically by a conflict (`ABORTED`).
    Aborted,
    /// An argument is outside the valid range (`OUT_OF_RANGE`).
    OutOfRange,
    /// The handler does not implement this (`UNIMPLEMENTED`).
    Unimplemented,
    /// An invariant broke inside the handler (`INTERNAL`).
    Internal,
    /// The service cannot answer now; trying again later may work (`UNAVAILABLE`).
    Unavailable,
    /// Data was lost or corrupted (`DATA_LOSS`).
    DataLoss,
    /// A code of the handler's own.
    Other(String),
}

impl Code {
    /// The code as it travels.
    pub fn as_str(&self) -> &str {
        match self {
            Code::Unknown => "HANDLER_ERROR",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Other(code) => code,
        }
    }

    /// A well-known code by its string, or `None`.
    fn well_known(code: &str) -> Option<Code> {
        Some(match code {
            "HANDLER_ERROR" => Code::Unknown,
            // One string each: a handler's own code (`"TIMEOUT"`) reaches its caller as
            // the same string.
            "INVALID_ARGUMENT" => Code::InvalidArgument,
            "DEADLINE_EXCEEDED" => Code::DeadlineExceeded,
            "NOT_FOUND" => Code::NotFound,
            "ALREADY_EXISTS" => Code::AlreadyExists,
            "PERMISSION_DENIED" => Code::PermissionDenied,
            "UNAUTHENTICATED" => Code::Unauthenticated,
            "RESOURCE_EXHAUSTED" => Code::ResourceExhausted,
            "FAILED_PRECONDITION" => Code::FailedPrecondition,
            "ABORTED" => Code::Aborted,
            "OUT_OF_RANGE" => Code::OutOfRange,
            "UNIMPLEMENTED" => Code::Unimplemented,
            "INTERNAL" => Code::Internal,
            "UNAVAILABLE" => Code::Unavailable,
            "DATA_LOSS" => Code::DataLoss,
            _ => return None,
        })
    }

    /// Whether this is [`Code::NotFound`].
    pub fn is_not_found(&self) -> bool {
        *self == Code::NotFound
    }

    /// Whether the caller may try again later and expect another outcome:
    /// [`Unavailable`](Code::Unavailable), [`ResourceExhausted`](Code::ResourceExhausted)
    /// or [`Aborted`](Code::Aborted). The handler may have had effects: it says so by
    /// choosing the code.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Code::Unavailable | Code::ResourceExhausted | Code::Aborted
        )
    }

    /// Whether the code refuses the request rather than reports a failure of it: the caller
    /// was refused for who it is ([`is_denied`](Self::is_denied)) or over its quota
    /// ([`ResourceExhausted`](Code::ResourceExhausted)). Metrics, hooks and a node's
    /// description count such replies as `refused`, not `error`, whether the handler or a
    /// middleware in front of it made them.
    ///
    /// ```
    /// use node::Code;
    /// assert!(Code::Unauthenticated.is_refusal());
    /// assert!(Code::ResourceExhausted.is_refusal());
    /// assert!(!Code::NotFound.is_refusal());
    /// ```
    pub fn is_refusal(&self) -> bool {
        self.is_denied() || *self == Code::ResourceExhausted
    }

    /// Whether the caller was refused for who it is: [`Unauthenticated`](Code::Unauthenticated)
    /// or [`PermissionDenied`](Code::PermissionDenied).
    pub fn is_denied(&self) -> bool {
        matches!(self, Code::Unauthenticated | Code::PermissionDenied)
    }
}

impl From<&str> for Code {
    /// A well-known code's string is that code; any other is [`Code::Other`].
    fn from(code: &str) -> Code {
        Code::well_known(code).unwrap_or_else(|| Code::Other(code.to_owned()))
    }
}

impl From<String> for Code {
    fn from(code: String) -> Code {
        Code::well_known(&code).unwrap_or(Code::Other(code))
    }
}

impl From<Cow<'_, str>> for Code {
    fn from(code: Cow<'_, str>) -> Code {
        Code::from(code.into_owned())
    }
}

impl From<&Code> for Code {
    fn from(code: &Code) -> Code {
        code.clone()
    }
}

impl From<Code> for String {
    fn from(code: Code) -> String {
        match code {
            Code::Other(code) => code,
            known => known.as_str().to_owned(),
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Code {
    /// Compares the code's wire string: `Code::NotFound == "NOT_FOUND"`.
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<Code> for String {
    fn eq(&self, other: &Code) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Code> for &Code {
    fn eq(&self, other: &Code) -> bool {
        **self == *other
    }
}

impl PartialEq<Code> for &str {
    fn eq(&self, other: &Code) -> bool {
        *self == other.as_str()
    }
}

/// The framework's codes: sent only as system errors
/// ([`protocol::RemoteError::system_error`]); each has a typed
/// [`Error`](crate::Error) variant on the caller's side.
pub(crate) mod system {
    pub(crate) use protocol::RemoteError;

    /// No handler for the event (protocol's).
    pub(crate) const NO_HANDLER: &str = RemoteError::NO_HANDLER;
    /// The receiver is closing (protocol's).
    pub(crate) const SHUTTING_DOWN: &str = RemoteError::SHUTTING_DOWN;
    /// A payload over the receiver's limit, its numbers in `limit` (protocol's).
    pub(crate) const PAYLOAD_TOO_LARGE: &str = RemoteError::PAYLOAD_TOO_LARGE;
    /// A streamed request over the receiver's most open streams.
    pub(crate) const TOO_MANY_STREAMS: &str = RemoteError::TOO_MANY_STREAMS;
    /// The handler panicked (protocol's).
    pub(crate) const PANICKED: &str = RemoteError::PANICKED;

    /// A request refused because the node's handlers are at their limit (its numbers in
    /// `limit`).
    pub(crate) const BUSY: &str = "BUSY";
    /// A handler stopped because the node's close grace ran out.
    pub(crate) const CANCELLED: &str = "CANCELLED";
    /// A request not run, or stopped, because its deadline passed.
    pub(crate) const DEADLINE_EXCEEDED: &str = "DEADLINE_EXCEEDED";
    /// A request whose metadata the receiver refused (over its limits: the numbers in
    /// `limit`; or malformed).
    pub(crate) const BAD_METADATA: &str = "BAD_METADATA";

    /// Handshakes refused, and messages of connections that never joined.
    pub(crate) const DUPLICATE_ID: &str = "DUPLICATE_ID";
    /// The peer speaks another node protocol version.
    pub(crate) const VERSION_MISMATCH: &str = "VERSION_MISMATCH";
    /// A message of a connection that has not (or no longer) joined.
    pub(crate) const NOT_JOINED: &str = "NOT_JOINED";
    /// The handshake of a connection whose CURVE key is not (or no longer) on the
    /// allow-list.
    pub(crate) const NOT_AUTHORIZED: &str = "NOT_AUTHORIZED";
    /// A handshake that does not decode.
    pub(crate) const BAD_HANDSHAKE: &str = "BAD_HANDSHAKE";
    /// A connection that joined one id claims another.
    pub(crate) const ALREADY_JOINED: &str = "ALREADY_JOINED";
    /// A forward whose header is missing or does not decode.
    pub(crate) const BAD_FORWARD: &str = "BAD_FORWARD";
}

/// The codes a router answers with (system errors, like [`system`]'s): the caller turns them
/// into typed errors (`routing/relay.rs`).
pub(crate) mod route {
    /// The node the router delivered to left before answering (it may have run).
    pub(crate) const PEER_LEFT: &str = "PEER_LEFT";
    /// The router could not complete the hop for another reason (it may have run).
    pub(crate) const HOP_FAILED: &str = "HOP_FAILED";
    /// Nothing matched the filter anywhere the message could reach.
    pub(crate) const NO_MATCH: &str = "NO_MATCH";
    /// No router could reach the node id.
    pub(crate) const NOT_FOUND: &str = "NOT_FOUND";
    /// The deadline ran out at a hop.
    pub(crate) const TIMEOUT: &str = "TIMEOUT";
    /// The message came back to a router it had visited, or ran out of hops.
    pub(crate) const LOOP: &str = "ROUTE_LOOP";
    /// The peer asked to forward is not a router.
    pub(crate) const NOT_A_ROUTER: &str = "NOT_A_ROUTER";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_known_code_reads_back_as_itself_and_any_other_string_is_kept() {
        let known = [
            Code::Unknown,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
            Code::AlreadyExists,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::ResourceExhausted,
            Code::FailedPrecondition,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unimplemented,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss,
        ];
        for code in known {
            assert_eq!(Code::from(code.as_str()), code);
        }
        assert_eq!(Code::from("TIMEOUT"), Code::Other("TIMEOUT".into()));
        assert_eq!(Code::from("E_MINE"), Code::Other("E_MINE".into()));
        assert_eq!(String::from(Code::Other("E_MINE".into())), "E_MINE");
    }
}
