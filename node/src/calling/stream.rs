//! Streams between nodes: a reply that arrives in pieces, a body that leaves in pieces.
//!
//! ```no_run
//! # async fn example(node: node::Node) -> node::Result<()> {
//! use futures::StreamExt;
//! use node::{HandlerError, Request, Sink};
//!
//! // The handler's side: items go out as the caller reads them.
//! node.on_stream("count", |req: Request, mut sink: Sink| async move {
//!     let up_to: u32 = req.decode()?;
//!     for i in 0..up_to {
//!         sink.send(&i).await?;
//!     }
//!     Ok::<_, HandlerError>(())
//! });
//!
//! // The caller's side: a `futures::Stream` of typed items.
//! let mut items = node.call("counter-1", "count").stream::<u32>(&10u32);
//! while let Some(item) = items.next().await {
//!     println!("{}", item?);
//! }
//! # Ok(()) }
//! ```
//!
//! Flow control is credit counted in items (the `protocol` crate's `credit.rs`): the
//! receiver holds at most its window of items (1,024 by default, [`DEFAULT_WINDOW`], set
//! per stream with [`Items::window`]; it grants fewer while items are large, aiming at about 2 MiB), each bounded by the payload
//! limit, so a stream costs its receiver at most window x `max_payload` bytes; a handler
//! whose caller reads slowly waits in [`Sink::send`].
//! Dropping [`Items`] cancels the handler (its task is stopped). The call's timeout (or
//! deadline) bounds the whole stream; [`Items::idle_timeout`] bounds the wait for each
//! item. A peer that leaves ends the stream with [`Error::PeerLeft`].
//!
//! Streams go to an id or to one match of a filter, directly or (when no joined peer fits)
//! through router nodes, which relay the items one by one and hold at most a window of
//! them each; an upload and a stream both ways likewise.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use protocol::{decode_value, encode_value, ReplyStream, StreamOptions};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::BoxError;

use crate::calling::call::{Call, FromReply, Prepared, Raw, Typed};
use crate::codes::Code;
use crate::error::{Error, Result};
use crate::mesh::link::{Link, Target};
use crate::mesh::peer::InFlight;
use crate::node::Node;
use crate::observation::metrics::StreamEnd;
use crate::routing::relay::forward_error;
use crate::routing::stream_route::checked;
use crate::serving::handler::{HandlerError, Reply, Request, Response};
use crate::serving::middleware::Shape;

/// The window a stream's reader holds at most when [`Items::window`] does not set one:
/// 1,024 items (fewer are granted while items are large, aiming at about 2 MiB). The
/// documents that state it are checked against it (`tests/docs.rs`).
///
/// ```
/// assert_eq!(node::DEFAULT_WINDOW, 1_024);
/// ```
pub const DEFAULT_WINDOW: u32 = protocol::DEFAULT_WINDOW;

/// Where a streaming handler sends its items ([`Node::on_stream`]).
///
/// [`send`](Self::send) waits for credit (the caller reads slower than the handler
/// produces) and for room in the connection's queue, so the handler never holds more than
/// the item in hand. It fails once the caller is gone: it dropped its stream
/// ([`ErrorCode::Cancelled`](crate::ErrorCode::Cancelled)), its deadline passed, it left,
/// or this node closes; the handler should return then (`?` does). A handler whose caller
/// dropped the stream or left is stopped wherever it waits, as a request's handler is when
/// its caller leaves: code that must run then belongs in a `Drop`.
#[derive(Debug)]
pub struct Sink {
    inner: protocol::ItemSink,
    counts: Arc<Counts>,
}

/// Items and bytes a stream carried, for its end-of-stream record.
#[derive(Debug, Default)]
struct Counts {
    items: AtomicU64,
    bytes: AtomicU64,
}

