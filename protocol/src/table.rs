//! The correlation table: requests waiting for their reply, and their deadlines.
//!
//! Pure code, no I/O and no clock: time comes in as an argument (`now`), so it is tested with
//! simulated time. All deadlines live in one ordered list; the driver sleeps until
//! [`Table::next_deadline`] with a single timer.

use std::collections::VecDeque;
use std::time::Instant;

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

    fn len(&self) -> usize {
        self.sorted.len()
    }

    fn retain(&mut self, keep: impl FnMut(&(Instant, u64)) -> bool) {
        self.sorted.retain(keep);
    }
}

/// One request, pending or ended, or a free slot (`value` is `None`).
struct Slot<T> {
    /// The id the slot was last given (its index in the low bits, a sequence number above).
    id: u64,
    due: Instant,
    /// Ended (answered, timed out or failed) and waiting for its caller to take it: no
    /// longer matched by replies, deadlines or failures.
    ended: bool,
    value: Option<T>,
}

/// Requests, each with an id the table gives out, a deadline and a value (the caller's
/// completion handle): pending until a reply, its deadline or a failure ends it, then ended
/// until its caller takes it (the value carries the outcome meanwhile).
///
/// A slab, not a map: an id carries the index of its slot in its low bits (and a sequence
/// number above them, so that an id is not given out again for a long time), so a reply
/// finds its request without hashing. A late, repeated or forged id finds a free slot, an
/// ended one, or one whose id differs: unmatched. (A hash map keyed by id, and a second one
/// for the outcomes of ended requests, cost about 350 instructions per request more;
/// callgrind, protocol client, 1000 B, 100 in flight.)
pub struct Table<T> {
    slots: Vec<Slot<T>>,
    /// Indexes of free slots, the most recently freed last (reused first: warm in cache).
    free: Vec<u32>,
    /// Pending requests.
    pending: usize,
    /// The sequence number of the next id.
    sequence: u32,
    /// Every pending entry's deadline, and stale ones of entries since ended (see
    /// [`Deadlines`]).
    deadlines: Deadlines,
    /// About how many of `deadlines` are stale (exact after a compaction).
    stale: usize,
    /// Replies that matched no pending request: late (after their timeout) or unknown.
    unmatched: u64,
}

impl<T> std::fmt::Debug for Table<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("pending", &self.pending)
            .field("unmatched", &self.unmatched)
            .finish()
    }
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table::starting_at(0)
    }
}

