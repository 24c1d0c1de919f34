//! # node: the zeronode user API
//!
//! A [`Node`] is one participant of a brokerless mesh: it has an id and options (metadata
//! other nodes filter on), binds at most one address (serving the nodes that connect to it),
//! and connects to any number of nodes. Once two nodes are joined, either can send to the
//! other:
//!
//! - [`Node::request`] (reply or typed error) and [`Node::tick`] (fire and forget), to an
//!   id, or to one node matching a [`Filter`] ([`Node::request_any`], [`Node::tick_any`]),
//!   or to all of them ([`Node::tick_all`]), upstream, downstream or both ([`Scope`]);
//! - handlers by event name or regex ([`Node::on_request`], [`Node::on_tick`]), behind tower
//!   middleware ([`Node::layer`]);
//! - a handshake that exchanges ids, options and versions and binds each peer's identity to
//!   its connection; heartbeats both ways; reconnection and re-handshake after restarts and
//!   network cuts; an events stream ([`Node::events`]); graceful close;
//! - router nodes ([`NodeBuilder::router`]): a message that finds no joined match (or an id
//!   that is not joined) goes through a joined router, which applies the same target to its
//!   own peers and other routers, with the caller's deadline, a hop limit and loop
//!   protection, so a mesh needs no full set of connections.
//!
//! What it never does: parse envelopes or touch sockets (the `protocol` and `transport`
//! crates do).
//!
//! ## Layout
//! - `node.rs`: [`Node`], the handshake, dispatch, supervision of upstream connections and
//!   the heartbeat loop;
//! - `peer.rs`: the peer registry and the `*_any` strategies (pure, tested with simulated
//!   time);
//! - `filter.rs`, `options.rs`: what nodes advertise and how to select them (pure);
//! - `forward.rs`: router nodes: the forwarded message and the decisions about it (pure);
//! - `handler.rs`: requests, responses, handler errors, middleware;
//! - `config.rs`, `events.rs`, `error.rs`.

#![forbid(unsafe_code)]

mod config;
mod error;
mod events;
pub mod filter;
mod forward;
mod handler;
mod node;
pub mod options;
mod peer;

pub use config::{Config, NodeBuilder};
pub use error::{Error, ErrorCode, Result};
pub use events::{ErrorSource, LeaveReason, NodeEvent};
pub use filter::Filter;
pub use forward::{RouterStats, DEFAULT_HOP_LIMIT};
pub use handler::{HandlerError, HandlerService, Pattern, Request, Response, Route};
pub use node::{Node, NodeStats, Target, PROTOCOL_VERSION};
pub use options::{Options, Value};
pub use peer::{Direction, NodeId, PeerInfo, Scope, Strategy};
pub use tower::BoxError;
pub use transport::{HandshakeFailure, Key, KeyPair, SecretKey};

/// The README's code example, compiled and run as a doctest so it cannot go stale.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
