//! Streamed replies through router nodes: the origin opens its stream to a router as a
//! streamed `_system:forward`; each router opens its own stream to the next hop (the leaf,
//! or another router) and relays the items one by one into the stream it was asked for.
//!
//! Flow control holds end to end and a router's memory per stream is bounded: it holds at
//! most its window of items from the next hop, and it reads the next item only once its
//! previous one was sent on, which waits for credit from the hop before it. Dropping the
//! stream at the origin cancels the first router's relay, which drops its own stream (a
//! cancel to the next hop), and so on to the leaf's handler.
//!
//! An upload goes the same way the other direction: each router reads the body it was sent
//! only as the next hop grants credit for it; a stream both ways does both at once.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use protocol::{
    encode_value, Answer, ItemSink, ItemStream, MetaValue, RemoteError, ReplyStream, StreamOptions,
};
use tokio::time::Instant;

use crate::codes::route as code;
use crate::context::{millis, Outgoing};
use crate::error::{Error, Result};
use crate::mesh::link::Target;
use crate::mesh::peer::NodeId;
use crate::routing::forward::{Action, Forward, FORWARD};
use crate::routing::relay::{forward_error, hop_error, Relay, FORWARD_KEY};

/// A stream both ways' body, as it leaves for the next hop.
type Body = futures::stream::BoxStream<'static, Bytes>;

