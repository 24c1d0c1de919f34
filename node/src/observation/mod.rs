//! Observation: events (`events.rs`), hooks and counters (`observe.rs`), metrics
//! (`metrics.rs`), spans (`trace.rs`, `otel.rs`), rate-limited error reports
//! (`ratelimit.rs`), the description's types and load (`describe.rs`) and a router's counts
//! per next hop (`hops.rs`): the instruments the parts above record into.
//!
//! May use the leaves, the mesh (ids) and discovery (its events); it reads no part. What
//! reads the whole node (its counters, the description it answers, its warnings, its
//! health) is in `node/`.

pub(crate) mod describe;
pub(crate) mod events;
pub(crate) mod hops;
pub(crate) mod metrics;
pub(crate) mod observe;
#[cfg(feature = "otel")]
pub(crate) mod otel;
pub(crate) mod ratelimit;
pub(crate) mod trace;
