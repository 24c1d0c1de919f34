//! The conversation core shared by [`Client`](crate::Client) and [`Server`](crate::Server):
//! sending requests and matching replies, running handlers, expiring deadlines.
//!
//! One driver task per socket fires timeouts and runs the close. Each socket receives one
//! way, chosen when it starts (`Link::deliver_to`): on the native engine, a Server's and a
//! Client's alike, each connection's own driver dispatches its messages as they are read
//! (`direct.rs`, one task wake-up fewer per message); on the libzmq engine the driver task
//! receives them from the socket's inbox. Dispatch completes
//! waiting requests and hands requests and ticks to their handlers. Callers send directly
//! (the transport allows it) and wait for whoever dispatches the reply to leave their
//! outcome in the pending table (no channel per request).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use transport::{Key, PeerId};

use crate::envelope::{
    check_event, encode_value, kind_and_id, request_id, Encoded, Envelope, Kind,
};
use crate::error::{DecodeError, Error, Limit, RemoteError, Result};
use crate::handler::{Answer, Answering, Incoming, RequestHandler, Responder};
use crate::link::Link;
use crate::serve::{Receiver, Serve};
use crate::stats::Counters;
pub use crate::stats::Stats;
use crate::table::Table;
use helpers::{elapsed_nanos, rand_start, remote_error, run_others_first, EPOCH};
use pending::{Forget, Outcome, Pending, Waiter};
pub(crate) use streams::Callee;
pub use streams::{ItemSink, ItemStream, ReplyStream, StreamOptions, DEFAULT_MAX_STREAMS};

/// Messages taken per wake-up of the driver, beyond the first.
const BATCH: usize = 63;

/// The most messages read after a lost connection before what is pending fails.
const LOST_DRAIN: usize = 4096;

/// Why a received message was dropped, for whoever listens (the node layer's error events).
pub type Rejected = (PeerId, Error);

/// The state shared by the driver and every handle.
pub(crate) struct Conversation<L: Link> {
    pub(crate) link: L,
    pending: Mutex<Pending>,
    /// Who takes requests and ticks (`serve.rs`), replaced whole (copy on write) when it
    /// changes: each dispatcher keeps its own reference and looks here again only when
    /// `receiver_version` moved, so a message costs no lock and no reference count to find
    /// its handler.
    receiver: RwLock<Arc<Receiver>>,
    /// Bumped (under the write lock) every time `receiver` changes.
    receiver_version: AtomicU64,
    /// Ids of ticks (a request gets its id from the pending table).
    next_id: AtomicU64,
    /// Wakes the driver when a request with an earlier deadline than all others is added.
    timer_reset: Notify,
    /// Cancelled when closing: new requests are refused, handlers in progress finish, and
    /// the driver starts the close.
    closing: CancellationToken,
    /// Cancelled by `abort`: stop at once; the work in progress (request handlers' tasks)
    /// is dropped.
    aborted: CancellationToken,
    /// Live [`Responder`]s: requests taken by a handler and not answered yet. A graceful
    /// close waits for zero.
    responders: AtomicUsize,
    /// Signalled when `responders` drops to zero.
    idle: Notify,
    /// Wakes the driver when the connection dropped (a Client's): it reads what had
    /// arrived, then fails what is still pending.
    lost: Notify,
    /// When the driver last received anything (a batch), in nanoseconds since
    /// [`EPOCH`] (0: never): on a Client, a sign of life of its server, replies included.
    heard: AtomicU64,
    /// Cancelled by the driver when it has finished.
    finished: CancellationToken,
    pub(crate) counters: Counters,
    pub(crate) max_payload: usize,
    /// The streams this end answers (see `streams.rs`): at most `max_streams`.
    callee: Mutex<Callee>,
    /// The window this end grants for a streamed body.
    stream_window: AtomicU32,
    /// The most streamed requests this end keeps open at once.
    max_streams: AtomicUsize,
    /// Where invalid inbound messages are reported (optional).
    rejected: Mutex<Option<tokio::sync::mpsc::UnboundedSender<Rejected>>>,
}

