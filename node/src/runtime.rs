//! Where handler work runs: one task per request or tick on the tokio runtime, never on a
//! socket's driver, under a node-wide bound with a stated policy when it is reached.
//!
//! The driver of each socket only decodes and dispatches (`dispatch.rs`); for a user
//! message it asks [`Runtime::admit`] for a slot and hands the work to a runner (a task
//! reused from one job to the next, `protocol::Runners`). So on a multi-thread
//! runtime handlers run in parallel, and a handler that blocks its thread or computes for a
//! long time delays nothing but itself: other peers' requests, heartbeats, handshakes and
//! replies keep flowing on the drivers.
//!
//! The bound: at most `max_concurrent_handlers` run at once (a counter of taken slots).
//! Above it,
//! [`BusyPolicy::Wait`] queues up to `max_queued` messages (each a spawned task waiting for
//! a permit: a few hundred bytes and the message), then refuses; [`BusyPolicy::Refuse`]
//! refuses at once. A refused request is answered with the system error `BUSY`
//! ([`Error::Busy`](crate::Error::Busy) for its caller); a refused tick is dropped and
//! counted. Either way what the node holds is bounded by the two numbers.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use futures::FutureExt;
use protocol::{Answer, Incoming, Meta, RemoteError, Responder};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::{BusyPolicy, Config};
use crate::context::{self, Context, Expiry, DEADLINE_EXCEEDED};
use crate::dispatch::Received;
use crate::inner::Inner;
use crate::middleware::First;
use crate::observe::{Outcome, Watch};
use crate::peer::{NodeId, PeerWork, Stop};
use crate::trace;
use protocol::Runners;

/// The error code of a request refused because the node's handlers are at their limit.
pub(crate) const BUSY: &str = "BUSY";

/// The error code of a request whose handler was stopped because the node's close grace
/// ran out.
pub(crate) const CANCELLED: &str = "CANCELLED";

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
    /// Handler slots taken. A counter taken with a compare-and-swap and given back with a
    /// subtraction, rather than tokio's `Semaphore`, whose release takes its waiters' lock
    /// every time (`add_permits_locked` in a perf profile of an echo server); a wake-up is
    /// sent only when messages are queued.
    taken: AtomicUsize,
    max: usize,
    /// The most jobs (running and queued) one peer may have.
    per_peer: usize,
    /// Wakes a queued message when a slot is given back.
    freed: Notify,
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
    /// The runners handler work runs on.
    pool: Arc<Runners<Job>>,
    /// Ticks dropped at the limit.
    pub(crate) ticks_dropped: AtomicU64,
    /// Jobs stopped because their peer left.
    pub(crate) cancelled: AtomicU64,
    /// Requests not run, or stopped, because their deadline passed.
    pub(crate) expired: AtomicU64,
}

impl Runtime {
    pub(crate) fn new(config: &Config) -> Runtime {
        Runtime {
            taken: AtomicUsize::new(0),
            max: config.max_concurrent_handlers.max(1),
            per_peer: config.max_handlers_per_peer.max(1),
            freed: Notify::new(),
            policy: config.when_busy,
            queued: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            answered: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            ticks_dropped: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            pool: Runners::new(),
        }
    }

    /// Takes a free slot, if there is one.
    fn try_take(&self) -> bool {
        let mut taken = self.taken.load(Ordering::SeqCst);
        loop {
            if taken >= self.max {
                return false;
            }
            match self.taken.compare_exchange_weak(
                taken,
                taken + 1,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => taken = now,
            }
        }
    }

    /// Gives a slot back, waking a queued message if there is one. (Sequentially
    /// consistent with `admit`'s count of the queued and `take`'s look at the slots: each
    /// side writes one and reads the other, and weaker orders would let both read stale
    /// values and lose the wake-up.)
    fn give_back(&self) {
        self.taken.fetch_sub(1, Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.freed.notify_one();
        }
    }

