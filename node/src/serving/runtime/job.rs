//! A job on a runner: a request or a tick waits for its slot (if it was queued), then runs
//! the middleware and the handler under its deadline, the peer's and the close's stops,
//! and answers; and how the runtime starts one (`spawn_request`, `spawn_tick`).

use super::*;

/// Answers a request whose deadline passed before or while it ran (counted).
fn expired(runtime: &Runtime, responder: Responder) -> Outcome {
    runtime.expired.fetch_add(1, Ordering::Relaxed);
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
pub(super) fn fitting(
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
                PAYLOAD_TOO_LARGE,
                "the answer is over the requester's limit",
            )
            .with_limit(Limit::Payload {
                size: answer.payload.len() as u64,
                max: limit as u64,
            }))
        }
        answer => answer,
    }
}

/// One message's handler work, as a runner runs it (`pool.rs`).
///
/// Boxed: a job is moved into the runners' queue, out of it, and into the runner's
/// future, and its parts go on into the handler's; as a box each of those moves is a
/// pointer, where the parts themselves (448 bytes) were copied at every step
/// (callgrind, the echo server at 100 in flight: `memcpy` 21% of its instructions).
pub(crate) enum Job {
    /// A user request or a forward (`first: None`).
    Request(Box<RequestJob>),
    /// A user tick.
    Tick(Box<TickJob>),
}

/// A user request or a forward, with what its handler needs.
pub(crate) struct RequestJob {
    work: Work,
    from: NodeId,
    incoming: Incoming,
    received: Received,
    /// The first step of its middleware and handler; `None`: a forward.
    first: Option<First>,
    responder: Responder,
}

/// A user tick, with what its handlers need.
pub(crate) struct TickJob {
    work: Work,
    from: NodeId,
    incoming: Incoming,
    meta: Meta,
    first: First,
}

impl protocol::Job for Job {
    fn run(self) -> impl std::future::Future<Output = ()> + Send {
        run_job(self)
    }
}

/// A user request (through `first`, its first step) or a forward (`first` is `None`)
/// from a joined peer, as a handler job runs it. A future made of its parts (see
/// [`First::run`]).
fn handle(
    node: &Arc<dyn Host>,
    from: NodeId,
    incoming: Incoming,
    received: Received,
    first: Option<First>,
) -> impl Future<Output = std::result::Result<Answer, RemoteError>> + Send + 'static {
    let Some(first) = first else {
        return Either::Left(Arc::clone(node).forward(from, incoming, received));
    };
    let request = Request::new(from, incoming, received.meta, received.deadline);
    Either::Right(first.run(request).map(|answered| match answered {
        Ok(response) => Ok(Answer {
            metadata: response.meta().as_bytes().clone(),
            payload: response.payload().clone(),
        }),
        Err(error) => Err(to_remote(error)),
    }))
}

/// The tick handlers for a user tick, through the middleware, as a handler job runs them.
/// A tick the middleware refuses is counted and reported.
async fn handle_tick(
    node: &dyn Host,
    from: NodeId,
    incoming: Incoming,
    meta: Meta,
    first: First,
) -> bool {
    let event = incoming.event().to_owned();
    let sender = from.clone();
    if let Err(error) = first.run(Request::new_tick(from, incoming, meta)).await {
        let runtime = node.runtime();
        tracing::debug!(node = %runtime.node, %event, cause = %error, "tick refused by its middleware");
        runtime.ticks_refused.fetch_add(1, Ordering::Relaxed);
        node.observers().report(
            ErrorSource::TickRefused,
            format!("tick {event:?} from {sender} refused: {error}"),
        );
        return false;
    }
    true
}

/// Runs one job to its end (on a runner).
async fn run_job(job: Job) {
    match job {
        Job::Request(job) => run_request(job).await,
        Job::Tick(job) => run_tick(job).await,
    }
}

/// Runs one tick's handlers (or stops before they ran).
async fn run_tick(mut job: Box<TickJob>) {
    let observers = job.work.node.observers();
    let watched = observers
        .active()
        .then(Instant::now)
        .and_then(|now| observers.watch(job.incoming.event(), &job.from, now));
    if !matches!(
        job.work
            .slot_before(None, watched.as_ref().map(Watch::arrived))
            .await,
        Waited::AtOnce | Waited::Slot
    ) {
        // Stopped before it ran (its peer left, or the close grace ran out): it ends
        // here, so that what watched its start sees its end.
        if let Some(watched) = watched {
            job.work
                .node
                .observers()
                .ended(watched, true, Outcome::Cancelled);
        }
        return;
    }
    let TickJob {
        work,
        from,
        incoming,
        meta,
        first,
    } = *job;
    let (node, peer) = (&work.node, &work.peer);
    let runtime = node.runtime();
    let handled =
        AssertUnwindSafe(handle_tick(&**node, from, incoming, meta, first)).catch_unwind();
    let outcome = tokio::select! {
        biased;
        result = handled => match result {
            Ok(true) => Outcome::Ok,
            Ok(false) => Outcome::Error,
            Err(_) => {
                tracing::error!(node = %runtime.node, "tick handler panicked");
                Outcome::Panicked
            }
        },
        _ = peer.gone() => {
            runtime.cancelled.fetch_add(1, Ordering::Relaxed);
            Outcome::Cancelled
        }
    };
    if let Some(watched) = watched {
        node.observers().ended(watched, true, outcome);
    }
}

