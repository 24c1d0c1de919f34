//! The [`Node`] handle and its API: building, binding, connecting, handlers, security,
//! counters, closing. Sending is in `send.rs`; what the handle shares with the node's tasks
//! is `inner.rs`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use protocol::{encode_value, Server};
use serde::Serialize;
use tower::{BoxError, Layer, Service};
use transport::{Curve, Key};

use crate::config::{Config, NodeBuilder};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::mesh::handshake::{BYE, OPTIONS};
use crate::mesh::link::Link;
use crate::mesh::peer::{Direction, LeaveReason, NodeId, PeerInfo, Scope};
use crate::mesh::phase::Closed;
use crate::node::dispatch::install_downstream;
use crate::node::heartbeat::heartbeat_loop;
use crate::node::inner::Inner;
use crate::node::upstream::ConnectOptions;
use crate::observation::events::{ErrorSource, EventStream};
use crate::options::Options;
use crate::routing::forward::RouterStats;
use crate::serving::handler::{self, HandlerError, HandlerService, Pattern, Request, Response};

/// What a node has been through, for operators and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Joined peers (a peer joined both ways counts twice).
    pub peers: usize,
    /// Requests this node's handlers answered.
    pub requests_handled: u64,
    /// Received messages that were not valid envelopes (dropped, counted, reported).
    pub invalid_envelopes: u64,
    /// Messages from connections that never completed the handshake (refused).
    pub unjoined_messages: u64,
    /// Replies that matched no pending request (late, duplicate or spoofed; dropped).
    pub unmatched_replies: u64,
    /// Requests of ours that ended with a timeout.
    pub timeouts: u64,
    /// Requests this node sent (system requests included).
    pub requests_sent: u64,
    /// Ticks this node sent (heartbeats included).
    pub ticks_sent: u64,
    /// Ticks this node received (heartbeats included).
    pub ticks_received: u64,
    /// Requests refused with `BUSY` (the handlers were at their limit).
    pub busy_refused: u64,
    /// Ticks dropped because the handlers were at their limit.
    pub ticks_dropped: u64,
    /// Ticks a middleware refused (each also a rate-limited
    /// [`NodeEvent::Error`](crate::NodeEvent::Error) from
    /// [`ErrorSource::TickRefused`](crate::ErrorSource::TickRefused)).
    pub ticks_refused: u64,
    /// Handler tasks running or waiting for a slot now.
    pub handlers_active: usize,
    /// Of those, the ones waiting for a slot.
    pub handlers_queued: usize,
    /// Handler jobs stopped because the peer they worked for left.
    pub handlers_cancelled: u64,
    /// Requests whose deadline passed before their handler started (not run) or while it
    /// ran (stopped); answered `DEADLINE_EXCEEDED`.
    pub handlers_expired: u64,
    /// Requests and ticks refused for their metadata (over
    /// [`Config::max_metadata`](crate::Config::max_metadata), or malformed).
    pub metadata_refused: u64,
    /// Forwarding counters (all zero unless this node is a router).
    pub router: RouterStats,
    /// Stream counters: opened, items, violations (see [`Node::on_stream`]).
    pub streams: StreamStats,
    /// Whether [`close`](Node::close) has started (the node drains, or is past that).
    pub closing: bool,
}

/// A node's stream counters ([`NodeStats::streams`]), over its
/// bound socket and every connection it made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Streams this node opened as a caller.
    pub opened: u64,
    /// Streamed requests this node's handlers took.
    pub accepted: u64,
    /// Items sent, either direction.
    pub items_sent: u64,
    /// Items received and queued for a reader.
    pub items_received: u64,
    /// Items, credit and cancels for no open stream (dropped).
    pub items_dropped: u64,
    /// Streams ended because the peer broke the stream rules.
    pub violations: u64,
    /// Streams ended early (a caller gave up, a peer left, an idle timeout).
    pub cancelled: u64,
    /// Streamed requests refused over the limit of open streams.
    pub refused: u64,
}

