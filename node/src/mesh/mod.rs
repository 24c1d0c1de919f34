//! Membership: who a peer is (`names.rs`: `NodeId`, `Direction`, `PeerInfo`, `LeaveReason`,
//! the ids every room speaks of), the peer registry and its pure decisions (`peer.rs`,
//! `peers.rs`), the handshake's
//! pure decisions (`handshake.rs`), the links to each peer and the connections to each
//! address (`link.rs`), and the node's life (`phase.rs`).
//!
//! May use only the leaves (codes, error, options, filter, context). What runs over the
//! registry (joining, heartbeats, supervising a connection, the close) takes the whole node
//! and is in `node/`.

pub(crate) mod handshake;
pub(crate) mod link;
pub(crate) mod names;
pub(crate) mod peer;
pub(crate) mod peers;
pub(crate) mod phase;
