//! Streams in the conversation: the state of each open stream at either end, what the
//! dispatch does with stream items, credit and cancels; the caller's and callee's handles
//! ([`ReplyStream`] in `streams/caller.rs`, [`ItemSink`] and [`ItemStream`] in
//! `streams/callee.rs`).
//!
//! One mechanism serves both directions. A stream's state ([`Ends`]) has a sending side
//! (credit, [`Credit`]) and a receiving side (held items, [`Window`]), either or both:
//!
//! - the caller's state lives in its request's entry of the pending table, so the request's
//!   deadline bounds the whole stream and everything that ends a request (its reply, its
//!   deadline, a peer that left, a lost connection, the close) ends the stream too;
//! - the callee's state lives in a map keyed by the caller's routing id and the request id,
//!   from when the request arrives to when its handler answers.
//!
//! Which of the two an item or a credit belongs to is in its flags (bit 3: the body, from
//! the caller; clear: the reply, from the callee), never guessed from the id: the two ends'
//! ids come from different counters.

use std::collections::{HashMap, VecDeque};
use std::task::{Context, Poll, Waker};

use tokio_util::sync::CancellationToken;

use super::*;
use crate::credit::{encode_grant, Credit, Violation, Window, DEFAULT_WINDOW};
use crate::envelope::{FLAG_BODY_STREAMED, FLAG_END, FLAG_REPLY_STREAMED};
use crate::error::Limit;
use crate::handler::Slots;

mod callee;
mod caller;

pub(crate) use callee::slots;
pub use callee::{ItemSink, ItemStream};
pub(crate) use caller::Calling;
pub use caller::ReplyStream;

/// Streamed requests a callee keeps open at once by default, over all its peers: each holds
/// a handler and up to a window of items, so this bounds what many idle streams can hold.
pub const DEFAULT_MAX_STREAMS: usize = 1024;

/// One stream at one end: what it may send and what it holds.
#[derive(Default)]
pub(crate) struct Ends {
    /// Set when this end sends items: the credit its peer granted.
    send: Option<Credit>,
    /// Set when this end receives items.
    recv: Option<Inbox>,
    /// The task waiting for credit (when it is not the request's own waker).
    send_waker: Option<Waker>,
    /// The task waiting for items (callee side; the caller's waits in its `Waiter`).
    recv_waker: Option<Waker>,
    /// Callee side: why the stream stopped before its handler answered.
    stopped: Option<Stop>,
    /// Callee side: cancelled when the caller cancels the stream or leaves, so a handler
    /// waiting between items is stopped, not only its next send.
    caller_gone: CancellationToken,
}

/// Items received and not consumed yet, bounded by the window.
pub(crate) struct Inbox {
    window: Window,
    items: VecDeque<Bytes>,
    /// The body's end item arrived.
    ended: bool,
}

impl Inbox {
    fn new(window: u32) -> Inbox {
        Inbox {
            window: Window::new(window),
            items: VecDeque::new(),
            ended: false,
        }
    }
}

/// Why a callee's stream stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// The caller sent a cancel, or left.
    Cancelled,
    /// The conversation closed.
    Closed,
    /// The caller broke the rules.
    Violation(Violation),
}

impl Stop {
    fn error(self) -> Error {
        match self {
            Stop::Cancelled => Error::Cancelled,
            Stop::Closed => Error::Closed,
            Stop::Violation(v) => Error::Violation(v),
        }
    }
}

impl Ends {
    /// Wakes whoever waits on this stream (without taking the registrations: the next
    /// poll replaces them).
    pub(super) fn wake(&self) {
        for waker in [&self.send_waker, &self.recv_waker].into_iter().flatten() {
            waker.wake_by_ref();
        }
    }
}

/// The callee's open streams, by caller and request id.
pub(crate) type Callee = HashMap<(PeerId, u64), Ends, foldhash::fast::RandomState>;