impl StreamStats {
    /// Adds one conversation's counters.
    pub(crate) fn add(&mut self, stats: &protocol::Stats) {
        self.opened += stats.streams_opened;
        self.accepted += stats.streams_accepted;
        self.items_sent += stats.stream_items_sent;
        self.items_received += stats.stream_items_received;
        self.items_dropped += stats.stream_items_dropped;
        self.violations += stats.stream_violations;
        self.cancelled += stats.streams_cancelled;
        self.refused += stats.streams_refused;
    }
}

/// A zeronode node: binds at most one address, connects to any number of nodes, and talks to
/// every joined peer by id or by filter.
///
/// Cheap to clone: clones share the node. Dropping the last clone closes the node (as
/// [`close`](Self::close) does, in a task of its own: the port is released, peers are told,
/// its tasks end). A handler that needs its own node holds a [`WeakNode`]
/// ([`downgrade`](Self::downgrade)): a `Node` captured by one of its own handlers would keep
/// it alive forever.
///
/// ```
/// # #[tokio::main] async fn main() -> node::Result<()> {
/// use node::{HandlerError, Node};
///
/// let server = Node::builder().id("server").bind("tcp://127.0.0.1:0").build().await?;
/// server.on_request("add", |req: node::Request| async move {
///     let (a, b): (i64, i64) = req.decode()?;
///     Ok::<_, HandlerError>(a + b)
/// });
///
/// let client = Node::builder().id("client").build().await?;
/// let peer = client.connect(server.address().unwrap().as_str()).await?;
/// assert_eq!(peer.id.as_str(), "server");
///
/// let sum: i64 = client.request("server", "add", &(2, 3)).await?;
/// assert_eq!(sum, 5);
/// client.close().await;
/// server.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<Inner>,
    /// Shared by the handles only (the node's own tasks hold `inner`, never this): when the
    /// last handle goes, its drop closes the node.
    alive: Arc<Alive>,
}

/// A handle that does not keep its node alive: what a handler of the node holds to send
/// from inside it.
///
/// ```
/// # #[tokio::main] async fn main() -> node::Result<()> {
/// use node::{HandlerError, Node, Request};
///
/// let server = Node::builder().id("server").bind("tcp://127.0.0.1:0").build().await?;
/// let me = server.downgrade();
/// server.on_request("whoami", move |_req: Request| {
///     let me = me.clone();
///     async move {
///         let node = me.upgrade().ok_or_else(|| HandlerError::new("GONE", "closed"))?;
///         Ok::<_, HandlerError>(node.id().to_string())
///     }
/// });
/// # server.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WeakNode {
    inner: Weak<Inner>,
    alive: Weak<Alive>,
}

impl WeakNode {
    /// The node, if some handle still keeps it open.
    pub fn upgrade(&self) -> Option<Node> {
        Some(Node {
            alive: self.alive.upgrade()?,
            inner: self.inner.upgrade()?,
        })
    }
}

impl std::fmt::Debug for WeakNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeakNode").finish_non_exhaustive()
    }
}

/// Closes the node when the last handle is dropped. Holds the node's state strongly: the
/// handles' own `inner` may be dropped first (fields drop in order), and the node's tasks
/// hold it only weakly, so this is what keeps it until the close has run.
struct Alive {
    inner: Arc<Inner>,
}

impl Drop for Alive {
    fn drop(&mut self) {
        let inner = Arc::clone(&self.inner);
        if inner.life.is_stopping() {
            return;
        }
        // Closing waits (for handlers, for goodbyes to be sent): in a task of its own. With
        // no runtime left there is nothing to close on; the runtime's end stops every task.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { inner.close().await });
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.inner.id)
            .field("address", &self.address())
            .finish()
    }
}

