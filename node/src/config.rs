//! Node configuration and the builder.

use std::time::Duration;

use transport::{Key, KeyPair};

use crate::options::{Options, Value};
use crate::peer::{NodeId, Strategy};

/// Tunables of a node. The defaults suit a LAN or one machine.
#[derive(Debug, Clone)]
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
    /// Send and receive high-water marks of every socket (messages per peer).
    pub hwm: i32,
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
    /// [`Node::connect_secure`](crate::Node::connect_secure) can connect to CURVE nodes.
    pub curve: Option<KeyPair>,
    /// The client keys the bound address accepts (CURVE only; `None`: any client that
    /// knows our public key). Changed at run time with
    /// [`Node::allow_key`](crate::Node::allow_key) and friends.
    pub allowed_keys: Option<Vec<Key>>,
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
            max_payload: protocol::DEFAULT_MAX_PAYLOAD,
            strategy: Strategy::Random,
            close_grace: Duration::from_secs(10),
            router: false,
            hop_limit: crate::forward::DEFAULT_HOP_LIMIT,
            curve: None,
            allowed_keys: None,
        }
    }
}

/// Builds a [`Node`](crate::Node).
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
#[derive(Debug, Clone, Default)]
pub struct NodeBuilder {
    pub(crate) id: Option<NodeId>,
    pub(crate) options: Options,
    pub(crate) bind: Option<String>,
    pub(crate) config: Config,
}

impl NodeBuilder {
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

    /// Sets the whole configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Sets the default request timeout.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// Sets the heartbeat interval (and the dead-peer timeout to two and a half of them).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = interval;
        self.config.dead_peer_timeout = interval * 5 / 2;
        self
    }

    /// Sets the dead-peer timeout.
    pub fn dead_peer_timeout(mut self, timeout: Duration) -> Self {
        self.config.dead_peer_timeout = timeout;
        self
    }

    /// Sets how long `connect` waits for the handshake.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// Sets the high-water marks.
    pub fn hwm(mut self, messages: i32) -> Self {
        self.config.hwm = messages;
        self
    }

    /// Sets the largest payload accepted.
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.config.max_payload = bytes;
        self
    }

    /// Sets how `*_any` picks a peer.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.config.strategy = strategy;
        self
    }

    /// Sets how long `close` waits for in-flight requests.
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.config.close_grace = grace;
        self
    }

    /// Makes this node a router: it forwards `*_any`, `tick_all` and messages to ids its
    /// peers cannot reach directly (see the crate docs).
    pub fn router(mut self, router: bool) -> Self {
        self.config.router = router;
        self
    }

    /// Sets how many router hops a forwarded message may take.
    pub fn hop_limit(mut self, hops: u8) -> Self {
        self.config.hop_limit = hops;
        self
    }

    /// Secures the node with CURVE (CurveZMQ): its bound address then accepts only
    /// encrypted connections from nodes that know its public key, and it can connect to
    /// secured nodes with [`Node::connect_secure`](crate::Node::connect_secure).
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> node::Result<()> {
    /// use std::time::Duration;
    /// use node::{KeyPair, Node};
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
    /// let peer = client.connect_secure(&address, server_keys.public).await?;
    /// assert_eq!(peer.key, Some(server_keys.public));
    /// let answer: String = client.request("vault", "secret", &()).await?;
    /// assert_eq!(answer, "42");
    /// # client.close().await; server.close().await;
    /// # Ok(()) }
    /// ```
    pub fn curve(mut self, keys: KeyPair) -> Self {
        self.config.curve = Some(keys);
        self
    }

    /// The client public keys the bound address accepts (needs [`curve`](Self::curve):
    /// binding without a key pair is [`Error::NoKeys`](crate::Error::NoKeys)). Without a
    /// list, any client that knows this node's public key may connect.
    pub fn allow_keys(mut self, keys: impl IntoIterator<Item = Key>) -> Self {
        self.config.allowed_keys = Some(keys.into_iter().collect());
        self
    }

    /// Builds the node (binding its address if one was given). Must run inside a tokio
    /// runtime.
    pub async fn build(self) -> crate::Result<crate::Node> {
        crate::Node::from_builder(self).await
    }
}
