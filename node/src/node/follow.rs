//! Following a discovery source (`discover.rs`): one task per source applies each address
//! set to the node through `connect` and `disconnect`; `Node::discover` and
//! `NodeBuilder::discover` start it.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::discovery::discover::{
    Discover, DiscoverOptions, Discovery, DiscoveryError, DiscoveryEvent, Shared,
};
use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::node::inner::Inner;
use crate::node::upstream::ConnectOptions;
use crate::observation::events::NodeEvent;
use crate::observation::ratelimit::{RateLimit, Verdict};
use crate::Error;

impl crate::Node {
    /// Follows `source`: connects to every address it lists and lets go of those that
    /// disappear (see the [`discover`](crate::discovery::discover) module). Returns the running
    /// discovery's handle; it runs as long as the node.
    ///
    /// ```no_run
    /// # async fn demo() -> node::Result<()> {
    /// use node::discover::Dns;
    /// use node::Node;
    ///
    /// let gateway = Node::builder().id("gateway").build().await?;
    /// let workers = gateway.discover(Dns::new("workers.default.svc.cluster.local:5555"));
    /// // ... later: what it follows now
    /// println!("{:?}", workers.joined());
    /// # Ok(()) }
    /// ```
    pub fn discover(&self, source: impl Discover) -> Discovery {
        self.discover_with(source, DiscoverOptions::default())
    }

    /// [`discover`](Self::discover) with options: the cap on connections, the grace of
    /// an address that disappeared, the connects' timeout and concurrency.
    pub fn discover_with(&self, source: impl Discover, options: DiscoverOptions) -> Discovery {
        start(&self.inner, Box::new(source), options)
    }
}

impl crate::NodeBuilder {
    /// Follows `source` once the node is built (and bound, if it binds): see
    /// [`Node::discover`](crate::Node::discover). Each node this builder builds follows
    /// its own copy. May be given several times.
    pub fn discover<D>(self, source: D) -> Self
    where
        D: Discover + Clone + Sync,
    {
        self.discover_with(source, DiscoverOptions::default())
    }

    /// [`discover`](Self::discover) with options.
    pub fn discover_with<D>(mut self, source: D, options: DiscoverOptions) -> Self
    where
        D: Discover + Clone + Sync,
    {
        self.discover
            .push(Arc::new(move || (Box::new(source.clone()), options)));
        self
    }
}

/// Where one listed address is.
#[derive(Debug, Clone)]
enum Slot {
    /// Waiting for a connect slot, or for its retry time.
    Waiting {
        /// Not before then.
        after: Instant,
        /// Failed connects in a row.
        failures: u32,
    },
    /// A connect is under way (after `failures` failed ones).
    Connecting {
        /// Failed connects in a row before this one.
        failures: u32,
    },
    /// Joined, to this peer.
    Joined(NodeId),
    /// It leads to a node joined through another address: kept aside.
    Alias,
    /// Our own address.
    Own,
    /// Listed, but past the cap.
    Capped,
}

/// The task that follows one source.
struct Driver {
    inner: Weak<Inner>,
    source: Box<dyn Discover>,
    description: String,
    options: DiscoverOptions,
    shared: Arc<Shared>,
    /// Every listed address (and those being let go are not here).
    slots: HashMap<String, Slot>,
    /// The connects under way: each gives its address and outcome.
    connecting: JoinSet<(String, Result<NodeId, Error>)>,
    /// The addresses being let go.
    releasing: JoinSet<()>,
    /// Addresses waiting to connect, in order of preference.
    queue: Vec<String>,
    /// A peer of this source left since the last answer: aliases are tried again.
    lost: bool,
    /// How often a failure is logged.
    logs: RateLimit,
    /// Orders addresses for the cap (per node, so that nodes spread over a large set).
    hasher: foldhash::fast::FixedState,
}

