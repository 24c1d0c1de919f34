//! The correlation table: requests waiting for their reply, and their deadlines.
//!
//! Pure code, no I/O and no clock: time comes in as an argument (`now`), so it is tested with
//! simulated time. All deadlines live in one ordered list; the driver sleeps until
//! [`Table::next_deadline`] with a single timer.

use std::collections::VecDeque;
use std::hash::Hasher;
use std::time::Instant;

/// Request ids are our own counter, not attacker-chosen keys, so they need no DoS-resistant
/// hash: one multiplication spreads sequential ids over a table (the conversation's map of
/// ended requests uses it).
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

/// The low bits of a request id: the index of its slot.
const SLOT_BITS: u32 = 32;

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

/// One request in flight, or a free slot (`value` is `None`).
struct Slot<T> {
    /// The id the slot was last given (its index in the low bits, a sequence number above).
    id: u64,
    due: Instant,
    value: Option<T>,
}

/// Requests in flight, each with an id the table gives out, a deadline and a value (the
/// caller's completion handle).
///
/// A slab, not a map: an id carries the index of its slot in its low bits (and a sequence
/// number above them, so that an id is not given out again for a long time), so a reply
/// finds its request without hashing. A late, repeated or forged id finds a free slot, or
/// one whose id differs: unmatched. (A hash map keyed by id cost about 250 instructions per
/// request more for the insertion and removal; callgrind, protocol client, 1000 B, 100 in
/// flight.)
pub struct Table<T> {
    slots: Vec<Slot<T>>,
    /// Indexes of free slots, the most recently freed last (reused first: warm in cache).
    free: Vec<u32>,
    /// Requests in flight.
    len: usize,
    /// The sequence number of the next id.
    sequence: u32,
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
            .field("pending", &self.len)
            .field("unmatched", &self.unmatched)
            .finish()
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table::starting_at(0)
    }
}

