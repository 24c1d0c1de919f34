//! The correlation table: requests waiting for their reply, and their deadlines.
//!
//! Pure code, no I/O and no clock: time comes in as an argument (`now`), so it is tested with
//! simulated time. All deadlines live in one ordered list; the driver sleeps until
//! [`Table::next_deadline`] with a single timer.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Instant;

/// Request ids are our own counter, not attacker-chosen keys, so they need no DoS-resistant
/// hash: one multiplication spreads sequential ids over the table.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<T> = HashMap<u64, T, BuildHasherDefault<IdHasher>>;

/// Stale deadlines tolerated before compacting, however few requests are in flight.
const COMPACT_AFTER: usize = 64;

/// The deadlines in order: `(deadline, id)` sorted ascending, in a ring buffer.
///
/// Requests usually share one timeout, so a new deadline is almost always the latest (an
/// O(1) push at the back) and replies come back roughly in the order the requests went out
/// (the entry removed is near the front, found by binary search, and removing it shifts the
/// few entries before it). Measured with callgrind against the `BTreeSet` this replaces
/// (two processes, 100 B, window 100): see the commit that introduced it.
///
/// A deadline is not removed when its request completes: it goes stale, and stale deadlines
/// are dropped when they reach the front (or all at once when they outnumber the live ones).
/// Removing each on completion (a binary search and a shift) cost about 200 instructions per
/// request (callgrind, protocol client, 100 B, window 100).
#[derive(Default)]
struct Deadlines {
    sorted: VecDeque<(Instant, u64)>,
}

impl Deadlines {
    fn insert(&mut self, key: (Instant, u64)) {
        match self.sorted.back() {
            Some(last) if *last > key => {
                let at = self.sorted.partition_point(|k| *k < key);
                self.sorted.insert(at, key);
            }
            _ => self.sorted.push_back(key),
        }
    }

    fn first(&self) -> Option<(Instant, u64)> {
        self.sorted.front().copied()
    }

    fn pop_first(&mut self) {
        self.sorted.pop_front();
    }

    fn clear(&mut self) {
        self.sorted.clear();
    }

    fn len(&self) -> usize {
        self.sorted.len()
    }

    fn retain(&mut self, keep: impl FnMut(&(Instant, u64)) -> bool) {
        self.sorted.retain(keep);
    }
}

/// Requests in flight, keyed by request id, each with a deadline and a value (the caller's
/// completion handle).
pub struct Table<T> {
    entries: IdMap<(Instant, T)>,
    /// Every pending entry's deadline, and stale ones of entries gone (see [`Deadlines`]).
    deadlines: Deadlines,
    /// About how many of `deadlines` are stale (exact after a compaction).
    stale: usize,
    /// Replies that matched no pending request: late (after their timeout) or unknown.
    unmatched: u64,
}

impl<T> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("pending", &self.entries.len())
            .field("unmatched", &self.unmatched)
            .finish()
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            entries: IdMap::default(),
            deadlines: Deadlines::default(),
            stale: 0,
            unmatched: 0,
        }
    }
}

