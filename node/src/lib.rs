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
//! ## Features
//! - `libzmq` (off): the libzmq engine ([`Engine::Libzmq`]), built from C++ through zmq-sys.
//!   Without it nothing of libzmq is built, and the native engine has everything, CURVE
//!   included; a node asked to run on libzmq fails at start with
//!   `transport::Error::EngineUnavailable`. CURVE on libzmq also needs zmq-sys patched with
//!   this repository's third_party/zmq-sys (README.md, "Use it from your own project").
//! - `otel` (off): spans joined to OpenTelemetry traces (`trace.rs`).
//!
//! ## Layout
//!
//! node/src is in rooms by concern, a folder each whose `mod.rs` says what it owns and which
//! rooms it may use. Bottom to top, each room uses only those before it (`tests/layers.rs`
//! holds the order and fails on an arrow up):
//!
//! - the leaves: `codes.rs` (the codes on the wire), `error.rs`, `options.rs` and
//!   `filter.rs` (what nodes advertise and how to select them, pure), `context.rs` (a
//!   request's deadline, what calls inherit, [`TraceParent`]);
//! - `mesh/`: the ids ([`NodeId`], [`PeerInfo`], [`LeaveReason`]: `names.rs`), the peer
//!   registry (`peer.rs`, pure, and `peers.rs`), the handshake's decisions (`handshake.rs`, pure), links
//!   and connections (`link.rs`, with [`Target`]), the node's life (`phase.rs`);
//! - `discovery/`: the sources of addresses (`discover.rs`, DNS in `dns.rs`);
//! - `observation/`: events, hooks, counters, metrics, spans (`trace.rs`, `otel.rs`),
//!   rate-limited error reports, the description's parts ([`Description`]) and a router's
//!   counts per next hop;
//! - `config.rs` and `startup.rs`;
//! - `serving/`: handlers ([`Request`], [`Response`], [`HandlerError`], [`Reply`]:
//!   `handler.rs`), the handler table and tower layers (`middleware.rs`), the runtime with its
//!   node-wide and per-peer limits (`runtime.rs`, `fair.rs` pure), its jobs
//!   (`runtime/job.rs`);
//! - `routing/`: router nodes: the forward header and its pure decisions (`forward.rs`),
//!   `Relay` (`relay.rs`), gathers and group ticks (`fanout.rs`), relayed streams
//!   (`stream_route.rs`);
//! - `node/`: the [`Node`] handle ([`Peers`], [`Keys`]: `handle.rs`), its parts composed
//!   (`inner.rs`, joined to the narrow types of the parts below in `host.rs`), what runs on
//!   a socket's driver for each message (`dispatch.rs`: decides, never waits), the
//!   protocol's own messages (`system/`: one type decoded once, a file each with its
//!   effect), and what works on the whole node: joining (`join.rs`), connections upstream (`upstream.rs`),
//!   heartbeats, the graceful close (`drain.rs`), following a discovery source
//!   (`follow.rs`), counters ([`NodeStats`], [`Hooks`]: `stats.rs`), the description it
//!   answers (`introspect.rs`), warnings (`watch.rs`) and [`Health`];
//! - `calling/`: the [`Call`] builder (`call.rs`), sending requests and ticks (`send.rs`),
//!   streamed replies and uploads ([`Items`], [`Sink`], [`Body`]: `stream.rs`), a stream from
//!   every match and [`Node::find`] (`find.rs`), [`Caller`] and its layers;
//! - `shutdown.rs`: closing on a signal.

#![forbid(unsafe_code)]
// Library code has no `unwrap` or `expect` (an audit found none outside tests; indexing,
// arithmetic and `panic!` are beyond what this lint checks); tests may have them.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod calling;
mod codes;
mod config;
mod context;
mod discovery;
mod error;
pub mod filter;
mod mesh;
mod node;
mod observation;
pub mod options;
mod routing;
mod serving;
mod shutdown;
mod startup;
#[cfg(test)]
mod wire_vectors;

pub use calling::breaker::{
    Breaker, BreakerFuture, CircuitBreaker, CircuitBreakerLayer, CircuitOpen,
};
pub use calling::call::{Call, FromReply, Raw, Sent, Typed};
pub use calling::call_timeout::{CallTimeout, CallTimeoutLayer};
pub use calling::caller::{CallFuture, Caller, Outbound, RetrySafe};
pub use calling::find::{Found, MAX_FOUND_ROUTERS};
pub use calling::stream::DEFAULT_WINDOW;
pub use calling::stream::{Body, Items, Sink};
pub use codes::Code;
pub use config::{BusyPolicy, Config, NodeBuilder, Reconnect, ReconnectPolicy, DEFAULT_HOP_LIMIT};
pub use context::{TraceParent, TRACEPARENT};
pub use discovery::discover;
pub use discovery::discover::{Discover, DiscoverOptions, Discovery, DiscoveryEvent, Dns, Static};
pub use error::{Error, ErrorCode, HandlerBound, Result};
pub use filter::Filter;
pub use mesh::handshake::PROTOCOL_VERSION;
pub use mesh::link::Target;
pub use mesh::peer::{Direction, LeaveReason, NodeId, PeerInfo, Scope, Strategy};
pub use mesh::phase::Closed;
pub use node::health;
pub use node::health::Health;
pub use node::stats::Hooks;
pub use node::upstream::ConnectOptions;
pub use node::{Keys, Node, NodeStats, Peers, StreamStats, WeakNode};
pub use observation::describe::{
    Counts, DescribePolicy, Description, EventStats, Latency, Limits, PeerSummary, RouterCounts,
    Totals, MAX_DESCRIBED_EVENTS,
};
pub use observation::events::{ErrorSource, EventStream, NodeEvent, WaitError};
pub use observation::hops::{HopCount, MAX_DESCRIBED_HOPS, OTHER_HOPS};
pub use observation::metrics::MAX_EVENT_LABELS;
pub use observation::observe::{Called, Handled, Outcome};
pub use options::{Options, Value};
pub use protocol::{Limit, Meta, MetaError, MetaLimits, MetaValue};
pub use routing::forward::RouterStats;
pub use serving::handler::{
    with_state, HandlerError, HandlerService, Pattern, Reply, Request, Response, Route,
};
pub use serving::middleware;
pub use shutdown::{Shutdown, Signal, Signals};
pub use startup::Waiting;
pub use tower::BoxError;
pub use transport::{Engine, HandshakeFailure, Key, KeyPair, SecretKey};

/// The README's code example, compiled and run as a doctest so it cannot go stale.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
