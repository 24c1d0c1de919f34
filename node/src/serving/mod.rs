//! The serving side: handlers and their registry (`handler.rs`, with the [`Reply`] a caller
//! reads), middleware as tower layers (`middleware.rs`), the handler runtime with its slots,
//! fair lanes and runners (`runtime.rs`, `fair.rs`). Each arriving message is dispatched by
//! the node (`node/dispatch.rs`), which hands user work to the runtime here.
//!
//! May use the leaves, the mesh, observation and the config. The runtime reaches the node
//! only through `Host` (joined to it in `node/host.rs`).
//!
//! [`Reply`]: crate::Reply

pub(crate) mod fair;
pub(crate) mod handler;
pub mod middleware;
pub(crate) mod runtime;
