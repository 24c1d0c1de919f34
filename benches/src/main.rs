//! The two-process benchmark harness (being written).
fn main() {}