/// How a caller's stream is opened.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Bounds the whole stream, from the request to its last item (or, for an upload, to
    /// its reply).
    pub timeout: Duration,
    /// Items the caller holds at most for a streamed reply (its credit window; 0 counts as
    /// 1, more than [`MAX_WINDOW`](crate::credit::MAX_WINDOW) as that). Memory per stream is
    /// at most `window` x the largest payload.
    pub window: u32,
    /// The most time to wait for the next item of a streamed reply (`None`: the timeout
    /// alone bounds it).
    pub idle_timeout: Option<Duration>,
}

impl StreamOptions {
    /// A stream bounded by `timeout`, with the default window and no idle timeout.
    pub fn new(timeout: Duration) -> StreamOptions {
        StreamOptions {
            timeout,
            window: DEFAULT_WINDOW,
            idle_timeout: None,
        }
    }

    /// The same options with a window of `items`.
    pub fn window(mut self, items: u32) -> StreamOptions {
        self.window = items;
        self
    }

    /// The same options with an idle timeout.
    pub fn idle_timeout(mut self, idle: Duration) -> StreamOptions {
        self.idle_timeout = Some(idle);
        self
    }
}

impl<L: Link> Conversation<L> {
    /// Opens a stream to `peer`: sends the request with its stream flags and, for a
    /// streamed reply, the first credit right behind it (so the first item is one round
    /// trip away). Returns the request id.
    pub(crate) async fn open_stream(
        self: &Arc<Self>,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: &Bytes,
        options: &StreamOptions,
        (reply, body): (bool, bool),
    ) -> Result<u64> {
        check_event(event)?;
        if self.is_closing() {
            return Err(Error::Closed);
        }
        let deadline = (Instant::now() + options.timeout).into_std();
        let mut ends = Ends::default();
        let mut grant = None;
        if reply {
            let mut inbox = Inbox::new(options.window);
            grant = Some(inbox.window.open());
            ends.recv = Some(inbox);
        }
        if body {
            ends.send = Some(Credit::new());
        }
        let id = {
            let mut pending = self.pending.lock();
            let id = pending.table.insert(
                deadline,
                Waiter {
                    peer: peer.clone(),
                    waker: None,
                    outcome: None,
                    outside_task: false,
                    stream: Some(Box::new(ends)),
                },
            );
            if pending.armed.is_none_or(|armed| deadline < armed) {
                self.timer_reset.notify_one();
            }
            id
        };
        let mut flags = 0;
        if reply {
            flags |= FLAG_REPLY_STREAMED;
        }
        if body {
            flags |= FLAG_BODY_STREAMED;
        }
        let encoded = Encoded::new(Kind::Request, id, event, metadata, payload)
            .with_budget(options.timeout)
            .with_flags(flags);
        let sent = match self.send_or_wait(peer, encoded) {
            Ok(None) => Ok(()),
            Ok(Some(wait)) => wait.await.map_err(Error::from),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            self.pending.lock().table.discard(id);
            return Err(e);
        }
        self.counters.requests_sent.fetch_add(1, Ordering::Relaxed);
        self.counters.streams_opened.fetch_add(1, Ordering::Relaxed);
        if let Some(grant) = grant {
            self.control(peer, Kind::Credit, id, 0, &grant.payload());
        }
        Ok(id)
    }

    /// Sends a credit or a cancel now, or (the queue being full) from a task that waits for
    /// room: a lost credit would stall its stream for good.
    pub(super) fn control(
        self: &Arc<Self>,
        peer: &PeerId,
        kind: Kind,
        id: u64,
        flags: u8,
        payload: &[u8],
    ) {
        let encoded = Encoded::new(kind, id, "", &[], payload).with_flags(flags);
        let sent = {
            let pieces = encoded.pieces();
            self.link.send_now(peer, pieces.frames().as_slice())
        };
        match sent {
            Ok(()) => {}
            Err(transport::Error::QueueFull) => {
                let this = Arc::clone(self);
                let peer = peer.clone();
                let payload = payload.to_vec();
                tokio::spawn(async move {
                    let encoded = Encoded::new(kind, id, "", &[], &payload).with_flags(flags);
                    let pieces = encoded.pieces();
                    if let Err(e) = this.link.send(&peer, pieces.frames().as_slice()).await {
                        tracing::debug!(peer = %peer.short(), id, cause = %e, "stream control not delivered");
                    }
                });
            }
            Err(e) => {
                tracing::debug!(peer = %peer.short(), id, cause = %e, "stream control not delivered")
            }
        }
    }

