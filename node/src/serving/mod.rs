//! The serving side: handlers and their registry (`handler.rs`), middleware as tower layers
//! (`middleware.rs`), the handler runtime with its slots, fair lanes and runners
//! (`runtime.rs`, `fair.rs`, `host.rs`), and the dispatch of each arriving message
//! (`dispatch.rs`, which decodes the protocol's own messages once: `crate::system`).
//!
//! Uses the mesh (who sent a message, the peer's work), routing (a forward runs as a task
//! here) and observation; the runtime reaches the node only through `Host`.

pub(crate) mod dispatch;
pub(crate) mod fair;
pub(crate) mod handler;
pub(crate) mod host;
pub mod middleware;
pub(crate) mod runtime;
