//! # node: the zeronode user API
//!
//! A [`Node`] is one participant of a brokerless mesh: it has an id and options (metadata
//! other nodes filter on), binds at most one address (serving the nodes that connect to it),
//! and connects to any number of nodes. Once two nodes are joined, either can call the
//! other. Every call is one of three, to one of three kinds of [`Target`]:
//!
//! | to | request (one reply) | tick (no reply) | gather (a reply from each) | stream (items as they come) |
//! |---|---|---|---|---|
//! | an id | `node.request("db-1", "get", &key).await?` | `node.tick("db-1", "hit", &key).await?` | (an id is one node: use request) | `node.call("db-1", "scan").stream::<Row>(&query)` |
//! | any match | `node.request(&shards, "get", &key).await?` | `node.tick(&shards, "hit", &key).await?` | `node.call(&shards, "count").gather(&()).await?` | `node.call(&shards, "scan").stream::<Row>(&query)` |
//! | all matches | (one reply: use gather) | `node.tick(Target::all(shards), "flush", &()).await?` | `node.call(Target::all(shards), "count").gather(&()).await?` | `node.call(Target::all(shards), "scan").stream_all::<Row>(&query).await?`: `(id, item)` from each |
//!
//! Here `shards` is a [`Filter`] (`Filter::new().eq("role", "shard")`); a filter is any
//! match, in both directions ([`Target::scope`] narrows it to upstream or downstream
//! peers); [`Node::find`] lists what a filter matches, here and through routers. `request`
//! and `tick` are shorthands for [`Node::call`], the one builder, which
//! also sets metadata, a timeout or deadline, the parent request, groups, and raw payloads
//! ([`Call::raw`]):
//!
//! ```no_run
//! # async fn example(node: node::Node) -> node::Result<()> {
//! use std::time::Duration;
//!
//! let count: u64 = node
//!     .call("db-1", "count")
//!     .meta("tenant", "acme")
//!     .timeout(Duration::from_millis(500))
//!     .send(&())
//!     .await?;
//! # let _ = count; Ok(()) }
//! ```
//!
//! A tick to all matches answers with [`Sent`]: how many nodes it was sent to (not how
//! many handled it). A reply's metadata comes with [`Reply`]. For tower middleware on the
//! calling side (retry, timeout, concurrency limits), [`Node::caller`] is the same call as a
//! tower `Service`.
//!
//! A stream ([`Call::stream`], handled by [`Node::on_stream`]) is a `futures::Stream` of
//! typed items ending with the handler's result; an upload ([`Call::upload`], handled by
//! [`Node::on_upload`]) sends a stream of items as a request's body and gets one reply. Both
//! have credit-based flow control counted in items: the receiver holds at most its window
//! (1,024 items by default, [`DEFAULT_WINDOW`], set per stream with [`Items::window`]; it
//! grants fewer while items are large, aiming at about 2 MiB), each bounded by the payload
//! limit, so a stream costs at most window x `max_payload` bytes at its receiver, and a slow
//! reader slows its producer. Dropping a stream cancels its handler; the call's timeout
//! bounds the whole stream, [`Items::idle_timeout`] each item. Streams and uploads go through router nodes
//! as requests do: each router relays the items one by one, holding at most a window of
//! them; a stream both ways ([`Call::bidi`], raw items) too.
//!
//! The rest of a node:
//!
//! - handlers by event name or regex ([`Node::on_request`], [`Node::on_tick`]), given shared
//!   state once with [`with_state`], behind middleware ([`Node::layer`]): an async function
//!   through [`middleware::from_fn`], or any tower layer;
//! - a handshake that exchanges ids, options and versions and binds each peer's identity to
//!   its connection; heartbeats both ways; reconnection and re-handshake after restarts and
//!   network cuts; an events stream ([`Node::events`]); graceful close; the joined peers
//!   ([`Node::peers`]), CURVE keys ([`Node::keys`]), counters ([`Node::stats`]), and a
//!   description any peer may ask for ([`Node::describe`]);
//! - router nodes ([`NodeBuilder::router`]): a message that finds no joined match (or an id
//!   that is not joined) goes through a joined router, which applies the same target to its
//!   own peers and other routers, with the caller's deadline, a hop limit and loop
//!   protection, so a mesh needs no full set of connections.
//!
//! What it never does: parse envelopes or touch sockets (the `protocol` and `transport`
//! crates do).
//!
//! ## Layout
//! The node is a few parts, each owning its state and its methods; `inner.rs` composes
//! them (no circle of imports larger than a few files: `tests/layers.rs`).
//! - `node.rs`: the [`Node`] handle and its API, the [`Peers`] and [`Keys`] views;
//!   `call.rs`: the [`Call`] builder and [`Reply`]; `stream.rs`: streamed replies and
//!   uploads ([`Items`], [`Sink`], [`Body`]); `send.rs`: sending requests and ticks
//!   (picking, retrying a pick, routers); `caller.rs`: [`Caller`], calls as a tower
//!   `Service`, and `call_timeout.rs` its timeout layer;
//! - `inner.rs`: the parts together, and what spans them (a peer leaving); `host.rs`:
//!   how the handler runtime reaches the node;
//! - the peer registry: `peers.rs` (who is joined, by which link; routes; bound keys) on
//!   `peer.rs` (the registry and the strategies of a pick, pure, tested with simulated
//!   time);
//! - the handler runtime: `runtime.rs` (handler work off the socket's driver, with the
//!   node-wide and per-peer limits and the busy policy, on `protocol::Runners`); `fair.rs`
//!   (the admission decision and the waiting work's lanes, pure); `middleware.rs` (the
//!   handler table and the tower layers in front of it); `handler.rs` (requests,
//!   responses, handler errors);
//! - `dispatch.rs`: what runs on a socket's driver for each message (decides, never waits);
//! - joining: `handshake.rs` (what nodes tell each other, and the pure decision to admit
//!   a peer, used by both sides), `join.rs` (both sides' steps);
//! - upstream links: `link.rs` (how a peer is reached, and [`Target`]), `upstream.rs` (one
//!   supervisor task per connection this node made: joining, rejoining by the reconnect
//!   policy), `heartbeat.rs`, `watch.rs` (the bound socket's monitor);
//! - routing and forwarding: `forward.rs` (the forwarded message and the pure decisions
//!   about it), `routing.rs` (`Relay`: router nodes at run time), `fanout.rs` (gathers and
//!   group ticks), `hops.rs` (what a router passed to each next hop);
//! - the node's life: `phase.rs` (open, draining, closing), `drain.rs` (graceful close);
//! - observability: `events.rs`, `observe.rs` (hooks, per-request metrics), `metrics.rs`,
//!   `trace.rs`, `otel.rs`, `stats.rs` (counters), `ratelimit.rs` (error reports),
//!   `describe.rs` (what a node tells a peer that asks about it, and the per-event load
//!   behind it), `introspect.rs` (building it, answering, asking);
//! - discovery: `discover.rs` (the sources: a DNS name, a list, the `Discover` trait),
//!   `follow.rs` (a task per source, through `connect` and `disconnect`);
//! - `filter.rs`, `options.rs`: what nodes advertise and how to select them (pure);
//!   `context.rs` (a request's deadline and what calls inherit), `codes.rs` (the codes on
//!   the wire), `config.rs`, `error.rs`; `breaker.rs` (a client layer).

