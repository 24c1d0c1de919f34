//! Node configuration and the builder.

use std::time::Duration;

use transport::{Key, KeyPair};

use crate::mesh::peer::{NodeId, Strategy};
use crate::options::{Options, Value};

/// How many router hops a message may take by default.
pub const DEFAULT_HOP_LIMIT: u8 = 8;

/// Tunables of a node. The defaults suit a LAN or one machine.
///
/// `#[non_exhaustive]`: start from `Config::default()` and set fields, or use the
/// [`NodeBuilder`]'s methods.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Timeout of a request when the call gives none.
    pub request_timeout: Duration,
    /// How often each side sends a heartbeat to each peer.
    pub heartbeat_interval: Duration,
    /// Silence after which a peer is declared dead (peer left, timed out). Default: two and a
    /// half heartbeat intervals, so a dead peer is noticed within three intervals.
    pub dead_peer_timeout: Duration,
    /// How long `connect` waits for the connection and the handshake.
    pub handshake_timeout: Duration,
    /// Send and receive high-water marks of every socket (messages per peer). A server
    /// socket on the native engine dispatches each message as it is read, so there only
    /// the send mark applies: what waits for a handler is bounded by
    /// `max_concurrent_handlers` and the [`BusyPolicy`] instead.
    pub hwm: i32,
    /// Which ZMTP engine the node's sockets run on (default: the process's,
    /// `ZERONODE_ENGINE`, else native; see [`transport::Engine`]).
    pub engine: transport::Engine,
    /// Largest payload accepted.
    pub max_payload: usize,
    /// How `*_any` picks a peer.
    pub strategy: Strategy,
    /// How long `close` lets in-flight requests finish before it stops waiting.
    pub close_grace: Duration,
    /// Whether this node is a router: it forwards messages for its peers (advertised in its
    /// handshake).
    pub router: bool,
    /// How many router hops a forwarded message may take.
    pub hop_limit: u8,
    /// This node's CURVE key pair. With it, the address the node binds accepts only CURVE
    /// connections (encrypted, and authenticated by key), and
    /// [`Node::connect_with`](crate::Node::connect_with) a server key connects to CURVE
    /// nodes.
    pub curve: Option<KeyPair>,
    /// The client keys the bound address accepts (CURVE only; `None`: any client that
    /// knows our public key). Changed at run time with
    /// [`Node::keys`](crate::Node::keys).
    pub allowed_keys: Option<Vec<Key>>,
    /// The most CURVE handshakes the bound address runs at once (0: no limit; native
    /// engine only, see [`transport::Options::max_handshakes`]). A connection beyond it is
    /// closed as soon as it is accepted, so a flood of handshakes cannot take the CPU from
    /// the peers that joined.
    pub max_handshakes: usize,
    /// How many request and tick handlers may run at once, node-wide (every connection,
    /// both directions). Handlers run as tasks of their own (in parallel on a multi-thread
    /// runtime); this bounds the work and the memory a flood of messages can take.
    pub max_concurrent_handlers: usize,
    /// What happens to a message that arrives while `max_concurrent_handlers` are running
    /// (or its peer's `max_handlers_per_peer`).
    pub when_busy: BusyPolicy,
    /// How many request and tick handlers one peer may have running at once (default 256,
    /// a quarter of the node-wide default): its further messages wait in its own lane (up
    /// to `max_queued_per_peer`) while other peers' run. Below `max_concurrent_handlers`,
    /// so that one peer cannot take every slot from the others: it takes four peers
    /// holding their whole share to fill a node with the defaults. (Lowering
    /// `max_concurrent_handlers` does not lower this: set both.)
    pub max_handlers_per_peer: usize,
    /// How many messages of one peer may wait for a handler slot at once under
    /// [`BusyPolicy::Wait`] (default 1,024, an eighth of the node-wide default): above it
    /// that peer's requests are answered `BUSY` ([`Error::Busy`](crate::Error::Busy),
    /// saying that the peer's share is taken) and its ticks dropped, while other peers
    /// keep their places. The waiting work is served a peer at a time in turn, so a peer
    /// with quick requests is not held behind another's long line.
    pub max_queued_per_peer: usize,
    /// What an upstream connection does after its peer left.
    pub reconnect: Reconnect,
    /// Limits on a message's metadata (entries and bytes, the framework's own entries
    /// included): a call over them fails with [`Error::Metadata`](crate::Error::Metadata)
    /// before anything is sent; a received request over them is answered with a typed
    /// refusal, a tick over them is dropped and counted.
    pub max_metadata: protocol::MetaLimits,
    /// Whether the node records metrics through the `metrics` facade (see
    /// [`NodeBuilder::metrics`]).
    pub metrics: bool,
    /// The level of the per-request spans, `zeronode.call` and `zeronode.handle` (see
    /// [`NodeBuilder::span_level`]). `INFO` by default.
    pub span_level: tracing::Level,
    /// Who may ask this node to describe itself (see [`NodeBuilder::describe`]).
    pub describe: crate::observation::describe::DescribePolicy,
}