impl NodeBuilder {
    /// Builds the node (binding its address if one was given). Must run inside a tokio
    /// runtime.
    pub async fn build(self) -> Result<Node> {
        Node::from_builder(self).await
    }
}

impl Node {
    /// A builder.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    pub(crate) async fn from_builder(builder: NodeBuilder) -> Result<Node> {
        let config = builder.resolved_config();
        // An engine this build lacks (libzmq without the `libzmq` feature) fails the start,
        // bound or not, rather than the first `connect` of a node that binds nothing.
        if !config.engine.is_available() {
            return Err(transport::Error::EngineUnavailable {
                engine: config.engine,
            }
            .into());
        }
        let inner = Arc::new(Inner::new(
            builder.id.unwrap_or_else(NodeId::generate),
            builder.options,
            config,
        ));
        let heartbeat = tokio::spawn(heartbeat_loop(Arc::downgrade(&inner)));
        *inner.links.heartbeat.lock() = Some(heartbeat);
        if inner.observers.metrics.is_some() {
            tokio::spawn(crate::node::stats::sample_metrics(Arc::downgrade(&inner)));
        }
        let node = Node {
            alive: Arc::new(Alive {
                inner: Arc::clone(&inner),
            }),
            inner,
        };
        if let Some(address) = builder.bind {
            node.bind(&address).await?;
        }
        for starter in &builder.discover {
            let (source, options) = starter();
            crate::node::follow::start(&node.inner, source, options);
        }
        Ok(node)
    }

    /// A handle that does not keep the node alive (for its own handlers).
    pub fn downgrade(&self) -> WeakNode {
        WeakNode {
            inner: Arc::downgrade(&self.inner),
            alive: Arc::downgrade(&self.alive),
        }
    }

    /// This node's id.
    pub fn id(&self) -> &NodeId {
        &self.inner.id
    }

    /// This node's options.
    pub fn options(&self) -> Options {
        self.inner.options.read().clone()
    }

    /// The address this node is bound to (the real one, port resolved), if bound.
    pub fn address(&self) -> Option<String> {
        self.inner
            .links
            .server
            .lock()
            .as_ref()
            .map(|s| s.endpoint().to_owned())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The events: peers joining and leaving, errors, stop, as a stream. Each call gives a
    /// new stream that sees events from now on; one that falls more than 1,024 events
    /// behind gets [`NodeEvent::Lagged`](crate::NodeEvent::Lagged) with the count it lost.
    pub fn events(&self) -> EventStream {
        EventStream::new(self.inner.observers.events.subscribe())
    }

    /// The joined peers: all of them, one by id or address, the ones a filter selects.
    pub fn peers(&self) -> Peers<'_> {
        Peers { node: self }
    }

    /// This node's CURVE keys: its public key, and the allow-list of client keys.
    pub fn keys(&self) -> Keys<'_> {
        Keys { node: self }
    }

    /// Binds `address` and starts serving the nodes that connect. A node binds at most one
    /// address at a time.
    pub async fn bind(&self, address: &str) -> Result<String> {
        let inner = &self.inner;
        if inner.life.is_stopping() {
            return Err(Error::Closed);
        }
        if inner.links.server.lock().is_some() {
            return Err(Error::Bind("this node is already bound"));
        }
        if inner.config.allowed_keys.is_some() && inner.config.curve.is_none() {
            // An allow-list on a plaintext node would let everyone in: refuse to bind.
            return Err(Error::NoKeys);
        }
        let options = match &inner.config.curve {
            Some(keys) => inner.transport_options().curve(Curve::server(keys)),
            None => inner.transport_options(),
        };
        let (server, events) =
            Server::bind_with(address, options, inner.config.max_payload).await?;
        if let (Some(_), Some(keys)) = (&inner.config.curve, &inner.config.allowed_keys) {
            server.allow_keys(keys.iter().copied())?;
        }
        tokio::spawn(crate::node::watch::watch_server(
            Arc::downgrade(inner),
            server.clone(),
            events,
        ));
        install_downstream(inner, &server);
        // Invalid messages are counted by the server; each is also reported as an event.
        let mut rejected = server.rejected();
        let weak = Arc::downgrade(inner);
        tokio::spawn(async move {
            while let Some((route, error)) = rejected.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                inner.observers.report(
                    ErrorSource::Peer,
                    format!("from {}: {error}", route.short()),
                );
            }
        });
        let endpoint = server.endpoint().to_owned();
        let raced = {
            let mut slot = inner.links.server.lock();
            if slot.is_some() {
                true
            } else {
                *slot = Some(server.clone());
                false
            }
        };
        if raced {
            server.abort().await;
            return Err(Error::Bind("this node is already bound"));
        }
        tracing::debug!(node = %inner.id, %endpoint, "bound");
        Ok(endpoint)
    }

    /// Stops serving: downstream peers leave, the port is released.
    pub async fn unbind(&self) -> Result<()> {
        let server = self
            .inner
            .links
            .server
            .lock()
            .take()
            .ok_or(Error::Bind("this node is not bound"))?;
        self.inner.say_bye(Some(Direction::Downstream)).await;
        server.close().await;
        Ok(())
    }

    /// Connects to the node bound at `address` and completes the handshake; returns the
    /// peer. Typed errors: handshake timeout, duplicate id, version mismatch. Afterwards the
    /// connection is kept: after a restart of the peer or a network cut, this node reconnects
    /// and re-handshakes by itself (peer left, then peer joined again), as the
    /// [`Reconnect`](crate::Reconnect) policy says.
    ///
    /// Idempotent per address: connecting to an address already joined returns its peer,
    /// and concurrent calls for one address share one connection (the later ones wait for
    /// the first's handshake).
    pub async fn connect(&self, address: &str) -> Result<PeerInfo> {
        self.connect_with(address, ConnectOptions::new()).await
    }

    /// [`connect`](Self::connect) with options: a timeout (instead of the node's handshake
    /// timeout), a CURVE server key.
    ///
    /// ```no_run
    /// # async fn example(node: node::Node, server_key: node::Key) -> node::Result<()> {
    /// use std::time::Duration;
    /// use node::ConnectOptions;
    ///
    /// let options = ConnectOptions::new()
    ///     .timeout(Duration::from_secs(2))
    ///     .server_key(server_key);
    /// let peer = node.connect_with("tcp://10.0.0.7:5555", options).await?;
    /// # let _ = peer;
    /// # Ok(()) }
    /// ```
    ///
    /// With a server key the connection is encrypted and both ends are authenticated by
    /// key; this node's own key pair must be set ([`NodeBuilder::curve`]; [`Error::NoKeys`]
    /// otherwise). A refusal is [`Error::Refused`] at once: our key is not on the server's
    /// allow-list, the key is not the server's, or the server is not a CURVE node.
    pub async fn connect_with(&self, address: &str, options: ConnectOptions) -> Result<PeerInfo> {
        // Starting lasts while it runs (see `Node::health`).
        let _wait = self.inner.startup.connecting(address);
        self.inner.connect(address, options).await
    }

    /// Lets go of the peer at `address`: from now on it is not picked for `any`, `all` or
    /// group calls (a request by id still reaches it); once nothing is in flight to it
    /// (this node's requests, those it forwards to it as a router, streams open to it), or
    /// once [`Config::close_grace`](crate::Config::close_grace) has passed, the connection
    /// drops and the peer leaves (reason: local). Returns then.
    pub async fn disconnect(&self, address: &str) -> Result<()> {
        let grace = self.inner.config.close_grace;
        crate::node::upstream::let_go(&Arc::downgrade(&self.inner), address, grace).await
    }

    /// Changes this node's options; joined peers receive them (their filters see the new
    /// values).
    pub async fn set_options(&self, options: Options) -> Result<()> {
        *self.inner.options.write() = options.clone();
        let payload = encode_value(&options)?;
        let links = self.inner.state.lock().links(None);
        for link in links {
            if let Err(e) = link.system().tick(OPTIONS, payload.clone()).await {
                self.inner
                    .observers
                    .report(ErrorSource::Send, format!("sending options failed: {e}"));
            }
        }
        Ok(())
    }

    /// Drops the downstream peers whose key matches: goodbye sent, peer left (revoked).
    pub(crate) async fn drop_peers_keyed(&self, matches: impl Fn(&Key) -> bool) {
        let dropped: Vec<(NodeId, Arc<Link>)> = self
            .inner
            .state
            .lock()
            .registry
            .all()
            .filter(|e| e.direction() == Direction::Downstream)
            .filter(|e| e.key.as_ref().is_some_and(&matches))
            .map(|e| (e.id().clone(), e.link().clone()))
            .collect();
        for (id, link) in dropped {
            self.inner
                .peer_left(&id, Direction::Downstream, LeaveReason::Revoked);
            let _ = tokio::time::timeout(
                Duration::from_millis(200),
                link.system().tick(BYE, Bytes::new()),
            )
            .await;
        }
    }

    // ---- handlers -------------------------------------------------------------------

    /// Handles requests whose event matches `pattern` (a name, or a [`regex::Regex`]) with
    /// an async function. Its `Ok` value is sent back encoded as MessagePack; its
    /// [`HandlerError`] as an error reply with the code and message. Shared state (a store,
    /// a pool, this node) is given once with [`with_state`](crate::with_state).
    pub fn on_request<P, F, Fut, R>(&self, pattern: P, handler: F)
    where
        P: Into<Pattern>,
        F: Fn(Request) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: Serialize + Send + 'static,
    {
        self.inner
            .handlers
            .add_request(pattern.into(), handler::service_from_fn(handler));
    }

    /// Handles requests whose event matches `pattern` with a tower service.
    pub fn on_request_service<P, S>(&self, pattern: P, service: S)
    where
        P: Into<Pattern>,
        S: Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
        S::Future: Send + 'static,
    {
        self.inner
            .handlers
            .add_request(pattern.into(), handler::boxed(service));
    }

    /// Removes the request handlers registered under `pattern`. Returns whether any was.
    pub fn off_request(&self, pattern: impl Into<Pattern>) -> bool {
        self.inner.handlers.remove_request(&pattern.into())
    }

    /// Handles ticks whose event matches `pattern`. Every matching tick handler runs.
    pub fn on_tick<P, F, Fut>(&self, pattern: P, handler: F)
    where
        P: Into<Pattern>,
        F: Fn(Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let handler: handler::TickHandler =
            Arc::new(move |request| -> BoxFuture<'static, ()> { Box::pin(handler(request)) });
        self.inner.handlers.add_tick(pattern.into(), handler);
    }

    /// Removes the tick handlers registered under `pattern`. Returns whether any was.
    pub fn off_tick(&self, pattern: impl Into<Pattern>) -> bool {
        self.inner.handlers.remove_tick(&pattern.into())
    }

    /// Puts a tower layer in front of the whole node: every request and tick (see
    /// [`Request::is_tick`](crate::Request::is_tick)) goes through this one instance, so a
    /// `ConcurrencyLimitLayer::new(1)` lets one message at a time into the node, whatever
    /// its event. The layer is applied once, now; handlers and layers registered later
    /// never rebuild it (its state is never reset). Layers added first run first. An async
    /// function is a layer too: [`middleware::from_fn`](crate::serving::middleware::from_fn).
    pub fn layer<L>(&self, layer: L)
    where
        L: Layer<HandlerService> + Send + Sync + 'static,
        L::Service:
            Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.inner
            .handlers
            .add_layer(None, handler::boxed_layer(layer));
    }

    /// Puts a tower layer in front of the events matching `pattern` (requests and ticks):
    /// one instance, applied now, shared by every matching event.
    pub fn layer_for<P, L>(&self, pattern: P, layer: L)
    where
        P: Into<Pattern>,
        L: Layer<HandlerService> + Send + Sync + 'static,
        L::Service:
            Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.inner
            .handlers
            .add_layer(Some(pattern.into()), handler::boxed_layer(layer));
    }

    /// Counters and state: what this node handled, refused and dropped, its router's
    /// forwarding, whether it is closing.
    pub fn stats(&self) -> NodeStats {
        let r = &self.inner.routing;
        NodeStats {
            router: RouterStats {
                forwarded: r.forwarded.load(Ordering::Relaxed),
                failed: r.failed.load(Ordering::Relaxed),
                looped: r.looped.load(Ordering::Relaxed),
                expired: r.expired.load(Ordering::Relaxed),
            },
            closing: self.inner.life.is_stopping(),
            ..self.inner.stats()
        }
    }

    /// Graceful close, in two steps.
    ///
    /// Draining: peers are told at once ([`PeerDraining`](crate::NodeEvent::PeerDraining)
    /// on their side, [`Draining`](crate::NodeEvent::Draining) here) and stop picking this
    /// node for `any`, `all` and group calls; requests being handled, and those already on
    /// their way (by id too), are handled, for up to
    /// [`Config::close_grace`](crate::Config::close_grace). The node's own calls and
    /// heartbeats go on meanwhile.
    ///
    /// Closing, once no handler is left or the grace ran out: new requests are refused with
    /// [`Error::ShuttingDown`] (nothing ran; retry-safe, and a caller's `any` pick tries
    /// another node by itself); handlers still running are stopped and their callers get
    /// [`Error::Cancelled`]; every answer is written before the goodbye, and the goodbye
    /// before the sockets close ([`PeerLeft`](crate::NodeEvent::PeerLeft) with
    /// [`LeaveReason::Stopped`] on the peers), then [`Stopped`](crate::NodeEvent::Stopped).
    ///
    /// Returns how it went: [`Closed::is_complete`] when no handler had to be stopped.
    /// Idempotent: a second call waits for the first and returns the same report.
    pub async fn close(&self) -> Closed {
        self.inner.close().await
    }
}

