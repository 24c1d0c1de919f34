//! # protocol: zeronode's envelope and conversation
//!
//! The middle layer. It gives meaning to the frames the `transport` crate moves:
//!
//! - the [`Envelope`]: a binary header (magic, version, kind, flags, a 64-bit request id, the
//!   event name, metadata) and the payload as a frame of its own. Decoding reads the header
//!   and the event name only; the payload stays the received `Bytes` until a handler asks for
//!   it, raw or decoded from MessagePack (lazy parsing, no copy);
//! - the conversation: a [`Client`] (over a Dealer) and a [`Server`] (over a Router) that send
//!   requests and match their replies by id, each with its own deadline, send ticks, run
//!   handlers concurrently and answer errors with a code and a message;
//! - streams: a request whose reply comes as a stream of items ([`ReplyStream`],
//!   [`ItemSink`]), or whose body leaves as one ([`ItemStream`]), with credit-based flow
//!   control counted in items (`credit.rs`): a stream holds at most its window of items
//!   (default [`DEFAULT_WINDOW`]) at its receiver, each bounded by the payload limit;
//! - a reserved `_system:` event namespace that `request` and `tick` refuse, kept for the node
//!   layer's handshake and heartbeats.
//!
//! What it never does: know about nodes, their ids, options or heartbeats (the `node` crate),
//! or touch libzmq directly (the `transport` crate).
//!
//! ## Layout
//! - `envelope.rs`: the wire format, byte by byte, and its decoder (pure);
//! - `credit.rs`: streams' flow control, credit and windows (pure);
//! - `table.rs`: the correlation table of pending requests and their deadlines (pure, tested
//!   with simulated time);
//! - `conversation.rs`: the driver shared by Client and Server;
//! - `runners.rs`: reusable tasks that run handler work off the driver;
//! - `peer.rs`: [`Peer`], the conversation with one remote end: one way to send each kind
//!   of message, user or system;
//! - `client.rs`, `server.rs` (what only a Client or a Server has: connecting, binding,
//!   keys; `local.rs` what both have), `handler.rs`, `error.rs`.
//!
//! ## Example
//!
//! ```
//! # #[tokio::main] async fn main() -> protocol::Result<()> {
//! use std::time::Duration;
//! use bytes::Bytes;
//! use protocol::{request_fn, Client, RemoteError, Server};
//!
//! let server = Server::bind("tcp://127.0.0.1:0").await?;
//! server.on_request("add", request_fn(|req| async move {
//!     let (a, b): (i64, i64) = req.decode().map_err(|e| RemoteError::new("BAD_INPUT", e.to_string()))?;
//!     protocol::encode_value(&(a + b)).map_err(|e| RemoteError::handler(e.to_string()))
//! }));
//! let client = Client::connect(server.endpoint(), Duration::from_secs(5)).await?;
//! let reply = client
//!     .peer()
//!     .request("add", protocol::encode_value(&(2, 3))?, Duration::from_secs(1))
//!     .await?;
//! assert_eq!(reply.decode_payload::<i64>()?, 5);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
// Library code has no `unwrap` or `expect` (an audit found none outside tests; indexing,
// arithmetic and `panic!` are beyond what this lint checks); tests may have them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod client;
mod conversation;
pub mod credit;
mod envelope;
mod error;
mod handler;
mod link;
mod local;
mod meta;
mod peer;
pub mod runners;
mod serve;
mod server;
mod stats;
pub mod table;

pub use client::{Client, Connection, DEFAULT_MAX_PAYLOAD};
pub use conversation::{
    ItemSink, ItemStream, Rejected, ReplyStream, Stats, StreamOptions, DEFAULT_MAX_STREAMS,
};
pub use credit::{Violation, DEFAULT_WINDOW};
pub use envelope::{
    decode_value, encode_value, Envelope, Kind, FIXED_HEADER, INLINE_MAX, MAGIC, MAX_EVENT_LEN,
    SYSTEM_PREFIX, VERSION,
};
pub use error::{DecodeError, Error, ErrorCode, Limit, RemoteError, Result};
pub use handler::{
    request_fn, stream_fn, tick_fn, upload_fn, Answer, Incoming, RequestFuture, RequestHandler,
    Responder, TickFuture, TickHandler,
};
pub use meta::{Meta, MetaError, MetaLimits, MetaValue, BUDGET, BUDGET_ENTRY, RESERVED_PREFIX};
pub use peer::Peer;
pub use runners::{Job, Runners};
pub use serve::Serve;
pub use server::Server;
pub use transport::PeerId;