/// A served stream's figures, recorded when its handler returns or is stopped (a caller
/// that drops its stream stops the handler: then this is dropped with its future).
struct Served {
    metrics: Option<Arc<crate::observation::metrics::Metrics>>,
    event: String,
    counts: Arc<Counts>,
    started: std::time::Instant,
    /// Whether the handler returned `Ok`; `None` while it runs (or once it was stopped).
    ok: Option<bool>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let end = StreamEnd {
            items: self.counts.items.load(Ordering::Relaxed),
            bytes: self.counts.bytes.load(Ordering::Relaxed),
            duration: self.started.elapsed(),
        };
        if let Some(metrics) = &self.metrics {
            metrics.stream_ended(&self.event, "served", end);
        }
        tracing::debug!(
            event = %self.event,
            items = end.items,
            bytes = end.bytes,
            duration_us = end.duration.as_micros() as u64,
            ended = match self.ok {
                Some(true) => "ok",
                Some(false) => "error",
                None => "stopped",
            },
            "stream served"
        );
    }
}

impl Counts {
    fn add(&self, bytes: usize) {
        self.items.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

impl Sink {
    /// Sends `item` encoded as MessagePack.
    pub async fn send<T: Serialize + ?Sized>(&mut self, item: &T) -> Result<()> {
        self.send_raw(encode_value(item)?).await
    }

    /// Sends raw bytes, untouched (read with [`Call::raw`]'s stream).
    pub async fn send_raw(&mut self, item: Bytes) -> Result<()> {
        let len = item.len();
        self.inner.send(item).await?;
        self.counts.add(len);
        Ok(())
    }

    /// Items sent so far.
    pub fn items(&self) -> u64 {
        self.counts.items.load(Ordering::Relaxed)
    }
}

/// A request's streamed body, as an upload handler reads it ([`Node::on_upload`]): each
/// item as raw bytes, then `None` after the caller's last. Credit goes back as the handler
/// reads, so the caller is never more than the window ahead.
#[derive(Debug)]
pub struct Body {
    inner: protocol::ItemStream,
}

impl Body {
    /// The streamed body of `request`, for a streaming handler ([`Node::on_stream`]) whose
    /// caller sends one too ([`Call::bidi`]): `Some` once.
    pub fn take(request: &Request) -> Option<Body> {
        request.incoming().take_body().map(|inner| Body { inner })
    }

    /// The next item decoded from MessagePack (as the typed [`Call::upload`] sends them).
    pub async fn next_as<T: DeserializeOwned>(&mut self) -> Option<Result<T>> {
        let item = self.next().await?;
        Some(item.and_then(|bytes| Ok(decode_value(&bytes)?)))
    }
}

impl Stream for Body {
    type Item = Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner
            .poll_next_unpin(cx)
            .map(|item| item.map(|r| r.map_err(Error::from)))
    }
}

/// The error a streaming handler answers when its caller did not ask for a stream.
fn not_streamed(what: &str) -> HandlerError {
    HandlerError::new(
        Code::FailedPrecondition,
        format!("this event {what}: call it as such"),
    )
}

impl Node {
    /// Handles requests whose event matches `pattern` with a streamed reply: `handler`
    /// gets the request and the [`Sink`] its items go to; its `Ok(())` ends the stream, its
    /// error reaches the caller as the stream's last item. It is a request handler like any
    /// other: the node's limits, middleware ([`Node::layer`]), deadline and spans apply, and
    /// the stream lasts as long as the handler runs. A caller that does not ask for a
    /// stream gets [`Code::FailedPrecondition`].
    pub fn on_stream<P, F, Fut>(&self, pattern: P, handler: F)
    where
        P: Into<crate::serving::handler::Pattern>,
        F: Fn(Request, Sink) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
    {
        // Not the node itself: the handler table would hold it alive.
        let metrics = self.inner.observers().metrics.clone();
        self.inner.handlers().add_shaped(
            pattern.into(),
            crate::serving::handler::boxed(tower::service_fn(move |request: Request| {
                let handler = handler.clone();
                let metrics = metrics.clone();
                async move {
                    let Some(sink) = request.incoming().take_sink() else {
                        return Err(BoxError::from(not_streamed("streams its reply")));
                    };
                    let counts = Arc::new(Counts::default());
                    let sink = Sink {
                        inner: sink,
                        counts: Arc::clone(&counts),
                    };
                    let mut served = Served {
                        metrics,
                        event: request.event().to_owned(),
                        counts,
                        started: std::time::Instant::now(),
                        ok: None,
                    };
                    let result = handler(request, sink).await;
                    served.ok = Some(result.is_ok());
                    drop(served);
                    result
                        .map(|()| Response::raw(Bytes::new()))
                        .map_err(BoxError::from)
                }
            })),
            Shape::Stream,
        );
    }

