//! The `zeronode` command (being written).
fn main() {}
