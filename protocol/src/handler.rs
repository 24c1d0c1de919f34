//! Handlers: what runs when a request or tick arrives.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use transport::{Key, PeerId};

use crate::conversation::{ItemSink, ItemStream};
use crate::envelope::{decode_value, Envelope};
use crate::error::{RemoteError, Result};
use crate::meta::{Meta, MetaError, MetaLimits};
use crate::runners::{Job, Runners};

/// A request or tick as a handler sees it: who sent it, the event, the metadata, and the
/// payload still undecoded until the handler asks.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The sender's routing id (empty on a Client: the sender is its server).
    pub from: PeerId,
    key: Option<Key>,
    envelope: Envelope,
    /// A streamed request's sink and body, until a handler takes them (shared by the
    /// clones of this request: middleware may clone it, one handler takes them).
    streams: Option<Arc<Slots>>,
}

/// The streams of a streamed request, each taken once.
pub(crate) struct Slots {
    pub(crate) sink: parking_lot::Mutex<Option<ItemSink>>,
    pub(crate) body: parking_lot::Mutex<Option<ItemStream>>,
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slots").finish_non_exhaustive()
    }
}

impl Incoming {
    /// An incoming message from `from` (for tests and for layers that forward messages).
    pub fn from_envelope(from: PeerId, envelope: Envelope) -> Incoming {
        Incoming::new(from, None, envelope)
    }

    /// An incoming message from `from`, authenticated with CURVE public key `key`.
    pub fn new(from: PeerId, key: Option<Key>, envelope: Envelope) -> Incoming {
        Incoming {
            from,
            key,
            envelope,
            streams: None,
        }
    }

    /// The same request carrying its streams (made by the conversation).
    pub(crate) fn with_streams(mut self, slots: Slots) -> Incoming {
        self.streams = Some(Arc::new(slots));
        self
    }

    /// Whether the caller wants the reply as a stream of items ([`take_sink`](Self::take_sink)).
    pub fn is_reply_streamed(&self) -> bool {
        self.envelope.reply_streamed()
    }

    /// Whether the request's body follows as a stream of items ([`take_body`](Self::take_body)).
    pub fn is_body_streamed(&self) -> bool {
        self.envelope.body_streamed()
    }

    /// The sink for a streamed reply's items: `Some` once (over all clones of this
    /// request), for a request whose caller asked for a stream. The stream ends when the
    /// request is answered: an empty reply ends it cleanly, an error reply reaches the
    /// caller as its last item.
    pub fn take_sink(&self) -> Option<ItemSink> {
        self.streams.as_ref()?.sink.lock().take()
    }

    /// The request's streamed body: `Some` once, for a request whose caller streams it.
    pub fn take_body(&self) -> Option<ItemStream> {
        self.streams.as_ref()?.body.lock().take()
    }

    /// The sender's CURVE public key, as libzmq authenticated it during the handshake: set
    /// on a server whose socket is a CURVE server, `None` otherwise.
    pub fn peer_key(&self) -> Option<&Key> {
        self.key.as_ref()
    }

    /// The event name.
    pub fn event(&self) -> &str {
        self.envelope.event()
    }

    /// The request id (unique per sender).
    pub fn id(&self) -> u64 {
        self.envelope.id()
    }

    /// The raw metadata section.
    pub fn metadata(&self) -> &Bytes {
        self.envelope.metadata()
    }

    /// The metadata, checked against `limits` (see [`Meta::parse`]).
    pub fn meta(&self, limits: &MetaLimits) -> std::result::Result<Meta, MetaError> {
        Meta::parse(self.envelope.metadata().clone(), limits)
    }

    /// The time its sender gives this request (its remaining timeout when it sent it), if
    /// it said: the receiver's deadline is its arrival plus this.
    pub fn budget(&self) -> Option<std::time::Duration> {
        crate::meta::budget_of(self.envelope.metadata())
    }

    /// The raw payload, untouched.
    pub fn payload(&self) -> &Bytes {
        self.envelope.payload()
    }

    /// Decodes the payload from MessagePack.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        decode_value(self.envelope.payload())
    }

    /// The whole envelope.
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// What a request handler answers: a payload and optional metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// Metadata carried back with the reply.
    pub metadata: Bytes,
    /// The reply payload.
    pub payload: Bytes,
}

impl From<Bytes> for Answer {
    fn from(payload: Bytes) -> Answer {
        Answer {
            metadata: Bytes::new(),
            payload,
        }
    }
}

/// The future an async request handler returns ([`request_fn`]).
pub type RequestFuture = BoxFuture<'static, Result<Answer, RemoteError>>;
/// The future an async tick handler returns ([`tick_fn`]).
pub type TickFuture = BoxFuture<'static, ()>;