impl Relay<'_> {
    /// The origin's side: no joined peer fits `target` (`local` says why), so the stream
    /// goes through a router. The stream's errors are the routers' and the leaf's error
    /// replies: read them with [`forward_error`].
    pub(crate) async fn stream_from_here(
        &self,
        target: &Target,
        event: &str,
        (payload, body): (Bytes, Option<Body>),
        outgoing: &Outgoing,
        window: u32,
        local: Error,
    ) -> Result<ReplyStream> {
        let timeout = outgoing.timeout;
        let (forward, routers) = self.forward_for(target, event, payload.len(), timeout, local)?;
        let deadline = Instant::now() + timeout;
        let opening = (payload, body);
        self.stream_via(&forward, routers, opening, deadline, &outgoing.meta, window)
            .await
            .map(|(stream, _)| stream)
            .map_err(|remote| forward_error(remote, target, event, timeout, self.id))
    }

    /// The forward header of a stream from here to `target`, and the routers it may go
    /// through (none: `local`, the reason no joined peer fitted).
    fn forward_for(
        &self,
        target: &Target,
        event: &str,
        size: usize,
        timeout: std::time::Duration,
        local: Error,
    ) -> Result<(Forward, Vec<NodeId>)> {
        let routers: Vec<NodeId> = self
            .state
            .lock()
            .registry
            .routers()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        if routers.is_empty() {
            return Err(local);
        }
        crate::mesh::link::check_size(size, self.config.max_payload)?;
        let forward = self.origin_header(Action::Request, target, event, timeout)?;
        Ok((forward, routers))
    }

    /// The origin's side of an upload through a router (see
    /// [`stream_from_here`](Self::stream_from_here)).
    pub(crate) async fn upload_from_here(
        &self,
        target: &Target,
        event: &str,
        items: impl futures::Stream<Item = Bytes> + Send,
        outgoing: &Outgoing,
        local: Error,
    ) -> Result<Answer> {
        let timeout = outgoing.timeout;
        let (forward, routers) = self.forward_for(target, event, 0, timeout, local)?;
        let deadline = Instant::now() + timeout;
        self.upload_via(&forward, routers, items, deadline, &outgoing.meta)
            .await
            .map_err(|remote| forward_error(remote, target, event, timeout, self.id))
    }

    /// Sends the upload of `forward` through the first of `routers` joined now (a body is
    /// sent once: no second router is tried).
    async fn upload_via(
        &self,
        forward: &Forward,
        routers: Vec<NodeId>,
        items: impl futures::Stream<Item = Bytes> + Send,
        deadline: Instant,
        user: &protocol::Meta,
    ) -> std::result::Result<Answer, RemoteError> {
        let link = routers
            .iter()
            .filter(|id| !forward.excludes(id) && *id != self.id)
            .find_map(|id| {
                let router = self.state.lock().registry.start_to(id);
                router.map(|r| (id, r))
            });
        let Some((id, router)) = link else {
            return Err(self.unreached(&forward.to));
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let mut header = forward.clone();
        header.remaining_ms = millis(left);
        let header = encode_value(&header).map_err(|e| RemoteError::handler(e.to_string()))?;
        let mut meta = user.clone();
        meta.set(FORWARD_KEY, MetaValue::Bytes(&header));
        let sent = (router.link)
            .system()
            .upload(
                FORWARD,
                meta.as_bytes(),
                Bytes::new(),
                items,
                StreamOptions::new(left),
            )
            .await;
        self.passed(id, &sent);
        sent.map(answer_of).map_err(|e| self.hop_failed(id, e))
    }

    /// A router's side of an upload: its body goes on to the next hop item by item (the
    /// leaf, or the next router), read from `body` only as the next hop grants credit.
    pub(crate) async fn upload_here(
        &self,
        forward: &Forward,
        from: &NodeId,
        (leaf, user): (Bytes, &protocol::Meta),
        deadline: Instant,
        body: ItemStream,
    ) -> std::result::Result<Answer, RemoteError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.refuse(code::TIMEOUT, "no time left"));
        }
        // A body that fails (its caller gave up) must not reach the next hop as a whole one.
        let (items, failed) = checked(body, |item: protocol::Result<Bytes>| {
            item.map_err(Error::from)
        });
        let sent = async {
            match self.pick_for(forward, from, &[])? {
                Some(reach) => {
                    let sent = (reach.link)
                        .peer()
                        .upload(
                            &forward.event,
                            &leaf,
                            Bytes::new(),
                            items,
                            StreamOptions::new(left),
                        )
                        .await;
                    self.passed(&reach.id, &sent);
                    sent.map(answer_of)
                        .map_err(|e| self.hop_failed(&reach.id, e))
                }
                None => {
                    let next = forward.next_hop(self.id, left);
                    let routers = self
                        .routers_except(from)
                        .into_iter()
                        .map(|(id, _)| id)
                        .collect();
                    self.upload_via(&next, routers, items, deadline, user).await
                }
            }
        };
        tokio::select! {
            answer = sent => answer,
            Ok(error) = failed => Err(self.refuse(code::HOP_FAILED, error.to_string())),
        }
    }

    /// Opens the stream of `forward` at the first of `routers` that takes it (with a body,
    /// a stream both ways, the first joined one: a body is sent once); returns the stream
    /// and the router it goes through.
    async fn stream_via(
        &self,
        forward: &Forward,
        routers: Vec<NodeId>,
        (payload, mut body): (Bytes, Option<Body>),
        deadline: Instant,
        user: &protocol::Meta,
        window: u32,
    ) -> std::result::Result<(ReplyStream, NodeId), RemoteError> {
        let mut last = None;
        let both_ways = body.is_some();
        for id in routers {
            // The body went with a router that failed to open: it cannot go again.
            if both_ways && body.is_none() {
                break;
            }
            if forward.excludes(&id) || id == *self.id {
                continue;
            }
            // Counted in flight to that router while it opens (one being let go is not
            // picked).
            let Some(router) = self.state.lock().registry.start_to(&id) else {
                continue;
            };
            let link = &router.link;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.refuse(code::TIMEOUT, "the deadline passed"));
            }
            let mut header = forward.clone();
            header.remaining_ms = millis(left);
            let header = encode_value(&header).map_err(|e| RemoteError::handler(e.to_string()))?;
            let mut meta = user.clone();
            meta.set(FORWARD_KEY, MetaValue::Bytes(&header));
            let options = StreamOptions::new(left).window(window);
            let opened = match body.take() {
                Some(items) => {
                    link.system()
                        .request_bidi(FORWARD, meta.as_bytes(), payload.clone(), items, options)
                        .await
                }
                None => {
                    link.system()
                        .request_stream(FORWARD, meta.as_bytes(), payload.clone(), options)
                        .await
                }
            };
            self.passed(&id, &opened);
            match opened {
                Ok(stream) => return Ok((stream, id)),
                // Not sent (the connection is down): the next router may do.
                Err(e) => last = Some(self.hop_failed(&id, e)),
            }
        }
        Err(last.unwrap_or_else(|| self.unreached(&forward.to)))
    }

    /// A router's side: `forward` asked for a streamed reply, to be sent into `sink`, and
    /// for a stream both ways sent its `body` too. Opens the next hop's stream (the leaf,
    /// with `leaf` metadata, or the next router), passes the body on as the next hop grants
    /// credit, and relays the reply's items; the answer ends the stream the router was
    /// asked for.
    pub(crate) async fn stream_here(
        &self,
        forward: &Forward,
        from: &NodeId,
        (leaf, user): (Bytes, &protocol::Meta),
        payload: Bytes,
        deadline: Instant,
        (sink, body): (ItemSink, Option<ItemStream>),
    ) -> std::result::Result<Answer, RemoteError> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(self.refuse(code::TIMEOUT, "no time left"));
        }
        // A body that fails (its caller gave up) must not reach the next hop as a whole one.
        let (body, failed) = match body {
            Some(body) => {
                let (items, failed) = checked(body, |item: protocol::Result<Bytes>| {
                    item.map_err(Error::from)
                });
                (Some(items.boxed()), Some(failed))
            }
            None => (None, None),
        };
        // The guard keeps the stream counted in flight to the leaf while it is relayed (a
        // let-go of the leaf waits for it).
        let ((stream, to), _leaf) = match self.pick_for(forward, from, &[])? {
            Some(reach) => {
                let options = StreamOptions::new(left);
                let opened = match body {
                    Some(items) => {
                        (reach.link)
                            .peer()
                            .request_bidi(&forward.event, &leaf, payload, items, options)
                            .await
                    }
                    None => {
                        (reach.link)
                            .peer()
                            .request_stream(&forward.event, &leaf, payload, options)
                            .await
                    }
                };
                self.passed(&reach.id, &opened);
                let stream = opened.map_err(|e| self.hop_failed(&reach.id, e))?;
                let to = reach.id.clone();
                ((stream, to), Some(reach))
            }
            None => {
                let next = forward.next_hop(self.id, left);
                let routers = self
                    .routers_except(from)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect();
                let stream = self.stream_via(
                    &next,
                    routers,
                    (payload, body),
                    deadline,
                    user,
                    protocol::DEFAULT_WINDOW,
                );
                (stream.await?, None)
            }
        };
        let relayed = relay(stream, sink, (self.id, &to));
        match failed {
            Some(failed) => tokio::select! {
                answer = relayed => answer,
                Ok(error) = failed => Err(self.refuse(code::HOP_FAILED, error.to_string())),
            },
            None => relayed.await,
        }
    }
}