impl<T> Table<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers request `id`, due by `deadline`. Returns the previous value if the id was
    /// already pending (a caller bug: ids are unique per sender).
    pub fn insert(&mut self, id: u64, deadline: Instant, value: T) -> Option<T> {
        let previous = self.entries.insert(id, (deadline, value));
        if previous.is_some() {
            self.went_stale();
        }
        self.deadlines.insert((deadline, id));
        previous.map(|(_, v)| v)
    }

    /// A reply arrived for `id`: removes and returns its entry. `None` (and the unmatched
    /// count goes up) for a reply that came after its timeout, or that was never asked for:
    /// such a reply is dropped, never handed to another request.
    pub fn complete(&mut self, id: u64) -> Option<T> {
        match self.entries.remove(&id) {
            Some((_, value)) => {
                self.went_stale();
                Some(value)
            }
            None => {
                self.unmatched += 1;
                None
            }
        }
    }

    /// Like [`complete`](Self::complete), but only if the entry's value passes `accept` (for
    /// example, the reply came from the peer the request went to); otherwise the entry stays
    /// and the reply counts as unmatched. One lookup instead of `get` then `complete`.
    pub fn complete_if(&mut self, id: u64, accept: impl FnOnce(&T) -> bool) -> Option<T> {
        match self.entries.entry(id) {
            std::collections::hash_map::Entry::Occupied(entry) if accept(&entry.get().1) => {
                let (_, value) = entry.remove();
                self.went_stale();
                Some(value)
            }
            _ => {
                self.unmatched += 1;
                None
            }
        }
    }

    /// The value pending under `id`, if any, to change it.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.entries.get_mut(&id).map(|(_, v)| v)
    }

    /// The value pending under `id`, if any.
    pub fn get(&self, id: u64) -> Option<&T> {
        self.entries.get(&id).map(|(_, v)| v)
    }

    /// Removes the entry of `id` without counting anything (the caller gave up).
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        let (_, value) = self.entries.remove(&id)?;
        self.went_stale();
        Some(value)
    }

    /// Removes and returns every entry whose deadline is at or before `now`, earliest first.
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, T)> {
        let mut expired = Vec::new();
        while let Some((deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if self.is_live(deadline, id) {
                if let Some((_, value)) = self.entries.remove(&id) {
                    expired.push((id, value));
                }
            } else {
                self.stale = self.stale.saturating_sub(1);
            }
        }
        expired
    }

    /// Removes and returns every entry whose value satisfies `pred` (for example, every
    /// request sent to a peer that left).
    pub fn remove_where(&mut self, mut pred: impl FnMut(&T) -> bool) -> Vec<(u64, T)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, (_, v))| pred(v))
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.cancel(id).map(|v| (id, v)))
            .collect()
    }

    /// Removes and returns everything (on close or connection loss).
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        self.deadlines.clear();
        self.stale = 0;
        self.entries.drain().map(|(id, (_, v))| (id, v)).collect()
    }

    /// The earliest deadline, for the driver's single timer.
    /// (Drops the stale deadlines in front of it on the way.)
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some((deadline, id)) = self.deadlines.first() {
            if self.is_live(deadline, id) {
                return Some(deadline);
            }
            self.deadlines.pop_first();
            self.stale = self.stale.saturating_sub(1);
        }
        None
    }

    /// Whether `(deadline, id)` is the deadline of a pending entry (not a stale one).
    fn is_live(&self, deadline: Instant, id: u64) -> bool {
        self.entries
            .get(&id)
            .is_some_and(|(due, _)| *due == deadline)
    }

    /// An entry left with its deadline still listed; when stale deadlines outnumber the
    /// pending entries (and a few), drop them all at once: each costs O(1) amortized, and
    /// the list stays within about twice the requests in flight.
    fn went_stale(&mut self) {
        self.stale += 1;
        if self.stale > COMPACT_AFTER && self.stale > self.entries.len() {
            let entries = &self.entries;
            self.deadlines
                .retain(|(deadline, id)| entries.get(id).is_some_and(|(due, _)| due == deadline));
            self.stale = self.deadlines.len() - self.entries.len().min(self.deadlines.len());
        }
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Replies dropped because they matched no pending request.
    pub fn unmatched(&self) -> u64 {
        self.unmatched
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_timeout_fires_at_its_deadline_not_before() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 100), "a");
        assert!(table.expire(at(t0, 99)).is_empty());
        assert_eq!(table.expire(at(t0, 100)), vec![(1, "a")]);
        assert!(table.is_empty());
    }

    #[test]
    fn deadlines_expire_in_order_and_the_timer_follows_the_earliest() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(3, at(t0, 300), "c");
        table.insert(1, at(t0, 100), "a");
        table.insert(2, at(t0, 200), "b");
        assert_eq!(table.next_deadline(), Some(at(t0, 100)));
        assert_eq!(table.expire(at(t0, 250)), vec![(1, "a"), (2, "b")]);
        assert_eq!(table.next_deadline(), Some(at(t0, 300)));
    }

    #[test]
    fn a_reply_after_its_timeout_is_dropped_and_counted() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 10), "first");
        table.insert(2, at(t0, 1000), "second");
        assert_eq!(table.expire(at(t0, 10)), vec![(1, "first")]);
        // The late reply to 1 must not reach request 2.
        assert_eq!(table.complete(1), None);
        assert_eq!(table.unmatched(), 1);
        assert_eq!(table.complete(2), Some("second"));
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn complete_if_leaves_a_rejected_entry_pending() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 10), "peer-a");
        assert_eq!(table.complete_if(1, |p| *p == "peer-b"), None);
        assert_eq!(table.unmatched(), 1);
        assert_eq!(table.complete_if(2, |_| true), None);
        assert_eq!(table.unmatched(), 2);
        assert_eq!(table.complete_if(1, |p| *p == "peer-a"), Some("peer-a"));
        assert!(table.is_empty());
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn deadlines_out_of_order_and_replies_out_of_order_keep_the_order() {
        let t0 = Instant::now();
        let mut table = Table::new();
        for (id, ms) in [(1, 50), (2, 10), (3, 30), (4, 30), (5, 70), (6, 20)] {
            table.insert(id, at(t0, ms), id);
        }
        assert_eq!(table.complete(3), Some(3));
        assert_eq!(table.complete(5), Some(5));
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(
            table.expire(at(t0, 100)),
            vec![(2, 2), (6, 6), (4, 4), (1, 1)]
        );
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn completing_removes_the_deadline() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 10), ());
        assert_eq!(table.complete(1), Some(()));
        assert!(table.expire(at(t0, 1000)).is_empty());
        assert_eq!(
            table.complete(1),
            None,
            "answered twice: second is unmatched"
        );
    }

    #[test]
    fn remove_where_and_drain() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 10), "peer-a");
        table.insert(2, at(t0, 10), "peer-b");
        table.insert(3, at(t0, 10), "peer-a");
        let mut gone = table.remove_where(|p| *p == "peer-a");
        gone.sort();
        assert_eq!(gone, vec![(1, "peer-a"), (3, "peer-a")]);
        assert_eq!(table.len(), 1);
        assert_eq!(table.drain(), vec![(2, "peer-b")]);
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn completed_deadlines_do_not_pile_up_behind_a_slow_request() {
        let t0 = Instant::now();
        let mut table = Table::new();
        // One request that stays pending, then many that complete at once.
        table.insert(0, at(t0, 10), ());
        for id in 1..100_000u64 {
            table.insert(id, at(t0, 20), ());
            assert_eq!(table.complete(id), Some(()));
        }
        assert_eq!(table.len(), 1);
        assert!(
            table.deadlines.len() <= 2 * COMPACT_AFTER + 2,
            "{} deadlines listed for 1 pending request",
            table.deadlines.len()
        );
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(table.expire(at(t0, 1000)), vec![(0, ())]);
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn reinserting_an_id_replaces_its_deadline() {
        let t0 = Instant::now();
        let mut table = Table::new();
        table.insert(1, at(t0, 10), "old");
        assert_eq!(table.insert(1, at(t0, 50), "new"), Some("old"));
        assert!(table.expire(at(t0, 20)).is_empty());
        assert_eq!(table.expire(at(t0, 50)), vec![(1, "new")]);
    }
}
