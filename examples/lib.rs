//! Examples (being written).
