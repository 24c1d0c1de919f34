//! # transport: asynchronous ROUTER/DEALER sockets on tokio, on two engines
//!
//! The lowest layer of zeronode. It moves multipart messages (frames as [`bytes::Bytes`])
//! between a [`Router`] (the side that binds and serves many peers) and [`Dealer`]s (the side
//! that connects), on one of two [`Engine`]s that speak the same ZMTP 3.1: the native one
//! (the default: ZMTP in Rust through the `zmtp` crate, one tokio task per connection, over
//! `tcp://` and `ipc://`) or libzmq (TCP, IPC and inproc).
//!
//! ## Features
//!
//! - `libzmq` (off by default): the libzmq engine, through the `zmq` crate and zmq-sys, which
//!   build libzmq from C++. Without it the crate has no libzmq at all, CURVE included (the
//!   native engine's CURVE and [`KeyPair::generate`] use libsodium), and a socket asked for
//!   on [`Engine::Libzmq`] is [`Error::EngineUnavailable`]. CURVE on the libzmq engine needs
//!   zmq-sys patched with this repository's third_party/zmq-sys; with crates.io's, a CURVE
//!   socket on it is [`Error::CurveUnavailable`].
//!
//! What it does:
//! - `bind` (`tcp://127.0.0.1:0` gives back the real endpoint), `unbind`, `connect`,
//!   `disconnect`, `close` (which releases every port at once);
//! - asynchronous `send` / `recv` that go straight into libzmq from the calling task, with
//!   backpressure at the high-water mark (wait, or a typed error by option);
//! - connection events from libzmq's socket monitor ([`Events`]);
//! - the socket options that matter ([`Options`]), with ROUTER_MANDATORY on so a message to an
//!   unknown peer is an error, never a silent drop;
//! - CurveZMQ encryption and authentication ([`Curve`], [`KeyPair`]): a Router as CURVE
//!   server with an allow-list of client keys that can change at run time
//!   ([`Router::allow_keys`]), and the client key of every received message
//!   ([`Router::recv_with_key`]).
//!
//! ## Frames are not copied on the way in, nor when sent on
//!
//! A received frame over 4 KiB is a `Bytes` that owns libzmq's message: no copy; a
//! smaller one is copied into a chunk the socket shares between frames (cheaper than an
//! owner allocated per frame; a frame kept alive keeps its 16 KiB chunk alive). A frame you build is
//! copied once when sent, into a buffer from a pool (64 B to 64 KiB size classes) that
//! libzmq gives back once it has written the frame, rather than one its I/O thread would
//! free (which, on a busy socket, made the sending thread and the I/O thread contend for
//! the allocator's lock). A frame you received and send on as it is
//! (an echo, a forwarder: the same `Bytes`, or a clone) is recognised and goes back to
//! libzmq as another reference to the received message, as raw libzmq code would forward
//! it: no copy, and no allocation for libzmq's I/O thread to free. The socket remembers the
//! last few frames of more than 33 bytes that it received, until it has nothing more to
//! read; a frame sent later than that, or a slice of one, is copied. A socket that never
//! sends on what it receives soon stops remembering, so it does not pay for it.
//!
//! What it never does: look inside a frame. Envelopes, request ids and handshakes belong to
//! the `protocol` and `node` crates above. No `zmq` type appears in this API, so either engine
//! sits behind it.
//!
//! ## Layout
//! - `engine.rs`: the engine choice and the socket enum that dispatches to either engine;
//! - `native/`: the native engine (a driver task per connection, the inbox, endpoints);
//!   `deliver.rs`: messages handed to a receiver on the connections' drivers;
//! - `socket.rs`: the libzmq engine's core shared by both socket kinds; how a non-thread-safe
//!   libzmq socket is driven from tokio through its edge-triggered ZMQ_FD (`turn.rs`: whose
//!   turn it is to read).
//! - `msg.rs`: libzmq messages owned directly, and the recent frames kept for forwarding.
//! - `pool.rs`: buffers for sent frames, given back by libzmq instead of freed.
//! - `router.rs`, `dealer.rs`: the two public socket types (`shared.rs`: the methods both
//!   have, written once).
//! - `monitor.rs`: connection events (`monitor/libzmq.rs`: libzmq's socket monitor).
//! - `curve.rs`: CURVE keys, the [`Curve`] option and a server's allow-list; `zap.rs`: the
//!   process-wide ZAP handler thread that applies each libzmq CURVE server's allow-list and
//!   tags connections with the client's key.
//!
//! `socket.rs`, `turn.rs`, `msg.rs`, `pool.rs`, `zap.rs` and `monitor/libzmq.rs` are the
//! libzmq engine's alone, compiled only with the `libzmq` feature.
//! - `options.rs`, `error.rs`: configuration and the one error enum.
//!
//! ## CURVE: a refused connection is an event, not an error
//!
//! libzmq handshakes in the background, so a refusal never comes back from `connect` or
//! `send` (a message sent meanwhile waits in the queue, and is dropped with the connection
//! if libzmq gives up). It shows up in both sockets' [`Events`] as
//! [`Event::HandshakeFailed`], each time a handshake fails. What libzmq 4.3.4 reports:
//!
//! | case | client (Dealer) | server (Router) | client retries? |
//! |---|---|---|---|
//! | key not on the allow-list | `Auth` | `Auth` | no: gives the endpoint up |
//! | plaintext client, CURVE server (or the reverse) | `Protocol` | `Protocol` | no |
//! | wrong server key | `NoDetail` (the server hangs up) | `Protocol` | yes, every reconnect interval, forever |
//!
//! To turn a refusal into an error in bounded time, watch the Dealer's events after
//! `connect`: the first `HandshakeFailed` comes one handshake after `Connected`
//! (milliseconds on a LAN); a CURVE client that sees it before any `HandshakeSucceeded`
//! was refused, so `disconnect` (which also ends the endless retries of the wrong-key case)
//! and report the reason. To try again after the server changed its allow-list, `connect`
//! again.
//!
//! ## Legacy peers are refused
//!
//! A Router speaks ZMTP 3 only: libzmq would take a connection whose first byte is not
//! 0xFF for a ZMTP 1.0 peer and its bytes for messages, so any stray connection could send
//! a Router messages under an arbitrary routing id, and each cost a pipe pair while it
//! lived. Every Router has a ZAP domain (a CURVE server its own, a plaintext one
//! `zeronode-plaintext`), which makes libzmq refuse ZMTP 1.0 and 2.0 peers: they are
//! accepted and dropped (`Accepted`, `Disconnected`, no `HandshakeFailed`).

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

