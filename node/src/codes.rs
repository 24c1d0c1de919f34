//! The system error codes the node's own outcomes travel as between nodes (the ones its
//! error type maps back), in one leaf module so that the error type depends on nothing
//! above it.

/// A request whose deadline passed before or while it ran.
pub(crate) const DEADLINE_EXCEEDED: &str = "DEADLINE_EXCEEDED";
/// A request whose metadata was refused (over the limits, or malformed).
pub(crate) const BAD_METADATA: &str = "BAD_METADATA";
/// A request refused because the node's handlers are at their limit.
pub(crate) const BUSY: &str = "BUSY";
/// A request whose handler was stopped because the node's close grace ran out.
pub(crate) const CANCELLED: &str = "CANCELLED";