/// What a node does with a request or tick that arrives while its handlers are at
/// [`Config::max_concurrent_handlers`], or its peer's at [`Config::max_handlers_per_peer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusyPolicy {
    /// Queue it until a handler finishes, up to `max_queued` messages waiting (node-wide)
    /// and [`Config::max_queued_per_peer`] of one peer; beyond that, refuse as
    /// [`BusyPolicy::Refuse`] does. The waiting messages are served a peer at a time in
    /// turn, each peer's in the order they came. A queued request still ends by its
    /// caller's deadline.
    Wait {
        /// The most messages waiting for a handler slot at once.
        max_queued: usize,
    },
    /// Refuse at once: a request is answered with the `BUSY` error
    /// ([`Error::Busy`](crate::Error::Busy) for its caller), a tick is dropped and counted
    /// ([`NodeStats::ticks_dropped`](crate::NodeStats::ticks_dropped)).
    Refuse,
}

/// When an upstream connection handshakes again after its peer left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReconnectPolicy {
    /// Whatever the reason, also after the peer said goodbye (it may come back on the same
    /// address).
    Always,
    /// After a failure (the connection dropped, heartbeats stopped, the peer asked us to
    /// rejoin), not after the peer closed gracefully: the connection is then given up.
    OnFailure,
    /// Never: once the peer leaves, the connection is given up
    /// ([`Node::connect`](crate::Node::connect) again to rejoin).
    Never,
}

/// How an upstream connection comes back: the policy, and the backoff between attempts
/// (libzmq's reconnection of the socket, and this node's handshakes), which doubles from
/// `initial` up to `max` and is spread by up to `jitter` of itself (so that the clients of
/// a restarted server do not all come back in the same instant).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Reconnect {
    /// When to reconnect.
    pub policy: ReconnectPolicy,
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
    /// The fraction of each wait added at random (0.0 to 1.0).
    pub jitter: f64,
}

impl Reconnect {
    /// A reconnection with `policy` and the default backoff.
    pub fn new(policy: ReconnectPolicy) -> Reconnect {
        Reconnect {
            policy,
            ..Reconnect::default()
        }
    }

    /// Sets the backoff: the first and the longest wait.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Reconnect {
        self.initial = initial;
        self.max = max.max(initial);
        self
    }

    /// Sets the jitter (clamped to 0.0..=1.0).
    pub fn jitter(mut self, jitter: f64) -> Reconnect {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The wait before attempt `attempt` (0 for the first retry), given `random` drawn
    /// uniformly from 0.0..1.0: `initial * 2^attempt`, at most `max`, plus up to `jitter`
    /// of it. Pure, so that it is tested without a clock.
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let base = self
            .initial
            .saturating_mul(1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX))
            .min(self.max);
        base + base.mul_f64(self.jitter * random.clamp(0.0, 1.0))
    }
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect {
            policy: ReconnectPolicy::Always,
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            jitter: 0.2,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        let heartbeat_interval = Duration::from_secs(1);
        Config {
            request_timeout: Duration::from_secs(10),
            heartbeat_interval,
            dead_peer_timeout: heartbeat_interval * 5 / 2,
            handshake_timeout: Duration::from_secs(5),
            hwm: 10_000,
            engine: transport::Engine::default(),
            max_payload: protocol::DEFAULT_MAX_PAYLOAD,
            strategy: Strategy::Random,
            close_grace: Duration::from_secs(10),
            router: false,
            hop_limit: DEFAULT_HOP_LIMIT,
            curve: None,
            allowed_keys: None,
            max_handshakes: transport::DEFAULT_MAX_HANDSHAKES,
            max_concurrent_handlers: 1024,
            when_busy: BusyPolicy::Wait { max_queued: 8192 },
            max_handlers_per_peer: 256,
            max_queued_per_peer: 1024,
            reconnect: Reconnect::default(),
            max_metadata: protocol::MetaLimits::default(),
            metrics: false,
            span_level: tracing::Level::INFO,
            describe: crate::observation::describe::DescribePolicy::Anyone,
        }
    }
}

