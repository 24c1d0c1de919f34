//! Fairness across peers for handler work: the decision for one more message, and the
//! work waiting for a handler slot kept in one FIFO lane per peer, the lanes served in turn
//! (what libzmq's fair queueing does for the messages of a socket's pipes).
//!
//! Pure: plain data, no I/O, no clock, no atomics. `runtime.rs` keeps the counts of taken
//! slots and calls these under its lock; the tests below drive them by hand.
//!
//! Why lanes and not one queue: with one FIFO queue, a peer that sends 50,000 requests to
//! a handler that takes ten minutes fills every slot and the queue, and another peer's quick
//! request waits behind all of it. With a lane per peer served in turn, a freed slot goes to
//! the next peer in line, whatever the length of the flooding peer's lane; with a per-peer
//! bound on slots and on places in line below the node-wide ones, the flooder is refused
//! once its own share is full while the others keep theirs.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// The bounds a message is admitted under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Messages of one peer waiting for a slot at once.
    pub(crate) queued_per_peer: usize,
    /// Messages waiting node-wide (zero: refuse at once when no slot is free,
    /// `BusyPolicy::Refuse`).
    pub(crate) queued: usize,
}

/// Which share was full when a message found no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The node's: every slot (or every place in line) is taken.
    Node,
    /// The sending peer's own: its slots or its places in line.
    Peer,
}

impl Full {
    /// The message of the `BUSY` refusal.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Full::Node => "the node's handlers are at their limit",
            Full::Peer => "this peer's share of the node's handlers is taken",
        }
    }
}

/// What to do with one more message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Slot<P> {
    /// Run now, holding this permit.
    Run(P),
    /// Wait in its peer's lane.
    Queue,
    /// Refuse it: this share is full.
    Refuse(Full),
}

/// The decision for a message that found a slot (`Ok`, taken) or not (`Err`: whose share
/// was full), with `queued` messages waiting node-wide and `peer_queued` of its own peer.
pub(crate) fn slot<P>(
    taken: Result<P, Full>,
    queued: usize,
    peer_queued: usize,
    bounds: &Bounds,
) -> Slot<P> {
    match taken {
        Ok(permit) => Slot::Run(permit),
        Err(full) if bounds.queued == 0 => Slot::Refuse(full),
        Err(_) if peer_queued >= bounds.queued_per_peer => Slot::Refuse(Full::Peer),
        Err(_) if queued >= bounds.queued => Slot::Refuse(Full::Node),
        Err(_) => Slot::Queue,
    }
}

/// Work waiting for a handler slot: a FIFO lane per peer (`K`), the lanes with work in
/// `turn`. A lane exists only while it holds work, so a peer that leaves (its waiters
/// removed) leaves nothing behind.
#[derive(Debug)]
pub(crate) struct Lanes<K, W> {
    /// Each waiter with the ticket that takes it out again.
    lanes: HashMap<K, VecDeque<(u64, W)>, foldhash::fast::RandomState>,
    /// The peers with work waiting, in the order they are served: each at most once.
    turn: VecDeque<K>,
    /// Waiters in every lane.
    len: usize,
    /// The next ticket.
    next: u64,
}

