//! The callee's side of streams: the handles a handler gets, the sink its items go to
//! ([`ItemSink`]) and the body it reads ([`ItemStream`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use super::*;

/// Where a streaming handler sends its items. [`send`](Self::send) waits for credit (the
/// caller reads slower than the handler produces) and for room in the socket's queue (the
/// network is slower), so a handler never buffers more than the caller's window.
///
/// A send fails with [`Error::Cancelled`] once the caller dropped its stream, sent a
/// cancel or left, with [`Error::Closed`] when the conversation closes or the request was
/// answered already, and with [`Error::Violation`] when the caller broke the credit rules:
/// the handler should stop then (the node layer stops a cancelled one wherever it waits:
/// [`Responder::aborted`]). The stream ends when the handler answers its request.
pub struct ItemSink {
    core: Arc<dyn Answering>,
    peer: PeerId,
    id: u64,
    /// When the caller stops waiting (its time budget from the request's arrival).
    deadline: Option<Instant>,
    event: Box<str>,
    budget: Duration,
}

impl ItemSink {
    /// Sends one item, waiting for credit and for room in the queue.
    pub async fn send(&mut self, item: Bytes) -> Result<()> {
        let wait = std::future::poll_fn(|cx| self.core.poll_reply_credit(&self.peer, self.id, cx));
        match self.deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, wait).await {
                Ok(credit) => credit?,
                Err(_) => {
                    return Err(Error::Timeout {
                        event: self.event.to_string(),
                        timeout: self.budget,
                    })
                }
            },
            None => wait.await?,
        }
        self.core.send_item(&self.peer, self.id, 0, &item).await
    }

    /// The request id of this stream.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl std::fmt::Debug for ItemSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemSink").field("id", &self.id).finish()
    }
}

/// A request's streamed body, as its handler reads it: each item as it arrives, `None`
/// after the caller's last. Credit is granted back as the handler reads (half a window at a
/// time), so the caller never sends more than the window ahead of the handler. A caller
/// that cancels or leaves ends it with an `Err` ([`Error::Cancelled`]).
pub struct ItemStream {
    core: Arc<dyn Answering>,
    peer: PeerId,
    id: u64,
    done: bool,
}

impl ItemStream {
    /// The request id of this stream.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl futures::Stream for ItemStream {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.core.poll_body_item(&self.peer, self.id, cx) {
            Poll::Ready(Some(Ok((item, grant)))) => {
                if let Some(grant) = grant {
                    Arc::clone(&self.core).body_credit(&self.peer, self.id, grant);
                }
                Poll::Ready(Some(Ok(item)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl std::fmt::Debug for ItemStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemStream").field("id", &self.id).finish()
    }
}

/// The sink and body of a streamed request, for its [`Incoming`].
pub(crate) fn slots(core: Arc<dyn Answering>, peer: PeerId, envelope: &Envelope) -> Slots {
    let id = envelope.id();
    let sink = envelope.reply_streamed().then(|| {
        sink(
            Arc::clone(&core),
            peer.clone(),
            id,
            envelope.event(),
            crate::meta::budget_of(envelope.metadata()),
        )
    });
    let body = envelope.body_streamed().then(|| body(core, peer, id));
    Slots {
        sink: parking_lot::Mutex::new(sink),
        body: parking_lot::Mutex::new(body),
    }
}

/// The sink of a streamed reply.
fn sink(
    core: Arc<dyn Answering>,
    peer: PeerId,
    id: u64,
    event: &str,
    budget: Option<Duration>,
) -> ItemSink {
    ItemSink {
        core,
        peer,
        id,
        deadline: budget.map(|b| Instant::now() + b),
        event: event.into(),
        budget: budget.unwrap_or_default(),
    }
}

/// The body of a request that streams it.
fn body(core: Arc<dyn Answering>, peer: PeerId, id: u64) -> ItemStream {
    ItemStream {
        core,
        peer,
        id,
        done: false,
    }
}