/// The slot index an id names.
fn index_of(id: u64) -> usize {
    (id & u64::from(u32::MAX)) as usize
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
            pending: 0,
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
                    ended: false,
                    value: None,
                });
                self.slots.len() - 1
            }
        };
        // More than 2^32 requests at once would need more memory than any machine has: the
        // slab's growth fails first.
        let id = (u64::from(sequence) << SLOT_BITS) | index as u64;
        // Field by field: the value is moved once, not a whole new slot.
        let slot = &mut self.slots[index];
        slot.id = id;
        slot.due = deadline;
        slot.ended = false;
        slot.value = Some(value);
        self.pending += 1;
        self.deadlines.insert((deadline, id));
        id
    }

    /// The slot of request `id`, pending or ended.
    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot<T>> {
        let slot = self.slots.get_mut(index_of(id))?;
        (slot.id == id && slot.value.is_some()).then_some(slot)
    }

    /// The slot of request `id` if it is pending.
    fn pending_slot(&self, id: u64) -> Option<&Slot<T>> {
        let slot = self.slots.get(index_of(id))?;
        (slot.id == id && slot.value.is_some() && !slot.ended).then_some(slot)
    }

    /// Ends pending request `id` and returns its value. Its deadline goes stale, unless
    /// the caller just took it off the list (`listed` false).
    fn end(&mut self, id: u64, listed: bool) -> Option<&mut T> {
        let slot = self.slots.get_mut(index_of(id))?;
        if slot.id != id || slot.ended || slot.value.is_none() {
            return None;
        }
        slot.ended = true;
        self.pending -= 1;
        if listed {
            self.went_stale();
        }
        self.slots[index_of(id)].value.as_mut()
    }

    /// A reply arrived for `id`: ends the pending request and returns its value, for the
    /// outcome to be left in it. `None` (and the unmatched count goes up) for a reply that
    /// came after its request ended (timed out, answered already) or that was never asked
    /// for: such a reply is dropped, never handed to another request.
    pub fn complete(&mut self, id: u64) -> Option<&mut T> {
        self.complete_if(id, |_| true)
    }

    /// Like [`complete`](Self::complete), but only if the entry's value passes `accept` (for
    /// example, the reply came from the peer the request went to); otherwise the entry stays
    /// pending and the reply counts as unmatched.
    pub fn complete_if(&mut self, id: u64, accept: impl FnOnce(&T) -> bool) -> Option<&mut T> {
        let accepted = self
            .pending_slot(id)
            .and_then(|slot| slot.value.as_ref())
            .is_some_and(accept);
        if !accepted {
            self.unmatched += 1;
            return None;
        }
        self.end(id, true)
    }

    /// The value of request `id`, pending or ended, to change it.
    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slot_mut(id)?.value.as_mut()
    }

    /// The value of request `id`, pending or ended.
    pub fn get(&self, id: u64) -> Option<&T> {
        let slot = self.slots.get(index_of(id))?;
        if slot.id != id {
            return None;
        }
        slot.value.as_ref()
    }

    /// Whether request `id` is pending (not ended, not taken).
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending_slot(id).is_some()
    }

    /// Removes request `id`, pending or ended, and returns its value: its caller took the
    /// outcome, or gave up. The id matches nothing from now on.
    pub fn take(&mut self, id: u64) -> Option<T> {
        let value = self.slot_mut(id)?.value.take();
        self.freed(id);
        value
    }

    /// [`take`](Self::take) without moving the value out (dropped in place): for a large
    /// value whose caller took what it needed from it already. Whether it was there.
    pub fn discard(&mut self, id: u64) -> bool {
        let Some(slot) = self.slot_mut(id) else {
            return false;
        };
        slot.value = None;
        self.freed(id);
        true
    }

    /// Accounts for the slot of `id`, just emptied.
    fn freed(&mut self, id: u64) {
        let index = index_of(id);
        let was_pending = !std::mem::replace(&mut self.slots[index].ended, false);
        self.free.push(index as u32);
        if was_pending {
            self.pending -= 1;
            self.went_stale();
        }
    }

    /// Ends every pending request whose deadline is at or before `now`, earliest first,
    /// handing each to `ended`; returns how many.
    pub fn expire(&mut self, now: Instant, mut ended: impl FnMut(u64, &mut T)) -> usize {
        let mut count = 0;
        while let Some((deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            if self.is_live(deadline, id) {
                if let Some(value) = self.end(id, false) {
                    ended(id, value);
                    count += 1;
                }
            } else {
                self.stale = self.stale.saturating_sub(1);
            }
        }
        count
    }

    /// Ends every pending request whose value satisfies `pred` (for example, every request
    /// sent to a peer that left), handing each to `ended`; returns how many.
    pub fn end_where(
        &mut self,
        mut pred: impl FnMut(&T) -> bool,
        mut ended: impl FnMut(u64, &mut T),
    ) -> usize {
        let ids: Vec<u64> = self
            .slots
            .iter()
            .filter(|slot| !slot.ended && slot.value.as_ref().is_some_and(&mut pred))
            .map(|slot| slot.id)
            .collect();
        for &id in &ids {
            if let Some(value) = self.end(id, true) {
                ended(id, value);
            }
        }
        ids.len()
    }

    /// Ends every pending request (on close or connection loss), handing each to `ended`;
    /// returns how many.
    pub fn end_all(&mut self, ended: impl FnMut(u64, &mut T)) -> usize {
        self.end_where(|_| true, ended)
    }

    /// The earliest deadline of a pending request, for the driver's single timer.
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

    /// Whether `(deadline, id)` is the deadline of a pending request (not a stale one).
    fn is_live(&self, deadline: Instant, id: u64) -> bool {
        self.pending_slot(id)
            .is_some_and(|slot| slot.due == deadline)
    }

    /// A pending request ended with its deadline still listed; when stale deadlines
    /// outnumber the pending requests (and a few), drop them all at once: each costs O(1)
    /// amortized, and the list stays within about twice the requests pending.
    fn went_stale(&mut self) {
        self.stale += 1;
        if self.stale > COMPACT_AFTER && self.stale > self.pending {
            let slots = &self.slots;
            self.deadlines.retain(|(deadline, id)| {
                slots.get(index_of(*id)).is_some_and(|s| {
                    s.id == *id && s.value.is_some() && !s.ended && s.due == *deadline
                })
            });
            self.stale = self.deadlines.len() - self.pending.min(self.deadlines.len());
        }
    }

    /// Pending requests (ended ones waiting for their caller not counted).
    pub fn len(&self) -> usize {
        self.pending
    }

    /// Whether no request is pending.
    pub fn is_empty(&self) -> bool {
        self.pending == 0
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

    /// The requests `expire` ends at `now`, in order.
    fn expired<T: Clone>(table: &mut Table<T>, now: Instant) -> Vec<(u64, T)> {
        let mut ended = Vec::new();
        let count = table.expire(now, |id, value| ended.push((id, value.clone())));
        assert_eq!(count, ended.len());
        ended
    }

    #[test]
    fn a_timeout_fires_at_its_deadline_not_before() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let a = table.insert(at(t0, 100), "a");
        assert!(expired(&mut table, at(t0, 99)).is_empty());
        assert_eq!(expired(&mut table, at(t0, 100)), vec![(a, "a")]);
        assert!(table.is_empty());
        // Ended, not gone: its caller takes it.
        assert_eq!(table.get(a), Some(&"a"));
        assert_eq!(table.take(a), Some("a"));
        assert_eq!(table.get(a), None);
    }

    #[test]
    fn deadlines_expire_in_order_and_the_timer_follows_the_earliest() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let _c = table.insert(at(t0, 300), "c");
        let a = table.insert(at(t0, 100), "a");
        let b = table.insert(at(t0, 200), "b");
        assert_eq!(table.next_deadline(), Some(at(t0, 100)));
        assert_eq!(expired(&mut table, at(t0, 250)), vec![(a, "a"), (b, "b")]);
        assert_eq!(table.next_deadline(), Some(at(t0, 300)));
    }

    #[test]
    fn a_reply_after_its_timeout_is_dropped_and_counted() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let first = table.insert(at(t0, 10), "first");
        assert_eq!(expired(&mut table, at(t0, 10)), vec![(first, "first")]);
        // Timed out, not yet taken by its caller: the late reply does not match.
        assert_eq!(table.complete(first), None);
        assert_eq!(table.unmatched(), 1);
        assert_eq!(table.take(first), Some("first"));
        // The next request reuses the slot: the late reply must not reach it either.
        let second = table.insert(at(t0, 1000), "second");
        assert_ne!(first, second);
        assert_eq!(table.complete(first), None);
        assert_eq!(table.unmatched(), 2);
        assert_eq!(table.complete(second).copied(), Some("second"));
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn an_answered_request_waits_for_its_caller_and_is_not_answered_twice() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let id = table.insert(at(t0, 10), 0);
        *table.complete(id).expect("pending") = 42;
        assert!(table.is_empty(), "no longer pending");
        assert!(!table.is_pending(id));
        assert_eq!(table.complete(id), None, "a second answer is unmatched");
        assert_eq!(table.unmatched(), 1);
        assert!(
            expired(&mut table, at(t0, 1000)).is_empty(),
            "its deadline is gone"
        );
        assert_eq!(table.end_all(|_, _| {}), 0, "nothing pending to fail");
        assert_eq!(table.take(id), Some(42), "the outcome is still there");
        assert_eq!(table.take(id), None);
    }

    #[test]
    fn ids_are_not_given_out_again_while_their_slots_are_reused() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = table.insert(at(t0, 10), ());
            assert!(seen.insert(id), "id {id:#x} given out twice");
            assert!(table.complete(id).is_some());
            assert_eq!(table.take(id), Some(()));
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
            assert!(table.take(forged).is_none());
        }
        assert_eq!(table.unmatched(), 5);
        assert_eq!(table.complete(id).copied(), Some("a"));
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
        assert!(table.is_pending(id));
        assert_eq!(
            table.complete_if(id, |p| *p == "peer-a").copied(),
            Some("peer-a")
        );
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
        assert_eq!(table.complete(ids[2]).copied(), Some(2));
        assert_eq!(table.complete(ids[4]).copied(), Some(4));
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(
            expired(&mut table, at(t0, 100)),
            vec![(ids[1], 1), (ids[5], 5), (ids[3], 3), (ids[0], 0)]
        );
        assert_eq!(table.next_deadline(), None);
    }

    #[test]
    fn a_caller_that_gives_up_removes_its_request() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let id = table.insert(at(t0, 10), ());
        assert!(table.discard(id));
        assert!(!table.discard(id), "once");
        assert!(table.is_empty());
        assert!(expired(&mut table, at(t0, 1000)).is_empty());
        assert_eq!(table.complete(id), None, "a reply after that is unmatched");
    }

    #[test]
    fn end_where_and_end_all_fail_pending_requests_only() {
        let t0 = Instant::now();
        let mut table = Table::new();
        let one = table.insert(at(t0, 10), "peer-a");
        let two = table.insert(at(t0, 10), "peer-b");
        let three = table.insert(at(t0, 10), "peer-a");
        let answered = table.insert(at(t0, 10), "peer-a");
        assert!(table.complete(answered).is_some());
        let mut gone = Vec::new();
        let count = table.end_where(|p| *p == "peer-a", |id, _| gone.push(id));
        gone.sort();
        let mut expected = vec![one, three];
        expected.sort();
        assert_eq!(
            (count, gone),
            (2, expected),
            "the answered one is left alone"
        );
        assert_eq!(table.len(), 1);
        let mut rest = Vec::new();
        assert_eq!(table.end_all(|id, _| rest.push(id)), 1);
        assert_eq!(rest, vec![two]);
        assert_eq!(table.next_deadline(), None);
        assert!(table.is_empty());
        for id in [one, two, three, answered] {
            assert!(table.take(id).is_some(), "each caller takes its own");
        }
        // Usable again.
        let four = table.insert(at(t0, 10), "peer-c");
        assert_eq!(table.complete(four).copied(), Some("peer-c"));
    }

    #[test]
    fn completed_deadlines_do_not_pile_up_behind_a_slow_request() {
        let t0 = Instant::now();
        let mut table = Table::new();
        // One request that stays pending, then many that complete at once.
        let slow = table.insert(at(t0, 10), ());
        for _ in 1..100_000u64 {
            let id = table.insert(at(t0, 20), ());
            assert!(table.complete(id).is_some());
            assert_eq!(table.take(id), Some(()));
        }
        assert_eq!(table.len(), 1);
        assert!(
            table.deadlines.len() <= 2 * COMPACT_AFTER + 2,
            "{} deadlines listed for 1 pending request",
            table.deadlines.len()
        );
        assert_eq!(table.next_deadline(), Some(at(t0, 10)));
        assert_eq!(expired(&mut table, at(t0, 1000)), vec![(slow, ())]);
        assert_eq!(table.next_deadline(), None);
    }

    mod model {
        //! The table against a plain model (a map of id -> (deadline, value, ended)) under
        //! random operations, including ids nobody was given.
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        #[derive(Debug, Clone)]
        enum Op {
            Insert(u64),
            /// Complete the n-th id given so far (or a forged one when out of range).
            Complete(usize, bool),
            Take(usize),
            Expire(u64),
            EndOdd,
            EndAll,
            Forged(u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u64..100).prop_map(Op::Insert),
                3 => (0usize..64, any::<bool>()).prop_map(|(n, a)| Op::Complete(n, a)),
                2 => (0usize..64).prop_map(Op::Take),
                1 => (0u64..120).prop_map(Op::Expire),
                1 => Just(Op::EndOdd),
                1 => Just(Op::EndAll),
                1 => any::<u64>().prop_map(Op::Forged),
            ]
        }

        proptest! {
            #[test]
            fn the_table_behaves_as_its_model(ops in proptest::collection::vec(op(), 1..200)) {
                let t0 = Instant::now();
                let mut table = Table::starting_at(u32::MAX - 50);
                // id -> (deadline ms, value, ended)
                let mut model: BTreeMap<u64, (u64, u64, bool)> = BTreeMap::new();
                let mut given: Vec<u64> = Vec::new();
                let mut unmatched = 0u64;
                for op in ops {
                    match op {
                        Op::Insert(ms) => {
                            let value = given.len() as u64;
                            let id = table.insert(at(t0, ms), value);
                            prop_assert!(!given.contains(&id), "id given twice");
                            given.push(id);
                            model.insert(id, (ms, value, false));
                        }
                        Op::Complete(n, accept) => {
                            let id = given.get(n).copied().unwrap_or(u64::MAX);
                            let got = table.complete_if(id, |_| accept).map(|v| *v);
                            let expected = match model.get_mut(&id) {
                                Some((_, value, ended)) if !*ended && accept => {
                                    *ended = true;
                                    Some(*value)
                                }
                                _ => {
                                    unmatched += 1;
                                    None
                                }
                            };
                            prop_assert_eq!(got, expected);
                        }
                        Op::Take(n) => {
                            let id = given.get(n).copied().unwrap_or(u64::MAX);
                            let got = table.take(id);
                            prop_assert_eq!(got, model.remove(&id).map(|(_, v, _)| v));
                        }
                        Op::Expire(now) => {
                            let mut ended = Vec::new();
                            table.expire(at(t0, now), |id, v| ended.push((id, *v)));
                            let mut expected: Vec<(u64, u64, u64)> = model
                                .iter()
                                .filter(|(_, (ms, _, ended))| !*ended && *ms <= now)
                                .map(|(id, (ms, v, _))| (*ms, *id, *v))
                                .collect();
                            expected.sort();
                            for (_, id, _) in &expected {
                                if let Some(entry) = model.get_mut(id) {
                                    entry.2 = true;
                                }
                            }
                            let mut got_sorted = ended.clone();
                            got_sorted.sort();
                            let mut expected_pairs: Vec<(u64, u64)> =
                                expected.iter().map(|(_, id, v)| (*id, *v)).collect();
                            expected_pairs.sort();
                            prop_assert_eq!(got_sorted, expected_pairs);
                            // Earliest first.
                            let deadlines: Vec<u64> = ended
                                .iter()
                                .map(|(id, _)| model[id].0)
                                .collect();
                            prop_assert!(deadlines.windows(2).all(|w| w[0] <= w[1]));
                        }
                        Op::EndOdd => {
                            let mut ended = Vec::new();
                            let count = table.end_where(|v| v % 2 == 1, |id, _| ended.push(id));
                            let mut expected: Vec<u64> = model
                                .iter_mut()
                                .filter(|(_, (_, v, ended))| !*ended && v % 2 == 1)
                                .map(|(id, entry)| {
                                    entry.2 = true;
                                    *id
                                })
                                .collect();
                            ended.sort();
                            expected.sort();
                            prop_assert_eq!(count, expected.len());
                            prop_assert_eq!(ended, expected);
                        }
                        Op::EndAll => {
                            let count = table.end_all(|_, _| {});
                            let expected = model.values_mut().filter(|e| !e.2).map(|e| e.2 = true).count();
                            prop_assert_eq!(count, expected);
                        }
                        Op::Forged(id) => {
                            if !model.contains_key(&id) {
                                prop_assert!(table.get(id).is_none());
                                prop_assert_eq!(table.complete(id), None);
                                unmatched += 1;
                            }
                        }
                    }
                    let pending = model.values().filter(|e| !e.2).count();
                    prop_assert_eq!(table.len(), pending);
                    prop_assert_eq!(table.unmatched(), unmatched);
                    let next = model.values().filter(|e| !e.2).map(|e| e.0).min();
                    prop_assert_eq!(table.next_deadline(), next.map(|ms| at(t0, ms)));
                    for (id, (_, v, _)) in &model {
                        prop_assert_eq!(table.get(*id), Some(v));
                    }
                }
            }
        }
    }

    #[test]
    fn a_sequence_near_its_end_wraps_without_reusing_a_pending_id() {
        let t0 = Instant::now();
        let mut table = Table::starting_at(u32::MAX);
        let last = table.insert(at(t0, 10), "last");
        let wrapped = table.insert(at(t0, 10), "wrapped");
        assert_ne!(last, wrapped);
        assert_eq!(table.complete(last).copied(), Some("last"));
        assert_eq!(table.complete(wrapped).copied(), Some("wrapped"));
    }
}
