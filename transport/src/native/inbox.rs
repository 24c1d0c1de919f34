//! The messages a native socket received, waiting for `recv`: a lane per connection, taken
//! in turn one message at a time (libzmq's fair queueing: a peer that floods the socket
//! cannot make another wait behind its backlog), each lane bounded by the receive
//! high-water mark (libzmq's is per pipe too).
//!
//! At its mark, a connection's driver stops reading (TCP then pushes back on that peer
//! alone) and waits to be woken by a receive that makes room in its lane.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::curve::Key;
use crate::error::{Error, Result};

/// One received message and where it came from.
#[derive(Debug)]
pub(super) struct Inbound {
    /// The connection's routing id (a Router's peer; empty on a Dealer).
    pub(super) peer: Bytes,
    /// The client's CURVE key, on a CURVE server.
    pub(super) key: Option<Key>,
    /// The frames.
    pub(super) frames: Vec<Bytes>,
}

/// One connection's messages.
#[derive(Debug, Default)]
struct Lane {
    items: VecDeque<Inbound>,
    /// Its driver, stopped at the mark.
    blocked: Option<Waker>,
    /// Whether its connection still runs (a closed lane is freed once emptied).
    open: bool,
}

#[derive(Debug, Default)]
struct State {
    lanes: Vec<Lane>,
    /// Lanes not in use, for the next connection.
    free: Vec<usize>,
    /// Lanes with messages, in the order they are served: one message, then the back.
    turn: VecDeque<usize>,
}

/// The queue of received messages.
#[derive(Debug)]
pub(super) struct Inbox {
    state: Mutex<State>,
    /// Wakes a receiver; a permit stored while nobody waits closes the race with one about
    /// to wait.
    arrived: Notify,
    /// The receive high-water mark of each lane, in messages.
    hwm: usize,
    closed: AtomicBool,
}

impl Inbox {
    pub(super) fn new(hwm: usize) -> Inbox {
        Inbox {
            state: Mutex::new(State::default()),
            arrived: Notify::new(),
            hwm: hwm.max(1),
            closed: AtomicBool::new(false),
        }
    }

    /// A lane for a new connection.
    pub(super) fn open_lane(&self) -> usize {
        let mut state = self.state.lock();
        let lane = match state.free.pop() {
            Some(lane) => lane,
            None => {
                state.lanes.push(Lane::default());
                state.lanes.len() - 1
            }
        };
        state.lanes[lane].open = true;
        lane
    }

    /// The connection of `lane` ended: what it received is still delivered, then the lane
    /// is reused.
    pub(super) fn close_lane(&self, lane: usize) {
        let mut state = self.state.lock();
        let Some(entry) = state.lanes.get_mut(lane) else {
            return;
        };
        entry.open = false;
        entry.blocked = None;
        if entry.items.is_empty() {
            state.free.push(lane);
        }
    }

    /// Whether the driver of `lane` may read more: `false` (and `waker` kept, to be woken
    /// when there is room) at the mark.
    pub(super) fn has_room(&self, lane: usize, waker: &Waker) -> bool {
        let mut state = self.state.lock();
        let Some(entry) = state.lanes.get_mut(lane) else {
            return true;
        };
        if entry.items.len() < self.hwm {
            return true;
        }
        if !entry.blocked.as_ref().is_some_and(|w| w.will_wake(waker)) {
            entry.blocked = Some(waker.clone());
        }
        false
    }

    /// Queues what the driver of `lane` read (and empties `batch`).
    pub(super) fn push(&self, lane: usize, batch: &mut Vec<Inbound>) {
        if batch.is_empty() {
            return;
        }
        if self.closed.load(Ordering::Acquire) {
            // The socket is closed: nobody will receive them.
            batch.clear();
            return;
        }
        {
            let mut state = self.state.lock();
            let Some(entry) = state.lanes.get_mut(lane) else {
                batch.clear();
                return;
            };
            let was_empty = entry.items.is_empty();
            entry.items.extend(batch.drain(..));
            if was_empty {
                state.turn.push_back(lane);
            }
        }
        self.arrived.notify_one();
    }

