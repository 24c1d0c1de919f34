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

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use hickory_resolver::config::{LookupIpStrategy, NameServerConfigGroup, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveError, TokioResolver};
use parking_lot::Mutex;
use std::future::Future;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

use transport::Key;

use crate::mesh::peer::NodeId;

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

/// The prefix of the SRV names a DNS source asks for a name without a port.
pub const SRV_PREFIX: &str = "_zeronode._tcp.";

/// One answer of a lookup: the addresses, and how long they hold.
type Answer = (Result<Vec<String>, DiscoveryError>, Duration);

/// A DNS name followed by its TTL: `NAME:PORT` resolves the A and AAAA records of NAME
/// (each address with PORT); `NAME` alone resolves the SRV records `_zeronode._tcp.NAME`
/// (each target's addresses with the record's port). The resolver is `hickory-resolver`
/// with the system's configuration (`/etc/resolv.conf`), or the name server given.
///
/// Resolved again when the shortest TTL of the answer runs out, clamped to
/// [`ttl_bounds`](Self::ttl_bounds) (default 1 s to 60 s: a TTL of 0 does not make a
/// busy loop, a TTL of a year does not freeze the set); after a failure, after the
/// minimum, doubling up to the maximum; on [`refresh`](Discover::refresh), at once but
/// never sooner than the minimum after the last resolution.
///
/// ```no_run
/// # async fn demo(node: node::Node) {
/// use node::discover::Dns;
///
/// let workers = node.discover(Dns::new("workers.default.svc.cluster.local:5555"));
/// # let _ = workers; }
/// ```
pub struct Dns {
    name: String,
    port: Option<u16>,
    name_server: Option<SocketAddr>,
    min_ttl: Duration,
    max_ttl: Duration,
    timeout: Duration,
    /// At most this many addresses of one answer are kept (the rest are dropped, so a
    /// name with a million records costs a bounded set).
    max_addresses: usize,
    running: Running,
}

/// The state of a running DNS source (not cloned).
#[derive(Default)]
struct Running {
    resolver: Option<TokioResolver>,
    /// When to resolve next; `None` before the first (at once).
    wake: Option<Pin<Box<Sleep>>>,
    /// The lookup under way, in a task of its own (so this source stays `Sync`).
    lookup: Option<JoinHandle<Answer>>,
    /// When the last lookup started (a refresh waits the minimum after it).
    last: Option<Instant>,
    /// Failed lookups in a row (the wait doubles).
    failures: u32,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(lookup) = self.lookup.take() {
            lookup.abort();
        }
    }
}

