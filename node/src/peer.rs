//! The peer registry: who is joined, in which direction, with which options; and how `*_any`
//! picks one of them. Pure code: no I/O, no clock (time comes in as `now`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::filter::Filter;
use crate::options::Options;

/// A node's id: unique in a mesh; the handshake refuses duplicates.
///
/// Cheap to clone (a shared string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// An id from a string.
    pub fn new(id: impl AsRef<str>) -> NodeId {
        NodeId(Arc::from(id.as_ref()))
    }

    /// A readable id that does not collide in practice: `node-` and 12 random hex digits.
    pub fn generate() -> NodeId {
        let random = uuid::Uuid::new_v4().simple().to_string();
        NodeId::new(format!("node-{}", &random[..12]))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for NodeId {
    fn from(id: &str) -> NodeId {
        NodeId::new(id)
    }
}

impl From<String> for NodeId {
    fn from(id: String) -> NodeId {
        NodeId(Arc::from(id))
    }
}

impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NodeId, D::Error> {
        String::deserialize(d).map(NodeId::from)
    }
}

impl From<&NodeId> for NodeId {
    fn from(id: &NodeId) -> NodeId {
        id.clone()
    }
}

/// Which way a peer is joined to this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// This node connected to the peer (the peer is our server).
    Upstream,
    /// The peer connected to this node (we are its server).
    Downstream,
}

/// Which peers a `*_any` / `*_all` call may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Scope {
    /// Only upstream peers (the nodes we connected to).
    Up,
    /// Only downstream peers (the nodes connected to us).
    Down,
    /// Either.
    #[default]
    Both,
}

impl Scope {
    fn admits(self, direction: Direction) -> bool {
        matches!(
            (self, direction),
            (Scope::Both, _)
                | (Scope::Up, Direction::Upstream)
                | (Scope::Down, Direction::Downstream)
        )
    }
}

/// How `*_any` picks among matching peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Uniformly at random (the JavaScript zeronode's only strategy).
    #[default]
    Random,
    /// In turn, by id order.
    RoundRobin,
    /// The peer with the fewest of our requests in flight (ties: random).
    LeastInFlight,
}

/// What the registry knows about one joined peer, as a user sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerInfo {
    /// The peer's id.
    pub id: NodeId,
    /// How it is joined to us.
    pub direction: Direction,
    /// The options it advertised (kept current by its `set_options`).
    pub options: Options,
    /// Our requests to it still waiting for an answer.
    pub in_flight: usize,
    /// Whether it is a router node (it forwards messages for its peers).
    pub router: bool,
    /// Its CURVE public key, on a secured connection: the key libzmq authenticated (a
    /// downstream peer's client key, or the server key we connected with).
    pub key: Option<transport::Key>,
}

/// One joined peer in one direction. `L` is how to reach it (a client, or a routing id).
#[derive(Debug)]
pub(crate) struct Entry<L> {
    pub(crate) id: NodeId,
    pub(crate) direction: Direction,
    pub(crate) options: Options,
    /// The peer process's instance id: tells a restart (new instance) from a reconnect.
    pub(crate) instance: String,
    /// The ticket we issued to the peer when it joined us (downstream): what a later claim
    /// of its id on another connection must bring. `None` upstream.
    pub(crate) token: Option<String>,
    /// Whether the peer is a router node.
    pub(crate) router: bool,
    /// Its CURVE public key, on a secured connection.
    pub(crate) key: Option<transport::Key>,
    pub(crate) link: L,
    /// When we last heard from the peer; shared so the message path updates it without
    /// taking the registry lock.
    pub(crate) last_seen: Arc<Mutex<Instant>>,
    /// Silence after which this peer is dead: our own dead-peer timeout, or longer if the
    /// peer said in its handshake that it sends heartbeats less often than we do.
    pub(crate) dead_after: Duration,
    pub(crate) in_flight: Arc<AtomicUsize>,
    /// The handler work this node does for the peer: counted for the per-peer limit, and
    /// cancelled when the peer leaves.
    pub(crate) work: Arc<PeerWork>,
}

