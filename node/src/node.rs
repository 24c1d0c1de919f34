//! The [`Node`]: one id, at most one server, any number of clients; handshakes, heartbeats,
//! routing, handlers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use protocol::{
    decode_value, encode_value, request_fn, tick_fn, Answer, Client, Connection, Envelope,
    Incoming, PeerId, RemoteError, Server,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};
use transport::{Curve, Event as SocketEvent, Key};

use crate::config::{Config, NodeBuilder};
use crate::error::{Error, Result};
use crate::events::{ErrorSource, LeaveReason, NodeEvent};
use crate::filter::Filter;
use crate::forward::{
    code, hop_budget, Action, Admission, Destination, Forward, RouterStats, Seen, FORWARD,
};
use crate::handler::{
    self, HandlerError, HandlerService, Handlers, Pattern, Request, Response, Route,
};
use crate::options::Options;
use crate::peer::{Direction, Entry, NodeId, PeerInfo, Registry, Scope, Strategy};

/// The node protocol version exchanged in the handshake.
pub const PROTOCOL_VERSION: u32 = 1;

const HANDSHAKE: &str = "_system:handshake";
const HEARTBEAT: &str = "_system:heartbeat";
const OPTIONS: &str = "_system:options";
const BYE: &str = "_system:bye";
/// Sent by a server to a connection it does not know (it declared the peer dead, or
/// restarted): the peer should handshake again.
const REJOIN: &str = "_system:rejoin";

/// Error codes of refused handshakes (carried in error replies).
const DUPLICATE_ID: &str = "DUPLICATE_ID";
const VERSION_MISMATCH: &str = "VERSION_MISMATCH";
const NOT_JOINED: &str = "NOT_JOINED";
/// The handshake of a connection whose CURVE key is not (or no longer) on the allow-list.
const NOT_AUTHORIZED: &str = "NOT_AUTHORIZED";

/// What each side tells the other in the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hello {
    id: NodeId,
    /// Random per process: tells a reconnect of the same node from a second node that claims
    /// the same id.
    instance: String,
    version: u32,
    options: Options,
    /// Whether the sender is a router node.
    #[serde(default)]
    router: bool,
    /// How often the sender sends heartbeats, in milliseconds (0: not said), so that the
    /// receiver does not declare it dead for heartbeats slower than its own.
    #[serde(default)]
    heartbeat_ms: u64,
}

/// How to reach a joined peer.
#[derive(Clone)]
pub(crate) enum Link {
    /// Through our client connected to it.
    Up {
        client: Client,
        /// Wakes the upstream supervisor when the peer is declared gone.
        left: Arc<Notify>,
    },
    /// Through our server, to the routing id of its connection.
    Down { server: Server, route: PeerId },
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Link::Up { client, .. } => write!(f, "Up({})", client.endpoint()),
            Link::Down { route, .. } => write!(f, "Down({route})"),
        }
    }
}

impl Link {
    async fn request(
        &self,
        event: &str,
        metadata: Bytes,
        payload: Bytes,
        timeout: Duration,
    ) -> protocol::Result<Envelope> {
        match self {
            Link::Up { client, .. } => client.request_with(event, metadata, payload, timeout).await,
            Link::Down { server, route } => {
                server
                    .request_with(route, event, metadata, payload, timeout)
                    .await
            }
        }
    }

    async fn tick(&self, event: &str, metadata: Bytes, payload: Bytes) -> protocol::Result<()> {
        match self {
            Link::Up { client, .. } => client.tick_with(event, metadata, payload).await,
            Link::Down { server, route } => server.tick_with(route, event, metadata, payload).await,
        }
    }

    async fn system_request(
        &self,
        event: &str,
        metadata: Bytes,
        payload: Bytes,
        timeout: Duration,
    ) -> protocol::Result<Envelope> {
        match self {
            Link::Up { client, .. } => {
                client
                    .system_request(event, metadata, payload, timeout)
                    .await
            }
            Link::Down { server, route } => {
                server
                    .system_request(route, event, metadata, payload, timeout)
                    .await
            }
        }
    }

    fn direction(&self) -> Direction {
        match self {
            Link::Up { .. } => Direction::Upstream,
            Link::Down { .. } => Direction::Downstream,
        }
    }

    async fn system_tick(&self, event: &str, payload: Bytes) -> protocol::Result<()> {
        match self {
            Link::Up { client, .. } => client.system_tick(event, payload).await,
            Link::Down { server, route } => server.system_tick(route, event, payload).await,
        }
    }

    /// Fails at once the requests waiting on this link.
    fn fail_pending(&self) {
        match self {
            Link::Up { client, .. } => {
                client.fail_pending(|| protocol::Error::ConnectionLost);
            }
            Link::Down { server, route } => {
                server.fail_pending(route, || protocol::Error::ConnectionLost);
            }
        }
    }
}

/// Who a message goes to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The joined node with this id.
    Id(NodeId),
    /// One joined node matching the filter, in the scope, picked by the node's strategy.
    Any(Filter, Scope),
}

impl From<&str> for Target {
    fn from(id: &str) -> Target {
        Target::Id(NodeId::from(id))
    }
}

impl From<String> for Target {
    fn from(id: String) -> Target {
        Target::Id(NodeId::from(id))
    }
}

impl From<NodeId> for Target {
    fn from(id: NodeId) -> Target {
        Target::Id(id)
    }
}

impl From<&NodeId> for Target {
    fn from(id: &NodeId) -> Target {
        Target::Id(id.clone())
    }
}

/// The registry and the map from downstream routing ids to node ids, under one lock.
#[derive(Default)]
struct State {
    registry: Registry<Link>,
    routes: HashMap<PeerId, NodeId>,
}

/// One address this node connected to.
struct Upstream {
    client: Client,
    supervisor: JoinHandle<()>,
}

/// The node's shared state.
struct Inner {
    id: NodeId,
    instance: String,
    options: RwLock<Options>,
    config: Config,
    state: Mutex<State>,
    server: Mutex<Option<Server>>,
    upstreams: Mutex<HashMap<String, Upstream>>,
    handlers: Mutex<Handlers>,
    events: broadcast::Sender<NodeEvent>,
    closing: AtomicBool,
    /// Requests being handled right now (graceful close waits for zero).
    handling: AtomicUsize,
    handled: Notify,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// Messages refused because their connection had not joined.
    unjoined: AtomicU64,
    /// Requests answered by this node's handlers (success or error reply).
    answered: AtomicU64,
    /// Router state: counters and the `tick_all` ids seen.
    routing: Routing,
}

/// What a router keeps.
#[derive(Default)]
struct Routing {
    forwarded: AtomicU64,
    failed: AtomicU64,
    looped: AtomicU64,
    expired: AtomicU64,
    seen: Mutex<Seen>,
}

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
}

/// A zeronode node: binds at most one address, connects to any number of nodes, and talks to
/// every joined peer by id or by filter.
///
/// Cheap to clone: clones share the node.
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
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.inner.id)
            .field("address", &self.address())
            .finish()
    }
}

/// Counts a request being handled, for graceful close; the count goes down however the
/// handling ends (answered, or dropped by an aborted server).
struct Handling<'a>(&'a Inner);

impl<'a> Handling<'a> {
    fn start(inner: &'a Inner) -> Handling<'a> {
        inner.handling.fetch_add(1, Ordering::AcqRel);
        Handling(inner)
    }
}

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        if self.0.handling.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.handled.notify_waiters();
        }
    }
}

