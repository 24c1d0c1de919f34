//! The peer registry: who is joined, in which direction, with which options; and how `*_any`
//! picks one of them. Pure code: no I/O, no clock (time comes in as `now`).
//!
//! Picking costs the same at 10 and at 1,000 peers: the peers matching a filter in a scope
//! are cached under the filter's canonical form ([`SelectionCache`]), and the cache is
//! dropped whenever the registry changes (a join, a leave, new options), so a pick is one
//! hash lookup and an index, not a filter run on every peer. Filters without a canonical
//! form (Rust predicates) are run on every peer each time, as before.

use std::collections::HashMap;

use indexmap::IndexMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::filter::{Filter, SelectionKey};
use crate::options::Options;

pub(crate) use crate::mesh::names::Ticket;
pub use crate::mesh::names::{Direction, LeaveReason, NodeId, PeerInfo, Scope, Strategy};

/// One joined peer in one direction. `L` is how to reach it (a client, or a routing id).
#[derive(Debug)]
pub(crate) struct Entry<L> {
    /// Who the peer is, how we reach it and our load on it: what a call takes of the entry.
    pub(crate) reach: Arc<Reach<L>>,
    pub(crate) options: Options,
    /// The peer process's instance id: tells a restart (new instance) from a reconnect.
    pub(crate) instance: String,
    /// The ticket we issued to the peer when it joined us (downstream): what a later claim
    /// of its id on another connection must bring. `None` upstream.
    pub(crate) token: Option<Ticket>,
    /// Whether the peer is a router node.
    pub(crate) router: bool,
    /// Its CURVE public key, on a secured connection.
    pub(crate) key: Option<transport::Key>,
    /// When we last heard from the peer; shared so the message path updates it without
    /// taking the registry lock.
    pub(crate) last_seen: Arc<Mutex<Instant>>,
    /// Silence after which this peer is dead: our own dead-peer timeout, or longer if the
    /// peer said in its handshake that it sends heartbeats less often than we do.
    pub(crate) dead_after: Duration,
    /// The handler work this node does for the peer: counted for the per-peer limit, and
    /// cancelled when the peer leaves.
    pub(crate) work: Arc<PeerWork>,
    /// The peer said it is stopping: still joined (its answers still come, a request by id
    /// still reaches it) but no longer picked by a filter.
    pub(crate) draining: bool,
}

impl<L> Entry<L> {
    /// The peer's id.
    pub(crate) fn id(&self) -> &NodeId {
        &self.reach.id
    }

    /// How the peer is joined to us.
    pub(crate) fn direction(&self) -> Direction {
        self.reach.direction
    }

    /// How to reach the peer.
    pub(crate) fn link(&self) -> &L {
        &self.reach.link
    }

    /// Requests this node has waiting on the peer (see [`Reach::in_flight`]).
    pub(crate) fn in_flight(&self) -> usize {
        self.reach.in_flight()
    }

    /// The entry as users see it.
    pub(crate) fn info(&self) -> PeerInfo {
        PeerInfo {
            id: self.id().clone(),
            direction: self.direction(),
            options: self.options.clone(),
            in_flight: self.in_flight(),
            router: self.router,
            key: self.key,
            draining: self.draining,
        }
    }
}

/// What a call needs of a joined peer, in one allocation: its id, its direction, its link
/// and our requests waiting for it. A pick or a route by id clones this one `Arc`, where
/// it cloned the id, the link and the counter, three shared counts on three lines of the
/// peer's, each cold when calls spread over many peers; and the counter a request keeps
/// up lies on the line of the count it already holds.
#[derive(Debug)]
pub(crate) struct Reach<L> {
    pub(crate) id: NodeId,
    pub(crate) direction: Direction,
    pub(crate) link: L,
    /// Requests this node has waiting on the peer: its own, those it forwards to it as a
    /// router, streams open to it. Each is counted from its pick, under the registry's
    /// lock, to its end: a let-go that marks the peer draining and then reads zero here
    /// (under the same lock) cuts nothing.
    in_flight: AtomicUsize,
}