impl<L: Link> Conversation<L> {
    /// Creates the conversation, lets `open` bind or connect its socket, and spawns its
    /// driver. The socket hands its messages to the conversation's dispatch before `open`
    /// runs, so that its first connection already does (`deliver_to` reaches the
    /// connections that come after it). The driver starts after `open`: started before it,
    /// on the libzmq engine, `node/tests/scale_limits.rs`' 50,000 parked requests ran past
    /// the test's 60 s, where they take 17.5 s (not looked into further). If `open` fails,
    /// the socket is closed and nothing is left running.
    pub(crate) async fn start<T>(
        link: L,
        max_payload: usize,
        open: impl FnOnce(&L) -> transport::Result<T>,
    ) -> Result<(Arc<Conversation<L>>, T)> {
        let conversation = Arc::new(Conversation {
            link,
            pending: Mutex::new(Pending {
                // Start from a random point so ids from a restarted process do not repeat
                // the previous run's (a late reply must not match a new request); truncated
                // to the table's sequence numbers, random all the same.
                table: Table::starting_at(rand_start() as u32),
                ..Pending::default()
            }),
            receiver: RwLock::new(Arc::new(Receiver::default())),
            receiver_version: AtomicU64::new(0),
            next_id: AtomicU64::new(rand_start()),
            timer_reset: Notify::new(),
            closing: CancellationToken::new(),
            aborted: CancellationToken::new(),
            responders: AtomicUsize::new(0),
            idle: Notify::new(),
            lost: Notify::new(),
            heard: AtomicU64::new(0),
            finished: CancellationToken::new(),
            counters: Counters::default(),
            max_payload,
            callee: Mutex::new(Callee::default()),
            stream_window: AtomicU32::new(crate::credit::DEFAULT_WINDOW),
            max_streams: AtomicUsize::new(DEFAULT_MAX_STREAMS),
            rejected: Mutex::new(None),
        });
        // Where messages are dispatched: by the connections' drivers (`direct.rs`), or by
        // the driver task below, which otherwise only keeps the deadlines and the close.
        let direct = Arc::new(direct::Direct(Arc::clone(&conversation)));
        let receives = !conversation.link.deliver_to(direct);
        let opened = match open(&conversation.link) {
            Ok(opened) => opened,
            Err(error) => {
                // Closing lets the socket's hold on the dispatch (and so on the
                // conversation) go.
                conversation.link.close().await;
                return Err(error.into());
            }
        };
        tokio::spawn(Arc::clone(&conversation).drive(receives));
        Ok((conversation, opened))
    }

    /// Changes who takes requests and ticks (`local.rs`: a named handler, or a receiver).
    pub(crate) fn change_receiver(&self, change: impl FnOnce(&mut Receiver)) {
        let mut receiver = self.receiver.write();
        change(Arc::make_mut(&mut receiver));
        self.receiver_version.fetch_add(1, Ordering::Release);
    }

    /// A dispatcher's view of the receiver: `seen` is the version it holds, refreshed when
    /// it changed since.
    fn refresh_receiver(&self, current: &mut Arc<Receiver>, seen: &mut u64) {
        let version = self.receiver_version.load(Ordering::Acquire);
        if version != *seen {
            // Read after the version: a change in between is seen at the next look.
            *current = Arc::clone(&self.receiver.read());
            *seen = version;
        }
    }

