//! The caller's side of streams: what its handles need of the conversation ([`Calling`]),
//! the streamed reply it reads ([`ReplyStream`]), and opening a stream, a stream both ways
//! and an upload.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

use super::*;

/// What the caller's handles need from the conversation (a trait object: the conversation
/// is generic over its socket, the handles are not).
pub(crate) trait Calling: Send + Sync {
    /// The next item of the streamed reply of request `id`, or how it ended.
    fn poll_reply(&self, id: u64, cx: &mut Context<'_>) -> Poll<Next>;
    /// Takes one credit for the body of request `id`; `Err` with the outcome when the
    /// request ended first. `apart`: the body is sent by another task than the one that
    /// waits for the request's end (a stream both ways), so its waker is kept apart.
    fn poll_body_credit(
        &self,
        id: u64,
        apart: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Outcome>>;
    /// How request `id` ended, once it did.
    fn poll_outcome(&self, id: u64, cx: &mut Context<'_>) -> Poll<Outcome>;
    /// Sends one item (`flags`: body, end) of stream `id` to `peer`, waiting at the
    /// socket's high-water mark.
    fn send_item<'a>(
        &'a self,
        peer: &'a PeerId,
        id: u64,
        flags: u8,
        item: &'a [u8],
    ) -> BoxFuture<'a, Result<()>>;
    /// Sends a credit or cancel, never lost to a full queue (a task waits for room then).
    fn control(self: Arc<Self>, peer: &PeerId, kind: Kind, id: u64, flags: u8, payload: &[u8]);
    /// The caller gave up on request `id`: its entry goes, and the callee is told unless
    /// the request had ended.
    fn give_up(self: Arc<Self>, peer: &PeerId, id: u64);
}

/// One step of a streamed reply.
pub(crate) enum Next {
    /// An item, and the credit to grant for it, if any.
    Item(Bytes, Option<u32>),
    /// The request ended.
    Ended(Outcome),
}

impl<L: Link> Calling for Conversation<L> {
    fn poll_reply(&self, id: u64, cx: &mut Context<'_>) -> Poll<Next> {
        let mut pending = self.pending.lock();
        let Some(waiter) = pending.table.get_mut(id) else {
            return Poll::Ready(Next::Ended(Outcome::Failed(Error::Closed)));
        };
        if let Some(inbox) = waiter.stream.as_mut().and_then(|s| s.recv.as_mut()) {
            if let Some(item) = inbox.items.pop_front() {
                let grant = inbox.window.consume();
                return Poll::Ready(Next::Item(item, grant));
            }
        }
        if let Some(outcome) = waiter.outcome.take() {
            pending.table.discard(id);
            return Poll::Ready(Next::Ended(outcome));
        }
        match &mut waiter.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    fn poll_body_credit(
        &self,
        id: u64,
        apart: bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Outcome>> {
        let mut pending = self.pending.lock();
        let Some(waiter) = pending.table.get_mut(id) else {
            return Poll::Ready(Err(Outcome::Failed(Error::Closed)));
        };
        if waiter.outcome.is_some() {
            // Ended first (an early answer, a deadline): the caller takes it next.
            return Poll::Ready(Err(Outcome::Failed(Error::Closed)));
        }
        let Some(stream) = waiter.stream.as_mut() else {
            return Poll::Ready(Err(Outcome::Failed(Error::Closed)));
        };
        if stream.send.as_mut().is_some_and(Credit::take) {
            return Poll::Ready(Ok(()));
        }
        let slot = if apart {
            &mut stream.send_waker
        } else {
            &mut waiter.waker
        };
        match slot {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    fn poll_outcome(&self, id: u64, cx: &mut Context<'_>) -> Poll<Outcome> {
        let mut pending = self.pending.lock();
        let Some(waiter) = pending.table.get_mut(id) else {
            return Poll::Ready(Outcome::Failed(Error::Closed));
        };
        if let Some(outcome) = waiter.outcome.take() {
            pending.table.discard(id);
            return Poll::Ready(outcome);
        }
        match &mut waiter.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    fn send_item<'a>(
        &'a self,
        peer: &'a PeerId,
        id: u64,
        flags: u8,
        item: &'a [u8],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let encoded = Encoded::new(Kind::StreamItem, id, "", &[], item).with_flags(flags);
            {
                let pieces = encoded.pieces();
                if self.link.send_now(peer, pieces.frames().as_slice()).is_ok() {
                    self.counters
                        .stream_items_sent
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
            // Full (or failing): wait as the socket's policy says; a producer faster than
            // the network waits here rather than buffering.
            let pieces = encoded.pieces();
            self.link.send(peer, pieces.frames().as_slice()).await?;
            self.counters
                .stream_items_sent
                .fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    fn control(self: Arc<Self>, peer: &PeerId, kind: Kind, id: u64, flags: u8, payload: &[u8]) {
        Conversation::control(&self, peer, kind, id, flags, payload);
    }

    fn give_up(self: Arc<Self>, peer: &PeerId, id: u64) {
        let was_pending = {
            let mut pending = self.pending.lock();
            let was_pending = pending.table.is_pending(id);
            pending.table.discard(id);
            was_pending
        };
        if was_pending {
            self.counters
                .streams_cancelled
                .fetch_add(1, Ordering::Relaxed);
            Conversation::control(&self, peer, Kind::Cancel, id, 0, &[]);
        }
    }
}

/// Turns how a request ended into its caller's result.
fn outcome_result(outcome: Outcome, event: &str, timeout: Duration) -> Result<Envelope> {
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

/// A streamed reply, as its caller reads it: each item as it arrives, then the end. The
/// handler's error (or the deadline, a peer that left, a protocol violation) comes as the
/// last item, an `Err`; a final reply with a payload gives that payload as the last item.
///
/// It holds at most its window of items: the callee sends one per credit, and credit is
/// granted back as the items are read (half a window at a time), so a slow reader slows
/// the handler. Dropping it before the end cancels the handler (its sink reports
/// [`Error::Cancelled`]).
pub struct ReplyStream {
    core: Arc<dyn Calling>,
    peer: PeerId,
    id: u64,
    event: Box<str>,
    timeout: Duration,
    idle: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    /// A stream both ways: the sending of the body, driven by this stream's polls.
    body: Option<BoxFuture<'static, ()>>,
    /// The stream ended (its last item was given): nothing more, nothing to cancel.
    done: bool,
}

impl ReplyStream {
    /// The request id of this stream.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Ends the stream here, telling the handler (as dropping it does).
    pub fn cancel(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if !std::mem::replace(&mut self.done, true) {
            Arc::clone(&self.core).give_up(&self.peer, self.id);
        }
    }
}

impl futures::Stream for ReplyStream {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(body) = &mut self.body {
            if body.as_mut().poll(cx).is_ready() {
                self.body = None;
            }
        }
        match self.core.poll_reply(self.id, cx) {
            Poll::Ready(Next::Item(item, grant)) => {
                if let Some(grant) = grant {
                    Arc::clone(&self.core).control(
                        &self.peer,
                        Kind::Credit,
                        self.id,
                        0,
                        &encode_grant(grant),
                    );
                }
                if let Some((idle, sleep)) = &mut self.idle {
                    let at = Instant::now() + *idle;
                    sleep.as_mut().reset(at);
                }
                Poll::Ready(Some(Ok(item)))
            }
            Poll::Ready(Next::Ended(outcome)) => {
                self.done = true;
                match outcome_result(outcome, &self.event, self.timeout) {
                    Ok(reply) if reply.payload().is_empty() => Poll::Ready(None),
                    Ok(reply) => Poll::Ready(Some(Ok(reply.into_payload()))),
                    Err(e) => Poll::Ready(Some(Err(e))),
                }
            }
            Poll::Pending => {
                let expired = match &mut self.idle {
                    Some((idle, sleep)) => std::future::Future::poll(sleep.as_mut(), cx)
                        .is_ready()
                        .then_some(*idle),
                    None => None,
                };
                match expired {
                    Some(idle) => {
                        self.stop();
                        Poll::Ready(Some(Err(Error::IdleTimeout {
                            event: self.event.to_string(),
                            idle,
                        })))
                    }
                    None => Poll::Pending,
                }
            }
        }
    }
}

impl Drop for ReplyStream {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for ReplyStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyStream")
            .field("id", &self.id)
            .field("event", &self.event)
            .finish()
    }
}

/// Sends `items` as the body of stream `id`, each when credit allows, then its end; stops
/// when the request ends first. A failed send gives the stream up (the callee is told).
async fn send_body(
    core: Arc<dyn Calling>,
    peer: PeerId,
    id: u64,
    items: impl futures::Stream<Item = Bytes> + Send + 'static,
) {
    use futures::StreamExt;
    let mut items = std::pin::pin!(items);
    while let Some(item) = items.next().await {
        if std::future::poll_fn(|cx| core.poll_body_credit(id, true, cx))
            .await
            .is_err()
        {
            return;
        }
        if core
            .send_item(&peer, id, FLAG_BODY_STREAMED, &item)
            .await
            .is_err()
        {
            Arc::clone(&core).give_up(&peer, id);
            return;
        }
    }
    if core
        .send_item(&peer, id, FLAG_BODY_STREAMED | FLAG_END, &[])
        .await
        .is_err()
    {
        core.give_up(&peer, id);
    }
}

/// Removes an upload's entry (and tells the callee) if its caller stops waiting early.
struct GiveUp {
    core: Arc<dyn Calling>,
    peer: PeerId,
    id: u64,
    armed: bool,
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        if self.armed {
            Arc::clone(&self.core).give_up(&self.peer, self.id);
        }
    }
}

impl<L: Link> Conversation<L> {
    /// Opens a streamed reply (see [`ReplyStream`]).
    pub(crate) async fn request_stream(
        self: &Arc<Self>,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        let id = self
            .open_stream(peer, event, metadata, &payload, &options, (true, false))
            .await?;
        let idle = options.idle_timeout.map(|idle| {
            (
                idle,
                Box::pin(tokio::time::sleep_until(Instant::now() + idle)),
            )
        });
        Ok(ReplyStream {
            core: Arc::clone(self) as Arc<dyn Calling>,
            peer: peer.clone(),
            id,
            event: event.into(),
            timeout: options.timeout,
            idle,
            body: None,
            done: false,
        })
    }

    /// Opens a stream both ways: `items` go as the request's body (each as the callee
    /// grants credit) while the reply comes back as a stream. The body is sent as the
    /// returned stream is polled: read the reply to keep both moving.
    pub(crate) async fn request_bidi(
        self: &Arc<Self>,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        let id = self
            .open_stream(peer, event, metadata, &payload, &options, (true, true))
            .await?;
        let idle = options.idle_timeout.map(|idle| {
            (
                idle,
                Box::pin(tokio::time::sleep_until(Instant::now() + idle)),
            )
        });
        let core = Arc::clone(self) as Arc<dyn Calling>;
        let body = send_body(Arc::clone(&core), peer.clone(), id, items);
        Ok(ReplyStream {
            core,
            peer: peer.clone(),
            id,
            event: event.into(),
            timeout: options.timeout,
            idle,
            body: Some(Box::pin(body)),
            done: false,
        })
    }

    /// Sends a request whose body is `items`, one per credit the callee grants, then waits
    /// for its one reply. The callee may answer before the body's end (a refusal): the
    /// upload stops there.
    pub(crate) async fn upload(
        self: &Arc<Self>,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        let id = self
            .open_stream(peer, event, metadata, &payload, &options, (false, true))
            .await?;
        let core = Arc::clone(self) as Arc<dyn Calling>;
        let mut guard = GiveUp {
            core: Arc::clone(&core),
            peer: peer.clone(),
            id,
            armed: true,
        };
        let mut items = std::pin::pin!(items);
        let early = loop {
            // The next item, unless the request ends first.
            let next = std::future::poll_fn(|cx| {
                if let Poll::Ready(outcome) = core.poll_outcome(id, cx) {
                    return Poll::Ready(Err(outcome));
                }
                items.as_mut().poll_next(cx).map(Ok)
            })
            .await;
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => {
                    // The end takes no credit.
                    core.send_item(peer, id, FLAG_BODY_STREAMED | FLAG_END, &[])
                        .await?;
                    break None;
                }
                Err(outcome) => break Some(outcome),
            };
            let credit = std::future::poll_fn(|cx| core.poll_body_credit(id, false, cx)).await;
            if credit.is_err() {
                // Ended while waiting: its outcome is taken below.
                break None;
            }
            core.send_item(peer, id, FLAG_BODY_STREAMED, &item).await?;
        };
        let outcome = match early {
            Some(outcome) => outcome,
            None => std::future::poll_fn(|cx| core.poll_outcome(id, cx)).await,
        };
        guard.armed = false;
        outcome_result(outcome, event, options.timeout)
    }
}