impl<L> Reach<L> {
    /// How to reach `id`, joined in `direction`, through `link`; nothing in flight.
    pub(crate) fn new(id: NodeId, direction: Direction, link: L) -> Arc<Reach<L>> {
        Arc::new(Reach {
            id,
            direction,
            link,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Requests this node has waiting on the peer (see the field).
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// A request to the peer starts; it ends when the guard drops, however it ends. Taken
    /// while the registry's lock that picked the peer is still held (see `in_flight`).
    pub(crate) fn start_request(self: Arc<Self>) -> InFlight<L> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }
}

/// One request waiting on a peer (ours, or one we forward to it): counted in its
/// [`Reach`] while this lives.
#[derive(Debug)]
pub(crate) struct InFlight<L>(Arc<Reach<L>>);

/// Another request to the same peer: counted on its own (the original still counts, so
/// a clone made after the registry's lock was let go misses no let-go).
impl<L> Clone for InFlight<L> {
    fn clone(&self) -> InFlight<L> {
        Arc::clone(&self.0).start_request()
    }
}

impl<L> std::ops::Deref for InFlight<L> {
    type Target = Reach<L>;

    fn deref(&self) -> &Reach<L> {
        &self.0
    }
}

impl<L> Drop for InFlight<L> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a node runs for one peer: how many handler jobs (running, queued), whether
/// they must stop (the peer left, or our close grace ran out), and the largest answer it
/// accepts.
#[derive(Debug)]
pub(crate) struct PeerWork {
    /// Handler slots its jobs hold (`runtime.rs`: at most `max_handlers_per_peer`).
    pub(crate) running: AtomicUsize,
    /// Its jobs waiting in its lane (changed under the runtime's lanes' lock; read without
    /// it, so that a peer with nothing waiting takes no lock for a slot).
    pub(crate) queued: AtomicUsize,
    /// Cancelled when its jobs must stop: by [`cancel`](Self::cancel) (the peer left), or
    /// with the node's token, of which it is a child (the close grace ran out).
    stop: CancellationToken,
    /// Why, when this peer's work was stopped on its own (it left, or another connection
    /// took its id over); unset when only the node's token was cancelled (the close grace).
    /// Set before `stop` is cancelled, so a job woken by it reads it.
    why: std::sync::OnceLock<Stop>,
    /// The largest payload the peer accepts (its handshake said): a larger answer is not
    /// sent (its socket would drop the connection for it) but refused with a typed error.
    /// Atomic: a new handshake on the same connection keeps the work and may change it.
    limit: AtomicUsize,
}

/// Why a peer's handler jobs stop before they end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The peer left: an answer would go nowhere.
    Left,
    /// Our close grace ran out: the peer is still there and is told.
    Grace,
    /// Another connection joined with the peer's id: the old connection's answers would
    /// go to a connection its peer no longer reads.
    Replaced,
}

impl Default for PeerWork {
    /// No limit of its own (the receiving protocol still checks), under no node.
    fn default() -> PeerWork {
        PeerWork::new(usize::MAX, &CancellationToken::new())
    }
}

impl PeerWork {
    /// The work of a peer that accepts payloads up to `limit` bytes; it stops too when
    /// `node` (the node's close-grace token) is cancelled.
    pub(crate) fn new(limit: usize, node: &CancellationToken) -> PeerWork {
        PeerWork {
            running: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            stop: node.child_token(),
            why: std::sync::OnceLock::new(),
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
        self.stop_for(Stop::Left);
    }

    /// Every job of the peer stops for `why` (the first reason given stays).
    pub(crate) fn stop_for(&self, why: Stop) {
        let _ = self.why.set(why);
        self.stop.cancel();
    }

    /// Resolves once the peer's jobs must stop, with why.
    pub(crate) async fn gone(&self) -> Stop {
        self.stop.cancelled().await;
        // Cancelled with no reason of its own: through the node's token.
        self.why.get().copied().unwrap_or(Stop::Grace)
    }
}

/// The peers joined to this node, keyed by (id, direction): a pair of nodes connected both
/// ways appears twice.
#[derive(Debug)]
pub(crate) struct Registry<L> {
    /// Ordered by id, then upstream before downstream: `matching` walks it in order, with
    /// no sorting and no map per call. Hashed too: a lookup by id (every request to an id,
    /// every message's liveness) costs a probe, where a B-tree of 1,000 peers compared
    /// about fifteen ids on cold nodes (`Registry::route` took 180 ns more a call with
    /// calls spread over 1,000 peers than over 100, under `perf`). Kept sorted by
    /// inserting in place (O(n) a join or leave).
    entries: Entries<L>,
    round_robin: usize,
    /// Bumped by every change to who is joined or what they advertise: the selection cache
    /// holds the matches of one generation only.
    generation: u64,
    /// The matches of recent filters, so `pick` does not run the filter on every peer.
    selection: SelectionCache<L>,
}

/// The registry's entries: see [`Registry::entries`](Registry).
type Entries<L> = IndexMap<(NodeId, Direction), Entry<L>, foldhash::fast::RandomState>;

/// A key of the registry's entries by reference, to look one up without cloning the id:
/// a clone and its drop are two atomic writes to the id's shared count, a line of every
/// peer's made dirty by every lookup (a request's route, its reply's liveness). Hashes as
/// the tuple it stands for (the id, then the direction).
#[derive(Hash)]
struct Key<'a>(&'a NodeId, Direction);

impl indexmap::Equivalent<(NodeId, Direction)> for Key<'_> {
    fn equivalent(&self, key: &(NodeId, Direction)) -> bool {
        *self.0 == key.0 && self.1 == key.1
    }
}