/// Runs one request to its answer (or its end): waits for a slot if it queued, checks its
/// deadline, runs the handler in its span and context, and tells what watched it how it
/// ended. The job's parts stay in their box while it waits for its slot.
async fn run_request(job: Box<RequestJob>) {
    // Only while a hook or metrics watch (see `Observers::watch`): the event's name, who
    // sent it, and when it arrived outlive the handler.
    let watched =
        job.work
            .node
            .observers()
            .watch(job.incoming.event(), &job.from, job.received.arrived);
    let Some(watched) = watched else {
        handle_request(job).await;
        return;
    };
    let node = Arc::clone(&job.work.node);
    let outcome = handle_request(job).await;
    node.observers().ended(watched, false, outcome);
}

/// [`run_request`] but the watch: how the request ended.
async fn handle_request(mut job: Box<RequestJob>) -> Outcome {
    let deadline = job.received.deadline;
    let arrived = job.received.arrived;
    // Passed before it starts: a job that waited looks at the clock; one that had its
    // slot on arrival compares with its arrival (no clock read on the common path).
    let passed = match job.work.slot_before(deadline, Some(arrived)).await {
        Waited::AtOnce => deadline.is_some_and(|deadline| deadline <= arrived),
        Waited::Slot => deadline.is_some_and(|deadline| deadline <= Instant::now()),
        // Nothing ran and the answer would go nowhere: counted (`NodeStats`) and seen by
        // hooks and metrics as `Outcome::Cancelled`.
        Waited::Stopped(Stop::Left | Stop::Replaced) => return Outcome::Cancelled,
        // The close grace ran out before it had a slot: nothing ran, it may go elsewhere.
        Waited::Stopped(Stop::Grace) => {
            job.responder.answer(Err(RemoteError::system_error(
                SHUTTING_DOWN,
                "the node closed before the request had a handler slot",
            )));
            return Outcome::Cancelled;
        }
        Waited::Expired => return expired(job.work.node.runtime(), job.responder),
    };
    if passed {
        return expired(job.work.node.runtime(), job.responder);
    }
    let RequestJob {
        work,
        from,
        incoming,
        received,
        first,
        responder,
    } = *job;
    let (node, peer) = (&work.node, &work.peer);
    let runtime = node.runtime();
    let (span, trace) =
        trace::handle_span(runtime.span_level, incoming.event(), &from, &received.meta);
    let mut unended = trace::Unended::new(&span);
    let context = Context { deadline, trace };
    let work = context::scope(context, handle(node, from, incoming, received, first));
    // Entered at each poll only when a subscriber records it (entering costs it work).
    let work = if span.is_disabled() {
        Either::Left(work)
    } else {
        Either::Right(trace::InSpan::new(&span, work))
    };
    let handled = AssertUnwindSafe(work).catch_unwind();
    let outcome = tokio::select! {
        biased;
        result = handled => {
            let (result, outcome) = match result {
                Ok(Ok(answer)) => (Ok(answer), Outcome::Ok),
                Ok(Err(e)) => {
                    let outcome = Outcome::of_reply(&e);
                    (Err(e), outcome)
                }
                Err(_) => {
                    tracing::error!(node = %runtime.node, "request handler panicked");
                    let e = RemoteError::system_error(PANICKED, "the handler panicked");
                    (Err(e), Outcome::Panicked)
                }
            };
            runtime.answered.fetch_add(1, Ordering::Relaxed);
            responder.answer(fitting(result, peer.limit()));
            outcome
        }
        // The socket was aborted, or the requester left: the answer would go nowhere; the
        // handler stops and its memory goes.
        () = responder.aborted() => Outcome::Cancelled,
        why = peer.gone() => {
            runtime.cancelled.fetch_add(1, Ordering::Relaxed);
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
        () = Expiry::new(deadline) => expired(runtime, responder),
    };
    unended.ended(outcome);
    outcome
}

impl Runtime {
    /// Runs a user request (or a forward, on a router) from the joined peer `from` on a runner,
    /// or answers `BUSY` at once. Called on the socket's driver.
    pub(crate) fn spawn_request<N: Host>(
        &self,
        node: &Arc<N>,
        (from, peer): (NodeId, Arc<PeerWork>),
        incoming: Incoming,
        received: Received,
        first: Option<First>,
        responder: Responder,
    ) {
        let hold = match self.hold_for(&peer) {
            Ok(hold) => hold,
            Err(full) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                responder.answer(Err(self.busy(full)));
                return;
            }
        };
        self.pool.run(Job::Request(Box::new(RequestJob {
            work: Work::start(Arc::clone(node) as Arc<dyn Host>, peer, hold),
            from,
            incoming,
            received,
            first,
            responder,
        })));
    }

    /// Runs the tick handlers for a user tick from `from` on a runner, or drops the tick
    /// (counted) at the limit. Called on the socket's driver.
    pub(crate) fn spawn_tick<N: Host>(
        &self,
        node: &Arc<N>,
        (from, peer): (NodeId, Arc<PeerWork>),
        incoming: Incoming,
        meta: Meta,
        first: First,
    ) {
        let hold = match self.hold_for(&peer) {
            Ok(hold) => hold,
            Err(full) => {
                self.ticks_dropped.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(node = %self.node, event = incoming.event(), cause = full.message(), "tick dropped");
                return;
            }
        };
        self.pool.run(Job::Tick(Box::new(TickJob {
            work: Work::start(Arc::clone(node) as Arc<dyn Host>, peer, hold),
            from,
            incoming,
            meta,
            first,
        })));
    }
}