/// A request handler. The socket's driver calls it for each request and it must return at
/// once: it answers through the [`Responder`], now (a refusal, a cheap system answer) or
/// later, from a task of its own. [`request_fn`] makes one that runs an async function as a
/// task per request, so handler work never runs on the driver.
pub type RequestHandler = Arc<dyn Fn(Incoming, Responder) + Send + Sync>;
/// A tick handler: called by the socket's driver, must return at once (see
/// [`RequestHandler`]); [`tick_fn`] runs an async function as a task per tick.
pub type TickHandler = Arc<dyn Fn(Incoming) + Send + Sync>;

/// Where a request's answer goes: to the peer that sent it, by its id. Answering consumes
/// it; a responder dropped without an answer (a handler that panicked, work that was
/// cancelled) answers `HANDLER_ERROR` itself, so a request always ends with an answer.
///
/// A live responder counts as work in progress: a graceful close waits for it.
pub struct Responder {
    to: Arc<dyn Answering>,
    peer: PeerId,
    id: u64,
    answered: bool,
    /// A streamed request: its stream closes with the answer.
    stream: bool,
    /// A streamed request: cancelled when its caller cancels the stream or leaves.
    caller_gone: Option<CancellationToken>,
}

/// An item of a streamed body and the credit to grant for it, if any.
pub(crate) type BodyItem = (Bytes, Option<u32>);

/// The conversation side of a [`Responder`] (a trait object: the conversation is generic
/// over its socket, the responder is not).
pub(crate) trait Answering: Send + Sync {
    /// Sends the answer to request `id` of `peer` (never waiting on a full queue).
    fn answer(&self, peer: &PeerId, id: u64, result: Result<Answer, RemoteError>);
    /// One responder fewer.
    fn released(&self);
    /// Counts a handler that panicked.
    fn panicked(&self);
    /// Counts a request nobody handles.
    fn unhandled(&self);
    /// The conversation's abort signal.
    fn abort(&self) -> &CancellationToken;
    /// Takes one credit for the streamed reply of `(peer, id)`, or says why it stopped.
    fn poll_reply_credit(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<()>>;
    /// Sends one item of a stream (see `Calling::send_item`).
    fn send_item<'a>(
        &'a self,
        peer: &'a PeerId,
        id: u64,
        flags: u8,
        item: &'a [u8],
    ) -> BoxFuture<'a, Result<()>>;
    /// The next item of the body of `(peer, id)` and the credit to grant for it.
    fn poll_body_item(
        &self,
        peer: &PeerId,
        id: u64,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<BodyItem>>>;
    /// Grants `n` items of the body of `(peer, id)`.
    fn body_credit(self: Arc<Self>, peer: &PeerId, id: u64, n: u32);
    /// The request of a stream was answered: the stream is closed.
    fn close_stream(&self, peer: &PeerId, id: u64);
}

impl Responder {
    /// Made by the conversation, which counted it as work in progress.
    pub(crate) fn new(to: Arc<dyn Answering>, peer: PeerId, id: u64) -> Responder {
        Responder {
            to,
            peer,
            id,
            answered: false,
            stream: false,
            caller_gone: None,
        }
    }

    /// The responder of a streamed request, whose stream the conversation registered (and
    /// closes when this answers or goes); `caller_gone` is cancelled when its caller
    /// cancels the stream or leaves.
    pub(crate) fn streamed(mut self, caller_gone: CancellationToken) -> Responder {
        self.stream = true;
        self.caller_gone = Some(caller_gone);
        self
    }

    /// The id of the request this answers.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The routing id of the peer the answer goes to.
    pub fn peer(&self) -> &PeerId {
        &self.peer
    }

    /// Answers the request: a reply, or an error reply.
    pub fn answer(mut self, result: Result<Answer, RemoteError>) {
        self.answered = true;
        self.to.answer(&self.peer, self.id, result);
    }

    /// Refuses the request: no handler takes its event `event`. Answers
    /// [`RemoteError::no_handler`] and counts it in
    /// [`Stats::no_handler`](crate::Stats::no_handler).
    pub fn no_handler(self, event: &str) {
        self.to.unhandled();
        self.answer(Err(RemoteError::no_handler(event)));
    }

    /// Closes this request's stream, if it has one (it answered, or it is going).
    fn close_stream(&mut self) {
        if std::mem::take(&mut self.stream) {
            self.to.close_stream(&self.peer, self.id);
        }
    }

    /// Whether the socket is being aborted (closed without waiting for answers): work still
    /// running may stop, its answer would go nowhere.
    pub fn is_aborting(&self) -> bool {
        self.to.abort().is_cancelled()
    }

