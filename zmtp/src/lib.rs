//! # zmtp: ZMTP 3.1 as a state machine
//!
//! The wire protocol of ZeroMQ (ZMTP 3.1, RFC 37, with the NULL mechanism of RFC 23 and
//! CurveZMQ, RFC 26) as a sans-IO core, in the way quinn-proto splits QUIC from its driver:
//! it contains no networking code. Bytes and time go in; messages, bytes to write and the
//! next deadline come out. The `transport` crate's native engine drives it over tokio; the
//! unit tests drive it with byte vectors and simulated time.
//!
//! What it does:
//! - the greeting, with version and mechanism checks on the peer's first bytes;
//! - the handshake: NULL (READY with the socket type and routing id) and CURVE (HELLO,
//!   WELCOME, INITIATE, READY, then every frame in a box);
//! - frames, short and long, multipart messages, with the size limit checked on each header
//!   before anything is allocated;
//! - PING and PONG (ZMTP 3.1 heartbeats): answers the peer's, sends its own, and reports a
//!   silent peer;
//! - ERROR: sent when a handshake is refused, reported when received.
//!
//! What it never does: open a socket, read a clock or start a timer.
//!
//! ## Layout
//! - `frame.rs`, `greeting.rs`, `command.rs`: the wire formats, as pure functions.
//! - `curve/`: CurveZMQ (RFC 26) as libzmq 4.3 speaks it: the client's and the server's
//!   handshake, and the [`curve::Cipher`] of every frame after it. Its cryptography is
//!   libsodium's (`curve/sodium.rs`, the crate's only `unsafe` code: FFI calls).
//! - `connection.rs`: one connection's state machine ([`Connection`]).
//! - `error.rs`: the one error enum.

// Library code has no `unwrap` or `expect` (an audit found none outside tests; indexing,
// arithmetic and `panic!` are beyond what this lint checks); tests may have them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod connection;
mod error;
mod outbox;

pub mod command;
pub mod curve;
pub mod frame;
pub mod greeting;

pub use connection::{
    AuthorizeFn, Authorizer, Config, Connection, Event, Heartbeat, Mechanism, Payload, Peer,
    SocketType, FRAME_OVERHEAD, MAX_ROUTING_ID, MAX_WANTED,
};
pub use error::{Error, Result};
pub use outbox::Outbox;