    pub(crate) fn report_rejected(&self) -> tokio::sync::mpsc::UnboundedReceiver<Rejected> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.rejected.lock() = Some(tx);
        rx
    }

    /// Sets the window granted for streamed bodies and the most streams kept open.
    pub(crate) fn set_stream_limits(&self, window: u32, max_streams: usize) {
        self.stream_window.store(window, Ordering::Relaxed);
        self.max_streams.store(max_streams, Ordering::Relaxed);
    }

    /// Streams this end answers that are open now.
    pub(crate) fn open_streams(&self) -> usize {
        self.callee.lock().len()
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Requests waiting for a reply.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.lock().table.len()
    }

    /// Sends a request to `peer` and waits for its reply, an error reply, or the deadline.
    pub(crate) async fn request(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_event(event)?;
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let deadline = (Instant::now() + timeout).into_std();
        // The entry carries this task's waker from the start, so the wait below need not
        // look (under the lock) right after the send: an outcome that came first has woken
        // us already.
        let waker = std::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone())).await;
        let outside_task = tokio::task::try_id().is_none();
        // The table gives the request its id.
        let id = {
            let mut pending = self.pending.lock();
            let id = pending.table.insert(
                deadline,
                Waiter {
                    peer: peer.clone(),
                    waker: Some(waker),
                    outcome: None,
                    outside_task,
                    stream: None,
                },
            );
            if pending.armed.is_none_or(|armed| deadline < armed) {
                self.timer_reset.notify_one();
            }
            id
        };
        // From here on, if this future is dropped, its entry goes with it (a late reply is
        // then unmatched and counted).
        let mut forget = Forget {
            pending: &self.pending,
            id,
            armed: true,
        };
        let encoded =
            Encoded::new(Kind::Request, id, event, metadata, &payload).with_budget(timeout);
        // Whether the waker in the entry is the one of the poll we are in (nothing waited
        // since the insertion).
        let mut registered = true;
        if let Some(wait) = self.send_or_wait(peer, encoded)? {
            registered = false;
            // The request's deadline covers the wait for room in the queue too: a request
            // always ends.
            // (Boxed with it: the timer would otherwise sit in every request's future.)
            match Box::pin(tokio::time::timeout_at(Instant::from_std(deadline), wait)).await {
                Ok(sent) => sent?,
                Err(_) => {
                    // Counted once: unless the driver's timer expired it first (and counted).
                    let taken = self.pending.lock().table.take(id);
                    forget.armed = false;
                    if taken.is_some_and(|waiter| waiter.outcome.is_none()) {
                        self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(Error::Timeout {
                        event: event.to_owned(),
                        timeout,
                    });
                }
            }
        }
        self.counters.requests_sent.fetch_add(1, Ordering::Relaxed);
        let outcome = std::future::poll_fn(|cx| {
            if std::mem::take(&mut registered) {
                // Still the poll that registered our waker: whatever ends this request
                // wakes it, and the next poll looks.
                return std::task::Poll::Pending;
            }
            let mut pending = self.pending.lock();
            match pending.table.get_mut(id) {
                Some(waiter) => {
                    if let Some(outcome) = waiter.outcome.take() {
                        // Only the outcome moves out; the rest is dropped in place.
                        pending.table.discard(id);
                        return std::task::Poll::Ready(outcome);
                    }
                    match &mut waiter.waker {
                        Some(waker) if waker.will_wake(cx.waker()) => {}
                        slot => *slot = Some(cx.waker().clone()),
                    }
                    std::task::Poll::Pending
                }
                // Neither pending nor ended: cannot happen while we hold the entry; closed
                // is the honest answer if it ever did.
                None => std::task::Poll::Ready(Outcome::Failed(Error::Closed)),
            }
        })
        .await;
        forget.armed = false;
        match outcome {
            Outcome::Reply(reply) => Ok(reply),
            Outcome::ErrorReply(reply) => Err(remote_error(&reply, event)),
            Outcome::TimedOut => Err(Error::Timeout {
                event: event.to_owned(),
                timeout,
            }),
            Outcome::Failed(error) => Err(error),
        }
    }

    /// Ends the requests `select` ends in the table with `outcome`, left in each entry for
    /// its caller in the same critical section (so that a caller giving up in between never
    /// leaves an outcome nobody takes), then wakes their callers, outside it.
    fn finish(
        &self,
        select: impl FnOnce(&mut Table<Waiter>, &mut dyn FnMut(u64, &mut Waiter)) -> usize,
        outcome: impl Fn() -> Outcome,
    ) -> usize {
        let mut wakers = Vec::new();
        let count = {
            let mut pending = self.pending.lock();
            let count = select(&mut pending.table, &mut |id, waiter| {
                tracing::trace!(id, "request ended");
                waiter.outcome = Some(outcome());
                wakers.extend(waiter.waker.take());
                if let Some(stream) = &waiter.stream {
                    stream.wake();
                }
            });
            count
        };
        wakers.into_iter().for_each(std::task::Waker::wake);
        count
    }

    /// Sends a tick: no answer, no waiting beyond the transport's backpressure.
    pub(crate) async fn tick(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
    ) -> Result<()> {
        check_event(event)?;
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let encoded = Encoded::new(Kind::Tick, id, event, metadata, &payload);
        if let Some(wait) = self.send_or_wait(peer, encoded)? {
            wait.await?;
        }
        self.counters.ticks_sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Sends a tick without waiting at the high-water mark (`QueueFull` instead).
    pub(crate) async fn try_tick(&self, peer: &PeerId, event: &str, payload: Bytes) -> Result<()> {
        check_event(event)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let encoded = Encoded::new(Kind::Tick, id, event, &[], &payload);
        let pieces = encoded.pieces();
        let frames = pieces.frames();
        self.link.try_send(peer, frames.as_slice()).await?;
        self.counters.ticks_sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Fails at once every request pending on `peer` (it left) with `error`.
    /// Sends a message at once if the socket takes it (the common case: no future at all),
    /// or returns the wait for room in its queue, under the socket's backpressure policy.
    ///
    /// Why not simply `link.send(..).await`: a request's future would then carry the send's
    /// future and the encoded frames across every later await, and it is moved (often into
    /// a box) per request. Measured (callgrind, protocol client, 500 B, 100 in flight):
    /// 760 bytes per request future, and about 800 instructions per request spent copying
    /// futures around. The wait is boxed because it is the rare path.
    fn send_or_wait<'a>(
        &'a self,
        peer: &'a PeerId,
        encoded: Encoded<'a>,
    ) -> Result<Option<futures::future::BoxFuture<'a, transport::Result<()>>>> {
        let sent = {
            let pieces = encoded.pieces();
            self.link.send_now(peer, pieces.frames().as_slice())
        };
        match sent {
            Ok(()) => Ok(None),
            // Full: wait as the socket's policy says (or fail at once, if it says so).
            Err(transport::Error::QueueFull) => Ok(Some(Box::pin(async move {
                let pieces = encoded.pieces();
                self.link.send(peer, pieces.frames().as_slice()).await
            }))),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn fail_pending(&self, peer: &PeerId, error: impl Fn() -> Error) -> usize {
        self.stop_streams_of(peer);
        self.finish(
            |table, ended| table.end_where(|w| &w.peer == peer, ended),
            || Outcome::Failed(error()),
        )
    }

    /// When the driver last received a message, if it ever did.
    pub(crate) fn last_heard(&self) -> Option<std::time::Instant> {
        match self.heard.load(Ordering::Relaxed) {
            0 => None,
            nanos => {
                Some(*EPOCH.get_or_init(std::time::Instant::now) + Duration::from_nanos(nanos))
            }
        }
    }

    /// The peers whose replies completed one of our requests since the last call, each
    /// with when the last one arrived (see `Pending::answered_by`); drained.
    pub(crate) fn take_answered(&self) -> Vec<(PeerId, std::time::Instant)> {
        let answered = std::mem::take(&mut self.pending.lock().answered_by);
        let epoch = *EPOCH.get_or_init(std::time::Instant::now);
        answered
            .into_iter()
            .map(|(peer, nanos)| (peer, epoch + Duration::from_nanos(nanos)))
            .collect()
    }

    /// The connection dropped: the driver reads what had arrived, then fails every request
    /// still pending with `ConnectionLost` (their replies cannot come any more).
    pub(crate) fn connection_lost(&self) {
        self.lost.notify_one();
    }

    /// Fails every pending request with `error`.
    pub(crate) fn fail_all(&self, error: impl Fn() -> Error) -> usize {
        self.stop_all_streams();
        self.finish(
            |table, ended| table.end_all(ended),
            || Outcome::Failed(error()),
        )
    }

    /// Graceful close: refuse new requests, let handlers in progress answer, fail what is
    /// still pending with `Closed`, close the socket. Returns when all that is done.
    pub(crate) async fn close(&self) {
        self.shut_down(false).await
    }

    /// Immediate close: handlers in progress are dropped unanswered, pending requests fail
    /// with `Closed`, the socket closes. For tests of abrupt failure and for a close whose
    /// grace period ran out.
    pub(crate) async fn abort(&self) {
        self.shut_down(true).await
    }

    async fn shut_down(&self, abort: bool) {
        if abort {
            self.aborted.cancel();
        }
        self.closing.cancel();
        self.finished.cancelled().await;
    }

    fn reject(&self, peer: &PeerId, error: Error) {
        tracing::debug!(peer = %peer.short(), cause = %error, "message dropped");
        if let Some(tx) = &*self.rejected.lock() {
            let _ = tx.send((peer.clone(), error));
        }
    }

    /// Handles one received message: an answer completes its request (and sets
    /// `answered`), a request or tick goes to the receiver (its handler in the socket's
    /// table, or the receiver a layer above gave it), which returns at once. Returns
    /// whether a handler was called (it may have started a task).
    fn on_message(
        self: &Arc<Self>,
        receiver: &Receiver,
        peer: PeerId,
        key: Option<Key>,
        frames: &[Bytes],
        closing: bool,
        answered: &mut Answered,
    ) -> bool {
        let envelope = match Envelope::decode(frames, self.max_payload) {
            Ok(envelope) => envelope,
            Err(e) => {
                self.counters
                    .invalid_envelopes
                    .fetch_add(1, Ordering::Relaxed);
                // A request refused for its size only is answered, so that its caller gets
                // a typed error at once rather than its timeout.
                if let (DecodeError::TooLarge { size, max }, Some(id)) = (&e, request_id(frames)) {
                    let refusal = RemoteError::system_error(
                        RemoteError::PAYLOAD_TOO_LARGE,
                        format!("a payload of {size} bytes is over the limit of {max}"),
                    )
                    .with_limit(Limit::Payload {
                        size: *size as u64,
                        max: *max as u64,
                    });
                    self.answer(&peer, id, Err(refusal));
                }
                // An item over the limit ends its stream, rather than leave a hole in it.
                if let (DecodeError::TooLarge { size, max }, Some((Kind::StreamItem, id, flags))) =
                    (&e, kind_and_id(frames))
                {
                    self.item_too_large(&peer, id, flags, *size, *max);
                }
                self.reject(&peer, Error::InvalidEnvelope(e));
                return false;
            }
        };
        tracing::trace!(peer = %peer.short(), kind = ?envelope.kind(), id = envelope.id(), event = envelope.event(), "received");
        match envelope.kind() {
            Kind::StreamItem | Kind::Credit | Kind::Cancel => {
                self.on_stream_message(peer, envelope);
                false
            }
            Kind::Reply | Kind::Error => {
                answered.any = true;
                answered.outside_tasks |= self.on_answer(peer, envelope);
                false
            }
            Kind::Tick => {
                let incoming = Incoming::new(peer, key, envelope);
                let handled = match receiver {
                    Receiver::Table(table) => {
                        let Some(handler) = table.tick(incoming.envelope().event_bytes()) else {
                            tracing::debug!(
                                event = incoming.event(),
                                "tick with no handler dropped"
                            );
                            self.counters.no_handler.fetch_add(1, Ordering::Relaxed);
                            return false;
                        };
                        std::panic::catch_unwind(AssertUnwindSafe(|| handler(incoming)))
                    }
                    Receiver::Serve(serve) => {
                        std::panic::catch_unwind(AssertUnwindSafe(|| serve.tick(incoming)))
                    }
                };
                self.counters.ticks_handled.fetch_add(1, Ordering::Relaxed);
                if handled.is_err() {
                    self.counters.handler_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("tick handler panicked");
                }
                true
            }
            Kind::Request => {
                let id = envelope.id();
                if closing {
                    let refusal = RemoteError::system_error(
                        RemoteError::SHUTTING_DOWN,
                        "the server is closing and takes no new requests",
                    );
                    self.answer(&peer, id, Err(refusal));
                    return false;
                }
                // A table's miss is refused before a stream is opened for it; a receiver
                // of its own refuses once it has looked.
                let taker = match receiver {
                    Receiver::Table(table) => match table.request(envelope.event_bytes()) {
                        Some(handler) => Taker::Handler(handler),
                        None => {
                            self.counters.no_handler.fetch_add(1, Ordering::Relaxed);
                            let missing = RemoteError::no_handler(envelope.event());
                            self.answer(&peer, id, Err(missing));
                            return false;
                        }
                    },
                    Receiver::Serve(serve) => Taker::Serve(serve),
                };
                let streamed = envelope.reply_streamed() || envelope.body_streamed();
                let caller_gone = if streamed {
                    let Some(gone) = self.accept_stream(&peer, &envelope) else {
                        return false;
                    };
                    Some(gone)
                } else {
                    None
                };
                self.responders.fetch_add(1, Ordering::AcqRel);
                let to: Arc<dyn Answering> = Arc::clone(self) as Arc<dyn Answering>;
                let mut responder = Responder::new(Arc::clone(&to), peer.clone(), id);
                let mut incoming = Incoming::new(peer.clone(), key, envelope);
                if let Some(gone) = caller_gone {
                    responder = responder.streamed(gone);
                    let slots = streams::slots(to, peer, incoming.envelope());
                    incoming = incoming.with_streams(slots);
                }
                // A handler that panics drops its responder while unwinding, which answers
                // the request with an error: the driver goes on.
                let handled = std::panic::catch_unwind(AssertUnwindSafe(|| match taker {
                    Taker::Handler(handler) => handler(incoming, responder),
                    Taker::Serve(serve) => serve.request(incoming, responder),
                }));
                if handled.is_err() {
                    self.counters.handler_panics.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(id, "request handler panicked");
                }
                true
            }
        }
    }

    /// Sends the answer to request `id`. Answers carry no event name: the requester matches
    /// them by id alone.
    fn answer(&self, peer: &PeerId, id: u64, result: Result<Answer, RemoteError>) {
        let (kind, answer) = match result {
            Ok(answer) => (Kind::Reply, answer),
            Err(error) => (
                Kind::Error,
                Answer::from(encode_value(&error).unwrap_or_default()),
            ),
        };
        let encoded = Encoded::new(kind, id, "", &answer.metadata, &answer.payload);
        let pieces = encoded.pieces();
        // Never wait on a requester: one that does not read its answers must not make
        // them pile up here. It will see its own timeout; we count the drop.
        if let Err(e) = self.link.send_now(peer, pieces.frames().as_slice()) {
            self.counters
                .replies_dropped
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %peer.short(), id, cause = %e, "reply not delivered");
        }
    }

    /// A reply or error reply arrived: complete the matching request, if any. Whether its
    /// caller is no task (see [`Answered::outside_tasks`]).
    fn on_answer(&self, peer: PeerId, envelope: Envelope) -> bool {
        let id = envelope.id();
        let (waker, outside_task) = {
            let mut pending = self.pending.lock();
            // Only the peer the request went to may answer it.
            match pending.table.complete_if(id, |w| w.peer == peer) {
                Some(waiter) => {
                    waiter.outcome = Some(match envelope.kind() {
                        Kind::Error => Outcome::ErrorReply(envelope),
                        _ => Outcome::Reply(envelope),
                    });
                    if let Some(stream) = &waiter.stream {
                        stream.wake();
                    }
                    let waker = waiter.waker.take();
                    let outside_task = waiter.outside_task;
                    // A Dealer's one remote has an empty id: only a Server keeps these.
                    if !peer.0.is_empty() {
                        let at = self.heard.load(Ordering::Relaxed);
                        match pending.answered_by.get_mut(&peer) {
                            Some(last) => *last = at,
                            None => {
                                pending.answered_by.insert(peer, at);
                            }
                        }
                    }
                    (waker, outside_task)
                }
                None => {
                    drop(pending);
                    self.counters
                        .unmatched_replies
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %peer.short(), id, "reply matched no pending request; dropped");
                    return false;
                }
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        outside_task
    }
}

/// Who takes a request: its handler in the socket's table, or the socket's receiver.
enum Taker<'a> {
    Handler(&'a RequestHandler),
    Serve(&'a Arc<dyn Serve>),
}

/// What the first message of a batch completed, for the driver's choice of how to let
/// the woken callers run.
#[derive(Debug, Default, Clone, Copy)]
struct Answered {
    /// A request was answered.
    any: bool,
    /// A request whose caller is no task was answered (`tokio::task::try_id` was `None`
    /// when it was sent): the runtime's `block_on` future, which runs only once the run
    /// queue empties or the runtime polls its I/O driver.
    outside_tasks: bool,
}

impl<L: Link> Answering for Conversation<L> {
    fn answer(&self, peer: &PeerId, id: u64, result: Result<Answer, RemoteError>) {
        self.counters
            .requests_handled
            .fetch_add(1, Ordering::Relaxed);
        Conversation::answer(self, peer, id, result);
    }

    fn released(&self) {
        if self.responders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    fn panicked(&self) {
        self.counters.handler_panics.fetch_add(1, Ordering::Relaxed);
    }

    fn unhandled(&self) {
        self.counters.no_handler.fetch_add(1, Ordering::Relaxed);
    }

    fn abort(&self) -> &CancellationToken {
        &self.aborted
    }

    fn poll_reply_credit(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>> {
        Conversation::poll_reply_credit(self, peer, id, cx)
    }

    fn send_item<'a>(
        &'a self,
        peer: &'a PeerId,
        id: u64,
        flags: u8,
        item: &'a [u8],
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        streams::Calling::send_item(self, peer, id, flags, item)
    }

    fn poll_body_item(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<crate::handler::BodyItem>>> {
        Conversation::poll_body_item(self, peer, id, cx)
    }

    fn body_credit(self: Arc<Self>, peer: &PeerId, id: u64, n: u32) {
        self.control(
            peer,
            Kind::Credit,
            id,
            crate::envelope::FLAG_BODY_STREAMED,
            &crate::credit::encode_grant(n),
        );
    }

    fn close_stream(&self, peer: &PeerId, id: u64) {
        self.close_callee(peer, id);
    }
}

mod direct;
mod drive;
mod helpers;
mod pending;
mod streams;
#[cfg(test)]
mod tests;