impl<T> Table<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose first id has sequence number `sequence` (a random start makes
    /// a reply meant for an earlier process with the same address unlikely to match).
    pub fn starting_at(sequence: u32) -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            sequence,
            deadlines: Deadlines::default(),
            stale: 0,
            unmatched: 0,
        }
    }

    /// Registers a request due by `deadline` and returns its id.
    pub fn insert(&mut self, deadline: Instant, value: T) -> u64 {
        let sequence = self.sequence;
        self.sequence = self.sequence.wrapping_add(1);
        let index = match self.free.pop() {
            Some(index) => index as usize,
            None => {
                self.slots.push(Slot {
                    id: 0,
                    due: deadline,
                    value: None,
                });
                self.slots.len() - 1
            }
        };
        // More than 2^32 requests in flight would need more memory than any machine has:
        // the slab's growth fails first.
        let id = (u64::from(sequence) << SLOT_BITS) | index as u64;
        self.slots[index] = Slot {
            id,
            due: deadline,
            value: Some(value),
        };
        self.len += 1;
        self.deadlines.insert((deadline, id));
        id
    }

    /// The slot of pending request `id`, if it is pending.
    fn slot(&self, id: u64) -> Option<&Slot<T>> {
        let slot = self.slots.get((id & u64::from(u32::MAX)) as usize)?;
        (slot.id == id && slot.value.is_some()).then_some(slot)
    }

    /// Frees the slot of pending request `id` and returns its value; its deadline stays
    /// listed, stale.
    fn remove(&mut self, id: u64) -> Option<T> {
        let value = self.take(id)?;
        self.went_stale();
        Some(value)
    }

    /// Frees the slot of pending request `id` and returns its value (the caller accounts
    /// for its deadline).
    fn take(&mut self, id: u64) -> Option<T> {
        let index = (id & u64::from(u32::MAX)) as usize;
        let slot = self.slots.get_mut(index)?;
        if slot.id != id {
            return None;
        }
        let value = slot.value.take()?;
        self.free.push(index as u32);
        self.len -= 1;
        Some(value)
    }

    /// A reply arrived for `id`: removes and returns its entry. `None` (and the unmatched
    /// count goes up) for a reply that came after its timeout, or that was never asked for:
    /// such a reply is dropped, never handed to another request.
    pub fn complete(&mut self, id: u64) -> Option<T> {
        self.complete_if(id, |_| true)
    }

    /// Like [`complete`](Self::complete), but only if the entry's value passes `accept` (for
    /// example, the reply came from the peer the request went to); otherwise the entry stays
    /// and the reply counts as unmatched.
    pub fn complete_if(&mut self, id: u64, accept: impl FnOnce(&T) -> bool) -> Option<T> {
        let accepted = self
            .slot(id)
            .and_then(|slot| slot.value.as_ref())
            .is_some_and(accept);
        if !accepted {
            self.unmatched += 1;
            return None;
        }
        self.remove(id)
    }

    /// The value pending under `id`, if any, to change it.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let slot = self.slots.get_mut((id & u64::from(u32::MAX)) as usize)?;
        if slot.id != id {
            return None;
        }
        slot.value.as_mut()
    }

    /// The value pending under `id`, if any.
    pub fn get(&self, id: u64) -> Option<&T> {
        self.slot(id).and_then(|slot| slot.value.as_ref())
    }

    /// Removes the entry of `id` without counting anything (the caller gave up).
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        self.remove(id)
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
                // Its deadline is the one just taken off the list: nothing goes stale.
                if let Some(value) = self.take(id) {
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
            .slots
            .iter()
            .filter(|slot| slot.value.as_ref().is_some_and(&mut pred))
            .map(|slot| slot.id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|v| (id, v)))
            .collect()
    }

    /// Removes and returns everything (on close or connection loss).
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        self.deadlines.clear();
        self.stale = 0;
        self.len = 0;
        self.free.clear();
        std::mem::take(&mut self.slots)
            .into_iter()
            .filter_map(|slot| slot.value.map(|value| (slot.id, value)))
            .collect()
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
        self.slot(id).is_some_and(|slot| slot.due == deadline)
    }

    /// An entry left with its deadline still listed; when stale deadlines outnumber the
    /// pending entries (and a few), drop them all at once: each costs O(1) amortized, and
    /// the list stays within about twice the requests in flight.
    fn went_stale(&mut self) {
        self.stale += 1;
        if self.stale > COMPACT_AFTER && self.stale > self.len {
            let slots = &self.slots;
            self.deadlines.retain(|(deadline, id)| {
                slots
                    .get((id & u64::from(u32::MAX)) as usize)
                    .is_some_and(|s| s.id == *id && s.value.is_some() && s.due == *deadline)
            });
            self.stale = self.deadlines.len() - self.len.min(self.deadlines.len());
        }
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        let a = table.insert(at(t0, 100), "a");
        assert!(table.expire(at(t0, 99)).is_empty());
        assert_eq!(table.expire(at(t0, 100)), vec![(a, "a")]);
        assert!(table.is_empty());
    }

    #[test]
    fn deadlines_expire_in_order_and_the_timer_follows_the_earliest() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let _c = table.insert(at(t0, 300), "c");
        let a = table.insert(at(t0, 100), "a");
        let b = table.insert(at(t0, 200), "b");
        assert_eq!(table.next_deadline(), Some(at(t0, 100)));
        assert_eq!(table.expire(at(t0, 250)), vec![(a, "a"), (b, "b")]);
        assert_eq!(table.next_deadline(), Some(at(t0, 300)));
    }

    #[test]
    fn a_reply_after_its_timeout_is_dropped_and_counted() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let first = table.insert(at(t0, 10), "first");
        assert_eq!(table.expire(at(t0, 10)), vec![(first, "first")]);
        // The next request reuses the slot: the late reply to the first must not reach it.
        let second = table.insert(at(t0, 1000), "second");
        assert_ne!(first, second);
        assert_eq!(table.complete(first), None);
        assert_eq!(table.unmatched(), 1);
        assert_eq!(table.complete(second), Some("second"));
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn ids_are_not_given_out_again_while_their_slots_are_reused() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = table.insert(at(t0, 10), ());
            assert!(seen.insert(id), "id {id:#x} given out twice");
            assert_eq!(table.complete(id), Some(()));
        }
        assert_eq!(table.slots.len(), 1, "one slot, reused");
    }

    #[test]
    fn ids_nobody_was_given_match_nothing_and_do_not_panic() {
        let t0 = Instant::now();
        let mut table = Table::starting_at(7);
        let id = table.insert(at(t0, 10), "a");
        for forged in [0, u64::MAX, id ^ (1 << 40), id + 1, (id & 0xffff_ffff) + 7] {
            assert_eq!(table.complete(forged), None, "{forged:#x}");
            assert!(table.get(forged).is_none());
            assert!(table.get_mut(forged).is_none());
            assert!(table.cancel(forged).is_none());
        }
        assert_eq!(table.unmatched(), 5);
        assert_eq!(table.complete(id), Some("a"));
    }

    #[test]
    fn complete_if_leaves_a_rejected_entry_pending() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let id = table.insert(at(t0, 10), "peer-a");
        assert_eq!(table.complete_if(id, |p| *p == "peer-b"), None);
        assert_eq!(table.unmatched(), 1);
        assert_eq!(table.complete_if(id + 1, |_| true), None);
        assert_eq!(table.unmatched(), 2);
        assert_eq!(table.complete_if(id, |p| *p == "peer-a"), Some("peer-a"));
        assert!(table.is_empty());
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn deadlines_out_of_order_and_replies_out_of_order_keep_the_order() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let ids: Vec<u64> = [50, 10, 30, 30, 70, 20]
            .into_iter()
            .enumerate()
            .map(|(n, ms)| table.insert(at(t0, ms), n))
            .collect();
        assert_eq!(table.complete(ids[2]), Some(2));
        assert_eq!(table.complete(ids[4]), Some(4));
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(
            table.expire(at(t0, 100)),
            vec![(ids[1], 1), (ids[5], 5), (ids[3], 3), (ids[0], 0)]
        );
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn completing_removes_the_deadline() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let id = table.insert(at(t0, 10), ());
        assert_eq!(table.complete(id), Some(()));
        assert!(table.expire(at(t0, 1000)).is_empty());
        assert_eq!(
            table.complete(id),
            None,
            "answered twice: second is unmatched"
        );
    }

    #[test]
    fn remove_where_and_drain() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let one = table.insert(at(t0, 10), "peer-a");
        let two = table.insert(at(t0, 10), "peer-b");
        let three = table.insert(at(t0, 10), "peer-a");
        let mut gone = table.remove_where(|p| *p == "peer-a");
        gone.sort();
        let mut expected = vec![(one, "peer-a"), (three, "peer-a")];
        expected.sort();
        assert_eq!(gone, expected);
        assert_eq!(table.len(), 1);
        assert_eq!(table.drain(), vec![(two, "peer-b")]);
        assert_eq!(table.next_deadline(), None);
        assert!(table.is_empty());
        // Usable again after a drain.
        let four = table.insert(at(t0, 10), "peer-c");
        assert_eq!(table.complete(four), Some("peer-c"));
    }

    #[test]
    fn completed_deadlines_do_not_pile_up_behind_a_slow_request() {
        let t0 = Instant::now();
        let mut table = Table::new();
        // One request that stays pending, then many that complete at once.
        let slow = table.insert(at(t0, 10), ());
        for _ in 1..100_000u64 {
            let id = table.insert(at(t0, 20), ());
            assert_eq!(table.complete(id), Some(()));
        }
        assert_eq!(table.len(), 1);
        assert!(
            table.deadlines.len() <= 2 * COMPACT_AFTER + 2,
            "{} deadlines listed for 1 pending request",
            table.deadlines.len()
        );
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(table.expire(at(t0, 1000)), vec![(slow, ())]);
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn a_sequence_near_its_end_wraps_without_reusing_a_pending_id() {
        let t0 = Instant::now();
        let mut table = Table::starting_at(u32::MAX);
        let last = table.insert(at(t0, 10), "last");
        let wrapped = table.insert(at(t0, 10), "wrapped");
        assert_ne!(last, wrapped);
        assert_eq!(table.complete(last), Some("last"));
        assert_eq!(table.complete(wrapped), Some("wrapped"));
    }
}