impl<L> Default for Registry<L> {
    fn default() -> Self {
        Registry {
            entries: Entries::default(),
            round_robin: 0,
            generation: 0,
            selection: SelectionCache::default(),
        }
    }
}

/// The peers one (filter, scope) pair matches, in `matching` order; shared with the picks
/// that read it, so the cache can start over while a pick still holds its list.
type Candidates<L> = Arc<[Arc<Reach<L>>]>;

/// The matching peers of recent (filter, scope) pairs, for one registry generation.
///
/// Bounded: at [`SelectionCache::CAPACITY`] pairs it is cleared and refilled, which keeps
/// the common case (a few filters used over and over) at one lookup per call and an
/// application that builds a new filter per call from growing it without end.
#[derive(Debug)]
pub(crate) struct SelectionCache<L> {
    /// The registry generation the lists below were computed in.
    generation: u64,
    /// The candidates per pair, in `matching` order (by id, one per id, upstream first).
    lists: HashMap<(SelectionKey, Scope), Candidates<L>>,
}

impl<L> Default for SelectionCache<L> {
    fn default() -> Self {
        SelectionCache {
            generation: 0,
            lists: HashMap::new(),
        }
    }
}

impl<L> SelectionCache<L> {
    /// How many (filter, scope) pairs are kept before the cache starts over.
    const CAPACITY: usize = 64;

    /// The candidates under `key` and `scope` in `generation`, computed by `fill` when not
    /// cached (or cached in an older generation).
    fn get_or_fill(
        &mut self,
        generation: u64,
        key: SelectionKey,
        scope: Scope,
        fill: impl FnOnce() -> Vec<Arc<Reach<L>>>,
    ) -> Candidates<L> {
        if self.generation != generation {
            self.lists.clear();
            self.generation = generation;
        }
        let slot = (key, scope);
        if let Some(list) = self.lists.get(&slot) {
            return Arc::clone(list);
        }
        if self.lists.len() >= Self::CAPACITY {
            self.lists.clear();
        }
        let list: Candidates<L> = fill().into();
        self.lists.insert(slot, Arc::clone(&list));
        list
    }
}