/// Builds a [`Node`](crate::Node). Settings may come in any order: a whole
/// [`Config`] given with [`config`](Self::config) is the base the other settings apply over.
///
/// ```
/// # #[tokio::main] async fn main() -> node::Result<()> {
/// use std::time::Duration;
/// use node::Node;
///
/// let node = Node::builder()
///     .id("billing-1")
///     .option("role", "billing")
///     .option("version", 3)
///     .heartbeat_interval(Duration::from_millis(500))
///     .bind("tcp://127.0.0.1:0")
///     .build()
///     .await?;
/// assert_eq!(node.id().as_str(), "billing-1");
/// assert!(node.address().is_some());
/// node.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct NodeBuilder {
    pub(crate) id: Option<NodeId>,
    pub(crate) options: Options,
    pub(crate) bind: Option<String>,
    /// The discovery sources to follow once built (`discover.rs`).
    pub(crate) discover: Vec<crate::discovery::discover::Starter>,
    /// The base configuration ([`config`](Self::config)), under what the other methods set.
    base: Config,
    /// Every setting made with a method, applied over `base` in order when the node is
    /// built: so `config(..)` never drops what was set before or after it.
    settings: Vec<Setting>,
}

/// One setting of the builder.
type Setting = std::sync::Arc<dyn Fn(&mut Config) + Send + Sync>;

impl std::fmt::Debug for NodeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBuilder")
            .field("id", &self.id)
            .field("options", &self.options)
            .field("bind", &self.bind)
            .field("config", &self.resolved_config())
            .finish()
    }
}

impl NodeBuilder {
    /// Records a setting.
    fn set(mut self, setting: impl Fn(&mut Config) + Send + Sync + 'static) -> Self {
        self.settings.push(std::sync::Arc::new(setting));
        self
    }

    /// The configuration the node will have: the base with every setting applied.
    pub fn resolved_config(&self) -> Config {
        let mut config = self.base.clone();
        for setting in &self.settings {
            setting(&mut config);
        }
        config
    }