#![forbid(unsafe_code)]
// Library code has no `unwrap` or `expect` (an audit found none outside tests; indexing,
// arithmetic and `panic!` are beyond what this lint checks); tests may have them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod breaker;
mod call;
mod call_timeout;
mod caller;
mod codes;
mod config;
mod context;
mod describe;
pub mod discover;
mod dispatch;
mod drain;
mod error;
mod events;
mod fair;
mod fanout;
pub mod filter;
mod find;
mod follow;
mod forward;
mod handler;
mod handshake;
pub mod health;
mod heartbeat;
mod hops;
mod host;
mod inner;
mod introspect;
mod join;
mod link;
mod metrics;
pub mod middleware;
mod node;
mod observe;
pub mod options;
#[cfg(feature = "otel")]
mod otel;
mod peer;
mod peers;
mod phase;
mod ratelimit;
mod routing;
mod runtime;
mod send;
mod shutdown;
mod startup;
mod stats;
mod stream;
mod stream_route;
mod system;
mod trace;
mod upstream;
mod watch;
#[cfg(test)]
mod wire_vectors;

pub use breaker::{Breaker, BreakerFuture, CircuitBreaker, CircuitBreakerLayer, CircuitOpen};
pub use call::{Call, FromReply, Raw, Reply, Sent, Typed};
pub use call_timeout::{CallTimeout, CallTimeoutLayer};
pub use caller::{CallFuture, Caller, Outbound, RetrySafe};
pub use codes::Code;
pub use config::{BusyPolicy, Config, NodeBuilder, Reconnect, ReconnectPolicy};
pub use describe::{
    Counts, DescribePolicy, Description, EventStats, Latency, Limits, PeerSummary, RouterCounts,
    Totals, MAX_DESCRIBED_EVENTS,
};
pub use discover::{Discover, DiscoverOptions, Discovery, DiscoveryEvent, Dns, Static};
pub use error::{Error, ErrorCode, HandlerBound, Result};
pub use events::{ErrorSource, EventStream, LeaveReason, NodeEvent, WaitError};
pub use filter::Filter;
pub use find::{Found, MAX_FOUND_ROUTERS};
pub use forward::{RouterStats, DEFAULT_HOP_LIMIT};
pub use handler::{with_state, HandlerError, HandlerService, Pattern, Request, Response, Route};
pub use handshake::PROTOCOL_VERSION;
pub use health::Health;
pub use hops::{HopCount, MAX_DESCRIBED_HOPS, OTHER_HOPS};
pub use link::Target;
pub use metrics::MAX_EVENT_LABELS;
pub use node::{Keys, Node, NodeStats, Peers, StreamStats, WeakNode};
pub use observe::{Called, Handled, Outcome};
pub use options::{Options, Value};
pub use peer::{Direction, NodeId, PeerInfo, Scope, Strategy};
pub use phase::Closed;
pub use protocol::{Limit, Meta, MetaError, MetaLimits, MetaValue};
pub use shutdown::{Shutdown, Signal, Signals};
pub use startup::Waiting;
pub use stats::Hooks;
pub use stream::DEFAULT_WINDOW;
pub use stream::{Body, Items, Sink};
pub use tower::BoxError;
pub use trace::{TraceParent, TRACEPARENT};
pub use transport::{Engine, HandshakeFailure, Key, KeyPair, SecretKey};
pub use upstream::ConnectOptions;

/// The README's code example, compiled and run as a doctest so it cannot go stale.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