impl Clone for Dns {
    /// The same name and settings, not yet running.
    fn clone(&self) -> Dns {
        Dns {
            name: self.name.clone(),
            port: self.port,
            name_server: self.name_server,
            min_ttl: self.min_ttl,
            max_ttl: self.max_ttl,
            timeout: self.timeout,
            max_addresses: self.max_addresses,
            running: Running::default(),
        }
    }
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("name_server", &self.name_server)
            .field("ttl_bounds", &(self.min_ttl, self.max_ttl))
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// Follows `NAME:PORT` (A and AAAA records) or `NAME` (SRV records
    /// `_zeronode._tcp.NAME`). An invalid name is reported by the first answer, as
    /// [`DiscoveryError::InvalidName`].
    pub fn new(name: impl Into<String>) -> Dns {
        let given: String = name.into();
        let (name, port) = match given.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
                // A port that does not parse (too large) leaves the colon in the name,
                // which the resolver refuses: an `InvalidName` at the first answer.
                match port.parse::<u16>() {
                    Ok(port) => (host.to_owned(), Some(port)),
                    Err(_) => (given.clone(), None),
                }
            }
            _ => (given, None),
        };
        Dns {
            name,
            port,
            name_server: None,
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
            max_addresses: 4096,
            running: Running::default(),
        }
    }

    /// Asks this name server (UDP, and TCP for long answers) instead of the system's.
    pub fn name_server(mut self, address: SocketAddr) -> Dns {
        self.name_server = Some(address);
        self
    }

    /// The TTL of an answer is clamped to `min..=max` (default 1 s to 60 s); `min` is
    /// also the shortest time between two resolutions.
    pub fn ttl_bounds(mut self, min: Duration, max: Duration) -> Dns {
        self.min_ttl = min;
        self.max_ttl = max.max(min);
        self
    }

    /// How long one query waits for the name server (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Dns {
        self.timeout = timeout;
        self
    }

    /// Keeps at most this many addresses of one answer (default 4,096).
    pub fn max_addresses(mut self, max: usize) -> Dns {
        self.max_addresses = max;
        self
    }

    /// The resolver, made at the first lookup.
    fn resolver(&mut self) -> Result<TokioResolver, DiscoveryError> {
        if let Some(resolver) = &self.running.resolver {
            return Ok(resolver.clone());
        }
        let mut builder = match self.name_server {
            Some(server) => {
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, vec![], servers),
                    TokioConnectionProvider::default(),
                )
            }
            None => {
                TokioResolver::builder_tokio().map_err(|e| DiscoveryError::Config(e.to_string()))?
            }
        };
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // Answers of a few hundred records fit one UDP message with EDNS(0).
        options.edns0 = true;
        options.timeout = self.timeout;
        options.attempts = 1;
        // Our own timing decides when to ask again; a cache would only hide changes.
        options.cache_size = 0;
        let resolver = builder.build();
        self.running.resolver = Some(resolver.clone());
        Ok(resolver)
    }

    /// Starts a lookup in a task of its own.
    fn start(&mut self) {
        self.running.last = Some(Instant::now());
        let resolver = match self.resolver() {
            Ok(resolver) => resolver,
            Err(e) => {
                let min = self.min_ttl;
                self.running.lookup = Some(tokio::spawn(async move { (Err(e), min) }));
                return;
            }
        };
        let (name, port, max) = (self.name.clone(), self.port, self.max_addresses);
        let bounds = (self.min_ttl, self.max_ttl);
        self.running.lookup = Some(tokio::spawn(async move {
            let looked = match port {
                Some(port) => lookup_ip(&resolver, &name, port, max).await,
                None => lookup_srv(&resolver, &name, max).await,
            };
            match looked {
                Ok((addresses, ttl)) => (Ok(addresses), ttl.clamp(bounds.0, bounds.1)),
                Err(e) => (Err(e), bounds.0),
            }
        }));
    }
}

/// A resolver error as ours; "no such name" and "no records of this type" are an empty
/// answer (`None`). A server failure (SERVFAIL, REFUSED) is a failure, not an empty
/// answer: only a name server that says so empties the set.
fn resolve_error(name: &str, e: &ResolveError) -> Option<DiscoveryError> {
    use hickory_resolver::proto::op::ResponseCode;
    use hickory_resolver::proto::ProtoErrorKind;
    if let Some(proto) = e.proto() {
        match proto.kind() {
            ProtoErrorKind::NoRecordsFound { response_code, .. }
                if matches!(
                    *response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                ) =>
            {
                return None;
            }
            ProtoErrorKind::Timeout => {
                return Some(DiscoveryError::Timeout {
                    name: name.to_owned(),
                })
            }
            _ => {}
        }
    }
    Some(DiscoveryError::Resolve {
        name: name.to_owned(),
        reason: e.to_string(),
    })
}

/// `tcp://IP:PORT`, with brackets for IPv6.
fn endpoint(ip: IpAddr, port: u16) -> String {
    format!("tcp://{}", SocketAddr::new(ip, port))
}

