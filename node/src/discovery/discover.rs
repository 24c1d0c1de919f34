//! Discovery: a node that follows a name (or any source of addresses) and keeps itself
//! connected to every address it lists.
//!
//! A [`Discover`] source is a [`Stream`] of address sets: each item is the whole current
//! set (`tcp://10.0.0.7:5555`, ...), or why there is none this time. Two are built in:
//! [`Dns`] (A and AAAA records of `NAME:PORT`, or the SRV records `_zeronode._tcp.NAME`,
//! followed by their TTL) and [`Static`] (a fixed list). [`Node::discover`](crate::Node::discover) runs one:
//!
//! - an address that appears is connected to (at most [`DiscoverOptions::max_peers`] at
//!   once: past it, [`DiscoveryEvent::Capped`]), our own address is skipped, and two
//!   addresses that lead to one node make one peer (the second is refused by the peer's
//!   id check and kept aside, tried again when a peer of this source leaves);
//! - an address that disappears is let go gracefully: its peer is no longer picked for
//!   `any`, `all` or group calls at once, and it is disconnected once everything in flight
//!   to it is answered (this node's requests, those it forwards to it as a router, streams
//!   open to it), or after [`DiscoverOptions::grace`];
//! - a failed answer or an empty one changes nothing: the peers that are joined stay
//!   (a DNS outage must not take a mesh down); it is an event and a counter;
//! - a connection to a listed address that fails, or a peer of this source that leaves,
//!   asks the source for a new answer at once ([`Discover::refresh`]; the source bounds
//!   how often).
//!
//! The driver is one task per source, holding the node only weakly; it ends with the node
//! or with [`Discovery::stop`]. It drives the node through `connect` and `disconnect`,
//! like a user would; the only hook it has into the node is marking a peer it lets go as
//! draining.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use transport::Key;

use crate::mesh::peer::NodeId;

pub use super::dns::{Dns, SRV_PREFIX};

/// Why a source has no address set this time. The peers joined so far stay.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The name given is not `NAME`, `NAME:PORT` or a valid DNS name.
    #[error("invalid name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The system's resolver configuration could not be read.
    #[error("cannot read the resolver configuration: {0}")]
    Config(String),
    /// The name server did not answer within the resolver's timeout.
    #[error("resolving {name} timed out")]
    Timeout {
        /// The name resolved.
        name: String,
    },
    /// The resolution failed (the name server's error, a network error).
    #[error("resolving {name} failed: {reason}")]
    Resolve {
        /// The name resolved.
        name: String,
        /// The resolver's error.
        reason: String,
    },
    /// A source of the user's own failed.
    #[error("{0}")]
    Source(String),
}

/// A source of addresses: a stream of address sets, each the whole current set (a
/// `tcp://HOST:PORT` per node), or why there is none this time. Implement it to follow
/// Consul, etcd or a file; [`Dns`] and [`Static`] are built in.
///
/// The source decides when to answer again (a DNS source waits for the records' TTL).
/// A stream that ends stops the discovery (its peers stay connected).
pub trait Discover:
    Stream<Item = Result<Vec<String>, DiscoveryError>> + Send + Unpin + 'static
{
    /// A connection to a listed address failed, or a peer of this source left: answer
    /// again soon. The source bounds how soon (the default ignores it).
    fn refresh(&mut self) {}

    /// What this source follows, for events and logs.
    fn describe(&self) -> String;
}

/// Wraps a stream of the user's own as a [`Discover`] source (without refresh).
pub fn from_stream<S>(description: impl Into<String>, stream: S) -> FromStream<S>
where
    S: Stream<Item = Result<Vec<String>, DiscoveryError>> + Send + Unpin + 'static,
{
    FromStream {
        description: description.into(),
        stream,
    }
}

/// A stream as a [`Discover`] source ([`from_stream`]).
#[derive(Debug)]
pub struct FromStream<S> {
    description: String,
    stream: S,
}

impl<S> Stream for FromStream<S>
where
    S: Stream<Item = Result<Vec<String>, DiscoveryError>> + Unpin,
{
    type Item = Result<Vec<String>, DiscoveryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stream.poll_next_unpin(cx)
    }
}

