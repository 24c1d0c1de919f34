//! The ZMTP core's error type: every way a peer's bytes or conduct can end a connection.

/// Everything that ends a ZMTP connection. None of them panics: the driver closes the
/// connection and reports the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer's first bytes are not a ZMTP 3 greeting.
    #[error("bad greeting: {reason}")]
    BadGreeting {
        /// What was wrong.
        reason: &'static str,
    },
    /// The peer speaks a ZMTP version before 3.0 (refused, as the libzmq engine refuses
    /// ZMTP 1.0 and 2.0).
    #[error("unsupported ZMTP version {major}.{minor}")]
    UnsupportedVersion {
        /// The peer's major version.
        major: u8,
        /// The peer's minor version.
        minor: u8,
    },
    /// The peer's security mechanism is not ours (a plaintext client at a CURVE server,
    /// or the reverse), or both or neither side claims to be the server.
    #[error("security mechanism mismatch: we use {ours}, the peer {theirs}")]
    MechanismMismatch {
        /// Our mechanism.
        ours: String,
        /// The peer's, as its greeting names it.
        theirs: String,
    },
    /// A frame header with a reserved flag bit set.
    #[error("reserved frame flags {flags:#04x}")]
    ReservedFlags {
        /// The flags byte.
        flags: u8,
    },
    /// A command frame with MORE set.
    #[error("a command frame with the MORE flag")]
    CommandWithMore,
    /// A frame longer than the limit, refused from its header before anything was
    /// allocated for it.
    #[error("frame of {size} bytes over the limit of {limit}")]
    FrameTooLarge {
        /// The size the header announced.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A message (all its frames) longer than the limit.
    #[error("message over the limit of {limit} bytes")]
    MessageTooLarge {
        /// The limit.
        limit: u64,
    },
    /// A command that does not parse.
    #[error("malformed command: {what}")]
    MalformedCommand {
        /// What was wrong.
        what: &'static str,
    },
    /// A command that is valid ZMTP but not expected now (a data frame before the
    /// handshake ends, HELLO to a client...).
    #[error("unexpected {what}")]
    Unexpected {
        /// What came.
        what: &'static str,
    },
    /// The peer's socket type cannot talk to ours (ZMTP 3's compatibility table).
    #[error("socket type {theirs} cannot talk to {ours}")]
    IncompatibleSocketType {
        /// Our socket type.
        ours: &'static str,
        /// The peer's, as its READY says.
        theirs: String,
    },
    /// The peer sent an ERROR command (its reason) and will close.
    #[error("the peer refused the handshake: {reason}")]
    Refused {
        /// The reason in its ERROR.
        reason: String,
    },
    /// The security mechanism did not let the peer in (its key is not on the allow-list).
    #[error("not authorized")]
    Unauthorized,
    /// A CURVE box did not open, a nonce was replayed, or another CURVE rule was broken.
    #[error("CURVE: {what}")]
    Crypto {
        /// What failed.
        what: &'static str,
    },
    /// The handshake did not finish in time.
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// Nothing came from the peer within the heartbeat timeout (ours, or the TTL the
    /// peer's PING asked for).
    #[error("heartbeat timed out")]
    HeartbeatTimeout,
}

/// The ZMTP core's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