    /// Waits for a slot (a message counted as queued).
    async fn take(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking: a slot given back in between wakes this one.
            freed.as_mut().enable();
            if self.try_take() {
                return;
            }
            freed.await;
        }
    }

    /// A slot for one more message of `peer`: refused at once when the peer has
    /// `max_handlers_per_peer` jobs already (counted for it otherwise; the job's end gives
    /// it back), else as [`admit`](Self::admit) decides.
    fn admit_for(&self, peer: &PeerWork) -> Slot<()> {
        let before = peer.active.fetch_add(1, Ordering::SeqCst);
        let decision = if before >= self.per_peer {
            Slot::Refuse
        } else {
            self.admit()
        };
        if matches!(decision, Slot::Refuse) {
            peer.active.fetch_sub(1, Ordering::SeqCst);
        }
        decision
    }

    /// A slot for one more message (counted as queued when it must wait).
    fn admit(&self) -> Slot<()> {
        if self.try_take() {
            return Slot::Run(());
        }
        // Counted first, so that two messages racing for the last queue place cannot both
        // take it.
        let queued = self.queued.fetch_add(1, Ordering::SeqCst);
        let decision = slot(None, queued, self.policy);
        if matches!(decision, Slot::Refuse) {
            self.queued.fetch_sub(1, Ordering::SeqCst);
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

    /// Waits until no handler task is left, until `deadline` at most; whether none is.
    pub(crate) async fn drain_until(&self, deadline: Instant) -> bool {
        tokio::time::timeout_at(deadline, async {
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

impl Drop for Runtime {
    fn drop(&mut self) {
        // The node is gone: its idle runners end.
        self.pool.close();
    }
}

/// A handler task's hold on the node: counted alive for graceful close, and holding a
/// slot of the limit once it has one; both are given back however the task ends.
pub(crate) struct Work {
    inner: Arc<Inner>,
    /// The peer the work is for: its count, and the signal that it left.
    peer: Arc<PeerWork>,
    slot: bool,
    /// Counted as queued (waiting for a slot) right now.
    queued: bool,
}

impl Work {
    /// The hold of a job admitted as `admitted` (a slot taken, or a place in the queue):
    /// given back by its drop even if the job never runs.
    fn start(inner: &Arc<Inner>, peer: Arc<PeerWork>, admitted: &Slot<()>) -> Work {
        inner.runtime.active.fetch_add(1, Ordering::AcqRel);
        Work {
            inner: Arc::clone(inner),
            peer,
            slot: matches!(admitted, Slot::Run(())),
            queued: matches!(admitted, Slot::Queue),
        }
    }

    /// Waits for a slot if the job had to queue, unless its peer leaves first (counted as
    /// cancelled) or `deadline` passes. A job admitted with a slot runs at once: only the
    /// rare queued one pays for a second handle on its peer.
    async fn slot_before(&mut self, deadline: Option<Instant>, arrived: Option<Instant>) -> Waited {
        if !self.queued {
            return Waited::AtOnce;
        }
        let peer = Arc::clone(&self.peer);
        tokio::select! {
            biased;
            // First: a job whose peer left, or whose node's grace ran out, does not start
            // even if a slot is free at the same moment (the stopped jobs free theirs).
            why = peer.gone() => {
                self.inner.runtime.cancelled.fetch_add(1, Ordering::Relaxed);
                Waited::Stopped(why)
            }
            () = self.slot() => {
                if let (Some(metrics), Some(arrived)) = (&self.inner.observers.metrics, arrived) {
                    metrics.queue_wait(arrived.elapsed());
                }
                Waited::Slot
            }
            () = Expiry::new(deadline) => Waited::Expired,
        }
    }

    /// Waits for a slot if the job had to queue.
    async fn slot(&mut self) {
        if self.queued {
            let runtime = &self.inner.runtime;
            runtime.take().await;
            runtime.queued.fetch_sub(1, Ordering::AcqRel);
            self.queued = false;
            self.slot = true;
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let runtime = &self.inner.runtime;
        if self.slot {
            runtime.give_back();
        }
        if self.queued {
            // Dropped while waiting (the runtime is shutting down).
            runtime.queued.fetch_sub(1, Ordering::AcqRel);
        }
        self.peer.active.fetch_sub(1, Ordering::AcqRel);
        if runtime.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            runtime.idle.notify_waiters();
        }
    }
}

/// How a job's wait for a slot ended.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    /// It had one from the start (admitted with a slot, when it arrived).
    AtOnce,
    /// It got one after waiting.
    Slot,
    /// Its peer left, or the close grace ran out, first.
    Stopped(Stop),
    Expired,
}

/// Answers a request whose deadline passed before or while it ran (counted).
fn expired(inner: &Inner, responder: Responder) -> Outcome {
    inner.runtime.expired.fetch_add(1, Ordering::Relaxed);
    responder.answer(Err(RemoteError::system_error(
        DEADLINE_EXCEEDED,
        "the request's deadline passed before its handler finished",
    )));
    Outcome::Timeout
}

/// The answer to send to a requester that accepts payloads up to `limit` bytes: a larger
/// one becomes the error reply `PAYLOAD_TOO_LARGE` (its caller's
/// [`Error::PayloadTooLarge`](crate::Error::PayloadTooLarge)). Sent as it is, it would make
/// the requester's socket drop the connection (ZMQ_MAXMSGSIZE), and libzmq does not
/// reconnect after that.
pub(crate) fn fitting(
    answer: Result<Answer, RemoteError>,
    limit: usize,
) -> Result<Answer, RemoteError> {
    match answer {
        Ok(answer) if answer.payload.len() > limit => {
            tracing::debug!(
                size = answer.payload.len(),
                limit,
                "answer over the requester's limit refused"
            );
            Err(RemoteError::system_error(
                RemoteError::PAYLOAD_TOO_LARGE,
                format!("{} {limit}", answer.payload.len()),
            ))
        }
        answer => answer,
    }
}

/// One message's handler work, as a runner runs it (`pool.rs`).
pub(crate) enum Job {
    /// A user request or a forward (`first: None`).
    Request {
        work: Work,
        from: NodeId,
        incoming: Incoming,
        received: Received,
        first: Option<First>,
        responder: Responder,
    },
    /// A user tick.
    Tick {
        work: Work,
        from: NodeId,
        incoming: Incoming,
        meta: Meta,
        first: First,
    },
}

impl protocol::Job for Job {
    fn run(self) -> impl std::future::Future<Output = ()> + Send {
        run_job(self)
    }
}

/// Runs one job to its end (on a runner).
async fn run_job(job: Job) {
    match job {
        Job::Request {
            mut work,
            from,
            incoming,
            received,
            first,
            responder,
        } => {
            // Only while a hook or metrics watch: the event's name, who sent it, and when
            // it arrived outlive the handler.
            // Only while a hook or metrics watch (see `Observers::watch`).
            let watched = work
                .inner
                .observers
                .watch(incoming.event(), &from, received.arrived);
            let outcome = run_request(&mut work, from, incoming, received, first, responder).await;
            if let Some(watched) = watched {
                work.inner.observers.ended(watched, false, outcome);
            }
        }
        Job::Tick {
            mut work,
            from,
            incoming,
            meta,
            first,
        } => {
            let watched = work
                .inner
                .observers
                .active()
                .then(Instant::now)
                .and_then(|now| work.inner.observers.watch(incoming.event(), &from, now));
            if !matches!(
                work.slot_before(None, watched.as_ref().map(Watch::arrived))
                    .await,
                Waited::AtOnce | Waited::Slot
            ) {
                return;
            }
            let (inner, peer) = (&work.inner, &work.peer);
            let handled =
                AssertUnwindSafe(inner.handle_tick(from, incoming, meta, first)).catch_unwind();
            let outcome = tokio::select! {
                biased;
                result = handled => match result {
                    Ok(true) => Outcome::Ok,
                    Ok(false) => Outcome::Error,
                    Err(_) => {
                        tracing::error!(node = %inner.id, "tick handler panicked");
                        Outcome::Error
                    }
                },
                _ = peer.gone() => {
                    inner.runtime.cancelled.fetch_add(1, Ordering::Relaxed);
                    Outcome::Cancelled
                }
            };
            if let Some(watched) = watched {
                inner.observers.ended(watched, true, outcome);
            }
        }
    }
}

/// Runs one request to its answer (or its end): waits for a slot if it queued, checks its
/// deadline, runs the handler in its span and context; how it ended.
async fn run_request(
    work: &mut Work,
    from: NodeId,
    incoming: Incoming,
    received: Received,
    first: Option<First>,
    responder: Responder,
) -> Outcome {
    let deadline = received.deadline;
    // Passed before it starts: a job that waited looks at the clock; one that had its
    // slot on arrival compares with its arrival (no clock read on the common path).
    let passed = match work.slot_before(deadline, Some(received.arrived)).await {
        Waited::AtOnce => deadline.is_some_and(|deadline| deadline <= received.arrived),
        Waited::Slot => deadline.is_some_and(|deadline| deadline <= Instant::now()),
        Waited::Stopped(Stop::Left) => return Outcome::Cancelled,
        // The close grace ran out before it had a slot: nothing ran, it may go elsewhere.
        Waited::Stopped(Stop::Grace) => {
            responder.answer(Err(RemoteError::system_error(
                RemoteError::SHUTTING_DOWN,
                "the node closed before the request had a handler slot",
            )));
            return Outcome::Cancelled;
        }
        Waited::Expired => return expired(&work.inner, responder),
    };
    if passed {
        return expired(&work.inner, responder);
    }
    let (inner, peer) = (&work.inner, &work.peer);
    let (span, trace) = trace::handle_span(
        inner.config.span_level,
        incoming.event(),
        &from,
        &received.meta,
    );
    let mut unended = trace::Unended::new(&span);
    let context = Context { deadline, trace };
    let work = context::scope(context, inner.handle(from, incoming, received, first));
    // Entered at each poll only when a subscriber records it (entering costs it work).
    let work = if span.is_disabled() {
        futures::future::Either::Left(work)
    } else {
        futures::future::Either::Right(trace::InSpan::new(&span, work))
    };
    let handled = AssertUnwindSafe(work).catch_unwind();
    let outcome = tokio::select! {
        biased;
        result = handled => {
            let result = result.unwrap_or_else(|_| {
                tracing::error!(node = %inner.id, "request handler panicked");
                Err(RemoteError::handler("the handler panicked"))
            });
            inner.runtime.answered.fetch_add(1, Ordering::Relaxed);
            let outcome = match &result {
                Ok(_) => Outcome::Ok,
                Err(e) if e.system => Outcome::Refused,
                Err(_) => Outcome::Error,
            };
            responder.answer(fitting(result, peer.limit()));
            outcome
        }
        // The socket was aborted, or the requester left: the answer would go nowhere; the
        // handler stops and its memory goes.
        () = responder.aborted() => Outcome::Cancelled,
        why = peer.gone() => {
            inner.runtime.cancelled.fetch_add(1, Ordering::Relaxed);
            if why == Stop::Grace {
                // The caller is still there: it learns the handler was stopped, and why.
                responder.answer(Err(RemoteError::system_error(
                    CANCELLED,
                    "the node's close grace ran out while the handler ran",
                )));
            }
            Outcome::Cancelled
        }
        // Its caller has given up: the same.
        () = Expiry::new(deadline) => expired(inner, responder),
    };
    unended.ended(outcome);
    outcome
}

/// Runs a user request (or a forward, on a router) from the joined peer `from` on a runner,
/// or answers `BUSY` at once. Called on the socket's driver.
pub(crate) fn spawn_request(
    inner: &Arc<Inner>,
    (from, peer): (NodeId, Arc<PeerWork>),
    incoming: Incoming,
    received: Received,
    first: Option<First>,
    responder: Responder,
) {
    let slot = inner.runtime.admit_for(&peer);
    if matches!(slot, Slot::Refuse) {
        inner.runtime.refused.fetch_add(1, Ordering::Relaxed);
        responder.answer(Err(RemoteError::system_error(
            BUSY,
            "the node's handlers are at their limit",
        )));
        return;
    }
    inner.runtime.pool.run(Job::Request {
        work: Work::start(inner, peer, &slot),
        from,
        incoming,
        received,
        first,
        responder,
    });
}

/// Runs the tick handlers for a user tick from `from` on a runner, or drops the tick
/// (counted) at the limit. Called on the socket's driver.
pub(crate) fn spawn_tick(
    inner: &Arc<Inner>,
    (from, peer): (NodeId, Arc<PeerWork>),
    incoming: Incoming,
    meta: Meta,
    first: First,
) {
    let slot = inner.runtime.admit_for(&peer);
    if matches!(slot, Slot::Refuse) {
        inner.runtime.ticks_dropped.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(node = %inner.id, event = incoming.event(), "tick dropped: handlers at their limit");
        return;
    }
    inner.runtime.pool.run(Job::Tick {
        work: Work::start(inner, peer, &slot),
        from,
        incoming,
        meta,
        first,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: BusyPolicy = BusyPolicy::Wait { max_queued: 2 };

    #[test]
    fn an_answer_over_the_requesters_limit_becomes_a_typed_error() {
        let answer = |n: usize| Ok(Answer::from(bytes::Bytes::from(vec![0u8; n])));
        assert_eq!(fitting(answer(8), 8), answer(8));
        let refused = fitting(answer(9), 8).unwrap_err();
        assert!(
            refused.is_system(RemoteError::PAYLOAD_TOO_LARGE),
            "{refused:?}"
        );
        assert!(matches!(
            crate::Error::from_remote(refused),
            crate::Error::PayloadTooLarge { size: 9, max: 8 }
        ));
        let error = Err(RemoteError::handler("no"));
        assert_eq!(fitting(error.clone(), 0), error);
    }

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
        assert!(matches!(runtime.admit(), Slot::Run(())));
        assert!(matches!(runtime.admit(), Slot::Queue));
        assert!(matches!(runtime.admit(), Slot::Queue));
        assert!(matches!(runtime.admit(), Slot::Refuse));
        assert_eq!(runtime.queued(), 2, "a refusal leaves the queue as it was");
        let refusing = Runtime::new(&Config {
            max_concurrent_handlers: 1,
            when_busy: BusyPolicy::Refuse,
            ..Config::default()
        });
        assert!(matches!(refusing.admit(), Slot::Run(())));
        assert!(matches!(refusing.admit(), Slot::Refuse));
        refusing.give_back();
        assert!(
            matches!(refusing.admit(), Slot::Run(())),
            "a slot given back is free"
        );
        assert_eq!(refusing.queued(), 0);
    }
}
