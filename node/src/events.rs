//! What a node reports as it runs.

use crate::options::Options;
use crate::peer::{Direction, NodeId};

/// Why a peer left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaveReason {
    /// It closed gracefully and said goodbye.
    Stopped,
    /// Its heartbeats stopped: it died, or the network between us did.
    TimedOut,
    /// Its connection dropped.
    Disconnected,
    /// We disconnected from it, or we are closing.
    Local,
    /// Its CURVE key was taken off our allow-list.
    Revoked,
}

/// Where an error event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// A handshake was refused or failed.
    Handshake,
    /// A peer sent something invalid (not an envelope, a message before joining, ...).
    Peer,
    /// Sending a heartbeat or a system message failed.
    Send,
}

/// Something that happened to a node.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A peer completed its handshake with us.
    PeerJoined {
        /// Its id.
        id: NodeId,
        /// How it is joined.
        direction: Direction,
        /// The options it advertised.
        options: Options,
    },
    /// A joined peer changed its options.
    PeerOptionsChanged {
        /// Its id.
        id: NodeId,
        /// Its new options.
        options: Options,
    },
    /// A peer left.
    PeerLeft {
        /// Its id.
        id: NodeId,
        /// How it was joined.
        direction: Direction,
        /// Why it left.
        reason: LeaveReason,
    },
    /// Our bound address refused a connection during the security handshake (CURVE): a key
    /// not on the allow-list, a plaintext client, or a client that has another server key.
    /// Nothing it sent reached a handler.
    ConnectionRefused {
        /// Our endpoint that refused it.
        endpoint: String,
        /// What libzmq reported.
        reason: transport::HandshakeFailure,
    },
    /// Something went wrong that no caller is waiting for.
    Error {
        /// Where.
        source: ErrorSource,
        /// What, as text (the typed error went to whoever could act on it).
        message: String,
    },
    /// The node closed.
    Stopped,
}