/// Sends each item of `stream` into `sink`, one at a time: the next is read only once the
/// previous one went (so the router holds at most the window of `stream`). The next hop's
/// error reply is passed back as it came.
/// A reply as an answer.
fn answer_of(reply: protocol::Envelope) -> Answer {
    Answer {
        metadata: reply.metadata().clone(),
        payload: reply.into_payload(),
    }
}

async fn relay(
    mut stream: ReplyStream,
    mut sink: ItemSink,
    (me, to): (&NodeId, &NodeId),
) -> std::result::Result<Answer, RemoteError> {
    while let Some(item) = stream.next().await {
        match item {
            Ok(item) => {
                if let Err(e) = sink.send(item).await {
                    // The hop before is gone or gave up: dropping `stream` tells the next.
                    let failed = RemoteError::system_error(code::HOP_FAILED, e.to_string());
                    return Err(failed.with_hop(me.as_str()));
                }
            }
            Err(protocol::Error::Remote(remote)) => return Err(remote),
            Err(e) => return Err(hop_error(e, me, to)),
        }
    }
    Ok(Answer::default())
}

/// `items` turned into bytes by `check`, one by one. The first that fails stops the
/// stream without ending it (a clean end would tell the handler the body is whole): its
/// error comes out of the receiver, and the caller drops the upload, which cancels it.
pub(crate) fn checked<T, S>(
    items: S,
    mut check: impl FnMut(T) -> Result<Bytes> + Send,
) -> (
    impl Stream<Item = Bytes> + Send,
    tokio::sync::oneshot::Receiver<Error>,
)
where
    S: Stream<Item = T> + Send,
{
    let (failed_tx, failed_rx) = tokio::sync::oneshot::channel();
    let mut failed_tx = Some(failed_tx);
    let items = items
        .map(move |item| match check(item) {
            Ok(bytes) => futures::future::Either::Left(futures::future::ready(bytes)),
            Err(e) => {
                if let Some(tx) = failed_tx.take() {
                    let _ = tx.send(e);
                }
                futures::future::Either::Right(futures::future::pending())
            }
        })
        .then(|item| item);
    (items, failed_rx)
}