    /// A stream item, credit or cancel arrived (the dispatch's share of streams).
    pub(super) fn on_stream_message(self: &Arc<Self>, peer: PeerId, envelope: Envelope) {
        let id = envelope.id();
        let handled = match (envelope.kind(), envelope.body_streamed()) {
            (Kind::StreamItem, false) => self.on_reply_item(&peer, id, envelope.into_payload()),
            (Kind::Credit, true) => self.on_body_credit(&peer, id, envelope.payload()),
            (Kind::StreamItem, true) => {
                let end = envelope.is_end();
                self.on_body_item(&peer, id, end, envelope.into_payload())
            }
            (Kind::Credit, false) => self.on_reply_credit(&peer, id, envelope.payload()),
            (Kind::Cancel, _) => {
                self.stop_callee(|key| key == &(peer.clone(), id), Stop::Cancelled) > 0
            }
            _ => false,
        };
        if !handled {
            self.counters
                .stream_items_dropped
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(peer = %peer.short(), id, "stream message for no open stream; dropped");
        }
    }

    /// Caller side: an item of a streamed reply.
    fn on_reply_item(self: &Arc<Self>, peer: &PeerId, id: u64, item: Bytes) -> bool {
        let mut pending = self.pending.lock();
        if !pending.table.is_pending(id) {
            return false;
        }
        let Some(waiter) = pending.table.get_mut(id) else {
            return false;
        };
        if &waiter.peer != peer {
            return false;
        }
        let Some(inbox) = waiter.stream.as_mut().and_then(|s| s.recv.as_mut()) else {
            return false;
        };
        if item.len() > self.max_payload {
            let violation = Violation::ItemTooLarge {
                size: item.len(),
                max: self.max_payload,
            };
            drop(pending);
            self.violated(peer, id, violation);
            return true;
        }
        match inbox.window.arrive(item.len()) {
            Ok(()) => {
                inbox.items.push_back(item);
                self.counters
                    .stream_items_received
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(waker) = &waiter.waker {
                    waker.wake_by_ref();
                }
            }
            Err(violation) => {
                drop(pending);
                self.violated(peer, id, violation);
            }
        }
        true
    }

    /// Caller side: credit for the body of request `id`.
    fn on_body_credit(self: &Arc<Self>, peer: &PeerId, id: u64, payload: &[u8]) -> bool {
        let mut pending = self.pending.lock();
        if !pending.table.is_pending(id) {
            return false;
        }
        let Some(waiter) = pending.table.get_mut(id) else {
            return false;
        };
        if &waiter.peer != peer {
            return false;
        }
        let Some(stream) = waiter.stream.as_mut() else {
            return false;
        };
        let Some(credit) = stream.send.as_mut() else {
            return false;
        };
        match credit.receive(payload) {
            Ok(()) => match &stream.send_waker {
                Some(waker) => waker.wake_by_ref(),
                None => {
                    if let Some(waker) = &waiter.waker {
                        waker.wake_by_ref();
                    }
                }
            },
            Err(violation) => {
                drop(pending);
                self.violated(peer, id, violation);
            }
        }
        true
    }

    /// Caller side: the callee broke the rules on stream `id`: the stream ends with the
    /// violation and the callee is told to stop.
    fn violated(self: &Arc<Self>, peer: &PeerId, id: u64, violation: Violation) {
        tracing::debug!(peer = %peer.short(), id, %violation, "stream ended: protocol violation");
        self.counters
            .stream_violations
            .fetch_add(1, Ordering::Relaxed);
        let ended = self.finish(
            |table, ended| match table.complete(id) {
                Some(waiter) => {
                    ended(id, waiter);
                    1
                }
                None => 0,
            },
            || Outcome::Failed(Error::Violation(violation)),
        );
        if ended > 0 {
            self.control(peer, Kind::Cancel, id, 0, &[]);
        }
    }

