//! The pending requests of a conversation: each caller's entry (its waker, and its outcome
//! once it ended), the table and the driver's timer under one lock, and the guard that
//! removes an entry when its caller gives up.

use parking_lot::Mutex;
use transport::PeerId;

use crate::envelope::Envelope;
use crate::error::Error;
use crate::table::Table;

/// A request waiting for its reply.
pub(super) struct Waiter {
    /// Who the request went to: only that peer may answer it.
    pub(super) peer: PeerId,
    /// The caller's waker.
    pub(super) waker: Option<std::task::Waker>,
    /// How the request ended, once it did (the table keeps the entry, ended, until the
    /// caller takes it).
    pub(super) outcome: Option<Outcome>,
    /// The caller is no task (the runtime's `block_on` future): see
    /// `Answered::outside_tasks`.
    pub(super) outside_task: bool,
    /// A stream's state at the caller (boxed: most requests have none).
    pub(super) stream: Option<Box<super::streams::Ends>>,
}

/// How a pending request ended, as the driver tells its caller (who turns it into the
/// caller's error, with the event name and timeout it has at hand).
pub(crate) enum Outcome {
    Reply(Envelope),
    ErrorReply(Envelope),
    TimedOut,
    Failed(Error),
}

/// The pending requests and the deadline the driver's timer is set to. Under one lock, so
/// that a caller only wakes the driver when its deadline is earlier than the timer's.
#[derive(Default)]
pub(super) struct Pending {
    /// Requests pending, and ended ones whose outcome (in their `Waiter`) their caller has
    /// not taken yet. (A oneshot channel per request cost an allocation and its atomics;
    /// measured with callgrind, see the commit.) A caller that gives up removes its own
    /// entry (`Forget`), so nothing stays.
    pub(super) table: Table<Waiter>,
    /// The timer's deadline. It may be stale (the request it was set for is answered): the
    /// timer then fires for nothing and is set again, which is cheaper than moving it on
    /// every request.
    pub(super) armed: Option<std::time::Instant>,
    /// On a Server: the peers whose replies completed a request since the last
    /// `take_answered`, with when the batch holding the last one was received (nanoseconds
    /// since the driver's `EPOCH`). Signs of life a liveness check drains: at most one entry per peer
    /// we had a request pending with, updated under the lock the reply takes anyway.
    pub(super) answered_by: std::collections::HashMap<PeerId, u64>,
}

/// Removes a request's entry (pending or ended) when its caller stops waiting before the
/// end: a dropped request future leaves nothing behind in the table.
pub(super) struct Forget<'a> {
    pub(super) pending: &'a Mutex<Pending>,
    pub(super) id: u64,
    /// Cleared once the caller took its outcome (nothing left to remove).
    pub(super) armed: bool,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.pending.lock().table.discard(self.id);
        }
    }
}