/// Decrements the in-flight count of a peer when a request to it ends, however it ends.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn start(counter: Arc<AtomicUsize>) -> InFlight {
        counter.fetch_add(1, Ordering::Relaxed);
        InFlight(counter)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Node {
    /// A builder.
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    pub(crate) async fn from_builder(builder: NodeBuilder) -> Result<Node> {
        let (events, _) = broadcast::channel(1024);
        let inner = Arc::new(Inner {
            id: builder.id.unwrap_or_else(NodeId::generate),
            instance: uuid::Uuid::new_v4().to_string(),
            options: RwLock::new(builder.options),
            config: builder.config,
            state: Mutex::new(State::default()),
            server: Mutex::new(None),
            upstreams: Mutex::new(HashMap::new()),
            handlers: Mutex::new(Handlers::default()),
            events,
            closing: AtomicBool::new(false),
            handling: AtomicUsize::new(0),
            handled: Notify::new(),
            heartbeat: Mutex::new(None),
            unjoined: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            routing: Routing::default(),
        });
        let heartbeat = tokio::spawn(heartbeat_loop(Arc::downgrade(&inner)));
        *inner.heartbeat.lock() = Some(heartbeat);
        let node = Node { inner };
        if let Some(address) = builder.bind {
            node.bind(&address).await?;
        }
        Ok(node)
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
            .server
            .lock()
            .as_ref()
            .map(|s| s.endpoint().to_owned())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The events stream: peers joining and leaving, errors, stop. Each call gives a new
    /// receiver that sees events from now on (a receiver that lags more than 1024 events
    /// behind loses the oldest).
    pub fn events(&self) -> broadcast::Receiver<NodeEvent> {
        self.inner.events.subscribe()
    }

    /// Every joined peer.
    pub fn peers(&self) -> Vec<PeerInfo> {
        self.inner.state.lock().registry.infos()
    }

    /// A joined peer by id (upstream preferred when joined both ways).
    pub fn peer(&self, id: impl Into<NodeId>) -> Option<PeerInfo> {
        let id = id.into();
        self.peers()
            .into_iter()
            .filter(|p| p.id == id)
            .min_by_key(|p| p.direction != Direction::Upstream)
    }

    /// Socket options of the bound server: CURVE server when the node has a key pair.
    fn server_options(&self) -> transport::Options {
        let options = self.transport_options();
        match &self.inner.config.curve {
            Some(keys) => options.curve(Curve::server(keys)),
            None => options,
        }
    }

    fn transport_options(&self) -> transport::Options {
        let config = &self.inner.config;
        transport::Options::default()
            .hwm(config.hwm)
            .max_message_size(Some(config.max_payload as u64 + 64 * 1024))
            .linger(Duration::from_millis(200))
            .reconnect(Duration::from_millis(100), Duration::from_secs(1))
            // ZMTP heartbeats make libzmq drop a connection that went silent (a network cut
            // sends no RST), so the client reconnects by itself once the path heals. They
            // are the backstop: one interval later than the node's own dead-peer check, so
            // a silent peer is reported as `TimedOut` (by the node) rather than raced by
            // libzmq's close (`Disconnected`).
            .heartbeat(transport::Heartbeat {
                interval: config.heartbeat_interval,
                timeout: config.dead_peer_timeout + config.heartbeat_interval,
                ttl: config.dead_peer_timeout + config.heartbeat_interval,
            })
    }

    /// Binds `address` and starts serving the nodes that connect. A node binds at most one
    /// address at a time.
    pub async fn bind(&self, address: &str) -> Result<String> {
        if self.is_closing() {
            return Err(Error::Closed);
        }
        if self.inner.server.lock().is_some() {
            return Err(Error::Bind("this node is already bound"));
        }
        if self.inner.config.allowed_keys.is_some() && self.inner.config.curve.is_none() {
            // An allow-list on a plaintext node would let everyone in: refuse to bind.
            return Err(Error::NoKeys);
        }
        let (server, events) = Server::bind_with(
            address,
            self.server_options(),
            self.inner.config.max_payload,
        )
        .await?;
        if let (Some(_), Some(keys)) = (&self.inner.config.curve, &self.inner.config.allowed_keys) {
            server.allow_keys(keys.iter().copied())?;
        }
        tokio::spawn(report_refusals(Arc::downgrade(&self.inner), events));
        let weak = Arc::downgrade(&self.inner);
        let dispatch_server = server.clone();
        server.on_any_request(Some(request_fn(move |incoming: Incoming| {
            let weak = weak.clone();
            let server = dispatch_server.clone();
            async move {
                let Some(inner) = weak.upgrade() else {
                    return Err(RemoteError::system_error(
                        RemoteError::SHUTTING_DOWN,
                        "node closed",
                    ));
                };
                on_downstream_request(inner, server, incoming).await
            }
        })));
        let weak = Arc::downgrade(&self.inner);
        let dispatch_server = server.clone();
        server.on_any_tick(Some(tick_fn(move |incoming: Incoming| {
            let weak = weak.clone();
            let server = dispatch_server.clone();
            async move {
                if let Some(inner) = weak.upgrade() {
                    on_downstream_tick(inner, server, incoming).await;
                }
            }
        })));
        // Invalid messages are counted by the server; each is also reported as an event.
        let mut rejected = server.rejected();
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some((route, error)) = rejected.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                inner.report(ErrorSource::Peer, format!("from {route}: {error}"));
            }
        });
        let endpoint = server.endpoint().to_owned();
        let raced = {
            let mut slot = self.inner.server.lock();
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
        tracing::debug!(node = %self.inner.id, %endpoint, "bound");
        Ok(endpoint)
    }

    /// Stops serving: downstream peers leave, the port is released.
    pub async fn unbind(&self) -> Result<()> {
        let server = self
            .inner
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
    /// and re-handshakes by itself (peer left, then peer joined again).
    pub async fn connect(&self, address: &str) -> Result<PeerInfo> {
        self.connect_with(address, None).await
    }

    /// Connects to a node secured with CURVE ([`NodeBuilder::curve`]) whose public key is
    /// `server_key`, with this node's own key pair (which must be set: [`Error::NoKeys`]
    /// otherwise). The connection is encrypted and both ends are authenticated by key.
    ///
    /// A refusal is [`Error::Refused`] at once: our key is not on the server's allow-list,
    /// `server_key` is not the server's key, or the server is not a CURVE node. Like
    /// [`connect`](Self::connect) otherwise.
    pub async fn connect_secure(&self, address: &str, server_key: Key) -> Result<PeerInfo> {
        self.connect_with(address, Some(server_key)).await
    }

    async fn connect_with(&self, address: &str, server_key: Option<Key>) -> Result<PeerInfo> {
        let options = match server_key {
            None => self.transport_options(),
            Some(server_key) => {
                let keys = self.inner.config.curve.as_ref().ok_or(Error::NoKeys)?;
                self.transport_options()
                    .curve(Curve::client(keys, server_key))
            }
        };
        if self.is_closing() {
            return Err(Error::Closed);
        }
        if self.inner.upstreams.lock().contains_key(address) {
            return Err(Error::Bind("already connected to this address"));
        }
        let timeout = self.inner.config.handshake_timeout;
        let client =
            match Client::connect_with(address, options, self.inner.config.max_payload, timeout)
                .await
            {
                Ok(client) => client,
                Err(protocol::Error::ConnectTimeout { endpoint }) => {
                    return Err(Error::HandshakeTimeout { endpoint })
                }
                Err(e) => return Err(e.into()),
            };
        let current: Arc<Mutex<Option<NodeId>>> = Arc::new(Mutex::new(None));
        install_upstream_dispatch(&self.inner, &client, Arc::clone(&current), server_key);
        let left = Arc::new(Notify::new());
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let supervisor = tokio::spawn(supervise_upstream(
            Arc::downgrade(&self.inner),
            client.clone(),
            Upstreaming {
                current,
                left,
                server_key,
            },
            first_tx,
        ));
        self.inner.upstreams.lock().insert(
            address.to_owned(),
            Upstream {
                client: client.clone(),
                supervisor,
            },
        );
        let first = tokio::time::timeout(timeout, first_rx).await;
        let outcome = match first {
            Ok(Ok(Ok(info))) => return Ok(info),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::HandshakeTimeout {
                endpoint: address.to_owned(),
            }),
        };
        // The first handshake failed: give the connection up.
        if let Some(upstream) = self.inner.upstreams.lock().remove(address) {
            upstream.supervisor.abort();
        }
        client.abort().await;
        outcome
    }

    /// Drops the connection to `address`: the peer leaves (reason: local).
    pub async fn disconnect(&self, address: &str) -> Result<()> {
        let upstream =
            self.inner
                .upstreams
                .lock()
                .remove(address)
                .ok_or_else(|| Error::NotConnectedTo {
                    address: address.to_owned(),
                })?;
        upstream.supervisor.abort();
        let gone: Vec<NodeId> = {
            let state = self.inner.state.lock();
            state
                .registry
                .all()
                .filter(
                    |e| matches!(&e.link, Link::Up { client, .. } if client.endpoint() == address),
                )
                .map(|e| e.id.clone())
                .collect()
        };
        let _ = upstream.client.system_tick(BYE, Bytes::new()).await;
        for id in gone {
            self.inner
                .peer_left(&id, Direction::Upstream, LeaveReason::Local);
        }
        upstream.client.close().await;
        Ok(())
    }

    /// Whether `close` has started.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.load(Ordering::Acquire)
    }

    /// Changes this node's options; joined peers receive them (their filters see the new
    /// values).
    pub async fn set_options(&self, options: Options) -> Result<()> {
        *self.inner.options.write() = options.clone();
        let payload = encode_value(&options)?;
        let links: Vec<Link> = self
            .inner
            .state
            .lock()
            .registry
            .all()
            .map(|e| e.link.clone())
            .collect();
        for link in links {
            if let Err(e) = link.system_tick(OPTIONS, payload.clone()).await {
                self.inner
                    .report(ErrorSource::Send, format!("sending options failed: {e}"));
            }
        }
        Ok(())
    }

    // ---- security --------------------------------------------------------------------

    /// This node's CURVE public key (what connecting nodes pass to
    /// [`connect_secure`](Self::connect_secure)), if it has a key pair.
    pub fn public_key(&self) -> Option<Key> {
        self.inner.config.curve.as_ref().map(|keys| keys.public)
    }

    /// The bound CURVE server: where the allow-list lives.
    fn curve_server(&self) -> Result<Server> {
        if self.inner.config.curve.is_none() {
            return Err(Error::NoKeys);
        }
        self.inner
            .server
            .lock()
            .clone()
            .ok_or(Error::Bind("this node is not bound"))
    }

    /// From now on accept exactly these client keys (an empty list refuses everyone).
    /// Nodes already joined with a key not on the new list are dropped, as by
    /// [`revoke_key`](Self::revoke_key). Needs a bound CURVE node.
    pub async fn allow_keys(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        let keys: Vec<Key> = keys.into_iter().collect();
        self.curve_server()?.allow_keys(keys.iter().copied())?;
        self.drop_peers_keyed(|key| !keys.contains(key)).await;
        Ok(())
    }

    /// Adds a client key to the allow-list (starting a list that holds only this key if
    /// there was none). A node refused earlier can `connect_secure` again and get in.
    pub fn allow_key(&self, key: Key) -> Result<()> {
        Ok(self.curve_server()?.allow_key(key)?)
    }

    /// Takes a client key off the allow-list: new connections with it are refused, and the
    /// nodes joined with it are dropped now (they see the node leave; their attempt to
    /// rejoin is refused with [`Error::Refused`]). Whether the key was on the list.
    pub async fn revoke_key(&self, key: &Key) -> Result<bool> {
        let was = self.curve_server()?.revoke_key(key)?;
        self.drop_peers_keyed(|k| k == key).await;
        Ok(was)
    }

    /// Drops the allow-list: any client that knows this node's public key may connect.
    pub fn allow_any_key(&self) -> Result<()> {
        Ok(self.curve_server()?.allow_any_key()?)
    }

    /// The keys on the allow-list; `None` when any key is accepted.
    pub fn allowed_keys(&self) -> Result<Option<Vec<Key>>> {
        Ok(self.curve_server()?.allowed_keys()?)
    }

    /// Drops the downstream peers whose key matches: goodbye sent, peer left (revoked).
    async fn drop_peers_keyed(&self, matches: impl Fn(&Key) -> bool) {
        let dropped: Vec<(NodeId, Link)> = self
            .inner
            .state
            .lock()
            .registry
            .all()
            .filter(|e| e.direction == Direction::Downstream)
            .filter(|e| e.key.as_ref().is_some_and(&matches))
            .map(|e| (e.id.clone(), e.link.clone()))
            .collect();
        for (id, link) in dropped {
            self.inner
                .peer_left(&id, Direction::Downstream, LeaveReason::Revoked);
            let _ = tokio::time::timeout(
                Duration::from_millis(200),
                link.system_tick(BYE, Bytes::new()),
            )
            .await;
        }
    }

    // ---- handlers -------------------------------------------------------------------

    /// Handles requests whose event matches `pattern` (a name, or a [`regex::Regex`]) with
    /// an async function. Its `Ok` value is sent back encoded as MessagePack; its
    /// [`HandlerError`] as an error reply with the code and message.
    pub fn on_request<P, F, Fut, R>(&self, pattern: P, handler: F)
    where
        P: Into<Pattern>,
        F: Fn(Request) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: Serialize + Send + 'static,
    {
        self.inner
            .handlers
            .lock()
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
            .lock()
            .add_request(pattern.into(), handler::boxed(service));
    }

    /// Removes the request handlers registered under `pattern`. Returns whether any was.
    pub fn off_request(&self, pattern: impl Into<Pattern>) -> bool {
        self.inner.handlers.lock().remove_request(&pattern.into())
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
        self.inner.handlers.lock().add_tick(pattern.into(), handler);
    }

    /// Removes the tick handlers registered under `pattern`. Returns whether any was.
    pub fn off_tick(&self, pattern: impl Into<Pattern>) -> bool {
        self.inner.handlers.lock().remove_tick(&pattern.into())
    }

    /// Puts a tower layer in front of every request handler. Layers added first run first.
    pub fn layer<L>(&self, layer: L)
    where
        L: Layer<HandlerService> + Send + Sync + 'static,
        L::Service:
            Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.inner
            .handlers
            .lock()
            .add_layer(None, handler::boxed_layer(layer));
    }

    /// Puts a tower layer in front of the request handlers of events matching `pattern`.
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
            .lock()
            .add_layer(Some(pattern.into()), handler::boxed_layer(layer));
    }

    // ---- messaging ------------------------------------------------------------------

    /// Sends a request and decodes the reply, with the default timeout.
    pub async fn request<T, R>(&self, to: impl Into<Target>, event: &str, data: &T) -> Result<R>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let timeout = self.inner.config.request_timeout;
        self.request_timeout(to, event, data, timeout).await
    }

    /// Sends a request with its own timeout and decodes the reply.
    pub async fn request_timeout<T, R>(
        &self,
        to: impl Into<Target>,
        event: &str,
        data: &T,
        timeout: Duration,
    ) -> Result<R>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let payload = encode_value(data)?;
        let reply = self.request_raw(to, event, payload, timeout).await?;
        Ok(decode_value(&reply)?)
    }

    /// Sends a request with a raw payload (passed through untouched) and returns the raw
    /// reply.
    pub async fn request_raw(
        &self,
        to: impl Into<Target>,
        event: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Bytes> {
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let target = to.into();
        let (id, link, in_flight) = match self.resolve(&target) {
            Ok(found) => found,
            Err(local) => {
                return self
                    .inner
                    .forward_from_here(Action::Request, &target, event, payload, timeout, local)
                    .await
                    .map(|(reply, _)| reply)
            }
        };
        let _counted = InFlight::start(in_flight);
        match link.request(event, Bytes::new(), payload, timeout).await {
            Ok(reply) => Ok(reply.into_payload()),
            Err(protocol::Error::ConnectionLost) => Err(Error::PeerLeft { id: id.to_string() }),
            Err(protocol::Error::Remote(remote)) if remote.code == NOT_JOINED => {
                // The peer no longer counts us as joined (it declared us dead, or it
                // restarted): it left, as far as we are concerned, and the connection's
                // supervisor joins again.
                self.inner
                    .peer_left(&id, link.direction(), LeaveReason::Disconnected);
                Err(Error::PeerLeft { id: id.to_string() })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Sends a request to one node matching `filter` in `scope`, picked by the strategy.
    pub async fn request_any<T, R>(
        &self,
        filter: &Filter,
        scope: Scope,
        event: &str,
        data: &T,
    ) -> Result<R>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        self.request(Target::Any(filter.clone(), scope), event, data)
            .await
    }

    /// Sends a tick (fire and forget).
    pub async fn tick<T>(&self, to: impl Into<Target>, event: &str, data: &T) -> Result<()>
    where
        T: Serialize + ?Sized,
    {
        self.tick_raw(to, event, encode_value(data)?).await
    }

    /// Sends a tick with a raw payload.
    pub async fn tick_raw(&self, to: impl Into<Target>, event: &str, payload: Bytes) -> Result<()> {
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let target = to.into();
        match self.resolve(&target) {
            Ok((_, link, _)) => link
                .tick(event, Bytes::new(), payload)
                .await
                .map_err(Error::from),
            Err(local) => {
                let timeout = self.inner.config.request_timeout;
                self.inner
                    .forward_from_here(Action::Tick, &target, event, payload, timeout, local)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Sends a tick to one node matching `filter` in `scope`.
    pub async fn tick_any<T>(
        &self,
        filter: &Filter,
        scope: Scope,
        event: &str,
        data: &T,
    ) -> Result<()>
    where
        T: Serialize + ?Sized,
    {
        self.tick(Target::Any(filter.clone(), scope), event, data)
            .await
    }

    /// Sends a tick to every node matching `filter` in `scope`; returns how many it reached.
    /// No match is [`Error::NoNodesMatchFilter`].
    pub async fn tick_all<T>(
        &self,
        filter: &Filter,
        scope: Scope,
        event: &str,
        data: &T,
    ) -> Result<usize>
    where
        T: Serialize + ?Sized,
    {
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let payload = encode_value(data)?;
        let links: Vec<Link> = self
            .inner
            .state
            .lock()
            .registry
            .matching(filter, scope)
            .into_iter()
            .map(|e| e.link.clone())
            .collect();
        if links.is_empty() {
            // Nobody here: the routers we are joined to deliver to their side of the mesh.
            let timeout = self.inner.config.request_timeout;
            let target = Target::Any(filter.clone(), scope);
            return self
                .inner
                .forward_from_here(
                    Action::TickAll,
                    &target,
                    event,
                    payload,
                    timeout,
                    Error::NoNodesMatchFilter,
                )
                .await
                .map(|(_, delivered)| delivered);
        }
        let mut sent = 0;
        let mut first_error = None;
        for link in &links {
            match link.tick(event, Bytes::new(), payload.clone()).await {
                Ok(()) => sent += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match (sent, first_error) {
            (0, Some(e)) => Err(e.into()),
            _ => Ok(sent),
        }
    }

    /// Finds the link for a target.
    fn resolve(&self, target: &Target) -> Result<(NodeId, Link, Arc<AtomicUsize>)> {
        let mut state = self.inner.state.lock();
        match target {
            Target::Id(id) => match state.registry.route(id) {
                Some((_, link, in_flight)) => Ok((id.clone(), link, in_flight)),
                None => Err(Error::NodeNotFound { id: id.to_string() }),
            },
            Target::Any(filter, scope) => {
                let random = rand::random::<u32>() as usize;
                state
                    .registry
                    .pick(filter, *scope, self.inner.config.strategy, random)
                    .map(|(id, _, link, in_flight)| (id, link, in_flight))
                    .ok_or(Error::NoNodesMatchFilter)
            }
        }
    }

    /// Requests in flight from this node to `id`.
    pub fn in_flight(&self, id: impl Into<NodeId>) -> usize {
        self.peer(id).map_or(0, |p| p.in_flight)
    }

    /// Counters: what this node handled, refused and dropped.
    pub fn stats(&self) -> NodeStats {
        let mut stats = NodeStats {
            peers: self.inner.state.lock().registry.all().count(),
            requests_handled: self.inner.answered.load(Ordering::Relaxed),
            unjoined_messages: self.inner.unjoined.load(Ordering::Relaxed),
            ..NodeStats::default()
        };
        let server = self.inner.server.lock().clone();
        let clients: Vec<Client> = self
            .inner
            .upstreams
            .lock()
            .values()
            .map(|u| u.client.clone())
            .collect();
        let conversations = server
            .map(|s| s.stats())
            .into_iter()
            .chain(clients.iter().map(Client::stats));
        for c in conversations {
            stats.invalid_envelopes += c.invalid_envelopes;
            stats.unmatched_replies += c.unmatched_replies;
            stats.timeouts += c.timeouts;
            stats.requests_sent += c.requests_sent;
            stats.ticks_sent += c.ticks_sent;
            stats.ticks_received += c.ticks_handled;
        }
        stats
    }

    /// Forwarding counters (all zero unless this node is a router).
    pub fn router_stats(&self) -> RouterStats {
        let r = &self.inner.routing;
        RouterStats {
            forwarded: r.forwarded.load(Ordering::Relaxed),
            failed: r.failed.load(Ordering::Relaxed),
            looped: r.looped.load(Ordering::Relaxed),
            expired: r.expired.load(Ordering::Relaxed),
        }
    }

    /// Whether this node is a router.
    pub fn is_router(&self) -> bool {
        self.inner.config.router
    }

    /// The strategy used by `*_any`.
    pub fn strategy(&self) -> Strategy {
        self.inner.config.strategy
    }

    /// Graceful close: new requests are refused (callers get a typed error), requests being
    /// handled finish (up to the configured grace period), peers are told we are stopping
    /// (they see peer left, stopped, at once), then every socket closes and
    /// [`NodeEvent::Stopped`] is emitted. Idempotent.
    pub async fn close(&self) {
        let inner = &self.inner;
        if inner.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        // Let in-flight handlers finish.
        let drained = tokio::time::timeout(inner.config.close_grace, async {
            loop {
                let handled = inner.handled.notified();
                if inner.handling.load(Ordering::Acquire) == 0 {
                    break;
                }
                handled.await;
            }
        })
        .await;
        if drained.is_err() {
            tracing::warn!(node = %inner.id, "close: grace period over with requests still running");
        }
        inner.say_bye(None).await;
        if let Some(heartbeat) = inner.heartbeat.lock().take() {
            heartbeat.abort();
        }
        let upstreams: Vec<Upstream> = inner.upstreams.lock().drain().map(|(_, u)| u).collect();
        for upstream in upstreams {
            upstream.supervisor.abort();
            upstream.client.close().await;
        }
        let server = inner.server.lock().take();
        if let Some(server) = server {
            server.close().await;
        }
        let left = inner.state.lock().registry.drain();
        for entry in left {
            entry.link.fail_pending();
            inner.emit(NodeEvent::PeerLeft {
                id: entry.id,
                direction: entry.direction,
                reason: LeaveReason::Local,
            });
        }
        inner.state.lock().routes.clear();
        // Handlers often hold a clone of their node (to send from a handler): dropping them
        // here breaks that cycle, so a closed node is freed.
        *inner.handlers.lock() = Handlers::default();
        inner.emit(NodeEvent::Stopped);
        tracing::debug!(node = %inner.id, "closed");
    }
}

impl Inner {
    fn emit(&self, event: NodeEvent) {
        // No receiver is fine.
        let _ = self.events.send(event);
    }

    fn report(&self, source: ErrorSource, message: String) {
        tracing::debug!(node = %self.id, ?source, %message, "error event");
        self.emit(NodeEvent::Error { source, message });
    }

    fn hello(&self) -> Hello {
        Hello {
            id: self.id.clone(),
            instance: self.instance.clone(),
            version: PROTOCOL_VERSION,
            options: self.options.read().clone(),
            router: self.config.router,
            heartbeat_ms: millis(self.config.heartbeat_interval),
        }
    }

    /// How long a peer may stay silent: our dead-peer timeout, stretched to two and a half of
    /// the peer's own heartbeat intervals when it beats slower than we do.
    fn dead_after(&self, hello: &Hello) -> Duration {
        let theirs = Duration::from_millis(hello.heartbeat_ms) * 5 / 2;
        self.config.dead_peer_timeout.max(theirs)
    }

    /// Tells peers we are leaving (all, or one direction).
    async fn say_bye(&self, only: Option<Direction>) {
        let links: Vec<Link> = self
            .state
            .lock()
            .registry
            .all()
            .filter(|e| only.is_none_or(|d| d == e.direction))
            .map(|e| e.link.clone())
            .collect();
        for link in links {
            let _ = tokio::time::timeout(
                Duration::from_millis(200),
                link.system_tick(BYE, Bytes::new()),
            )
            .await;
        }
    }

    /// A peer left: forget it, fail what waits on it, say so.
    fn peer_left(&self, id: &NodeId, direction: Direction, reason: LeaveReason) {
        let entry = {
            let mut state = self.state.lock();
            let entry = state.registry.leave(id, direction);
            if let Some(Entry {
                link: Link::Down { route, .. },
                ..
            }) = &entry
            {
                state.routes.remove(route);
            }
            entry
        };
        let Some(entry) = entry else { return };
        entry.link.fail_pending();
        if let Link::Up { left, .. } = &entry.link {
            left.notify_one();
        }
        tracing::debug!(node = %self.id, peer = %id, ?direction, ?reason, "peer left");
        self.emit(NodeEvent::PeerLeft {
            id: id.clone(),
            direction,
            reason,
        });
    }

    /// Runs the handlers for a user request from a joined peer.
    async fn handle_request(
        &self,
        from: NodeId,
        incoming: Incoming,
    ) -> std::result::Result<Answer, RemoteError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(RemoteError::system_error(
                RemoteError::SHUTTING_DOWN,
                "the node is closing and takes no new requests",
            ));
        }
        let stack = self.handlers.lock().request_stack(incoming.event());
        let Some(stack) = stack else {
            return Err(RemoteError::system_error(
                RemoteError::NO_HANDLER,
                format!("no handler for {:?}", incoming.event()),
            ));
        };
        let _handling = Handling::start(self);
        let result = handler::call(stack, Request::new(from, incoming)).await;
        self.answered.fetch_add(1, Ordering::Relaxed);
        result.map(Answer::from)
    }

    /// Runs every tick handler matching the event.
    async fn handle_tick(&self, from: NodeId, incoming: Incoming) {
        let handlers = self.handlers.lock().tick_handlers(incoming.event());
        if handlers.is_empty() {
            tracing::trace!(node = %self.id, event = incoming.event(), "tick with no handler");
            return;
        }
        let request = Request::new(from, incoming);
        futures::future::join_all(handlers.into_iter().map(|h| h(request.clone()))).await;
    }

    /// A system tick from a joined peer (heartbeat, options, bye).
    fn system_tick(&self, from: &NodeId, direction: Direction, incoming: &Incoming) {
        match incoming.event() {
            HEARTBEAT => {}
            OPTIONS => match incoming.decode::<Options>() {
                Ok(options) => {
                    self.state
                        .lock()
                        .registry
                        .set_options(from, direction, options.clone());
                    self.emit(NodeEvent::PeerOptionsChanged {
                        id: from.clone(),
                        options,
                    });
                }
                Err(e) => self.report(ErrorSource::Peer, format!("bad options from {from}: {e}")),
            },
            BYE => self.peer_left(from, direction, LeaveReason::Stopped),
            REJOIN if direction == Direction::Upstream => {
                self.peer_left(from, direction, LeaveReason::Disconnected)
            }
            other => self.report(
                ErrorSource::Peer,
                format!("unknown system event {other:?} from {from}"),
            ),
        }
    }
}

/// Router nodes: forwarding (see `forward.rs` for the message and the rules).
impl Inner {
    /// Sends a message that found no joined destination here through the routers we are
    /// joined to. `local` is the error when there is no router. Returns the reply payload
    /// (requests) and how many nodes were reached (ticks).
    async fn forward_from_here(
        &self,
        action: Action,
        target: &Target,
        event: &str,
        payload: Bytes,
        timeout: Duration,
        local: Error,
    ) -> Result<(Bytes, usize)> {
        let routers = self.state.lock().registry.routers();
        if routers.is_empty() {
            return Err(local);
        }
        let to = match target {
            Target::Id(id) => Destination::Id(id.clone()),
            // A predicate (Rust code) cannot travel: refused at once.
            Target::Any(filter, scope) => Destination::Filter(filter.to_spec()?, *scope),
        };
        let forward = Forward {
            id: rand::random(),
            action,
            to,
            event: event.to_owned(),
            remaining_ms: millis(timeout),
            hops_left: self.config.hop_limit,
            origin: self.id.clone(),
            visited: Vec::new(),
        };
        let deadline = Instant::now() + timeout;
        self.forward_via(&forward, routers, payload, deadline)
            .await
            .map_err(|remote| forward_error(remote, target, event, timeout))
    }

    /// Offers `forward` to `routers` in turn (all of them for `TickAll`), each with the time
    /// left before `deadline`.
    async fn forward_via(
        &self,
        forward: &Forward,
        routers: Vec<(NodeId, Link)>,
        payload: Bytes,
        deadline: Instant,
    ) -> std::result::Result<(Bytes, usize), RemoteError> {
        let mut delivered = 0usize;
        let mut last: Option<RemoteError> = None;
        for (id, link) in routers {
            if forward.excludes(&id) || id == self.id {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RemoteError::new(code::TIMEOUT, "the deadline passed"));
            }
            let mut header = forward.clone();
            header.remaining_ms = millis(left);
            let metadata =
                encode_value(&header).map_err(|e| RemoteError::handler(e.to_string()))?;
            match link
                .system_request(FORWARD, metadata, payload.clone(), left)
                .await
            {
                Ok(reply) if forward.action == Action::TickAll => {
                    delivered += decode_value::<u64>(reply.payload()).unwrap_or(0) as usize;
                }
                Ok(reply) => {
                    let reached = match forward.action {
                        Action::Tick => decode_value::<u64>(reply.payload()).unwrap_or(1) as usize,
                        _ => 1,
                    };
                    return Ok((reply.into_payload(), reached));
                }
                // This router's side of the mesh has nothing: try the others.
                Err(protocol::Error::Remote(remote))
                    if [
                        code::NO_MATCH,
                        code::NOT_FOUND,
                        code::LOOP,
                        code::NOT_A_ROUTER,
                    ]
                    .contains(&remote.code.as_str()) =>
                {
                    last = Some(remote);
                }
                Err(protocol::Error::Remote(remote)) => return Err(remote),
                Err(protocol::Error::Timeout { .. }) => {
                    return Err(RemoteError::new(code::TIMEOUT, "no answer in time"))
                }
                Err(protocol::Error::NoHandler { event }) => {
                    return Err(RemoteError::system_error(
                        RemoteError::NO_HANDLER,
                        format!("no handler for {event:?}"),
                    ))
                }
                // That router is unreachable right now: try the others.
                Err(e) => last = Some(RemoteError::new(code::NO_MATCH, e.to_string())),
            }
        }
        if forward.action == Action::TickAll && delivered > 0 {
            return Ok((Bytes::new(), delivered));
        }
        Err(last
            .filter(|r| r.code != code::NOT_A_ROUTER)
            .unwrap_or_else(|| match &forward.to {
                Destination::Id(id) => RemoteError::new(code::NOT_FOUND, id.to_string()),
                Destination::Filter(..) => RemoteError::new(code::NO_MATCH, "no node matches"),
            }))
    }

    /// A router receives a forwarded message from its peer `from`.
    async fn handle_forward(
        &self,
        from: NodeId,
        incoming: Incoming,
    ) -> std::result::Result<Answer, RemoteError> {
        if !self.config.router {
            return Err(RemoteError::new(code::NOT_A_ROUTER, self.id.to_string()));
        }
        let forward: Forward = decode_value(incoming.metadata())
            .map_err(|e| RemoteError::new("BAD_FORWARD", e.to_string()))?;
        let routing = &self.routing;
        let admission = forward.admit(&self.id, &mut routing.seen.lock());
        let left = match admission {
            Admission::Accept(left) => left,
            Admission::Duplicate => return Ok(count_answer(0)),
            Admission::Loop => {
                routing.looped.fetch_add(1, Ordering::Relaxed);
                return Err(RemoteError::new(
                    code::LOOP,
                    format!(
                        "visited {:?}, {} hops left",
                        forward.visited, forward.hops_left
                    ),
                ));
            }
            Admission::Expired => {
                routing.expired.fetch_add(1, Ordering::Relaxed);
                return Err(RemoteError::new(code::TIMEOUT, "no time left"));
            }
        };
        let deadline = Instant::now() + hop_budget(left);
        let mut via = forward.visited.clone();
        via.push(self.id.clone());
        let route = Route {
            origin: forward.origin.clone(),
            via,
        };
        let metadata = encode_value(&route).map_err(|e| RemoteError::handler(e.to_string()))?;
        let payload = incoming.payload().clone();
        let result = match forward.action {
            Action::TickAll => {
                self.forward_tick_all(&forward, &from, metadata, payload, deadline)
                    .await
            }
            _ => {
                self.forward_one(&forward, &from, metadata, payload, deadline)
                    .await
            }
        };
        let counter = match &result {
            Ok(_) => &routing.forwarded,
            Err(e) if e.code == code::TIMEOUT => &routing.expired,
            Err(e) if e.code == code::LOOP => &routing.looped,
            Err(_) => &routing.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Delivers a forwarded request or tick to one local peer, or passes it on.
    async fn forward_one(
        &self,
        forward: &Forward,
        from: &NodeId,
        metadata: Bytes,
        payload: Bytes,
        deadline: Instant,
    ) -> std::result::Result<Answer, RemoteError> {
        let local = self.pick_for(forward, from)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(link) = local else {
            let next = forward.next_hop(&self.id, left);
            let routers = self.state.lock().registry.routers();
            let routers = routers.into_iter().filter(|(id, _)| id != from).collect();
            let (reply, reached) = self.forward_via(&next, routers, payload, deadline).await?;
            return Ok(match forward.action {
                Action::Request => Answer::from(reply),
                _ => count_answer(reached as u64),
            });
        };
        if left.is_zero() {
            return Err(RemoteError::new(code::TIMEOUT, "no time left"));
        }
        match forward.action {
            Action::Request => match link.request(&forward.event, metadata, payload, left).await {
                Ok(reply) => Ok(Answer::from(reply.into_payload())),
                Err(e) => Err(hop_error(e)),
            },
            _ => match link.tick(&forward.event, metadata, payload).await {
                Ok(()) => Ok(count_answer(1)),
                Err(e) => Err(hop_error(e)),
            },
        }
    }

    /// Delivers a forwarded `tick_all` to every local match and passes it on to the other
    /// routers; answers how many nodes it reached.
    async fn forward_tick_all(
        &self,
        forward: &Forward,
        from: &NodeId,
        metadata: Bytes,
        payload: Bytes,
        deadline: Instant,
    ) -> std::result::Result<Answer, RemoteError> {
        let Destination::Filter(spec, scope) = &forward.to else {
            return Err(RemoteError::new("BAD_FORWARD", "tick_all needs a filter"));
        };
        let filter = Filter::from_spec(spec.clone())
            .map_err(|e| RemoteError::new("BAD_FORWARD", e.to_string()))?;
        let links: Vec<Link> = self
            .state
            .lock()
            .registry
            .matching(&filter, *scope)
            .into_iter()
            .filter(|e| !forward.excludes(&e.id) && &e.id != from)
            .map(|e| e.link.clone())
            .collect();
        let mut reached = 0usize;
        for link in links {
            if link
                .tick(&forward.event, metadata.clone(), payload.clone())
                .await
                .is_ok()
            {
                reached += 1;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let next = forward.next_hop(&self.id, left);
        let routers: Vec<(NodeId, Link)> = self
            .state
            .lock()
            .registry
            .routers()
            .into_iter()
            .filter(|(id, _)| id != from)
            .collect();
        if !routers.is_empty() && next.hops_left > 0 {
            if let Ok((_, further)) = self.forward_via(&next, routers, payload, deadline).await {
                reached += further;
            }
        }
        if reached == 0 {
            return Err(RemoteError::new(code::NO_MATCH, "no node matches"));
        }
        Ok(count_answer(reached as u64))
    }

    /// The local peer a forwarded request or tick goes to, if any.
    fn pick_for(
        &self,
        forward: &Forward,
        from: &NodeId,
    ) -> std::result::Result<Option<Link>, RemoteError> {
        let mut state = self.state.lock();
        Ok(match &forward.to {
            Destination::Id(id) if forward.excludes(id) => None,
            Destination::Id(id) => state.registry.route(id).map(|(_, link, _)| link),
            Destination::Filter(spec, scope) => {
                let filter = Filter::from_spec(spec.clone())
                    .map_err(|e| RemoteError::new("BAD_FORWARD", e.to_string()))?;
                state
                    .registry
                    .pick_except(
                        &filter,
                        *scope,
                        self.config.strategy,
                        rand::random::<u32>() as usize,
                        |id| forward.excludes(id) || id == from,
                    )
                    .map(|(_, _, link, _)| link)
            }
        })
    }
}

/// An answer carrying how many nodes a forwarded tick reached.
fn count_answer(count: u64) -> Answer {
    Answer::from(encode_value(&count).unwrap_or_default())
}

/// What a router answers when the hop it forwarded to failed.
fn hop_error(error: protocol::Error) -> RemoteError {
    match error {
        protocol::Error::Remote(remote) => remote,
        protocol::Error::Timeout { .. } => RemoteError::new(code::TIMEOUT, "no answer in time"),
        protocol::Error::NoHandler { event } => {
            RemoteError::system_error(RemoteError::NO_HANDLER, format!("no handler for {event:?}"))
        }
        other => RemoteError::handler(other.to_string()),
    }
}

/// The caller's typed error for a forward that failed.
fn forward_error(remote: RemoteError, target: &Target, event: &str, timeout: Duration) -> Error {
    match remote.code.as_str() {
        code::NO_MATCH => Error::NoNodesMatchFilter,
        code::NOT_FOUND => Error::NodeNotFound {
            id: match target {
                Target::Id(id) => id.to_string(),
                Target::Any(..) => remote.message,
            },
        },
        code::TIMEOUT => Error::Timeout {
            event: event.to_owned(),
            timeout,
        },
        code::LOOP => Error::RouteLoop {
            reason: remote.message,
        },
        RemoteError::NO_HANDLER => Error::NoHandler {
            event: event.to_owned(),
        },
        _ => Error::Handler {
            code: remote.code,
            message: remote.message,
        },
    }
}

/// A duration in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Requests arriving at our server.
async fn on_downstream_request(
    inner: Arc<Inner>,
    server: Server,
    incoming: Incoming,
) -> std::result::Result<Answer, RemoteError> {
    if incoming.event() == HANDSHAKE {
        // A closing node takes no new peers (they would join and be dropped at once).
        if inner.closing.load(Ordering::Acquire) {
            return Err(RemoteError::system_error(
                RemoteError::SHUTTING_DOWN,
                "the node is closing",
            ));
        }
        return handshake_downstream(&inner, server, &incoming);
    }
    let Some(from) = downstream_peer(&inner, &incoming.from) else {
        // Identity is bound to the connection: no handshake, no service.
        inner.unjoined.fetch_add(1, Ordering::Relaxed);
        inner.report(
            ErrorSource::Peer,
            format!(
                "request {:?} from a connection that has not joined",
                incoming.event()
            ),
        );
        return Err(RemoteError::new(NOT_JOINED, "handshake first"));
    };
    if incoming.event() == FORWARD {
        return inner.handle_forward(from, incoming).await;
    }
    inner.handle_request(from, incoming).await
}

/// Ticks arriving at our server.
async fn on_downstream_tick(inner: Arc<Inner>, server: Server, incoming: Incoming) {
    let Some(from) = downstream_peer(&inner, &incoming.from) else {
        inner.unjoined.fetch_add(1, Ordering::Relaxed);
        if incoming.event() == HEARTBEAT {
            // A peer that still believes it is joined: tell it to handshake again.
            let _ = server
                .system_tick(&incoming.from, REJOIN, Bytes::new())
                .await;
            return;
        }
        inner.report(
            ErrorSource::Peer,
            format!(
                "tick {:?} from a connection that has not joined",
                incoming.event()
            ),
        );
        return;
    };
    if incoming.envelope().is_system() {
        inner.system_tick(&from, Direction::Downstream, &incoming);
        return;
    }
    inner.handle_tick(from, incoming).await;
}

/// The joined peer behind a routing id, marking it alive.
fn downstream_peer(inner: &Inner, route: &PeerId) -> Option<NodeId> {
    let state = inner.state.lock();
    let id = state.routes.get(route)?.clone();
    state
        .registry
        .seen(&id, Direction::Downstream, Instant::now().into_std());
    Some(id)
}

/// The server side of the handshake.
fn handshake_downstream(
    inner: &Arc<Inner>,
    server: Server,
    incoming: &Incoming,
) -> std::result::Result<Answer, RemoteError> {
    let hello: Hello = incoming
        .decode()
        .map_err(|e| RemoteError::new("BAD_HANDSHAKE", e.to_string()))?;
    if hello.version != PROTOCOL_VERSION {
        inner.report(
            ErrorSource::Handshake,
            format!(
                "refused {}: protocol version {} (ours {PROTOCOL_VERSION})",
                hello.id, hello.version
            ),
        );
        return Err(RemoteError::new(
            VERSION_MISMATCH,
            PROTOCOL_VERSION.to_string(),
        ));
    }
    if hello.id == inner.id {
        inner.report(
            ErrorSource::Handshake,
            format!("refused a node claiming our own id {}", hello.id),
        );
        return Err(RemoteError::new(DUPLICATE_ID, hello.id.to_string()));
    }
    let key = incoming.peer_key().copied();
    if let Some(key) = key {
        // The connection passed the allow-list when it was made; the key may have been
        // revoked since (a revoked peer that tries to rejoin on its old connection).
        if let Ok(Some(allowed)) = server.allowed_keys() {
            if !allowed.contains(&key) {
                inner.report(
                    ErrorSource::Handshake,
                    format!("refused {}: key {key} is not allowed", hello.id),
                );
                return Err(RemoteError::new(NOT_AUTHORIZED, key.to_string()));
            }
        }
    }
    let route = incoming.from.clone();
    let entry = Entry {
        id: hello.id.clone(),
        direction: Direction::Downstream,
        options: hello.options.clone(),
        instance: hello.instance.clone(),
        router: hello.router,
        key,
        link: Link::Down {
            server,
            route: route.clone(),
        },
        last_seen: Arc::new(Mutex::new(Instant::now().into_std())),
        dead_after: inner.dead_after(&hello),
        in_flight: Arc::new(AtomicUsize::new(0)),
    };
    let joined = {
        let mut state = inner.state.lock();
        match state.registry.join(entry) {
            Ok(replaced) => {
                if let Some(Entry {
                    link: Link::Down { route: old, .. },
                    ..
                }) = &replaced
                {
                    state.routes.remove(old);
                }
                state.routes.insert(route, hello.id.clone());
                Ok(replaced.is_none())
            }
            Err(_) => Err(()),
        }
    };
    match joined {
        Ok(is_new) => {
            if is_new {
                tracing::debug!(node = %inner.id, peer = %hello.id, "downstream peer joined");
                inner.emit(NodeEvent::PeerJoined {
                    id: hello.id,
                    direction: Direction::Downstream,
                    options: hello.options,
                });
            }
            encode_value(&inner.hello())
                .map(Answer::from)
                .map_err(|e| RemoteError::handler(e.to_string()))
        }
        Err(()) => {
            inner.report(
                ErrorSource::Handshake,
                format!("refused a second node with id {}", hello.id),
            );
            Err(RemoteError::new(DUPLICATE_ID, hello.id.to_string()))
        }
    }
}

/// Routes requests and ticks that our upstream peer (through `client`) sends us.
fn install_upstream_dispatch(
    inner: &Arc<Inner>,
    client: &Client,
    current: Arc<Mutex<Option<NodeId>>>,
    server_key: Option<Key>,
) {
    let weak = Arc::downgrade(inner);
    let peer = Arc::clone(&current);
    client.on_any_request(Some(request_fn(move |incoming: Incoming| {
        let weak = weak.clone();
        let peer = peer.lock().clone();
        // Our side of a CURVE connection: the peer is the server whose key we checked.
        let incoming = match server_key {
            Some(key) => Incoming::new(
                incoming.from.clone(),
                Some(key),
                incoming.envelope().clone(),
            ),
            None => incoming,
        };
        async move {
            let (Some(inner), Some(from)) = (weak.upgrade(), peer) else {
                return Err(RemoteError::new(NOT_JOINED, "handshake first"));
            };
            inner
                .state
                .lock()
                .registry
                .seen(&from, Direction::Upstream, Instant::now().into_std());
            if incoming.event() == FORWARD {
                return inner.handle_forward(from, incoming).await;
            }
            inner.handle_request(from, incoming).await
        }
    })));
    let weak = Arc::downgrade(inner);
    client.on_any_tick(Some(tick_fn(move |incoming: Incoming| {
        let weak = weak.clone();
        let peer = current.lock().clone();
        async move {
            let (Some(inner), Some(from)) = (weak.upgrade(), peer) else {
                return;
            };
            inner
                .state
                .lock()
                .registry
                .seen(&from, Direction::Upstream, Instant::now().into_std());
            if incoming.envelope().is_system() {
                inner.system_tick(&from, Direction::Upstream, &incoming);
            } else {
                inner.handle_tick(from, incoming).await;
            }
        }
    })));
}

/// The client side of the handshake.
async fn handshake_upstream(inner: &Inner, client: &Client) -> Result<Hello> {
    let payload = encode_value(&inner.hello())?;
    let reply = match client
        .system_request(
            HANDSHAKE,
            Bytes::new(),
            payload,
            inner.config.handshake_timeout,
        )
        .await
    {
        Ok(reply) => reply,
        Err(protocol::Error::Remote(remote)) => {
            return Err(match remote.code.as_str() {
                DUPLICATE_ID => Error::DuplicateId { id: remote.message },
                NOT_AUTHORIZED => Error::Refused {
                    endpoint: client.endpoint().to_owned(),
                    reason: transport::HandshakeFailure::Auth,
                },
                VERSION_MISMATCH => Error::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: remote.message.parse().unwrap_or(0),
                },
                _ => Error::HandshakeRefused {
                    reason: remote.to_string(),
                },
            })
        }
        Err(protocol::Error::Timeout { .. }) => {
            return Err(Error::HandshakeTimeout {
                endpoint: client.endpoint().to_owned(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    let hello: Hello = reply
        .decode_payload()
        .map_err(|e| Error::HandshakeRefused {
            reason: format!("invalid handshake reply: {e}"),
        })?;
    if hello.version != PROTOCOL_VERSION {
        return Err(Error::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs: hello.version,
        });
    }
    if hello.id == inner.id {
        return Err(Error::DuplicateId {
            id: hello.id.to_string(),
        });
    }
    Ok(hello)
}

/// What an upstream supervisor shares with the connection's dispatch.
struct Upstreaming {
    /// The id of the peer joined through this connection, once joined.
    current: Arc<Mutex<Option<NodeId>>>,
    /// Wakes the supervisor when the peer is declared gone.
    left: Arc<Notify>,
    /// The server's CURVE key, on a secured connection.
    server_key: Option<Key>,
}

/// Reports the connections our server refused (CURVE: a key not on the allow-list, a
/// plaintext client, a client with another server key) as events, until the socket closes.
async fn report_refusals(weak: Weak<Inner>, mut events: transport::Events) {
    while let Some(event) = events.recv().await {
        let SocketEvent::HandshakeFailed { endpoint, reason } = event else {
            continue;
        };
        let Some(inner) = weak.upgrade() else { return };
        tracing::info!(node = %inner.id, %endpoint, %reason, "connection refused");
        inner.emit(NodeEvent::ConnectionRefused { endpoint, reason });
    }
}

/// Keeps one upstream connection joined: handshakes, and after every loss (the peer left,
/// the connection dropped) handshakes again once it can. The first outcome goes to
/// `connect` through `first`.
async fn supervise_upstream(
    weak: Weak<Inner>,
    client: Client,
    upstreaming: Upstreaming,
    first: tokio::sync::oneshot::Sender<Result<PeerInfo>>,
) {
    let Upstreaming {
        current,
        left,
        server_key,
    } = upstreaming;
    let mut first = Some(first);
    let mut connection = client.watch_connection();
    loop {
        // Wait for a live connection.
        loop {
            let refused = match &*connection.borrow_and_update() {
                Connection::Connected => break,
                Connection::Closed => return,
                Connection::Refused(reason) => Some(*reason),
                _ => None,
            };
            if let Some(reason) = refused {
                // The server refused a reconnection (it restarted with another key or
                // allow-list): libzmq does not retry after an authentication refusal.
                if let Some(inner) = weak.upgrade() {
                    inner.report(
                        ErrorSource::Handshake,
                        format!("{} refused the connection: {reason}", client.endpoint()),
                    );
                }
            }
            if connection.changed().await.is_err() {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        if inner.closing.load(Ordering::Acquire) {
            return;
        }
        let outcome = match handshake_upstream(&inner, &client).await {
            Ok(hello) => {
                let entry = Entry {
                    id: hello.id.clone(),
                    direction: Direction::Upstream,
                    options: hello.options.clone(),
                    instance: hello.instance.clone(),
                    router: hello.router,
                    key: server_key,
                    link: Link::Up {
                        client: client.clone(),
                        left: Arc::clone(&left),
                    },
                    last_seen: Arc::new(Mutex::new(Instant::now().into_std())),
                    dead_after: inner.dead_after(&hello),
                    in_flight: Arc::new(AtomicUsize::new(0)),
                };
                let joined = inner.state.lock().registry.join(entry);
                match joined {
                    Ok(_) => {
                        *current.lock() = Some(hello.id.clone());
                        tracing::debug!(node = %inner.id, peer = %hello.id, "upstream peer joined");
                        inner.emit(NodeEvent::PeerJoined {
                            id: hello.id.clone(),
                            direction: Direction::Upstream,
                            options: hello.options.clone(),
                        });
                        Ok(PeerInfo {
                            id: hello.id,
                            direction: Direction::Upstream,
                            options: hello.options,
                            in_flight: 0,
                            router: hello.router,
                            key: server_key,
                        })
                    }
                    Err(_) => {
                        let _ = client.system_tick(BYE, Bytes::new()).await;
                        Err(Error::DuplicateId {
                            id: hello.id.to_string(),
                        })
                    }
                }
            }
            Err(e) => Err(e),
        };
        let joined_id = outcome.as_ref().ok().map(|p| p.id.clone());
        if let Some(first) = first.take() {
            let failed = outcome.is_err();
            let _ = first.send(outcome);
            if failed {
                return;
            }
        } else if let Err(e) = outcome {
            inner.report(ErrorSource::Handshake, format!("re-handshake failed: {e}"));
            if matches!(&e, Error::Refused { .. }) {
                // Our key was revoked: retrying cannot help. Give the connection up.
                if let Some(upstream) = inner.upstreams.lock().remove(client.endpoint()) {
                    drop(upstream.supervisor);
                }
                drop(inner);
                client.close().await;
                return;
            }
        }
        let interval = inner.config.heartbeat_interval;
        drop(inner);
        let Some(id) = joined_id else {
            // Not joined: try again shortly.
            tokio::time::sleep(interval).await;
            continue;
        };
        // Joined: stay until the peer leaves or the connection drops.
        let reason = loop {
            tokio::select! {
                () = left.notified() => break None,
                changed = connection.changed() => {
                    if changed.is_err() {
                        break Some(LeaveReason::Local);
                    }
                    if *connection.borrow() != Connection::Connected {
                        break Some(LeaveReason::Disconnected);
                    }
                }
            }
        };
        *current.lock() = None;
        let Some(inner) = weak.upgrade() else { return };
        if let Some(reason) = reason {
            inner.peer_left(&id, Direction::Upstream, reason);
        }
    }
}

/// Sends heartbeats to every peer and declares dead the ones gone silent.
async fn heartbeat_loop(weak: Weak<Inner>) {
    let Some(inner) = weak.upgrade() else { return };
    let interval = inner.config.heartbeat_interval;
    drop(inner);
    // Check four times per interval so that detection is within a quarter interval of the
    // dead-peer timeout.
    let mut ticker = tokio::time::interval(interval / 4);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut beat = 0u64;
    loop {
        ticker.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        if inner.closing.load(Ordering::Acquire) {
            return;
        }
        if beat % 4 == 0 {
            let links: Vec<Link> = inner
                .state
                .lock()
                .registry
                .all()
                .map(|e| e.link.clone())
                .collect();
            for link in links {
                match tokio::time::timeout(interval, link.system_tick(HEARTBEAT, Bytes::new()))
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(node = %inner.id, cause = %e, ?link, "heartbeat not sent")
                    }
                    Err(_) => tracing::debug!(node = %inner.id, ?link, "heartbeat send blocked"),
                }
            }
        }
        beat = beat.wrapping_add(1);
        let dead = inner
            .state
            .lock()
            .registry
            .silent(Instant::now().into_std());
        for (id, direction) in dead {
            inner.peer_left(&id, direction, LeaveReason::TimedOut);
        }
    }
}