    /// Handles requests whose event matches `pattern` with a streamed body (an upload):
    /// `handler` gets the request and its [`Body`] and answers once, as a request handler
    /// does. A caller that does not stream a body gets [`Code::FailedPrecondition`].
    pub fn on_upload<P, F, Fut, R>(&self, pattern: P, handler: F)
    where
        P: Into<crate::serving::handler::Pattern>,
        F: Fn(Request, Body) -> Fut + Send + Sync + Clone + 'static,
        Fut: Future<Output = std::result::Result<R, HandlerError>> + Send + 'static,
        R: Serialize + Send + 'static,
    {
        let service = crate::serving::handler::service_from_fn(move |request: Request| {
            let handler = handler.clone();
            async move {
                let Some(body) = request.incoming().take_body() else {
                    return Err(not_streamed("takes a streamed body"));
                };
                handler(request, Body { inner: body }).await
            }
        });
        (self.inner.handlers()).add_shaped(pattern.into(), service, Shape::Upload);
    }

    /// Finds the peer a stream goes to (an id, or one match of a filter; no router): the
    /// stream counts as in flight to it while the guard lives.
    fn stream_reach(&self, target: &Target) -> Result<InFlight<Arc<Link>>> {
        if self.inner.life().is_closing() {
            return Err(Error::Closed);
        }
        if let Target::All(..) = target {
            return Err(Error::InvalidTarget {
                reason: "a stream comes from one node: to all matches, gather",
            });
        }
        self.resolve(target)
    }
}

/// What an open stream needs to end well: where it goes, for its errors.
struct Opened {
    stream: ReplyStream,
    /// The joined peer it goes to, or `None` through routers (its errors are theirs);
    /// counted in flight to it while the stream is open.
    peer: Option<InFlight<Arc<Link>>>,
}

enum State<'a> {
    /// Built, not polled yet (the window and idle timeout may still change).
    Ready(Box<Prepared<'a>>, Bytes),
    /// Sending the request.
    Opening(BoxFuture<'a, (Box<Prepared<'a>>, Result<Opened>)>),
    /// Items flow.
    Open(Box<Prepared<'a>>, Opened),
    /// Ended (or failed before it started: the error is the one item).
    Failed(Option<Error>),
}

/// A streamed reply as its caller reads it ([`Call::stream`]): each item as it arrives,
/// then the end. The handler's error, the deadline, an idle timeout or the peer leaving
/// comes as the last item, an `Err`. Nothing is sent until it is first polled.
///
/// It holds at most its window of items; dropping it cancels the handler.
#[must_use = "a stream does nothing until it is polled"]
pub struct Items<'a, R> {
    state: State<'a>,
    decode: fn(Bytes) -> Result<R>,
    window: u32,
    idle: Option<Duration>,
    /// A stream both ways: the body to send ([`Call::bidi`]).
    body: Option<futures::stream::BoxStream<'static, Bytes>>,
    started: std::time::Instant,
    items: u64,
    bytes: u64,
}

impl<R> std::fmt::Debug for Items<'_, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("window", &self.window)
            .field("items", &self.items)
            .finish_non_exhaustive()
    }
}

