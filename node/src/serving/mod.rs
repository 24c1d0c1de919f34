//! The serving side: handlers and their registry (`handler.rs`, with the [`Reply`] a caller
//! reads), middleware as tower layers (`middleware.rs`), the handler runtime with its slots,
//! fair lanes and runners (`runtime.rs`, `fair.rs`), and the dispatch of each arriving
//! message (`dispatch.rs`, which decodes the protocol's own messages once: `crate::system`).
//!
//! May use the leaves, the mesh, observation and the config. The runtime reaches the node
//! only through `Host` (joined to it in `node/host.rs`); `dispatch.rs` still names the node
//! and `system/` (the two arrows up listed in `tests/layers.rs`).
//!
//! [`Reply`]: crate::Reply

pub(crate) mod dispatch;
pub(crate) mod fair;
pub(crate) mod handler;
pub mod middleware;
pub(crate) mod runtime;