/// Which of `len` candidates `strategy` picks: `in_flight(i)` reads candidate `i`'s load,
/// `random` is the caller's draw, `turn` the round-robin counter. `None` when `len` is 0.
fn choose(
    len: usize,
    in_flight: impl Fn(usize) -> usize,
    strategy: Strategy,
    random: usize,
    turn: usize,
) -> Option<usize> {
    if len == 0 {
        return None;
    }
    Some(match strategy {
        Strategy::Random => random % len,
        Strategy::RoundRobin => turn % len,
        Strategy::LeastInFlight => {
            let least = (0..len).map(&in_flight).min().unwrap_or(0);
            let tied: Vec<usize> = (0..len).filter(|&i| in_flight(i) == least).collect();
            tied.get(random % tied.len().max(1)).copied().unwrap_or(0)
        }
    })
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
            if let Some(existing) = self.entries.get(&Key(entry.id(), direction)) {
                if existing.instance != entry.instance {
                    return Err(Refusal::DuplicateId);
                }
            }
        }
        self.changed();
        Ok(self
            .entries
            .insert_sorted((entry.id().clone(), entry.direction()), entry)
            .1)
    }

    /// Removes a peer (it left).
    pub(crate) fn leave(&mut self, id: &NodeId, direction: Direction) -> Option<Entry<L>> {
        let left = self.entries.shift_remove(&Key(id, direction));
        if left.is_some() {
            self.changed();
        }
        left
    }

    /// Who is joined, or what they advertise, changed: cached selections are stale.
    ///
    /// They are dropped now rather than at the next pick, so the links they hold (a left
    /// peer's client) are not kept alive by the cache.
    fn changed(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.selection.lists.clear();
    }

    /// The entry of a peer in a direction.
    pub(crate) fn get(&self, id: &NodeId, direction: Direction) -> Option<&Entry<L>> {
        self.entries.get(&Key(id, direction))
    }

    /// The link of a peer in a direction.
    pub(crate) fn get_link(&self, id: &NodeId, direction: Direction) -> Option<&L> {
        self.entries.get(&Key(id, direction)).map(Entry::link)
    }

    /// How to reach `id`, preferring upstream (our own client) when joined both ways.
    pub(crate) fn route(&self, id: &NodeId) -> Option<Arc<Reach<L>>> {
        [Direction::Upstream, Direction::Downstream]
            .into_iter()
            .find_map(|d| self.entries.get(&Key(id, d)))
            .map(|e| Arc::clone(&e.reach))
    }

    /// A request to `id` through the route [`route`](Self::route) takes, counted from now
    /// (under the registry's lock, see [`Reach::in_flight`]); `None` when `id` is not
    /// joined or is being let go (draining: no longer picked).
    pub(crate) fn start_to(&self, id: &NodeId) -> Option<InFlight<L>> {
        [Direction::Upstream, Direction::Downstream]
            .into_iter()
            .find_map(|d| self.entries.get(&Key(id, d)))
            .filter(|e| !e.draining)
            .map(|e| Arc::clone(&e.reach).start_request())
    }

    /// Records traffic from a peer (for liveness).
    #[cfg(test)]
    pub(crate) fn seen(&self, id: &NodeId, direction: Direction, now: Instant) {
        self.seen_work(id, direction, now);
    }

    /// Records a sign of life of a peer at `at`, unless one is recorded later already.
    pub(crate) fn seen_at_least(&self, id: &NodeId, direction: Direction, at: Instant) {
        if let Some(entry) = self.entries.get(&Key(id, direction)) {
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
        let entry = self.entries.get(&Key(id, direction))?;
        *entry.last_seen.lock() = now;
        Some(Arc::clone(&entry.work))
    }

    /// Marks a peer as stopping (its `DRAINING` reached us): no longer picked by a filter.
    /// Whether it was joined and not marked already.
    pub(crate) fn set_draining(&mut self, id: &NodeId, direction: Direction) -> bool {
        match self.entries.get_mut(&Key(id, direction)) {
            Some(entry) if !entry.draining => {
                entry.draining = true;
                self.changed();
                true
            }
            _ => false,
        }
    }

    /// Updates a peer's options (its `set_options` reached us).
    pub(crate) fn set_options(&mut self, id: &NodeId, direction: Direction, options: Options) {
        if let Some(entry) = self.entries.get_mut(&Key(id, direction)) {
            entry.options = options;
            self.changed();
        }
    }

    /// Peers not heard from for longer than their `dead_after`: they are dead.
    pub(crate) fn silent(&self, now: Instant) -> Vec<(NodeId, Direction)> {
        self.entries
            .values()
            .filter(|e| now.saturating_duration_since(*e.last_seen.lock()) > e.dead_after)
            .map(|e| (e.id().clone(), e.direction()))
            .collect()
    }

    /// Every entry matching the filter in the scope, one per node id (upstream preferred),
    /// sorted by id so that round-robin and tests are deterministic.
    pub(crate) fn matching(&self, filter: &Filter, scope: Scope) -> Vec<&Entry<L>> {
        matching_in(&self.entries, filter, scope)
    }

    /// Picks one matching peer by `strategy`. `random` is a number drawn by the caller (so
    /// this stays deterministic under test).
    pub(crate) fn pick(
        &mut self,
        filter: &Filter,
        scope: Scope,
        strategy: Strategy,
        random: usize,
    ) -> Option<Arc<Reach<L>>> {
        match filter.selection_key() {
            Some(key) => self.pick_cached(key, filter, scope, strategy, random),
            None => self.pick_except(filter, scope, strategy, random, |_| false),
        }
    }

    /// [`pick`](Self::pick) among the peers that `exclude` does not rule out (a router does
    /// not send a message back where it came from).
    ///
    /// A filter with a canonical form is looked up in the selection cache (filled by one
    /// walk per registry generation); one with a predicate walks the registry.
    pub(crate) fn pick_except(
        &mut self,
        filter: &Filter,
        scope: Scope,
        strategy: Strategy,
        random: usize,
        exclude: impl Fn(&NodeId) -> bool,
    ) -> Option<Arc<Reach<L>>> {
        let turn = self.round_robin;
        let picked = match filter.selection_key() {
            Some(key) => {
                let candidates = self.candidates(key, filter, scope);
                let kept: Vec<&Arc<Reach<L>>> =
                    candidates.iter().filter(|c| !exclude(&c.id)).collect();
                let load = |i: usize| kept[i].in_flight();
                Arc::clone(kept.get(choose(kept.len(), load, strategy, random, turn)?)?)
            }
            None => {
                let mut kept = self.matching(filter, scope);
                kept.retain(|e| !exclude(e.id()));
                let load = |i: usize| kept[i].in_flight();
                let e = kept.get(choose(kept.len(), load, strategy, random, turn)?)?;
                Arc::clone(&e.reach)
            }
        };
        if strategy == Strategy::RoundRobin {
            self.round_robin = self.round_robin.wrapping_add(1);
        }
        Some(picked)
    }

    /// Picks one matching peer as [`pick`](Self::pick) does, from the selection cache
    /// without walking the candidates when nothing is excluded: the `*_any` path.
    fn pick_cached(
        &mut self,
        key: SelectionKey,
        filter: &Filter,
        scope: Scope,
        strategy: Strategy,
        random: usize,
    ) -> Option<Arc<Reach<L>>> {
        let candidates = self.candidates(key, filter, scope);
        let load = |i: usize| candidates[i].in_flight();
        let index = choose(candidates.len(), load, strategy, random, self.round_robin)?;
        let picked = Arc::clone(candidates.get(index)?);
        if strategy == Strategy::RoundRobin {
            self.round_robin = self.round_robin.wrapping_add(1);
        }
        Some(picked)
    }

    /// The peers matching `filter` in `scope`, from the cache under `key` (its canonical
    /// form) or computed now by one walk and cached for this generation.
    fn candidates(&mut self, key: SelectionKey, filter: &Filter, scope: Scope) -> Candidates<L> {
        let Registry {
            entries,
            generation,
            selection,
            ..
        } = self;
        selection.get_or_fill(*generation, key, scope, || {
            matching_in(entries, filter, scope)
                .into_iter()
                .map(|e| Arc::clone(&e.reach))
                .collect()
        })
    }

    /// Every joined peer, as users see them.
    pub(crate) fn infos(&self) -> Vec<PeerInfo> {
        // In the map's order: by id, upstream first.
        self.entries.values().map(Entry::info).collect()
    }

    /// Joined router peers, one per id (upstream preferred), sorted by id.
    pub(crate) fn routers(&self) -> Vec<(NodeId, L)> {
        self.matching(&Filter::any(), Scope::Both)
            .into_iter()
            .filter(|e| e.router)
            .map(|e| (e.id().clone(), e.link().clone()))
            .collect()
    }

    /// Every entry (for heartbeats and close).
    pub(crate) fn all(&self) -> impl Iterator<Item = &Entry<L>> {
        self.entries.values()
    }

    /// Removes everything.
    pub(crate) fn drain(&mut self) -> Vec<Entry<L>> {
        self.changed();
        std::mem::take(&mut self.entries).into_values().collect()
    }
}

/// Every entry matching the filter in the scope, one per node id (upstream preferred), in
/// id order: [`Registry::matching`], on the entries alone so the cache can fill from it
/// while holding the rest of the registry mutably.
fn matching_in<'a, L>(entries: &'a Entries<L>, filter: &Filter, scope: Scope) -> Vec<&'a Entry<L>> {
    let mut list: Vec<&Entry<L>> = Vec::new();
    for entry in entries.values() {
        if entry.draining || !scope.admits(entry.direction()) || !filter.matches(&entry.options) {
            continue;
        }
        // The entries of one id are adjacent, upstream first: the first that matches
        // is the one to keep.
        if list.last().is_some_and(|last| last.id() == entry.id()) {
            continue;
        }
        list.push(entry);
    }
    list
}

#[cfg(test)]
mod tests;
