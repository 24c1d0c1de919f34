//! Discovery: the sources of addresses (`discover.rs`: DNS, a static list, a user's own).
//!
//! May use the leaves and the mesh (ids). The node following a source is one of the node's
//! tasks (`node/follow.rs`).

pub mod discover;