/// The joined peers of a node, read when asked (made by [`Node::peers`]).
///
/// ```no_run
/// # async fn show(node: node::Node) {
/// use node::{Filter, Scope};
/// for peer in node.peers().matching(&Filter::new().eq("region.zone", "a"), Scope::Both) {
///     println!("{} in zone a, {} requests waiting", peer.id, peer.in_flight);
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Peers<'a> {
    node: &'a Node,
}

impl Peers<'_> {
    /// Every joined peer (a node joined both ways is there twice, once per direction), by
    /// id.
    pub fn list(&self) -> Vec<PeerInfo> {
        self.node.inner.state.lock().registry.infos()
    }

    /// How many joined peers (a node joined both ways counts twice).
    pub fn len(&self) -> usize {
        self.node.inner.state.lock().registry.all().count()
    }

    /// Whether no peer is joined.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A joined peer by id (upstream preferred when joined both ways).
    pub fn get(&self, id: impl Into<NodeId>) -> Option<PeerInfo> {
        let id = id.into();
        let state = self.node.inner.state.lock();
        state
            .registry
            .get(&id, Direction::Upstream)
            .or_else(|| state.registry.get(&id, Direction::Downstream))
            .map(|entry| entry.info())
    }

    /// The joined peers that `filter` selects in `scope`: the peers a call to
    /// `Target::any(filter).scope(scope)` picks among and a tick to `Target::all` reaches,
    /// one per node id (the upstream entry when a node is joined both ways), in id order.
    pub fn matching(&self, filter: &Filter, scope: Scope) -> Vec<PeerInfo> {
        self.node
            .inner
            .state
            .lock()
            .registry
            .matching(filter, scope)
            .into_iter()
            .map(|entry| entry.info())
            .collect()
    }

    /// The upstream peer joined through the connection this node made to `address` (the
    /// string given to [`connect`](Node::connect), compared as written: `tcp://localhost:5555`
    /// is not `tcp://127.0.0.1:5555`).
    ///
    /// Only upstream peers have an address here: a downstream peer reaches us through our
    /// bound socket, and ZeroMQ does not tell which address it connected from.
    pub fn by_address(&self, address: &str) -> Option<PeerInfo> {
        self.node
            .inner
            .state
            .lock()
            .registry
            .all()
            .find(|entry| {
                entry
                    .link()
                    .client()
                    .is_some_and(|client| client.endpoint() == address)
            })
            .map(|entry| entry.info())
    }
}

