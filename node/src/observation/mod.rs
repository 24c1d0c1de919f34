//! Observation: events (`events.rs`), hooks and counters (`observe.rs`, `stats.rs`),
//! metrics (`metrics.rs`), spans and the trace context (`trace.rs`, `otel.rs`), rate-limited
//! error reports (`ratelimit.rs`, `watch.rs`), the node's description (`describe.rs`,
//! `introspect.rs`) and its health for probes (`health.rs`).
//!
//! Reads the other parts (a description lists the peers, the handlers and the routing
//! counts); nothing here changes them.

pub(crate) mod describe;
pub(crate) mod events;
pub mod health;
pub(crate) mod introspect;
pub(crate) mod metrics;
pub(crate) mod observe;
#[cfg(feature = "otel")]
pub(crate) mod otel;
pub(crate) mod ratelimit;
pub(crate) mod stats;
pub(crate) mod trace;
pub(crate) mod watch;