/// What a node runs for one peer: how many handler jobs (running or queued), whether
/// the peer left (its jobs stop: their answers could go nowhere), and the largest answer
/// it accepts.
#[derive(Debug)]
pub(crate) struct PeerWork {
    pub(crate) active: AtomicUsize,
    gone: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
    /// The largest payload the peer accepts (its handshake said): a larger answer is not
    /// sent (its socket would drop the connection for it) but refused with a typed error.
    /// Atomic: a new handshake on the same connection keeps the work and may change it.
    limit: AtomicUsize,
}

impl Default for PeerWork {
    /// No limit of its own (the receiving protocol still checks).
    fn default() -> PeerWork {
        PeerWork::new(usize::MAX)
    }
}

impl PeerWork {
    /// The work of a peer that accepts payloads up to `limit` bytes.
    pub(crate) fn new(limit: usize) -> PeerWork {
        PeerWork {
            active: AtomicUsize::new(0),
            gone: std::sync::atomic::AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
            limit: AtomicUsize::new(limit),
        }
    }

    /// The largest payload the peer accepts.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// The peer's new handshake said another limit.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// The peer left: every job of its stops.
    pub(crate) fn cancel(&self) {
        self.gone.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Resolves once the peer left.
    pub(crate) async fn gone(&self) {
        let notified = self.notify.notified();
        if !self.gone.load(Ordering::Acquire) {
            notified.await;
        }
    }
}

/// The peers joined to this node, keyed by (id, direction): a pair of nodes connected both
/// ways appears twice.
#[derive(Debug)]
pub(crate) struct Registry<L> {
    /// Ordered by id, then upstream before downstream: `matching` walks it in order, with
    /// no sorting and no map per call (it runs for every `*_any` message).
    entries: BTreeMap<(NodeId, Direction), Entry<L>>,
    round_robin: usize,
}

impl<L> Default for Registry<L> {
    fn default() -> Self {
        Registry {
            entries: BTreeMap::new(),
            round_robin: 0,
        }
    }
}

/// Why a handshake is refused by the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Another live instance already joined under this id.
    DuplicateId,
}

impl<L: Clone> Registry<L> {
    /// Admits a peer that completed its handshake. A new instance under an id that another
    /// instance holds (in either direction) is refused; the same instance re-joining (after
    /// a reconnect) replaces its entry. Returns the entry it replaced, if any.
    pub(crate) fn join(&mut self, entry: Entry<L>) -> Result<Option<Entry<L>>, Refusal> {
        for direction in [Direction::Upstream, Direction::Downstream] {
            if let Some(existing) = self.entries.get(&(entry.id.clone(), direction)) {
                if existing.instance != entry.instance {
                    return Err(Refusal::DuplicateId);
                }
            }
        }
        Ok(self
            .entries
            .insert((entry.id.clone(), entry.direction), entry))
    }

    /// Removes a peer (it left).
    pub(crate) fn leave(&mut self, id: &NodeId, direction: Direction) -> Option<Entry<L>> {
        self.entries.remove(&(id.clone(), direction))
    }

    /// The entry of a peer in a direction.
    pub(crate) fn get(&self, id: &NodeId, direction: Direction) -> Option<&Entry<L>> {
        self.entries.get(&(id.clone(), direction))
    }

    /// The link of a peer in a direction.
    pub(crate) fn get_link(&self, id: &NodeId, direction: Direction) -> Option<&L> {
        self.entries.get(&(id.clone(), direction)).map(|e| &e.link)
    }

    /// The link to `id`, preferring upstream (our own client) when joined both ways.
    pub(crate) fn route(&self, id: &NodeId) -> Option<(Direction, L, Arc<AtomicUsize>)> {
        [Direction::Upstream, Direction::Downstream]
            .into_iter()
            .find_map(|d| self.entries.get(&(id.clone(), d)))
            .map(|e| (e.direction, e.link.clone(), Arc::clone(&e.in_flight)))
    }