impl<'a, R> Items<'a, R> {
    fn new(prepared: Result<Prepared<'a>>, payload: Bytes, decode: fn(Bytes) -> Result<R>) -> Self {
        Items {
            state: match prepared {
                Ok(prepared) => State::Ready(Box::new(prepared), payload),
                Err(e) => State::Failed(Some(e)),
            },
            decode,
            window: DEFAULT_WINDOW,
            idle: None,
            body: None,
            started: std::time::Instant::now(),
            items: 0,
            bytes: 0,
        }
    }

    /// Items this caller holds at most (its credit window; [`DEFAULT_WINDOW`] by default,
    /// 1,024; fewer granted while items are large): memory for the stream is at most `items` x the largest
    /// payload. Set before the first poll.
    pub fn window(mut self, items: u32) -> Self {
        self.window = items.max(1);
        self
    }

    /// The most time to wait for each next item (the timeout still bounds the whole
    /// stream); running out ends the stream with [`Error::IdleTimeout`] and cancels the handler.
    pub fn idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = Some(idle);
        self
    }

    /// Items received so far.
    pub fn received(&self) -> u64 {
        self.items
    }

    fn open(&mut self) -> Option<BoxFuture<'a, (Box<Prepared<'a>>, Result<Opened>)>> {
        let State::Ready(..) = &self.state else {
            return None;
        };
        let State::Ready(prepared, payload) =
            std::mem::replace(&mut self.state, State::Failed(None))
        else {
            return None;
        };
        let mut options = StreamOptions::new(prepared.outgoing.timeout).window(self.window);
        if let Some(idle) = self.idle {
            options = options.idle_timeout(idle);
        }
        let body = self.body.take();
        Some(Box::pin(async move {
            let opened = open(&prepared, payload, options, body).await;
            (prepared, opened)
        }))
    }

    /// The stream ended with `result`: recorded in its span, hooks, metrics and log.
    fn ended(&mut self, prepared: &mut Prepared<'_>, result: &Result<()>) {
        prepared.finished(false, result);
        if let Some(metrics) = &prepared.node.inner.observers().metrics {
            let end = StreamEnd {
                items: self.items,
                bytes: self.bytes,
                duration: self.started.elapsed(),
            };
            metrics.stream_ended(prepared.event, "read", end);
        }
        tracing::debug!(
            event = prepared.event,
            items = self.items,
            bytes = self.bytes,
            duration_us = self.started.elapsed().as_micros() as u64,
            ok = result.is_ok(),
            "stream received"
        );
    }
}

async fn open(
    prepared: &Prepared<'_>,
    payload: Bytes,
    options: StreamOptions,
    body: Option<futures::stream::BoxStream<'static, Bytes>>,
) -> Result<Opened> {
    let node = prepared.node;
    let peer = match node.stream_reach(&prepared.to) {
        Ok(found) => found,
        // No joined peer fits: through a router, if we are joined to one.
        Err(local @ (Error::NodeNotFound { .. } | Error::NoNodesMatchFilter)) => {
            let window = options.window;
            let stream = node
                .inner
                .relay()
                .stream_from_here(
                    &prepared.to,
                    prepared.event,
                    (payload, body),
                    &prepared.outgoing,
                    window,
                    local,
                )
                .await?;
            return Ok(Opened { stream, peer: None });
        }
        Err(e) => return Err(e),
    };
    let link = &peer.link;
    link.check_size(&payload)?;
    let timeout = options.timeout;
    let metadata = prepared.outgoing.meta.as_bytes();
    let opened = match body {
        // An item over the receiver's limit ends the body there with a typed error the
        // handler reads (the receiver refuses it: `Violation::ItemTooLarge`).
        Some(body) => {
            link.peer()
                .request_bidi(prepared.event, metadata, payload, body, options)
                .await
        }
        None => {
            link.peer()
                .request_stream(prepared.event, metadata, payload, options)
                .await
        }
    };
    let stream = opened.map_err(|e| {
        node.inner
            .relay()
            .link_error(&peer.id, link, prepared.event, timeout, e)
    })?;
    Ok(Opened {
        stream,
        peer: Some(peer),
    })
}