impl Driver {
    async fn run(mut self, mut events: broadcast::Receiver<NodeEvent>) {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                answer = self.source.next() => match answer {
                    Some(answer) => self.answered(answer),
                    None => {
                        tracing::debug!(source = %self.description, "the discovery source ended");
                        return;
                    }
                },
                Some(done) = self.connecting.join_next(), if !self.connecting.is_empty() => {
                    if let Ok((address, outcome)) = done {
                        self.connected(address, outcome);
                    }
                }
                Some(_) = self.releasing.join_next(), if !self.releasing.is_empty() => {}
                event = events.recv() => match event {
                    Ok(NodeEvent::PeerLeft { id, direction: Direction::Upstream, reason }) => {
                        self.left(&id, reason);
                    }
                    Ok(NodeEvent::Stopped) | Err(broadcast::error::RecvError::Closed) => return,
                    _ => {}
                },
                _ = tick.tick() => {}
            }
            let Some(inner) = self.inner.upgrade() else {
                return;
            };
            if inner.life.is_stopping() {
                return;
            }
            self.connect_more(&inner);
        }
    }

    /// Counts an event, says it, and (rate-limited) logs failures.
    fn emit(&mut self, event: DiscoveryEvent) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if inner.observers.metrics.is_some() {
            metrics::counter!(
                "zeronode_discovery_total",
                "node" => inner.id.to_string(),
                "kind" => event.as_str()
            )
            .increment(1);
        }
        match &event {
            DiscoveryEvent::Changed { .. } => {
                tracing::debug!(node = %inner.id, ?event, "discovery")
            }
            _ => match self.logs.check(Instant::now()) {
                Verdict::Report(held) => {
                    let held = held.map(|h| h.to_string()).unwrap_or_default();
                    tracing::warn!(node = %inner.id, ?event, %held, "discovery");
                }
                Verdict::Suppress => {}
            },
        }
        inner.observers.emit(NodeEvent::Discovery(event));
    }

    /// The source answered.
    fn answered(&mut self, answer: Result<Vec<String>, DiscoveryError>) {
        let counters = &self.shared.counters;
        counters.answers.fetch_add(1, Ordering::Relaxed);
        let addresses = match answer {
            Err(error) => {
                counters.failures.fetch_add(1, Ordering::Relaxed);
                let source = self.description.clone();
                self.emit(DiscoveryEvent::Failed { source, error });
                return;
            }
            Ok(addresses) if addresses.is_empty() => {
                counters.empty.fetch_add(1, Ordering::Relaxed);
                let source = self.description.clone();
                self.emit(DiscoveryEvent::Empty { source });
                return;
            }
            Ok(addresses) => addresses,
        };
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let listed: BTreeSet<String> = addresses.into_iter().collect();
        let mut added = Vec::new();
        let mut removed = Vec::new();
        for address in &listed {
            if !self.slots.contains_key(address) {
                added.push(address.clone());
                let slot = if is_own(&inner, address) {
                    Slot::Own
                } else {
                    Slot::Waiting {
                        after: Instant::now(),
                        failures: 0,
                    }
                };
                self.slots.insert(address.clone(), slot);
            }
        }
        let gone: Vec<String> = self
            .slots
            .keys()
            .filter(|a| !listed.contains(*a))
            .cloned()
            .collect();
        for address in gone {
            if let Some(slot) = self.slots.remove(&address) {
                self.release(&inner, &address, slot);
            }
            removed.push(address);
        }
        if self.lost {
            // A peer of ours left: an address kept aside may lead to it now.
            self.lost = false;
            for slot in self.slots.values_mut() {
                if matches!(slot, Slot::Alias) {
                    *slot = Slot::Waiting {
                        after: Instant::now(),
                        failures: 0,
                    };
                }
            }
        }
        *self.shared.listed.lock() = listed.iter().cloned().collect();
        if !added.is_empty() || !removed.is_empty() {
            self.shared.counters.changes.fetch_add(1, Ordering::Relaxed);
            let source = self.description.clone();
            self.emit(DiscoveryEvent::Changed {
                source,
                added,
                removed,
                listed: listed.len(),
            });
            self.plan();
        }
    }

    /// Orders the addresses to connect, and applies the cap: the `max_peers` addresses
    /// with the lowest hash (seeded per node) are wanted, the others capped.
    fn plan(&mut self) {
        let mut candidates: Vec<(u64, String)> = self
            .slots
            .iter()
            .filter(|(_, slot)| !matches!(slot, Slot::Own))
            .map(|(address, _)| (self.hasher.hash_one(address), address.clone()))
            .collect();
        candidates.sort();
        let listed = candidates.len();
        let cap = self.options.max_peers;
        for (rank, (_, address)) in candidates.iter().enumerate() {
            let Some(slot) = self.slots.get_mut(address) else {
                continue;
            };
            if rank < cap {
                if matches!(slot, Slot::Capped) {
                    *slot = Slot::Waiting {
                        after: Instant::now(),
                        failures: 0,
                    };
                }
            } else if matches!(slot, Slot::Waiting { .. }) {
                // Past the cap and not joined: not connected. (A joined one keeps its
                // peer until its address goes; the set cannot grow past the cap by
                // much, since only the capped are swapped in.)
                *slot = Slot::Capped;
            }
        }
        self.queue = candidates.into_iter().map(|(_, a)| a).collect();
        if listed > cap {
            self.shared.counters.capped.fetch_add(1, Ordering::Relaxed);
            let source = self.description.clone();
            self.emit(DiscoveryEvent::Capped {
                source,
                listed,
                cap,
            });
        }
    }

    /// Starts connects for waiting addresses, within the cap and the concurrency.
    fn connect_more(&mut self, inner: &Arc<Inner>) {
        let now = Instant::now();
        let busy = self
            .slots
            .values()
            .filter(|s| matches!(s, Slot::Connecting { .. } | Slot::Joined(_)))
            .count();
        let mut room = self.options.max_peers.saturating_sub(busy);
        for address in &self.queue {
            if room == 0 || self.connecting.len() >= self.options.connect_concurrency {
                break;
            }
            let Some(slot) = self.slots.get_mut(address) else {
                continue;
            };
            let Slot::Waiting { after, failures } = *slot else {
                continue;
            };
            if after > now {
                continue;
            }
            *slot = Slot::Connecting { failures };
            self.shared
                .counters
                .connects
                .fetch_add(1, Ordering::Relaxed);
            room -= 1;
            let weak = Arc::downgrade(inner);
            let address = address.clone();
            let mut options = ConnectOptions::new();
            if let Some(timeout) = self.options.connect_timeout {
                options = options.timeout(timeout);
            }
            if let Some(key) = self.options.server_key {
                options = options.server_key(key);
            }
            self.connecting.spawn(async move {
                let outcome = match weak.upgrade() {
                    Some(inner) => inner.connect(&address, options).await.map(|p| p.id),
                    None => Err(Error::Closed),
                };
                (address, outcome)
            });
        }
    }

    /// A connect finished.
    fn connected(&mut self, address: String, outcome: Result<NodeId, Error>) {
        let Some(slot) = self.slots.get_mut(&address) else {
            // Let go while connecting: undo it.
            if let (Ok(id), Some(inner)) = (&outcome, self.inner.upgrade()) {
                // Not picked from now; what was picked meanwhile is answered first.
                inner.peer_draining(id, Direction::Upstream);
                let weak = self.inner.clone();
                let grace = self.options.grace;
                self.releasing.spawn(async move {
                    let _ = crate::node::upstream::let_go(&weak, &address, grace).await;
                });
            }
            return;
        };
        match outcome {
            Ok(id) => {
                *slot = Slot::Joined(id.clone());
                self.shared.joined.lock().insert(address, id);
            }
            // The node there refused a second connection from us: it is joined through
            // another address (its IPv4 and IPv6, two names of one host).
            Err(Error::DuplicateId { .. }) => *slot = Slot::Alias,
            Err(Error::Closed) => {}
            Err(error) => {
                self.shared
                    .counters
                    .connect_failures
                    .fetch_add(1, Ordering::Relaxed);
                let prior = match slot {
                    Slot::Connecting { failures } => *failures,
                    _ => 0,
                };
                // retry, 2 retry, 4 retry, ... up to 32 retry.
                let wait = self.options.retry.saturating_mul(1 << prior.min(5));
                *slot = Slot::Waiting {
                    after: Instant::now() + wait,
                    failures: prior.saturating_add(1),
                };
                if let Verdict::Report(_) = self.logs.check(Instant::now()) {
                    tracing::debug!(%address, %error, "a discovered address did not join");
                }
                // The set may have changed under us: ask again (the source bounds how
                // often).
                self.source.refresh();
            }
        }
    }

    /// A peer left: if it is one of ours, the source is asked again.
    fn left(&mut self, id: &NodeId, reason: LeaveReason) {
        let ours = self
            .slots
            .values()
            .any(|slot| matches!(slot, Slot::Joined(joined) if joined == id));
        if ours && reason != LeaveReason::Local {
            self.lost = true;
            self.source.refresh();
        }
    }

    /// Lets an address that disappeared go: its peer stops being picked now, and is
    /// disconnected once everything in flight to it is answered (our requests, those we
    /// forward to it as a router, streams open to it), or after the grace.
    fn release(&mut self, inner: &Arc<Inner>, address: &str, slot: Slot) {
        self.shared.joined.lock().remove(address);
        let id = match slot {
            Slot::Joined(id) => Some(id),
            // A connect under way is undone when it finishes (see `connected`).
            Slot::Connecting { .. } => return,
            Slot::Waiting { .. } | Slot::Alias | Slot::Own | Slot::Capped => return,
        };
        self.shared
            .counters
            .released
            .fetch_add(1, Ordering::Relaxed);
        if let Some(id) = &id {
            inner.peer_draining(id, Direction::Upstream);
        }
        let weak = Arc::downgrade(inner);
        let address = address.to_owned();
        let grace = self.options.grace;
        self.releasing.spawn(async move {
            let _ = crate::node::upstream::let_go(&weak, &address, grace).await;
        });
    }
}

