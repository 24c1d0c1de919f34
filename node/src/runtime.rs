//! Where handler work runs: one task per request or tick on the tokio runtime, never on a
//! socket's driver, under a node-wide bound with a stated policy when it is reached.
//!
//! The driver of each socket only decodes and dispatches (`dispatch.rs`); for a user
//! message it asks [`Runtime::admit`] for a slot and spawns the work. So on a multi-thread
//! runtime handlers run in parallel, and a handler that blocks its thread or computes for a
//! long time delays nothing but itself: other peers' requests, heartbeats, handshakes and
//! replies keep flowing on the drivers.
//!
//! The bound: at most `max_concurrent_handlers` run at once (a semaphore). Above it,
//! [`BusyPolicy::Wait`] queues up to `max_queued` messages (each a spawned task waiting for
//! a permit: a few hundred bytes and the message), then refuses; [`BusyPolicy::Refuse`]
//! refuses at once. A refused request is answered with the system error `BUSY`
//! ([`Error::Busy`](crate::Error::Busy) for its caller); a refused tick is dropped and
//! counted. Either way what the node holds is bounded by the two numbers.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use protocol::{Incoming, RemoteError, Responder};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::config::{BusyPolicy, Config};
use crate::inner::Inner;
use crate::peer::NodeId;

/// The error code of a request refused because the node's handlers are at their limit.
pub(crate) const BUSY: &str = "BUSY";

/// What to do with one more message, from the counts (pure: see the tests).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Slot<P> {
    /// Run now, holding this permit.
    Run(P),
    /// Wait for a permit (counted as queued).
    Queue,
    /// Refuse it.
    Refuse,
}

/// The decision for a message that found `permit` (a free handler slot, or none) with
/// `queued` messages already waiting.
pub(crate) fn slot<P>(permit: Option<P>, queued: usize, policy: BusyPolicy) -> Slot<P> {
    match (permit, policy) {
        (Some(permit), _) => Slot::Run(permit),
        (None, BusyPolicy::Wait { max_queued }) if queued < max_queued => Slot::Queue,
        (None, _) => Slot::Refuse,
    }
}

/// The node's handler execution: limits and counters.
pub(crate) struct Runtime {
    permits: Arc<Semaphore>,
    policy: BusyPolicy,
    /// Messages waiting for a permit.
    queued: AtomicUsize,
    /// Handler tasks alive (running or queued): a graceful close waits for zero.
    active: AtomicUsize,
    idle: Notify,
    /// Requests answered by this node's handlers (a reply or an error reply).
    pub(crate) answered: AtomicU64,
    /// Requests refused with `BUSY`.
    pub(crate) refused: AtomicU64,
    /// Ticks dropped at the limit.
    pub(crate) ticks_dropped: AtomicU64,
}

impl Runtime {
    pub(crate) fn new(config: &Config) -> Runtime {
        Runtime {
            permits: Arc::new(Semaphore::new(config.max_concurrent_handlers.max(1))),
            policy: config.when_busy,
            queued: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            answered: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            ticks_dropped: AtomicU64::new(0),
        }
    }