/// The A and AAAA records of `name`, each with `port`; the shortest TTL. Asked apart,
/// so that a failure of one is a failure (not hidden behind the other's "no records").
async fn lookup_ip(
    resolver: &TokioResolver,
    name: &str,
    port: u16,
    max: usize,
) -> Result<(Vec<String>, Duration), DiscoveryError> {
    let (v4, v6) = tokio::join!(resolver.ipv4_lookup(name), resolver.ipv6_lookup(name));
    let mut set = BTreeSet::new();
    let mut ttl = u32::MAX;
    let mut take = |lookup: &hickory_resolver::lookup::Lookup| {
        for record in lookup.records() {
            ttl = ttl.min(record.ttl());
            let ip = match record.data() {
                hickory_resolver::proto::rr::RData::A(a) => IpAddr::V4(a.0),
                hickory_resolver::proto::rr::RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            if set.len() < max {
                set.insert(endpoint(ip, port));
            }
        }
    };
    for outcome in [
        v4.map(|l| l.as_lookup().clone()),
        v6.map(|l| l.as_lookup().clone()),
    ] {
        match outcome {
            Ok(lookup) => take(&lookup),
            Err(e) => {
                if let Some(e) = resolve_error(name, &e) {
                    return Err(e);
                }
            }
        }
    }
    let ttl = if ttl == u32::MAX { 0 } else { ttl };
    Ok((
        set.into_iter().collect(),
        Duration::from_secs(u64::from(ttl)),
    ))
}

/// The SRV records `_zeronode._tcp.NAME`, each target resolved; the shortest TTL.
async fn lookup_srv(
    resolver: &TokioResolver,
    name: &str,
    max: usize,
) -> Result<(Vec<String>, Duration), DiscoveryError> {
    let srv_name = format!("{SRV_PREFIX}{name}");
    let lookup = match resolver.srv_lookup(srv_name.as_str()).await {
        Ok(lookup) => lookup,
        Err(e) => {
            return match resolve_error(&srv_name, &e) {
                None => Ok((Vec::new(), Duration::ZERO)),
                Some(e) => Err(e),
            }
        }
    };
    let mut ttl = lookup
        .as_lookup()
        .records()
        .iter()
        .map(|r| r.ttl())
        .min()
        .unwrap_or(0);
    let targets: BTreeSet<(String, u16)> = lookup
        .iter()
        .map(|srv| (srv.target().to_ascii(), srv.port()))
        .take(max)
        .collect();
    let mut set = BTreeSet::new();
    for (target, port) in targets {
        if set.len() >= max {
            break;
        }
        match resolver.lookup_ip(target.as_str()).await {
            Ok(ips) => {
                for record in ips.as_lookup().records() {
                    ttl = ttl.min(record.ttl());
                }
                set.extend(ips.iter().map(|ip| endpoint(ip, port)));
            }
            // One target that does not resolve leaves the others.
            Err(e) => {
                if let Some(e) = resolve_error(&target, &e) {
                    tracing::debug!(%target, error = %e, "an SRV target did not resolve");
                }
            }
        }
    }
    Ok((
        set.into_iter().take(max).collect(),
        Duration::from_secs(u64::from(ttl)),
    ))
}

impl Stream for Dns {
    type Item = Result<Vec<String>, DiscoveryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(lookup) = this.running.lookup.as_mut() {
                let answered = match Pin::new(lookup).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(answered) => answered,
                };
                this.running.lookup = None;
                let (result, mut wait) = answered.unwrap_or_else(|e| {
                    (
                        Err(DiscoveryError::Resolve {
                            name: this.name.clone(),
                            reason: format!("the lookup task failed: {e}"),
                        }),
                        this.min_ttl,
                    )
                });
                if result.is_err() {
                    // min, 2 min, 4 min, ... up to the maximum.
                    let factor = 1u32 << this.running.failures.min(16);
                    wait = this.min_ttl.saturating_mul(factor).min(this.max_ttl);
                    this.running.failures = this.running.failures.saturating_add(1);
                } else {
                    this.running.failures = 0;
                }
                let at = Instant::now() + wait;
                match this.running.wake.as_mut() {
                    Some(sleep) => sleep.as_mut().reset(at),
                    None => this.running.wake = Some(Box::pin(tokio::time::sleep_until(at))),
                }
                return Poll::Ready(Some(result));
            }
            if let Some(sleep) = this.running.wake.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            this.start();
        }
    }
}

impl Discover for Dns {
    fn refresh(&mut self) {
        if self.running.lookup.is_some() {
            return;
        }
        let soonest = match self.running.last {
            Some(last) => (last + self.min_ttl).max(Instant::now()),
            None => Instant::now(),
        };
        if let Some(sleep) = self.running.wake.as_mut() {
            if sleep.deadline() > soonest {
                sleep.as_mut().reset(soonest);
            }
        }
    }

    fn describe(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.name),
            None => format!("{SRV_PREFIX}{}", self.name),
        }
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

    #[test]
    fn a_name_with_a_port_asks_for_addresses_and_one_without_for_srv() {
        let dns = Dns::new("workers.svc:5555");
        assert_eq!(dns.describe(), "workers.svc:5555");
        let dns = Dns::new("workers.svc");
        assert_eq!(dns.describe(), "_zeronode._tcp.workers.svc");
        // A port past u16 stays in the name (refused at the first answer).
        let dns = Dns::new("workers.svc:99999");
        assert_eq!(dns.port, None);
    }

    #[test]
    fn addresses_are_written_as_endpoints() {
        assert_eq!(
            endpoint("10.0.0.7".parse().unwrap(), 5555),
            "tcp://10.0.0.7:5555"
        );
        assert_eq!(endpoint("::1".parse().unwrap(), 5555), "tcp://[::1]:5555");
    }

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