    /// Sets the node id (default: a generated readable one).
    pub fn id(mut self, id: impl Into<NodeId>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Adds one option peers can filter on.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Replaces all options.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// Binds this address when built (`tcp://127.0.0.1:0` picks a port).
    pub fn bind(mut self, address: impl Into<String>) -> Self {
        self.bind = Some(address.into());
        self
    }

    /// Sets the base configuration: every other setting of this builder, made before or
    /// after (a key pair from [`curve`](Self::curve), a timeout), still applies over it.
    pub fn config(mut self, config: Config) -> Self {
        self.base = config;
        self
    }

    /// Sets the default request timeout.
    pub fn request_timeout(self, timeout: Duration) -> Self {
        self.set(move |config| {
            config.request_timeout = timeout;
        })
    }

    /// Sets the heartbeat interval (and the dead-peer timeout to two and a half of them).
    pub fn heartbeat_interval(self, interval: Duration) -> Self {
        self.set(move |config| {
            config.heartbeat_interval = interval;
            config.dead_peer_timeout = interval * 5 / 2;
        })
    }

    /// Sets the dead-peer timeout.
    pub fn dead_peer_timeout(self, timeout: Duration) -> Self {
        self.set(move |config| {
            config.dead_peer_timeout = timeout;
        })
    }

    /// Sets how long `connect` waits for the handshake.
    pub fn handshake_timeout(self, timeout: Duration) -> Self {
        self.set(move |config| {
            config.handshake_timeout = timeout;
        })
    }

    /// Sets the high-water marks.
    pub fn hwm(self, messages: i32) -> Self {
        self.set(move |config| {
            config.hwm = messages;
        })
    }

    /// Runs the node's sockets on `engine`: libzmq, or the native ZMTP engine. Nodes on
    /// different engines talk to each other (both speak ZMTP 3.1).
    pub fn engine(self, engine: transport::Engine) -> Self {
        self.set(move |config| {
            config.engine = engine;
        })
    }

    /// Sets the largest payload accepted.
    pub fn max_payload(self, bytes: usize) -> Self {
        self.set(move |config| {
            config.max_payload = bytes;
        })
    }

    /// Sets how `*_any` picks a peer.
    pub fn strategy(self, strategy: Strategy) -> Self {
        self.set(move |config| {
            config.strategy = strategy;
        })
    }

    /// Sets how long `close` waits for in-flight requests.
    pub fn close_grace(self, grace: Duration) -> Self {
        self.set(move |config| {
            config.close_grace = grace;
        })
    }

    /// Makes this node a router: it forwards calls to filters and to ids its
    /// peers cannot reach directly (see the crate docs).
    pub fn router(self, router: bool) -> Self {
        self.set(move |config| {
            config.router = router;
        })
    }

    /// Sets how many router hops a forwarded message may take.
    pub fn hop_limit(self, hops: u8) -> Self {
        self.set(move |config| {
            config.hop_limit = hops;
        })
    }

    /// Secures the node with CURVE (CurveZMQ): its bound address then accepts only
    /// encrypted connections from nodes that know its public key, and it can connect to
    /// secured nodes with [`Node::connect_with`](crate::Node::connect_with) and the
    /// server's key.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> node::Result<()> {
    /// use std::time::Duration;
    /// use node::{ConnectOptions, KeyPair, Node};
    ///
    /// let (server_keys, client_keys) = (KeyPair::generate()?, KeyPair::generate()?);
    /// let server = Node::builder()
    ///     .id("vault")
    ///     .curve(server_keys.clone())
    ///     .allow_keys([client_keys.public]) // only this client may join
    ///     .bind("tcp://127.0.0.1:0")
    ///     .build()
    ///     .await?;
    /// server.on_request("secret", |_req| async { Ok("42") });
    ///
    /// let client = Node::builder().id("teller").curve(client_keys).build().await?;
    /// let address = server.address().unwrap();
    /// let secure = ConnectOptions::new().server_key(server_keys.public);
    /// let peer = client.connect_with(&address, secure).await?;
    /// assert_eq!(peer.key, Some(server_keys.public));
    /// let answer: String = client.request("vault", "secret", &()).await?;
    /// assert_eq!(answer, "42");
    /// # client.close().await; server.close().await;
    /// # Ok(()) }
    /// ```
    pub fn curve(self, keys: KeyPair) -> Self {
        self.set(move |config| {
            config.curve = Some(keys.clone());
        })
    }

    /// The client public keys the bound address accepts (needs [`curve`](Self::curve):
    /// binding without a key pair is [`Error::NoKeys`](crate::Error::NoKeys)). Without a
    /// list, any client that knows this node's public key may connect.
    pub fn allow_keys(self, keys: impl IntoIterator<Item = Key>) -> Self {
        let keys: Vec<Key> = keys.into_iter().collect();
        self.set(move |config| {
            config.allowed_keys = Some(keys.clone());
        })
    }

    /// Sets the most CURVE handshakes the bound address runs at once (see
    /// [`Config::max_handshakes`]; 0: no limit).
    pub fn max_handshakes(self, handshakes: usize) -> Self {
        self.set(move |config| {
            config.max_handshakes = handshakes;
        })
    }

    /// Sets how many handlers may run at once, node-wide (at least 1).
    pub fn max_concurrent_handlers(self, handlers: usize) -> Self {
        self.set(move |config| {
            config.max_concurrent_handlers = handlers.max(1);
        })
    }

    /// Records metrics through the `metrics` facade, so any exporter works: requests and
    /// ticks sent and handled by event and outcome, handler and round-trip latencies, in
    /// flight, peers joined and left, refusals, queue waits (`node/src/metrics.rs` lists
    /// the series). Install the recorder before building the node.
    pub fn metrics(self, on: bool) -> Self {
        self.set(move |config| config.metrics = on)
    }

    /// Sets the level of the spans the node makes for every request it sends and handles
    /// (`zeronode.call`, `zeronode.handle`; `INFO` by default, so `RUST_LOG=zeronode=info`
    /// shows them). A subscriber that records a span charges for it whether or not anything
    /// is logged inside: with `tracing_subscriber`'s fmt layer about 330 ns a span, two a
    /// request, which at 100 requests in flight is about a sixth of a request's CPU
    /// (`cargo bench -p node --bench spans`; PERFORMANCE.md). `DEBUG` keeps them out of an
    /// `info` filter, and their cost with them, while the node's other logs stay; the trace
    /// context is carried on across nodes either way.
    pub fn span_level(self, level: tracing::Level) -> Self {
        self.set(move |config| config.span_level = level)
    }

    /// Sets who may ask this node to describe itself ([`Node::describe`](crate::Node::describe)):
    /// any joined peer by default, only some CURVE keys, or nobody. While on, each request
    /// and tick its handlers run costs two counts and a histogram record
    /// (`node/src/describe.rs`); off, nothing.
    pub fn describe(self, policy: crate::observation::describe::DescribePolicy) -> Self {
        self.set(move |config| config.describe = policy.clone())
    }

    /// Sets the limits on a message's metadata (see [`Config::max_metadata`]).
    pub fn max_metadata(self, entries: usize, bytes: usize) -> Self {
        self.set(move |config| {
            config.max_metadata = protocol::MetaLimits {
                max_entries: entries,
                max_bytes: bytes,
            };
        })
    }

    /// Sets how many handlers one peer may have running at once (at least 1; see
    /// [`Config::max_handlers_per_peer`]).
    pub fn max_handlers_per_peer(self, handlers: usize) -> Self {
        self.set(move |config| {
            config.max_handlers_per_peer = handlers.max(1);
        })
    }

    /// Sets how many messages of one peer may wait for a handler slot at once (zero: none
    /// waits, a message of a peer that holds its share is refused at once; see
    /// [`Config::max_queued_per_peer`]).
    pub fn max_queued_per_peer(self, messages: usize) -> Self {
        self.set(move |config| {
            config.max_queued_per_peer = messages;
        })
    }

    /// Sets what happens to a message that arrives while the handlers are at their limit.
    pub fn when_busy(self, policy: BusyPolicy) -> Self {
        self.set(move |config| {
            config.when_busy = policy;
        })
    }

    /// Sets the reconnection policy and backoff of upstream connections.
    pub fn reconnect(self, reconnect: Reconnect) -> Self {
        self.set(move |config| {
            config.reconnect = reconnect;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_config_never_drops_what_was_set_around_it() {
        let keys = KeyPair::generate().expect("a key pair");
        let built = NodeBuilder::default()
            .curve(keys.clone())
            .request_timeout(Duration::from_secs(3))
            .config(Config {
                hwm: 7,
                ..Config::default()
            })
            .max_concurrent_handlers(0)
            .resolved_config();
        assert_eq!(built.curve.map(|k| k.public), Some(keys.public));
        assert_eq!(built.request_timeout, Duration::from_secs(3));
        assert_eq!(built.hwm, 7, "the base applies under the settings");
        assert_eq!(built.max_concurrent_handlers, 1, "at least one handler");
    }

    #[test]
    fn the_backoff_doubles_up_to_its_maximum_with_bounded_jitter() {
        let reconnect = Reconnect::new(ReconnectPolicy::OnFailure)
            .backoff(Duration::from_millis(100), Duration::from_secs(1))
            .jitter(0.5);
        assert_eq!(reconnect.delay(0, 0.0), Duration::from_millis(100));
        assert_eq!(reconnect.delay(1, 0.0), Duration::from_millis(200));
        assert_eq!(reconnect.delay(3, 0.0), Duration::from_millis(800));
        assert_eq!(reconnect.delay(4, 0.0), Duration::from_secs(1));
        assert_eq!(reconnect.delay(400, 0.0), Duration::from_secs(1));
        assert_eq!(reconnect.delay(0, 1.0), Duration::from_millis(150));
        assert_eq!(reconnect.delay(9, 0.999_999).as_millis(), 1499);
        assert_eq!(Reconnect::default().jitter(f64::NAN).jitter, 0.0);
    }
}