impl<R> Drop for Items<'_, R> {
    /// Dropped while items flowed (its reader stopped early, which cancels the handler):
    /// recorded as cancelled in its span, hooks and metrics, as a stream that ended is.
    fn drop(&mut self) {
        if let State::Open(..) = self.state {
            if let State::Open(mut prepared, _) =
                std::mem::replace(&mut self.state, State::Failed(None))
            {
                self.ended(&mut prepared, &Err(Error::Cancelled));
            }
        }
    }
}

impl<R> Stream for Items<'_, R> {
    type Item = Result<R>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(opening) = this.open() {
            this.started = std::time::Instant::now();
            this.state = State::Opening(opening);
        }
        loop {
            match &mut this.state {
                State::Ready(..) => return Poll::Ready(None),
                State::Failed(error) => return Poll::Ready(error.take().map(Err)),
                State::Opening(opening) => {
                    let (mut prepared, opened) = std::task::ready!(opening.poll_unpin(cx));
                    match opened {
                        Ok(opened) => this.state = State::Open(prepared, opened),
                        Err(e) => {
                            let result = Err(e);
                            this.ended(&mut prepared, &result);
                            this.state = State::Failed(result.err());
                        }
                    }
                }
                State::Open(_, opened) => {
                    let next = std::task::ready!(opened.stream.poll_next_unpin(cx));
                    match next {
                        Some(Ok(bytes)) => {
                            this.items += 1;
                            this.bytes += bytes.len() as u64;
                            return Poll::Ready(Some((this.decode)(bytes)));
                        }
                        Some(Err(e)) => {
                            let State::Open(mut prepared, opened) =
                                std::mem::replace(&mut this.state, State::Failed(None))
                            else {
                                return Poll::Ready(None);
                            };
                            let (event, timeout) = (prepared.event, prepared.outgoing.timeout);
                            let error = match (&opened.peer, e) {
                                (Some(peer), e) => prepared
                                    .node
                                    .inner
                                    .relay()
                                    .link_error(&peer.id, &peer.link, event, timeout, e),
                                (None, protocol::Error::Remote(remote)) => {
                                    let me = &prepared.node.inner.id();
                                    forward_error(remote, &prepared.to, event, timeout, me)
                                }
                                // The stream went as a forward: the event that had no
                                // handler is the caller's, not the forward's.
                                (None, protocol::Error::NoHandler { .. }) => Error::NoHandler {
                                    event: event.to_owned(),
                                },
                                (None, e) => e.into(),
                            };
                            let result = Err(error);
                            this.ended(&mut prepared, &result);
                            return Poll::Ready(result.err().map(Err));
                        }
                        None => {
                            let State::Open(mut prepared, _) =
                                std::mem::replace(&mut this.state, State::Failed(None))
                            else {
                                return Poll::Ready(None);
                            };
                            this.ended(&mut prepared, &Ok(()));
                            return Poll::Ready(None);
                        }
                    }
                }
            }
        }
    }
}

impl<'a> Call<'a, Typed> {
    /// Sends the request with `data` encoded as MessagePack and returns its streamed reply:
    /// each item decoded into `R` as it arrives (see [`Items`]). For a handler registered
    /// with [`Node::on_stream`]; to an id or one match of a filter.
    pub fn stream<R: DeserializeOwned>(self, data: &(impl Serialize + ?Sized)) -> Items<'a, R> {
        match encode_value(data) {
            Ok(payload) => Items::new(self.prepare(), payload, |bytes| Ok(decode_value(&bytes)?)),
            Err(e) => Items::new(Err(e.into()), Bytes::new(), |_| Err(Error::Closed)),
        }
    }

    /// Sends a request whose body is `items`, each encoded as MessagePack and sent as the
    /// handler ([`Node::on_upload`]) grants credit for it, and decodes the one reply. The
    /// request carries no payload of its own: say what the body is with
    /// [`meta`](Call::meta). An item that cannot be encoded cancels the upload (the handler
    /// sees its body fail, never a clean end) and is this call's error.
    pub async fn upload<T, R>(self, items: impl Stream<Item = T> + Send) -> Result<R>
    where
        T: Serialize + Send,
        R: FromReply,
    {
        let prepared = self.prepare()?;
        let limits = prepared.node.inner.config().max_metadata;
        let (encoded, failed) = checked(items, |item: T| Ok(encode_value(&item)?));
        let answer = tokio::select! {
            answer = upload_raw(prepared, encoded) => answer?,
            Ok(error) = failed => return Err(error),
        };
        R::from_answer(answer, &limits)
    }
}