// `unsafe` in three places, each with its safety argument: msg.rs (libzmq messages owned
// through zmq-sys, for zero-copy receive and forwarding), pool.rs (send buffers handed to
// libzmq and given back) and socket.rs (registering libzmq's ZMQ_FD with tokio).
// `unsafe_code` is denied everywhere else.

// Library code has no `unwrap` or `expect` (an audit found none outside tests; indexing,
// arithmetic and `panic!` are beyond what this lint checks); tests may have them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod curve;
mod dealer;
mod deliver;
mod engine;
mod error;
mod frame;
mod ids;
mod monitor;
#[cfg(feature = "libzmq")]
mod msg;
mod native;
mod options;
#[cfg(feature = "libzmq")]
mod pool;
mod router;
mod shared;
#[cfg(feature = "libzmq")]
mod socket;
#[cfg(feature = "libzmq")]
mod turn;
#[cfg(feature = "libzmq")]
mod zap;

pub use curve::{Curve, Key, KeyPair, SecretKey};
pub use dealer::Dealer;
pub use deliver::{Deliver, Delivery};
pub use error::{Error, Result};
pub use frame::Frame;
pub use ids::{Engine, PeerId};
pub use monitor::{Event, Events, HandshakeFailure};
pub use options::{Backpressure, Heartbeat, Options, DEFAULT_MAX_HANDSHAKES};
pub use router::Router;

/// The libzmq version linked in, as `(major, minor, patch)` (with the `libzmq` feature).
#[cfg(feature = "libzmq")]
pub fn libzmq_version() -> (i32, i32, i32) {
    zmq::version()
}

/// Whether the linked libzmq supports a capability (`"curve"`, `"ipc"`, ...), with the
/// `libzmq` feature. The workspace builds libzmq with libsodium (third_party/zmq-sys), so
/// `"curve"` is there; crates.io's zmq-sys has no `"curve"`. The native engine's CURVE does
/// not depend on it.
#[cfg(feature = "libzmq")]
pub fn has_capability(name: &str) -> bool {
    zmq::has(name).unwrap_or(false)
}
