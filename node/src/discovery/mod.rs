//! Discovery: the sources of addresses (`discover.rs`: the trait, a static list, a user's
//! own, the options and events; `dns.rs`: DNS).
//!
//! May use the leaves and the mesh (ids). The node following a source is one of the node's
//! tasks (`node/follow.rs`).

pub mod discover;
mod dns;