    /// Callee side: an item of a streamed body.
    fn on_body_item(&self, peer: &PeerId, id: u64, end: bool, item: Bytes) -> bool {
        let mut callee = self.callee.lock();
        let Some(ends) = callee.get_mut(&(peer.clone(), id)) else {
            return false;
        };
        let Some(inbox) = ends.recv.as_mut() else {
            return false;
        };
        if ends.stopped.is_some() || inbox.ended {
            return false;
        }
        let outcome = if end {
            inbox.ended = true;
            if item.is_empty() {
                Ok(())
            } else {
                Err(Violation::BadEnd)
            }
        } else if item.len() > self.max_payload {
            Err(Violation::ItemTooLarge {
                size: item.len(),
                max: self.max_payload,
            })
        } else {
            inbox.window.arrive(item.len()).map(|()| {
                inbox.items.push_back(item);
                self.counters
                    .stream_items_received
                    .fetch_add(1, Ordering::Relaxed);
            })
        };
        if let Err(violation) = outcome {
            tracing::debug!(peer = %peer.short(), id, %violation, "stream body stopped: protocol violation");
            self.counters
                .stream_violations
                .fetch_add(1, Ordering::Relaxed);
            ends.stopped = Some(Stop::Violation(violation));
        }
        ends.wake();
        true
    }

    /// Callee side: credit for a streamed reply.
    fn on_reply_credit(&self, peer: &PeerId, id: u64, payload: &[u8]) -> bool {
        let mut callee = self.callee.lock();
        let Some(ends) = callee.get_mut(&(peer.clone(), id)) else {
            return false;
        };
        let Some(credit) = ends.send.as_mut() else {
            return false;
        };
        if let Err(violation) = credit.receive(payload) {
            tracing::debug!(peer = %peer.short(), id, %violation, "streamed reply stopped: protocol violation");
            self.counters
                .stream_violations
                .fetch_add(1, Ordering::Relaxed);
            ends.stopped.get_or_insert(Stop::Violation(violation));
        }
        ends.wake();
        true
    }

    /// Callee side: stops the open streams whose key `select` picks (a cancel, a peer that
    /// left, the close); their handlers see it at their next send or read, and a cancel
    /// stops them ([`Responder::aborted`]). Returns how many.
    fn stop_callee(&self, select: impl Fn(&(PeerId, u64)) -> bool, stop: Stop) -> usize {
        let mut callee = self.callee.lock();
        let mut count = 0;
        for (key, ends) in callee.iter_mut() {
            if select(key) && ends.stopped.is_none() {
                ends.stopped = Some(stop);
                ends.wake();
                if matches!(stop, Stop::Cancelled) {
                    ends.caller_gone.cancel();
                }
                count += 1;
            }
        }
        if count > 0 && matches!(stop, Stop::Cancelled) {
            self.counters
                .streams_cancelled
                .fetch_add(count as u64, Ordering::Relaxed);
        }
        count
    }

