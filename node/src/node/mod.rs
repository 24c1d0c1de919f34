//! The node itself: the [`Node`] handle (`handle.rs`), its parts composed into one shared
//! state (`inner.rs`, with `host.rs` joining the handler runtime to it), where each message
//! its sockets receive enters it (`dispatch.rs`) and the protocol's own messages with their
//! effect on it (`system/`, one file each), and what runs over
//! all of the parts at once: the node's tasks (joining a peer, `join.rs`; connecting and
//! reconnecting upstream, `upstream.rs`; heartbeats, `heartbeat.rs`; a graceful close,
//! `drain.rs`; following a discovery source, `follow.rs`) and its readings (counters and
//! hooks, `stats.rs`; the description it answers, `introspect.rs`; the warnings it watches
//! for, `watch.rs`; its health for probes, `health.rs`).
//!
//! Every file here works on the whole node (`Inner`), which is why they are together and
//! above the parts. May use every room below it: the mesh, discovery's sources,
//! observation, the config, the serving side, routing.

pub(crate) mod dispatch;
pub(crate) mod drain;
pub(crate) mod follow;
mod handle;
pub mod health;
pub(crate) mod heartbeat;
mod host;
pub(crate) mod inner;
pub(crate) mod introspect;
pub(crate) mod join;
pub(crate) mod stats;
pub(crate) mod system;
pub(crate) mod upstream;
pub(crate) mod watch;

pub use handle::{Keys, Node, NodeStats, Peers, StreamStats, WeakNode};