    /// Records traffic from a peer (for liveness).
    #[cfg(test)]
    pub(crate) fn seen(&self, id: &NodeId, direction: Direction, now: Instant) {
        self.seen_work(id, direction, now);
    }

    /// Records a sign of life of a peer at `at`, unless one is recorded later already.
    pub(crate) fn seen_at_least(&self, id: &NodeId, direction: Direction, at: Instant) {
        if let Some(entry) = self.entries.get(&(id.clone(), direction)) {
            let mut last = entry.last_seen.lock();
            if at > *last {
                *last = at;
            }
        }
    }

    /// Records traffic from a peer; the peer's work, if it is joined.
    pub(crate) fn seen_work(
        &self,
        id: &NodeId,
        direction: Direction,
        now: Instant,
    ) -> Option<Arc<PeerWork>> {
        let entry = self.entries.get(&(id.clone(), direction))?;
        *entry.last_seen.lock() = now;
        Some(Arc::clone(&entry.work))
    }

    /// Updates a peer's options (its `set_options` reached us).
    pub(crate) fn set_options(&mut self, id: &NodeId, direction: Direction, options: Options) {
        if let Some(entry) = self.entries.get_mut(&(id.clone(), direction)) {
            entry.options = options;
        }
    }

    /// Peers not heard from for longer than their `dead_after`: they are dead.
    pub(crate) fn silent(&self, now: Instant) -> Vec<(NodeId, Direction)> {
        self.entries
            .values()
            .filter(|e| now.saturating_duration_since(*e.last_seen.lock()) > e.dead_after)
            .map(|e| (e.id.clone(), e.direction))
            .collect()
    }

    /// Every entry matching the filter in the scope, one per node id (upstream preferred),
    /// sorted by id so that round-robin and tests are deterministic.
    pub(crate) fn matching(&self, filter: &Filter, scope: Scope) -> Vec<&Entry<L>> {
        let mut list: Vec<&Entry<L>> = Vec::new();
        for entry in self.entries.values() {
            if !scope.admits(entry.direction) || !filter.matches(&entry.options) {
                continue;
            }
            // The entries of one id are adjacent, upstream first: the first that matches
            // is the one to keep.
            if list.last().is_some_and(|last| last.id == entry.id) {
                continue;
            }
            list.push(entry);
        }
        list
    }

    /// Picks one matching peer by `strategy`. `random` is a number drawn by the caller (so
    /// this stays deterministic under test).
    pub(crate) fn pick(
        &mut self,
        filter: &Filter,
        scope: Scope,
        strategy: Strategy,
        random: usize,
    ) -> Option<(NodeId, Direction, L, Arc<AtomicUsize>)> {
        self.pick_except(filter, scope, strategy, random, |_| false)
    }