    /// Takes the next message, if one is there: the first lane in turn gives one and goes to
    /// the back.
    pub(super) fn try_pop(&self) -> Result<Option<Inbound>> {
        let mut state = self.state.lock();
        let Some(lane) = state.turn.pop_front() else {
            return if self.closed.load(Ordering::Acquire) {
                Err(Error::Closed)
            } else {
                Ok(None)
            };
        };
        let entry = &mut state.lanes[lane];
        let Some(item) = entry.items.pop_front() else {
            return Ok(None);
        };
        let left = entry.items.len();
        let wake = if left < self.hwm {
            entry.blocked.take()
        } else {
            None
        };
        let freed = left == 0 && !entry.open;
        if left > 0 {
            state.turn.push_back(lane);
        } else if freed {
            state.free.push(lane);
        }
        let more = !state.turn.is_empty();
        drop(state);
        if let Some(waker) = wake {
            waker.wake();
        }
        // More are there: pass the turn on, should another receiver be waiting.
        if more {
            self.arrived.notify_one();
        }
        Ok(Some(item))
    }

    /// Waits for the next message.
    pub(super) async fn pop(&self) -> Result<Inbound> {
        // A receiver that always finds a message never waits: the budget makes it yield
        // now and then, as every tokio resource does.
        tokio::task::coop::consume_budget().await;
        loop {
            if let Some(item) = self.try_pop()? {
                return Ok(item);
            }
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(item) = self.try_pop()? {
                return Ok(item);
            }
            notified.await;
        }
    }

    /// Fails every receive from now on (messages already there are dropped with the
    /// socket).
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let blocked: Vec<Waker> = {
            let mut state = self.state.lock();
            state.turn.clear();
            state
                .lanes
                .iter_mut()
                .filter_map(|lane| {
                    lane.items.clear();
                    lane.blocked.take()
                })
                .collect()
        };
        blocked.into_iter().for_each(Waker::wake);
        self.arrived.notify_waiters();
        self.arrived.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(peer: &'static [u8], n: u8) -> Inbound {
        Inbound {
            peer: Bytes::from_static(peer),
            key: None,
            frames: vec![Bytes::from(vec![n])],
        }
    }

    fn order(inbox: &Inbox) -> Vec<(&'static [u8], u8)> {
        std::iter::from_fn(|| inbox.try_pop().unwrap())
            .map(|m| {
                let peer: &'static [u8] = if m.peer.as_ref() == b"a" { b"a" } else { b"b" };
                (peer, m.frames[0][0])
            })
            .collect()
    }

    #[test]
    fn a_flooding_lane_does_not_make_another_wait_behind_it() {
        let inbox = Inbox::new(100);
        let a = inbox.open_lane();
        let b = inbox.open_lane();
        inbox.push(a, &mut (0..5).map(|n| message(b"a", n)).collect());
        inbox.push(b, &mut vec![message(b"b", 0), message(b"b", 1)]);
        // One from each in turn, then what is left of the flood.
        assert_eq!(
            order(&inbox),
            [
                (&b"a"[..], 0),
                (&b"b"[..], 0),
                (&b"a"[..], 1),
                (&b"b"[..], 1),
                (&b"a"[..], 2),
                (&b"a"[..], 3),
                (&b"a"[..], 4)
            ]
        );
    }

    #[test]
    fn the_mark_is_per_lane_and_a_closed_lane_is_drained_then_reused() {
        let inbox = Inbox::new(2);
        let waker = futures::task::noop_waker();
        let a = inbox.open_lane();
        let b = inbox.open_lane();
        inbox.push(a, &mut vec![message(b"a", 0), message(b"a", 1)]);
        assert!(!inbox.has_room(a, &waker), "a is at its mark");
        assert!(inbox.has_room(b, &waker), "b is not held back by a");
        inbox.close_lane(a);
        assert_eq!(order(&inbox).len(), 2, "a's messages are still delivered");
        assert_eq!(inbox.open_lane(), a, "then its lane is reused");
    }
}