impl<S> Discover for FromStream<S>
where
    S: Stream<Item = Result<Vec<String>, DiscoveryError>> + Send + Unpin + 'static,
{
    fn describe(&self) -> String {
        self.description.clone()
    }
}

/// A fixed list of addresses: answered once, then kept (the stream never ends, so the
/// discovery goes on reconnecting what fails).
#[derive(Debug, Clone)]
pub struct Static {
    addresses: Vec<String>,
    told: bool,
}

impl Static {
    /// These addresses (`tcp://HOST:PORT` each).
    pub fn new<I, S>(addresses: I) -> Static
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Static {
            addresses: addresses.into_iter().map(Into::into).collect(),
            told: false,
        }
    }
}

impl Stream for Static {
    type Item = Result<Vec<String>, DiscoveryError>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.told {
            return Poll::Pending;
        }
        self.told = true;
        Poll::Ready(Some(Ok(self.addresses.clone())))
    }
}

impl Discover for Static {
    fn describe(&self) -> String {
        format!("{} listed addresses", self.addresses.len())
    }
}

/// How a node follows a source ([`Node::discover_with`](crate::Node::discover_with)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoverOptions {
    /// At most this many addresses of the source are connected at once (default 256):
    /// a name that answers 10,000 records joins a bounded set. Which ones is decided by
    /// a hash of the address seeded per node, so that many nodes spread over the set.
    pub max_peers: usize,
    /// How long a peer whose address disappeared may take to answer what is in flight to
    /// it (our requests, those a router forwards to it) before it is disconnected anyway
    /// (default 10 s).
    pub grace: Duration,
    /// How long one connect waits for its handshake (default: the node's handshake
    /// timeout).
    pub connect_timeout: Option<Duration>,
    /// How many connects run at once (default 64).
    pub connect_concurrency: usize,
    /// After a connect to an address failed, it is tried again after this, doubling up
    /// to 32 times this (default 500 ms).
    pub retry: Duration,
    /// The CURVE public key of the nodes the source lists: every connection it makes is
    /// encrypted and authenticated against it, as with
    /// [`ConnectOptions::server_key`](crate::ConnectOptions::server_key) (default: none,
    /// plaintext). The node needs a key pair of its own.
    pub server_key: Option<Key>,
}

impl Default for DiscoverOptions {
    fn default() -> DiscoverOptions {
        DiscoverOptions {
            max_peers: 256,
            grace: Duration::from_secs(10),
            connect_timeout: None,
            connect_concurrency: 64,
            retry: Duration::from_millis(500),
            server_key: None,
        }
    }
}

impl DiscoverOptions {
    /// The defaults.
    pub fn new() -> DiscoverOptions {
        DiscoverOptions::default()
    }

    /// At most `max` addresses connected at once.
    pub fn max_peers(mut self, max: usize) -> DiscoverOptions {
        self.max_peers = max;
        self
    }

    /// The longest a peer that disappeared keeps what is in flight to it.
    pub fn grace(mut self, grace: Duration) -> DiscoverOptions {
        self.grace = grace;
        self
    }

    /// How long one connect waits for its handshake.
    pub fn connect_timeout(mut self, timeout: Duration) -> DiscoverOptions {
        self.connect_timeout = Some(timeout);
        self
    }

    /// How many connects run at once.
    pub fn connect_concurrency(mut self, n: usize) -> DiscoverOptions {
        self.connect_concurrency = n.max(1);
        self
    }

    /// Connects to every listed address with CURVE, to a server with this public key.
    pub fn server_key(mut self, key: Key) -> DiscoverOptions {
        self.server_key = Some(key);
        self
    }

    /// The first wait before a failed address is tried again.
    pub fn retry(mut self, retry: Duration) -> DiscoverOptions {
        self.retry = retry;
        self
    }
}

