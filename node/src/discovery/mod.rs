//! Discovery: the sources of addresses (`discover.rs`: DNS, a static list, a user's own) and
//! the node following one (`follow.rs`: connects to what appears, lets go of what goes,
//! gracefully).
//!
//! Uses the mesh (connect, let go) and observation.

pub mod discover;
pub(crate) mod follow;