    /// [`pick`](Self::pick) among the peers that `exclude` does not rule out (a router does
    /// not send a message back where it came from).
    pub(crate) fn pick_except(
        &mut self,
        filter: &Filter,
        scope: Scope,
        strategy: Strategy,
        random: usize,
        exclude: impl Fn(&NodeId) -> bool,
    ) -> Option<(NodeId, Direction, L, Arc<AtomicUsize>)> {
        let turn = self.round_robin;
        let mut candidates = self.matching(filter, scope);
        candidates.retain(|e| !exclude(&e.id));
        if candidates.is_empty() {
            return None;
        }
        let index = match strategy {
            Strategy::Random => random % candidates.len(),
            Strategy::RoundRobin => turn % candidates.len(),
            Strategy::LeastInFlight => {
                let least = candidates
                    .iter()
                    .map(|e| e.in_flight.load(Ordering::Relaxed))
                    .min()
                    .unwrap_or(0);
                let tied: Vec<usize> = candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.in_flight.load(Ordering::Relaxed) == least)
                    .map(|(i, _)| i)
                    .collect();
                tied.get(random % tied.len().max(1)).copied().unwrap_or(0)
            }
        };
        let entry = candidates.get(index)?;
        let picked = (
            entry.id.clone(),
            entry.direction,
            entry.link.clone(),
            Arc::clone(&entry.in_flight),
        );
        if strategy == Strategy::RoundRobin {
            self.round_robin = self.round_robin.wrapping_add(1);
        }
        Some(picked)
    }

    /// Every joined peer, as users see them.
    pub(crate) fn infos(&self) -> Vec<PeerInfo> {
        // In the map's order: by id, upstream first.
        self.entries
            .values()
            .map(|e| PeerInfo {
                id: e.id.clone(),
                direction: e.direction,
                options: e.options.clone(),
                in_flight: e.in_flight.load(Ordering::Relaxed),
                router: e.router,
                key: e.key,
            })
            .collect()
    }

    /// Joined router peers, one per id (upstream preferred), sorted by id.
    pub(crate) fn routers(&self) -> Vec<(NodeId, L)> {
        self.matching(&Filter::any(), Scope::Both)
            .into_iter()
            .filter(|e| e.router)
            .map(|e| (e.id.clone(), e.link.clone()))
            .collect()
    }

    /// Every entry (for heartbeats and close).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Entry<L>> {
        self.entries.values()
    }

    /// Removes everything.
    pub(crate) fn drain(&mut self) -> Vec<Entry<L>> {
        std::mem::take(&mut self.entries).into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{options, Value};

    fn entry(
        id: &str,
        direction: Direction,
        instance: &str,
        role: &str,
        now: Instant,
    ) -> Entry<u32> {
        Entry {
            id: NodeId::from(id),
            direction,
            options: options([("role", Value::from(role))]),
            instance: instance.into(),
            router: false,
            key: None,
            link: 0,
            last_seen: Arc::new(Mutex::new(now)),
            dead_after: Duration::from_millis(300),
            in_flight: Arc::new(AtomicUsize::new(0)),
            work: Arc::default(),
            token: None,
        }
    }

    #[test]
    fn a_second_instance_under_a_used_id_is_refused() {
        let now = Instant::now();
        let mut registry = Registry::default();
        registry
            .join(entry("a", Direction::Downstream, "i1", "w", now))
            .unwrap();
        assert_eq!(
            registry
                .join(entry("a", Direction::Upstream, "i2", "w", now))
                .unwrap_err(),
            Refusal::DuplicateId
        );
        // The same instance re-joining (a reconnect) replaces its entry.
        assert!(registry
            .join(entry("a", Direction::Downstream, "i1", "w", now))
            .unwrap()
            .is_some());
        // And may join the other way too.
        assert!(registry
            .join(entry("a", Direction::Upstream, "i1", "w", now))
            .unwrap()
            .is_none());
    }

    #[test]
    fn scope_and_filter_select_peers() {
        let now = Instant::now();
        let mut registry = Registry::default();
        registry
            .join(entry("up-w", Direction::Upstream, "1", "worker", now))
            .unwrap();
        registry
            .join(entry("down-w", Direction::Downstream, "2", "worker", now))
            .unwrap();
        registry
            .join(entry("down-x", Direction::Downstream, "3", "other", now))
            .unwrap();
        let workers = Filter::new().eq("role", "worker");
        let ids = |scope| {
            registry
                .matching(&workers, scope)
                .iter()
                .map(|e| e.id.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(Scope::Both), ["down-w", "up-w"]);
        assert_eq!(ids(Scope::Up), ["up-w"]);
        assert_eq!(ids(Scope::Down), ["down-w"]);
    }

    #[test]
    fn round_robin_takes_turns() {
        let now = Instant::now();
        let mut registry = Registry::default();
        for id in ["a", "b", "c"] {
            registry
                .join(entry(id, Direction::Downstream, id, "w", now))
                .unwrap();
        }
        let picks: Vec<String> = (0..6)
            .map(|_| {
                registry
                    .pick(&Filter::any(), Scope::Both, Strategy::RoundRobin, 0)
                    .unwrap()
                    .0
                    .to_string()
            })
            .collect();
        assert_eq!(picks, ["a", "b", "c", "a", "b", "c"]);
    }

    #[test]
    fn least_in_flight_prefers_the_idle_peer() {
        let now = Instant::now();
        let mut registry = Registry::default();
        for id in ["a", "b", "c"] {
            registry
                .join(entry(id, Direction::Downstream, id, "w", now))
                .unwrap();
        }
        for (id, load) in [("a", 3), ("b", 0), ("c", 1)] {
            registry
                .get(&NodeId::from(id), Direction::Downstream)
                .unwrap()
                .in_flight
                .store(load, Ordering::Relaxed);
        }
        for random in 0..5 {
            let (id, ..) = registry
                .pick(&Filter::any(), Scope::Both, Strategy::LeastInFlight, random)
                .unwrap();
            assert_eq!(id.as_str(), "b");
        }
    }

    #[test]
    fn random_uses_the_drawn_number() {
        let now = Instant::now();
        let mut registry = Registry::default();
        for id in ["a", "b"] {
            registry
                .join(entry(id, Direction::Upstream, id, "w", now))
                .unwrap();
        }
        let pick = |registry: &mut Registry<u32>, r| {
            registry
                .pick(&Filter::any(), Scope::Both, Strategy::Random, r)
                .unwrap()
                .0
        };
        assert_eq!(pick(&mut registry, 0).as_str(), "a");
        assert_eq!(pick(&mut registry, 1).as_str(), "b");
        assert!(registry
            .pick(
                &Filter::new().eq("role", "none"),
                Scope::Both,
                Strategy::Random,
                0
            )
            .is_none());
    }

    #[test]
    fn silence_marks_peers_dead_with_simulated_time() {
        let t0 = Instant::now();
        let mut registry = Registry::default();
        registry
            .join(entry("a", Direction::Upstream, "1", "w", t0))
            .unwrap();
        registry
            .join(entry("b", Direction::Downstream, "2", "w", t0))
            .unwrap();
        let timeout = Duration::from_millis(300);
        registry.seen(
            &NodeId::from("b"),
            Direction::Downstream,
            t0 + Duration::from_millis(250),
        );
        assert!(registry.silent(t0 + timeout).is_empty());
        assert_eq!(
            registry.silent(t0 + Duration::from_millis(301)),
            vec![(NodeId::from("a"), Direction::Upstream)]
        );
    }

    #[test]
    fn a_peer_with_slower_heartbeats_gets_its_own_dead_timeout() {
        let t0 = Instant::now();
        let mut registry = Registry::default();
        let mut slow = entry("slow", Direction::Upstream, "1", "w", t0);
        slow.dead_after = Duration::from_secs(5);
        registry.join(slow).unwrap();
        registry
            .join(entry("fast", Direction::Upstream, "2", "w", t0))
            .unwrap();
        assert_eq!(
            registry.silent(t0 + Duration::from_secs(1)),
            vec![(NodeId::from("fast"), Direction::Upstream)]
        );
    }

    #[test]
    fn routing_by_id_prefers_upstream() {
        let now = Instant::now();
        let mut registry = Registry::default();
        let mut down = entry("a", Direction::Downstream, "1", "w", now);
        down.link = 2;
        let mut up = entry("a", Direction::Upstream, "1", "w", now);
        up.link = 1;
        registry.join(down).unwrap();
        assert_eq!(registry.route(&NodeId::from("a")).unwrap().1, 2);
        registry.join(up).unwrap();
        assert_eq!(registry.route(&NodeId::from("a")).unwrap().1, 1);
        assert!(registry.route(&NodeId::from("zzz")).is_none());
    }

    #[test]
    fn generated_ids_are_readable_and_distinct() {
        let a = NodeId::generate();
        let b = NodeId::generate();
        assert!(a.as_str().starts_with("node-"));
        assert_ne!(a, b);
    }
}