/// Every joined peer, as [`list`](Peers::list).
impl IntoIterator for Peers<'_> {
    type Item = PeerInfo;
    type IntoIter = std::vec::IntoIter<PeerInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.list().into_iter()
    }
}

/// A node's CURVE keys (made by [`Node::keys`]): its public key, and the allow-list of the
/// client keys its bound socket accepts. The allow-list needs a bound node with a key pair
/// ([`NodeBuilder::curve`]): [`Error::NoKeys`] or [`Error::Bind`] otherwise.
///
/// ```no_run
/// # async fn example(server: node::Node, client_key: node::Key) -> node::Result<()> {
/// server.keys().allow(client_key).await?;
/// // ... later: the client's connections are dropped, and refused from now on.
/// server.keys().revoke(&client_key).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    node: &'a Node,
}

impl Keys<'_> {
    /// This node's CURVE public key (what connecting nodes give as the server key in
    /// [`ConnectOptions::server_key`]), if it has a key pair.
    pub fn public(&self) -> Option<Key> {
        self.node
            .inner
            .config
            .curve
            .as_ref()
            .map(|keys| keys.public)
    }

    /// The bound CURVE server: where the allow-list lives.
    fn server(&self) -> Result<Server> {
        let inner = &self.node.inner;
        if inner.config.curve.is_none() {
            return Err(Error::NoKeys);
        }
        inner
            .links
            .server
            .lock()
            .clone()
            .ok_or(Error::Bind("this node is not bound"))
    }

    /// From now on accept exactly these client keys (an empty list refuses everyone).
    /// Nodes already joined with a key not on the new list are dropped, as by
    /// [`revoke`](Self::revoke).
    pub async fn allow_only(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        let keys: Vec<Key> = keys.into_iter().collect();
        self.server()?.allow_keys(keys.iter().copied())?;
        self.node.drop_peers_keyed(|key| !keys.contains(key)).await;
        Ok(())
    }

    /// Adds a client key to the allow-list (starting a list that holds only this key if
    /// there was none). A node refused earlier can connect again and get in.
    pub async fn allow(&self, key: Key) -> Result<()> {
        Ok(self.server()?.allow_key(key)?)
    }

    /// Takes a client key off the allow-list: new connections with it are refused, and the
    /// nodes joined with it are dropped now (they see the node leave; their attempt to
    /// rejoin is refused with [`Error::Refused`]). Whether the key was on the list.
    pub async fn revoke(&self, key: &Key) -> Result<bool> {
        let was = self.server()?.revoke_key(key)?;
        self.node.drop_peers_keyed(|k| k == key).await;
        Ok(was)
    }

    /// Drops the allow-list: any client that knows this node's public key may connect.
    pub async fn allow_any(&self) -> Result<()> {
        Ok(self.server()?.allow_any_key()?)
    }

    /// The keys on the allow-list; `None` when any key is accepted.
    pub fn allowed(&self) -> Result<Option<Vec<Key>>> {
        Ok(self.server()?.allowed_keys()?)
    }
}
