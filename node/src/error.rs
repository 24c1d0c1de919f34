//! The node layer's error type.

/// Everything that can go wrong in the node layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filter could not be built or parsed (bad operator, bad operand, bad regex).
    #[error("invalid filter: {reason}")]
    InvalidFilter {
        /// What is wrong with it.
        reason: String,
    },
    /// A filter holding a Rust predicate cannot be sent to another node.
    #[error("a predicate filter cannot travel to another node")]
    PredicateNotSerializable,
}