/// Whether `address` is this node's own bound address: the same port, and the bound IP,
/// or (bound to every interface) an address of this host.
fn is_own(inner: &Inner, address: &str) -> bool {
    let Some(bound) = inner
        .links
        .server
        .lock()
        .as_ref()
        .map(|s| s.endpoint().to_owned())
    else {
        return false;
    };
    let (Some(theirs), Some(ours)) = (socket_address(address), socket_address(&bound)) else {
        return false;
    };
    if theirs.port() != ours.port() {
        return false;
    }
    if theirs.ip() == ours.ip() {
        return true;
    }
    ours.ip().is_unspecified() && is_local(theirs.ip())
}

/// `tcp://IP:PORT` as a socket address (`None` for a host name or another transport).
fn socket_address(endpoint: &str) -> Option<SocketAddr> {
    endpoint.strip_prefix("tcp://")?.parse().ok()
}

/// Whether `ip` is an address of this host: only those can be bound (no I/O beyond the
/// bind, which is released at once).
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Starts following `source` on the node.
pub(crate) fn start(
    inner: &Arc<Inner>,
    source: Box<dyn Discover>,
    options: DiscoverOptions,
) -> Discovery {
    let shared = Arc::new(Shared::default());
    let events = inner.observers.events.subscribe();
    inner.startup.discovering(source.describe(), &shared);
    let driver = Driver {
        inner: Arc::downgrade(inner),
        description: source.describe(),
        source,
        options,
        shared: Arc::clone(&shared),
        slots: HashMap::new(),
        connecting: JoinSet::new(),
        releasing: JoinSet::new(),
        queue: Vec::new(),
        lost: false,
        logs: RateLimit::new(5, Duration::from_secs(60)),
        hasher: foldhash::fast::FixedState::with_seed(rand::random()),
    };
    let task = tokio::spawn(driver.run(events));
    Discovery {
        shared,
        task: Arc::new(Mutex::new(Some(task))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tcp_ip_endpoints_are_socket_addresses() {
        assert_eq!(
            socket_address("tcp://[::1]:5555"),
            Some("[::1]:5555".parse().unwrap())
        );
        assert_eq!(socket_address("ipc:///tmp/x"), None);
    }

    #[test]
    fn only_addresses_of_this_host_are_local() {
        assert!(is_local("127.0.0.1".parse().unwrap()));
        // TEST-NET-3 (RFC 5737) is never assigned to a host.
        assert!(!is_local("203.0.113.9".parse().unwrap()));
    }
}