/// What a discovery reports, in [`NodeEvent::Discovery`](crate::NodeEvent::Discovery).
/// Each names its source ([`Discover::describe`]). Counted in
/// [`Discovery::stats`] and, with metrics on, in `zeronode_discovery_total{kind}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryEvent {
    /// The set changed: these addresses appeared and disappeared (the appeared are being
    /// connected to, the disappeared let go).
    Changed {
        /// The source.
        source: String,
        /// New addresses (our own and those past the cap included).
        added: Vec<String>,
        /// Addresses gone.
        removed: Vec<String>,
        /// How many the source lists now.
        listed: usize,
    },
    /// The source answered with no address: nothing changes, the peers stay.
    Empty {
        /// The source.
        source: String,
    },
    /// The source failed: nothing changes, the peers stay.
    Failed {
        /// The source.
        source: String,
        /// Why.
        error: DiscoveryError,
    },
    /// The source lists more addresses than [`DiscoverOptions::max_peers`]: only that
    /// many are connected. Said once per change of the set.
    Capped {
        /// The source.
        source: String,
        /// How many it lists (our own excluded).
        listed: usize,
        /// How many are connected at most.
        cap: usize,
    },
}

impl DiscoveryEvent {
    /// A stable lower-case name (the metrics' `kind` label).
    pub fn as_str(&self) -> &'static str {
        match self {
            DiscoveryEvent::Changed { .. } => "changed",
            DiscoveryEvent::Empty { .. } => "empty",
            DiscoveryEvent::Failed { .. } => "failed",
            DiscoveryEvent::Capped { .. } => "capped",
        }
    }
}

/// The counters of one discovery ([`Discovery::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoveryStats {
    /// Answers the source gave (failures included).
    pub answers: u64,
    /// Answers that were failures.
    pub failures: u64,
    /// Answers with no address.
    pub empty: u64,
    /// Answers that changed the set.
    pub changes: u64,
    /// Times the cap bit.
    pub capped: u64,
    /// Connects started.
    pub connects: u64,
    /// Connects that failed (aliases of a joined node and our own address excluded).
    pub connect_failures: u64,
    /// Addresses let go.
    pub released: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) answers: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) empty: AtomicU64,
    pub(crate) changes: AtomicU64,
    pub(crate) capped: AtomicU64,
    pub(crate) connects: AtomicU64,
    pub(crate) connect_failures: AtomicU64,
    pub(crate) released: AtomicU64,
}

/// What the handle and the driver share.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) counters: Counters,
    /// The addresses joined through this source, with their peer.
    pub(crate) joined: Mutex<BTreeMap<String, NodeId>>,
    /// The last set the source listed.
    pub(crate) listed: Mutex<Vec<String>>,
}

/// A running discovery ([`Node::discover`](crate::Node::discover)): its counters and
/// state. Dropping it does not stop it (it runs as long as the node); [`stop`](Self::stop)
/// does, leaving the peers it joined connected.
#[derive(Clone)]
pub struct Discovery {
    pub(crate) shared: Arc<Shared>,
    pub(crate) task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Discovery {
    /// The counters so far.
    pub fn stats(&self) -> DiscoveryStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiscoveryStats {
            answers: get(&c.answers),
            failures: get(&c.failures),
            empty: get(&c.empty),
            changes: get(&c.changes),
            capped: get(&c.capped),
            connects: get(&c.connects),
            connect_failures: get(&c.connect_failures),
            released: get(&c.released),
        }
    }

    /// The addresses the source listed last (sorted).
    pub fn listed(&self) -> Vec<String> {
        self.shared.listed.lock().clone()
    }

    /// The addresses joined through this source now, with the id of each one's peer.
    pub fn joined(&self) -> BTreeMap<String, NodeId> {
        self.shared.joined.lock().clone()
    }

    /// Stops following the source; the peers it joined stay connected.
    pub fn stop(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// Makes a source for each node a builder builds.
pub(crate) type Starter = Arc<dyn Fn() -> (Box<dyn Discover>, DiscoverOptions) + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_static_list_answers_once_and_then_holds() {
        let mut list = Static::new(["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]);
        let first = list.next().await;
        assert_eq!(
            first,
            Some(Ok(vec![
                "tcp://127.0.0.1:1".into(),
                "tcp://127.0.0.1:2".into()
            ]))
        );
        let again = tokio::time::timeout(Duration::from_millis(50), list.next()).await;
        assert!(again.is_err(), "no second answer, and no end");
    }
}