impl<'a> Call<'a, Raw> {
    /// The typed [`stream`](Call::stream) with a raw payload and raw items.
    pub fn stream(self, payload: Bytes) -> Items<'a, Bytes> {
        Items::new(self.prepare(), payload, Ok)
    }

    /// A stream both ways, with raw items: `items` go to the handler as the request's body
    /// (each as it grants credit; read it with [`Body::take`]) while its reply comes back
    /// as [`Items`]. The body is sent as the returned stream is polled: read it to keep
    /// both moving. Through routers too: each passes the body on as the next hop grants
    /// credit (a body is sent once, so only the first router joined is tried).
    pub fn bidi(
        self,
        payload: Bytes,
        items: impl Stream<Item = Bytes> + Send + 'static,
    ) -> Items<'a, Bytes> {
        let mut stream = Items::new(self.prepare(), payload, Ok);
        stream.body = Some(items.boxed());
        stream
    }

    /// The typed [`upload`](Call::upload) with raw items, and the whole reply.
    pub async fn upload(self, items: impl Stream<Item = Bytes> + Send) -> Result<Reply> {
        let prepared = self.prepare()?;
        let limits = prepared.node.inner.config().max_metadata;
        let answer = upload_raw(prepared, items).await?;
        Reply::from_answer(answer, &limits)
    }
}

/// Sends an upload as `prepared` says.
async fn upload_raw(
    mut prepared: Prepared<'_>,
    items: impl Stream<Item = Bytes> + Send,
) -> Result<protocol::Answer> {
    let result = async {
        let node = prepared.node;
        let timeout = prepared.outgoing.timeout;
        let peer = match node.stream_reach(&prepared.to) {
            Ok(found) => found,
            // No joined peer fits: through a router, if we are joined to one.
            Err(local @ (Error::NodeNotFound { .. } | Error::NoNodesMatchFilter)) => {
                let relay = node.inner.relay();
                let (items, too_large) = checked(items, |item: Bytes| {
                    crate::mesh::link::check_size(item.len(), relay.config.max_payload)?;
                    Ok(item)
                });
                let sent = relay.upload_from_here(
                    &prepared.to,
                    prepared.event,
                    items,
                    &prepared.outgoing,
                    local,
                );
                return tokio::select! {
                    reply = sent => reply,
                    Ok(error) = too_large => Err(error),
                };
            }
            Err(e) => return Err(e),
        };
        let (id, link) = (&peer.id, &peer.link);
        let limit = link.limit();
        // An item over the receiver's limit would end the upload there: refused here.
        let (items, too_large) = checked(items, |item: Bytes| {
            crate::mesh::link::check_size(item.len(), limit)?;
            Ok(item)
        });
        let sent = link.peer().upload(
            prepared.event,
            prepared.outgoing.meta.as_bytes(),
            Bytes::new(),
            items,
            StreamOptions::new(timeout),
        );
        let reply = tokio::select! {
            reply = sent => reply.map_err(|e| {
                node.inner.relay().link_error(id, link, prepared.event, timeout, e)
            })?,
            Ok(error) = too_large => return Err(error),
        };
        Ok(protocol::Answer {
            metadata: reply.metadata().clone(),
            payload: reply.into_payload(),
        })
    }
    .await;
    prepared.finished(false, &result);
    result
}
