//! # transport: asynchronous ROUTER/DEALER sockets over libzmq on tokio
//!
//! The lowest layer of zeronode. It moves multipart messages (frames as [`bytes::Bytes`])
//! between a [`Router`] (the side that binds and serves many peers) and [`Dealer`]s (the side
//! that connects), over libzmq's TCP, IPC and inproc transports.
//!
//! What it does:
//! - `bind` (`tcp://127.0.0.1:0` gives back the real endpoint), `unbind`, `connect`,
//!   `disconnect`, `close` (which releases every port at once);
//! - asynchronous `send` / `recv` that go straight into libzmq from the calling task, with
//!   backpressure at the high-water mark (wait, or a typed error by option);
//! - connection events from libzmq's socket monitor ([`Events`]);
//! - the socket options that matter ([`Options`]), with ROUTER_MANDATORY on so a message to an
//!   unknown peer is an error, never a silent drop.
//!
//! What it never does: look inside a frame. Envelopes, request ids and handshakes belong to
//! the `protocol` and `node` crates above. No `zmq` type appears in this API, so another engine
//! speaking the same wire protocol can sit behind it later.
//!
//! ## Layout
//! - `socket.rs`: the core shared by both socket kinds; how a non-thread-safe libzmq socket is
//!   driven from tokio through its edge-triggered ZMQ_FD.
//! - `router.rs`, `dealer.rs`: the two public socket types.
//! - `monitor.rs`: connection events.
//! - `options.rs`, `error.rs`: configuration and the one error enum.
//!
//! ## Example
//!
//! ```
//! # #[tokio::main] async fn main() -> transport::Result<()> {
//! use bytes::Bytes;
//! use transport::{Dealer, Router};
//!
//! let router = Router::new()?;
//! let endpoint = router.bind("tcp://127.0.0.1:0")?;
//! let dealer = Dealer::new()?;
//! dealer.connect(&endpoint)?;
//! dealer.send(vec![Bytes::from_static(b"hello")]).await?;
//! let (peer, frames) = router.recv().await?;
//! router.send(&peer, vec![Bytes::from_static(b"world")]).await?;
//! assert_eq!(frames, vec![Bytes::from_static(b"hello")]);
//! assert_eq!(dealer.recv().await?, vec![Bytes::from_static(b"world")]);
//! # Ok(()) }
//! ```

// One `unsafe` block in the whole crate: registering libzmq's ZMQ_FD with tokio
// (socket.rs, with its safety argument). `unsafe_code` is denied everywhere else.

mod dealer;
mod error;
mod monitor;
mod options;
mod router;
mod socket;

pub use dealer::Dealer;
pub use error::{Error, Result};
pub use monitor::{Event, Events, HandshakeFailure};
pub use options::{Backpressure, Heartbeat, Options};
pub use router::{PeerId, Router};

/// The libzmq version linked in, as `(major, minor, patch)`.
pub fn libzmq_version() -> (i32, i32, i32) {
    zmq::version()
}

/// Whether the linked libzmq supports a capability (`"curve"`, `"ipc"`, ...).
pub fn has_capability(name: &str) -> bool {
    zmq::has(name).unwrap_or(false)
}