    /// A slot for one more message (counted as queued when it must wait). The semaphore is
    /// fair: a permit given back goes to a queued message before a new one can take it.
    fn admit(&self) -> Slot<OwnedSemaphorePermit> {
        if let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() {
            return Slot::Run(permit);
        }
        // Counted first, so that two messages racing for the last queue place cannot both
        // take it.
        let queued = self.queued.fetch_add(1, Ordering::AcqRel);
        let decision = slot(None, queued, self.policy);
        if matches!(decision, Slot::Refuse) {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        decision
    }

    /// Handler tasks running or queued now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Messages waiting for a handler slot now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Waits until no handler task is left, for at most `grace`; whether none is.
    pub(crate) async fn drain(&self, grace: Duration) -> bool {
        tokio::time::timeout(grace, async {
            loop {
                let idle = self.idle.notified();
                if self.active() == 0 {
                    break;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }
}

/// Counts a handler task alive for graceful close; the count goes down however it ends.
struct Active(Arc<Inner>);

impl Active {
    fn start(inner: Arc<Inner>) -> Active {
        inner.runtime.active.fetch_add(1, Ordering::AcqRel);
        Active(inner)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let runtime = &self.0.runtime;
        if runtime.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            runtime.idle.notify_waiters();
        }
    }
}

/// Waits for the slot's permit if it had to queue.
async fn permit(inner: &Inner, slot: Slot<OwnedSemaphorePermit>) -> Option<OwnedSemaphorePermit> {
    match slot {
        Slot::Run(permit) => Some(permit),
        Slot::Queue => {
            let permit = Arc::clone(&inner.runtime.permits)
                .acquire_owned()
                .await
                .ok();
            inner.runtime.queued.fetch_sub(1, Ordering::AcqRel);
            permit
        }
        Slot::Refuse => None,
    }
}

/// Runs a user request (or a forward, on a router) from the joined peer `from` as a task of
/// its own, or answers `BUSY` at once. Called on the socket's driver.
pub(crate) fn spawn_request(
    inner: &Arc<Inner>,
    from: NodeId,
    incoming: Incoming,
    responder: Responder,
) {
    let slot = inner.runtime.admit();
    if matches!(slot, Slot::Refuse) {
        inner.runtime.refused.fetch_add(1, Ordering::Relaxed);
        responder.answer(Err(RemoteError::system_error(
            BUSY,
            "the node's handlers are at their limit",
        )));
        return;
    }
    let active = Active::start(Arc::clone(inner));
    tokio::spawn(async move {
        let inner = &active.0;
        let Some(_permit) = permit(inner, slot).await else {
            return;
        };
        let work = AssertUnwindSafe(inner.handle(from, incoming)).catch_unwind();
        tokio::select! {
            biased;
            result = work => {
                let result = result.unwrap_or_else(|_| {
                    tracing::error!(node = %inner.id, "request handler panicked");
                    Err(RemoteError::handler("the handler panicked"))
                });
                inner.runtime.answered.fetch_add(1, Ordering::Relaxed);
                responder.answer(result);
            }
            // The socket was aborted: the answer would go nowhere.
            () = responder.aborted() => {}
        }
    });
}

/// Runs the tick handlers for a user tick from `from` as a task of its own, or drops the
/// tick (counted) at the limit. Called on the socket's driver.
pub(crate) fn spawn_tick(inner: &Arc<Inner>, from: NodeId, incoming: Incoming) {
    if !inner.handlers.has_tick_handler(incoming.event()) {
        tracing::trace!(node = %inner.id, event = incoming.event(), "tick with no handler");
        return;
    }
    let slot = inner.runtime.admit();
    if matches!(slot, Slot::Refuse) {
        inner.runtime.ticks_dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(node = %inner.id, event = incoming.event(), "tick dropped: handlers at their limit");
        return;
    }
    let active = Active::start(Arc::clone(inner));
    tokio::spawn(async move {
        let inner = &active.0;
        let Some(_permit) = permit(inner, slot).await else {
            return;
        };
        if AssertUnwindSafe(inner.handle_tick(from, incoming))
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!(node = %inner.id, "tick handler panicked");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: BusyPolicy = BusyPolicy::Wait { max_queued: 2 };

    #[test]
    fn a_free_slot_runs_whatever_the_policy() {
        assert_eq!(slot(Some(7), 0, WAIT), Slot::Run(7));
        assert_eq!(slot(Some(7), 99, BusyPolicy::Refuse), Slot::Run(7));
    }

    #[test]
    fn waiting_is_bounded_then_refused() {
        assert_eq!(slot::<()>(None, 0, WAIT), Slot::Queue);
        assert_eq!(slot::<()>(None, 1, WAIT), Slot::Queue);
        assert_eq!(slot::<()>(None, 2, WAIT), Slot::Refuse);
        assert_eq!(slot::<()>(None, 0, BusyPolicy::Refuse), Slot::Refuse);
    }

    #[test]
    fn the_counts_stay_in_step_with_the_decisions() {
        let config = Config {
            max_concurrent_handlers: 1,
            when_busy: WAIT,
            ..Config::default()
        };
        let runtime = Runtime::new(&config);
        let running = runtime.admit();
        assert!(matches!(running, Slot::Run(_)));
        assert!(matches!(runtime.admit(), Slot::Queue));
        assert!(matches!(runtime.admit(), Slot::Queue));
        assert!(matches!(runtime.admit(), Slot::Refuse));
        assert_eq!(runtime.queued(), 2, "a refusal leaves the queue as it was");
        let refusing = Runtime::new(&Config {
            max_concurrent_handlers: 1,
            when_busy: BusyPolicy::Refuse,
            ..Config::default()
        });
        let _running = refusing.admit();
        assert!(matches!(refusing.admit(), Slot::Refuse));
        assert_eq!(refusing.queued(), 0);
    }
}