    /// An item over the payload limit (refused by the decoder) ends its stream.
    pub(super) fn item_too_large(
        self: &Arc<Self>,
        peer: &PeerId,
        id: u64,
        flags: u8,
        size: usize,
        max: usize,
    ) {
        let violation = Violation::ItemTooLarge { size, max };
        if flags & FLAG_BODY_STREAMED != 0 {
            let stopped =
                self.stop_callee(|key| key == &(peer.clone(), id), Stop::Violation(violation));
            if stopped > 0 {
                self.counters
                    .stream_violations
                    .fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let ours = {
                let pending = self.pending.lock();
                pending.table.is_pending(id)
                    && pending
                        .table
                        .get(id)
                        .is_some_and(|w| &w.peer == peer && w.stream.is_some())
            };
            if ours {
                self.violated(peer, id, violation);
            }
        }
    }

    /// Callee side: stops every open stream of `peer` (it left).
    pub(super) fn stop_streams_of(&self, peer: &PeerId) {
        self.stop_callee(|(p, _)| p == peer, Stop::Cancelled);
    }

    /// Callee side: stops every open stream (the conversation ends).
    pub(super) fn stop_all_streams(&self) {
        self.stop_callee(|_| true, Stop::Closed);
    }

    /// Callee side: a streamed request arrived. Registers its stream (granting the body's
    /// window at once); `Some` when its handler may run, with what tells it the caller is
    /// gone. A refusal is answered or dropped here.
    pub(super) fn accept_stream(
        self: &Arc<Self>,
        peer: &PeerId,
        envelope: &Envelope,
    ) -> Option<CancellationToken> {
        let id = envelope.id();
        let mut ends = Ends::default();
        let mut grant = None;
        if envelope.reply_streamed() {
            ends.send = Some(Credit::new());
        }
        if envelope.body_streamed() {
            let mut inbox = Inbox::new(self.stream_window.load(Ordering::Relaxed));
            grant = Some(inbox.window.open());
            ends.recv = Some(inbox);
        }
        let gone = {
            let mut callee = self.callee.lock();
            let key = (peer.clone(), id);
            if callee.contains_key(&key) {
                drop(callee);
                // The open stream is left alone: the reuse is the sender's fault, and
                // answering it would end the open one.
                self.counters
                    .stream_violations
                    .fetch_add(1, Ordering::Relaxed);
                self.reject(peer, Error::Violation(Violation::ReusedId));
                return None;
            }
            let max = self.max_streams.load(Ordering::Relaxed);
            if callee.len() >= max {
                drop(callee);
                self.counters
                    .streams_refused
                    .fetch_add(1, Ordering::Relaxed);
                let refusal = RemoteError::system_error(
                    RemoteError::TOO_MANY_STREAMS,
                    format!("{max} streams are open; no more accepted"),
                )
                .with_limit(Limit::Streams { max: max as u64 });
                self.answer(peer, id, Err(refusal));
                return None;
            }
            let gone = ends.caller_gone.clone();
            callee.insert(key, ends);
            gone
        };
        self.counters
            .streams_accepted
            .fetch_add(1, Ordering::Relaxed);
        if let Some(grant) = grant {
            self.control(peer, Kind::Credit, id, FLAG_BODY_STREAMED, &grant.payload());
        }
        Some(gone)
    }

    /// Callee side: takes one credit for the streamed reply of `(peer, id)`, or says why
    /// the stream stopped.
    pub(super) fn poll_reply_credit(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<()>> {
        if self.aborted.is_cancelled() {
            return Poll::Ready(Err(Error::Closed));
        }
        let mut callee = self.callee.lock();
        let Some(ends) = callee.get_mut(&(peer.clone(), id)) else {
            return Poll::Ready(Err(Error::Closed));
        };
        if let Some(stop) = ends.stopped {
            return Poll::Ready(Err(stop.error()));
        }
        match ends.send.as_mut() {
            Some(credit) if credit.available() > 0 => {
                credit.take();
                Poll::Ready(Ok(()))
            }
            Some(_) => {
                match &mut ends.send_waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    slot => *slot = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            None => Poll::Ready(Err(Error::Closed)),
        }
    }

    /// Callee side: the next item of the body of `(peer, id)`, `None` after its end, and
    /// the credit to grant for it.
    pub(super) fn poll_body_item(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<crate::handler::BodyItem>>> {
        let mut callee = self.callee.lock();
        let Some(ends) = callee.get_mut(&(peer.clone(), id)) else {
            return Poll::Ready(Some(Err(Error::Closed)));
        };
        let Some(inbox) = ends.recv.as_mut() else {
            return Poll::Ready(None);
        };
        if let Some(item) = inbox.items.pop_front() {
            let grant = inbox.window.consume();
            return Poll::Ready(Some(Ok((item, grant))));
        }
        if let Some(stop) = ends.stopped {
            return Poll::Ready(Some(Err(stop.error())));
        }
        if inbox.ended {
            return Poll::Ready(None);
        }
        match &mut ends.recv_waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Callee side: the handler answered (or its responder went): the stream is closed.
    pub(super) fn close_callee(&self, peer: &PeerId, id: u64) {
        self.callee.lock().remove(&(peer.clone(), id));
    }
}
