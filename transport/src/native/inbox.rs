//! The messages a native socket received, waiting for `recv`: one queue for all the
//! socket's connections, bounded by the receive high-water mark.
//!
//! At the mark, connection drivers stop reading (TCP then pushes back on the peer, as
//! libzmq's pipes do) and wait to be woken by a receive that makes room.

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

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Inbound>,
    /// Drivers that stopped reading at the mark.
    blocked: Vec<Waker>,
}

/// The queue of received messages.
#[derive(Debug)]
pub(super) struct Inbox {
    state: Mutex<State>,
    /// Wakes a receiver; a permit stored while nobody waits closes the race with one about
    /// to wait.
    arrived: Notify,
    /// The receive high-water mark, in messages.
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

    /// Whether a driver may read more: `false` (and `waker` kept, to be woken when there is
    /// room) at the mark.
    pub(super) fn has_room(&self, waker: &Waker) -> bool {
        let mut state = self.state.lock();
        if state.items.len() < self.hwm {
            return true;
        }
        if !state.blocked.iter().any(|w| w.will_wake(waker)) {
            state.blocked.push(waker.clone());
        }
        false
    }

    /// Queues what a driver read (and empties `batch`).
    pub(super) fn push(&self, batch: &mut Vec<Inbound>) {
        if batch.is_empty() {
            return;
        }
        self.state.lock().items.extend(batch.drain(..));
        self.arrived.notify_one();
    }

    /// Takes the next message, if one is there.
    pub(super) fn try_pop(&self) -> Result<Option<Inbound>> {
        let mut state = self.state.lock();
        let Some(item) = state.items.pop_front() else {
            return if self.closed.load(Ordering::Acquire) {
                Err(Error::Closed)
            } else {
                Ok(None)
            };
        };
        let left = state.items.len();
        let wake = if left < self.hwm && !state.blocked.is_empty() {
            std::mem::take(&mut state.blocked)
        } else {
            Vec::new()
        };
        drop(state);
        wake.into_iter().for_each(Waker::wake);
        // More are there: pass the turn on, should another receiver be waiting.
        if left > 0 {
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

    /// Fails every receive from now on (once the queue is empty: messages already there
    /// are dropped with the socket).
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let blocked = {
            let mut state = self.state.lock();
            state.items.clear();
            std::mem::take(&mut state.blocked)
        };
        blocked.into_iter().for_each(Waker::wake);
        self.arrived.notify_waiters();
        self.arrived.notify_one();
    }
}