impl<K: Hash + Eq + Clone, W> Default for Lanes<K, W> {
    fn default() -> Self {
        Lanes {
            lanes: HashMap::default(),
            turn: VecDeque::new(),
            len: 0,
            next: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, W> Lanes<K, W> {
    /// Waiters in every lane.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Waiters in `peer`'s lane.
    pub(crate) fn len_of(&self, peer: &K) -> usize {
        self.lanes.get(peer).map_or(0, VecDeque::len)
    }

    /// Lanes with work (peers waiting).
    #[cfg(test)]
    pub(crate) fn lanes(&self) -> usize {
        self.lanes.len()
    }

    /// Puts `waiter` at the back of `peer`'s lane (a new lane goes to the end of the turn);
    /// its ticket, for [`remove`](Self::remove).
    pub(crate) fn push(&mut self, peer: K, waiter: W) -> u64 {
        let ticket = self.next;
        self.next = self.next.wrapping_add(1);
        let lane = self.lanes.entry(peer.clone()).or_default();
        if lane.is_empty() {
            self.turn.push_back(peer);
        }
        lane.push_back((ticket, waiter));
        self.len += 1;
        ticket
    }

    /// The first waiter of the next lane in turn for whose peer `take` takes a slot (false:
    /// the peer holds its share already, or the node is full); that lane goes to the back
    /// of the turn. Lanes passed over go to the back too, keeping their work. `None` when
    /// no lane's peer could take one.
    pub(crate) fn pop(&mut self, mut take: impl FnMut(&K) -> bool) -> Option<(K, W)> {
        for _ in 0..self.turn.len() {
            let peer = self.turn.pop_front()?;
            if !take(&peer) {
                self.turn.push_back(peer);
                continue;
            }
            let lane = self.lanes.get_mut(&peer)?;
            let (_, waiter) = lane.pop_front()?;
            self.len -= 1;
            if lane.is_empty() {
                self.lanes.remove(&peer);
            } else {
                self.turn.push_back(peer.clone());
            }
            return Some((peer, waiter));
        }
        None
    }

    /// Takes the waiter with `ticket` out of `peer`'s lane (it stopped waiting: its peer
    /// left, or its deadline passed); `None` when it is not there (it was served already).
    pub(crate) fn remove(&mut self, peer: &K, ticket: u64) -> Option<W> {
        let lane = self.lanes.get_mut(peer)?;
        // Usually near the front: waiters give up in about the order they came.
        let at = lane.iter().position(|(t, _)| *t == ticket)?;
        let (_, waiter) = lane.remove(at)?;
        self.len -= 1;
        if lane.is_empty() {
            self.lanes.remove(peer);
            self.turn.retain(|p| p != peer);
        }
        Some(waiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        queued_per_peer: 2,
        queued: 3,
    };

    #[test]
    fn a_slot_runs_and_none_queues_within_both_shares() {
        assert_eq!(slot(Ok(7), 99, 99, &BOUNDS), Slot::Run(7));
        assert_eq!(slot::<()>(Err(Full::Node), 0, 0, &BOUNDS), Slot::Queue);
        assert_eq!(slot::<()>(Err(Full::Peer), 2, 1, &BOUNDS), Slot::Queue);
    }

    #[test]
    fn a_full_share_refuses_and_says_whose() {
        // The peer's places in line are taken while the node still has some.
        assert_eq!(
            slot::<()>(Err(Full::Node), 2, 2, &BOUNDS),
            Slot::Refuse(Full::Peer)
        );
        // The node's line is full, the peer has places left.
        assert_eq!(
            slot::<()>(Err(Full::Peer), 3, 1, &BOUNDS),
            Slot::Refuse(Full::Node)
        );
        // Refusing at once: whose slots were full.
        let at_once = Bounds {
            queued: 0,
            ..BOUNDS
        };
        assert_eq!(
            slot::<()>(Err(Full::Peer), 0, 0, &at_once),
            Slot::Refuse(Full::Peer)
        );
        assert_eq!(
            slot::<()>(Err(Full::Node), 0, 0, &at_once),
            Slot::Refuse(Full::Node)
        );
        assert_ne!(Full::Node.message(), Full::Peer.message());
    }

    /// Pops every waiter, any peer taking a slot.
    fn drain(lanes: &mut Lanes<char, u32>) -> Vec<(char, u32)> {
        std::iter::from_fn(|| lanes.pop(|_| true)).collect()
    }

    #[test]
    fn lanes_are_served_in_turn_and_each_in_order() {
        let mut lanes = Lanes::default();
        for n in 1..=4 {
            lanes.push('a', n);
        }
        lanes.push('b', 1);
        lanes.push('c', 1);
        lanes.push('b', 2);
        assert_eq!((lanes.len(), lanes.lanes()), (7, 3));
        assert_eq!((lanes.len_of(&'a'), lanes.len_of(&'z')), (4, 0));
        // The flooding peer `a` came first, but b and c wait one turn, not four.
        assert_eq!(
            drain(&mut lanes),
            [
                ('a', 1),
                ('b', 1),
                ('c', 1),
                ('a', 2),
                ('b', 2),
                ('a', 3),
                ('a', 4)
            ]
        );
        assert_eq!((lanes.len(), lanes.lanes()), (0, 0));
        assert_eq!(lanes.pop(|_| true), None);
    }

    #[test]
    fn a_lane_whose_peer_holds_its_share_is_passed_over_and_keeps_its_work() {
        let mut lanes = Lanes::default();
        lanes.push('a', 1);
        lanes.push('a', 2);
        lanes.push('b', 1);
        // `a` is at its own bound: the slot goes to `b`, though `a` came first.
        assert_eq!(lanes.pop(|peer| *peer != 'a'), Some(('b', 1)));
        // Nobody can take one (the node is full): nothing is served, nothing is lost.
        assert_eq!(lanes.pop(|_| false), None);
        assert_eq!(lanes.len_of(&'a'), 2);
        assert_eq!(drain(&mut lanes), [('a', 1), ('a', 2)]);
    }

    #[test]
    fn a_waiter_that_gives_up_leaves_and_its_peers_lane_goes_when_empty() {
        let mut lanes = Lanes::default();
        let first = lanes.push('a', 1);
        let second = lanes.push('a', 2);
        let other = lanes.push('b', 1);
        assert_eq!(lanes.remove(&'a', second), Some(2));
        assert_eq!(lanes.remove(&'a', second), None, "taken out once");
        assert_eq!(lanes.remove(&'b', first), None, "a ticket is its peer's");
        // The peer leaves: its last waiter goes, and so do its lane and its turn.
        assert_eq!(lanes.remove(&'a', first), Some(1));
        assert_eq!((lanes.len(), lanes.lanes()), (1, 1));
        assert_eq!(drain(&mut lanes), [('b', 1)]);
        // Served already: nothing to take out.
        assert_eq!(lanes.remove(&'b', other), None);
        assert_eq!((lanes.len(), lanes.lanes(), lanes.turn.len()), (0, 0, 0));
    }

    /// A simulated node (no sockets, no clock): 4 slots, at most 2 for one peer, places in
    /// line 3 per peer and 6 in all. A flooding peer sends 100 jobs that never end; a quick
    /// peer sends one job after another, each ending before the next. The quick peer is
    /// always served, and the flooder refused beyond 2 running and 3 waiting.
    #[test]
    fn a_flooding_peer_is_held_to_its_share_and_a_quick_one_is_always_served() {
        const SLOTS: usize = 4;
        const PER_PEER: usize = 2;
        let bounds = Bounds {
            queued_per_peer: 3,
            queued: 6,
        };
        let mut running = std::collections::HashMap::<char, usize>::new();
        let mut lanes: Lanes<char, u32> = Lanes::default();
        let take = |running: &mut std::collections::HashMap<char, usize>, peer: char| {
            let all: usize = running.values().sum();
            let mine = running.entry(peer).or_default();
            if *mine >= PER_PEER {
                Err(Full::Peer)
            } else if all >= SLOTS {
                Err(Full::Node)
            } else {
                *mine += 1;
                Ok(())
            }
        };
        let admit = |running: &mut std::collections::HashMap<char, usize>,
                     lanes: &mut Lanes<char, u32>,
                     peer: char,
                     job: u32| {
            let taken = if lanes.len_of(&peer) == 0 {
                take(running, peer)
            } else {
                Err(Full::Peer)
            };
            let decision = slot(taken, lanes.len(), lanes.len_of(&peer), &bounds);
            if decision == Slot::Queue {
                lanes.push(peer, job);
            }
            decision
        };
        let mut refused = 0;
        for job in 0..100 {
            match admit(&mut running, &mut lanes, 'f', job) {
                Slot::Refuse(full) => {
                    assert_eq!(full, Full::Peer);
                    refused += 1;
                }
                Slot::Run(()) | Slot::Queue => {}
            }
        }
        assert_eq!((running[&'f'], lanes.len_of(&'f'), refused), (2, 3, 95));
        for job in 0..1000 {
            assert_eq!(admit(&mut running, &mut lanes, 'q', job), Slot::Run(()));
            // It ends: its slot is given back and offered to the lanes in turn; the flooder
            // holds its share, so nothing of its is served and the slot stays free.
            *running.entry('q').or_default() -= 1;
            assert_eq!(lanes.pop(|peer| take(&mut running, *peer).is_ok()), None);
        }
        assert_eq!(lanes.len_of(&'f'), 3, "the flooder's waiting work is kept");
    }
}
