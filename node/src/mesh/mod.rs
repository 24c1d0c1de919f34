//! Membership: the peer registry and its pure decisions (`peer.rs`, `peers.rs`), joining
//! (`handshake.rs`, pure, and `join.rs`), the links to each peer and the connections to each
//! address (`link.rs`, `upstream.rs`), heartbeats (`heartbeat.rs`), the node's life and its
//! drain (`phase.rs`, `drain.rs`).
//!
//! Uses observation (events) and, for a drain, the serving side's runtime.

pub(crate) mod drain;
pub(crate) mod handshake;
pub(crate) mod heartbeat;
pub(crate) mod join;
pub(crate) mod link;
pub(crate) mod peer;
pub(crate) mod peers;
pub(crate) mod phase;
pub(crate) mod upstream;