    /// Resolves when the answer would go nowhere: the socket is aborted (see
    /// [`is_aborting`](Self::is_aborting)), or, for a streamed request, its caller
    /// cancelled the stream (dropped it) or left. Work still running may stop then.
    pub async fn aborted(&self) {
        let abort = self.to.abort();
        match &self.caller_gone {
            Some(gone) => tokio::select! {
                () = abort.cancelled() => {}
                () = gone.cancelled() => {}
            },
            None => abort.cancelled().await,
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered {
            self.to.answer(
                &self.peer,
                self.id,
                Err(RemoteError::handler(
                    "the handler ended without answering (it panicked or was cancelled)",
                )),
            );
        }
        self.close_stream();
        self.to.released();
    }
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("peer", &self.peer)
            .field("id", &self.id)
            .finish()
    }
}

/// Wraps an async function as a [`RequestHandler`] that runs each request on a task of its
/// own (a [runner](crate::Runners), reused from one request to the next), in parallel on a
/// multi-thread runtime and never on the socket's driver. A handler that panics is
/// answered with `HANDLER_ERROR`; an aborted socket stops it.
pub fn request_fn<F, Fut, A>(f: F) -> RequestHandler
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<A, RemoteError>> + Send + 'static,
    A: Into<Answer> + 'static,
{
    let runners = Owned(Runners::new());
    Arc::new(move |incoming, responder: Responder| {
        runners.0.run(RequestJob {
            work: f(incoming),
            responder,
        });
    })
}

/// Wraps an async function as a [`RequestHandler`] for a streamed reply: it gets the
/// request and the [`ItemSink`] its items go to, and its result ends the stream (`Ok`: the
/// stream's end; `Err`: the caller's last item is that error). Run on a runner, as
/// [`request_fn`]'s are. A request whose caller did not ask for a stream is answered with
/// the system error [`RemoteError::NOT_STREAMED`].
pub fn stream_fn<F, Fut>(f: F) -> RequestHandler
where
    F: Fn(Incoming, ItemSink) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), RemoteError>> + Send + 'static,
{
    let runners = Owned(Runners::new());
    Arc::new(
        move |incoming: Incoming, responder: Responder| match incoming.take_sink() {
            Some(sink) => runners.0.run(RequestJob {
                work: f(incoming, sink).map(|done| done.map(|()| Answer::default())),
                responder,
            }),
            None => responder.answer(Err(RemoteError::system_error(
                RemoteError::NOT_STREAMED,
                "this event streams its reply: call it as a stream",
            ))),
        },
    )
}

/// Wraps an async function as a [`RequestHandler`] for a request whose body is streamed
/// (an upload): it gets the request and the [`ItemStream`] of its body, and answers once.
/// A request sent without a streamed body is answered with [`RemoteError::NOT_STREAMED`].
pub fn upload_fn<F, Fut, A>(f: F) -> RequestHandler
where
    F: Fn(Incoming, ItemStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<A, RemoteError>> + Send + 'static,
    A: Into<Answer> + 'static,
{
    let runners = Owned(Runners::new());
    Arc::new(
        move |incoming: Incoming, responder: Responder| match incoming.take_body() {
            Some(body) => runners.0.run(RequestJob {
                work: f(incoming, body),
                responder,
            }),
            None => responder.answer(Err(RemoteError::system_error(
                RemoteError::NOT_STREAMED,
                "this event takes a streamed body: call it as an upload",
            ))),
        },
    )
}

/// Wraps an async function as a [`TickHandler`] that runs each tick on a runner.
pub fn tick_fn<F, Fut>(f: F) -> TickHandler
where
    F: Fn(Incoming) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let runners = Owned(Runners::new());
    Arc::new(move |incoming| runners.0.run(TickJob(f(incoming))))
}

/// The runners of one handler: closed when the handler is dropped.
struct Owned<J: Job>(Arc<Runners<J>>);

impl<J: Job> Drop for Owned<J> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A request of a [`request_fn`] handler.
struct RequestJob<Fut> {
    work: Fut,
    responder: Responder,
}

impl<Fut, A> Job for RequestJob<Fut>
where
    Fut: Future<Output = Result<A, RemoteError>> + Send + 'static,
    A: Into<Answer> + 'static,
{
    async fn run(self) {
        let RequestJob { work, responder } = self;
        let work = std::panic::AssertUnwindSafe(work).catch_unwind();
        tokio::select! {
            biased;
            result = work => match result {
                Ok(result) => responder.answer(result.map(Into::into)),
                Err(_) => {
                    tracing::error!(id = responder.id(), "request handler panicked");
                    responder.to.panicked();
                    responder.answer(Err(RemoteError::system_error(
                        RemoteError::PANICKED,
                        "the handler panicked",
                    )));
                }
            },
            () = responder.aborted() => {}
        }
    }
}

/// A tick of a [`tick_fn`] handler.
struct TickJob<Fut>(Fut);

impl<Fut> Job for TickJob<Fut>
where
    Fut: Future<Output = ()> + Send + 'static,
{
    async fn run(self) {
        if std::panic::AssertUnwindSafe(self.0)
            .catch_unwind()
            .await
            .is_err()
        {
            tracing::error!("tick handler panicked");
        }
    }
}
