//! A call being made: the one request builder behind every send.
//!
//! ```no_run
//! # async fn example(node: node::Node) -> node::Result<()> {
//! use std::time::Duration;
//!
//! let total: u64 = node
//!     .call("billing-1", "invoice:total")
//!     .meta("auth", "t0k3n")
//!     .timeout(Duration::from_secs(2))
//!     .send(&"order-17")
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! [`Node::request`] and [`Node::tick`] are calls with no metadata and the default
//! timeout. Every call made while a request handler runs inherits that request's deadline
//! (the smaller of the two wins) unless it is [`detached`](Call::detached): see
//! ARCHITECTURE.md, "Request context".

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use futures::FutureExt;
use protocol::{decode_value, encode_value, Answer, Meta, MetaError, MetaLimits};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use crate::context::{self, call_timeout, Outgoing};
use crate::error::{Error, Result};
use crate::mesh::link::Target;
use crate::mesh::peer::NodeId;
use crate::node::Node;
use crate::observation::observe::{Called, Outcome};
use crate::observation::trace;
use crate::routing::fanout::Spread;
use crate::serving::handler::{Reply, Request};

/// When a call started, if a hook or metrics watch the node: otherwise the clock is not
/// read.
fn watch_from(node: &Node) -> Option<std::time::Instant> {
    node.inner
        .observers()
        .calls_watched()
        .then(std::time::Instant::now)
}

/// A call ready to go: see [`Call::prepare`].
pub(crate) struct Prepared<'a> {
    pub(crate) node: &'a Node,
    pub(crate) to: Target,
    pub(crate) event: &'a str,
    pub(crate) outgoing: Outgoing,
    /// The call's span: `cancelled` if the call is dropped before it ends.
    span: trace::Unended<tracing::Span>,
    started: Option<std::time::Instant>,
}

impl Prepared<'_> {
    /// Records how the call ended: in its span, and for the hooks and metrics.
    pub(crate) fn finished<T>(&mut self, tick: bool, result: &Result<T>) {
        let outcome = Outcome::of(result);
        self.span.ended(outcome);
        if let Some(started) = self.started {
            self.node.inner.observers().called(&Called {
                event: self.event,
                tick,
                outcome,
                duration: started.elapsed(),
            });
        }
    }
}

/// What a typed call's reply can be decoded into: any type serde can deserialize (the
/// payload, decoded from MessagePack), or [`Reply`] (payload and metadata, undecoded).
/// Implemented for those; not meant to be implemented elsewhere.
pub trait FromReply: Sized {
    /// The value of a reply as it came off the wire (its metadata checked against `limits`
    /// only when it is kept).
    #[doc(hidden)]
    fn from_answer(answer: Answer, limits: &MetaLimits) -> Result<Self>;

    /// The value of a reply already parsed (the entries of a gather).
    #[doc(hidden)]
    fn from_reply(reply: Reply) -> Result<Self>;
}

impl<R: DeserializeOwned> FromReply for R {
    fn from_answer(answer: Answer, _limits: &MetaLimits) -> Result<R> {
        Ok(decode_value(&answer.payload)?)
    }

    fn from_reply(reply: Reply) -> Result<R> {
        reply.decode()
    }
}

impl FromReply for Reply {
    fn from_answer(answer: Answer, limits: &MetaLimits) -> Result<Reply> {
        Reply::from_answer(answer, limits)
    }

    fn from_reply(reply: Reply) -> Result<Reply> {
        Ok(reply)
    }
}

/// What a tick did: the number of nodes it was handed to the connection for. Sent, not
/// reached or handled: a tick has no answer, so a node that drops it (full, closing,
/// refused by its middleware) is counted all the same. One for a tick to an id or to any
/// match; for [`Target::all`], each match here, plus what the routers report sending on
/// their side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// How many nodes the tick was sent to.
    pub nodes: usize,
}

/// A [`Call`]'s mode: payloads are values encoded as MessagePack, replies are decoded (the
/// default).
#[derive(Debug, Clone, Copy)]
pub struct Typed;

/// A [`Call`]'s mode after [`Call::raw`]: payloads are [`Bytes`] passed through untouched,
/// replies are whole [`Reply`]s.
#[derive(Debug, Clone, Copy)]
pub struct Raw;

/// Which deadline a call inherits.
#[derive(Debug, Clone, Copy)]
enum Inherit {
    /// The one of the request whose handler runs on this task, if any (the default).
    Current,
    /// This one (a request's, given with [`Call::parent`]).
    From(Option<Instant>),
    /// None ([`Call::detached`]).
    Nothing,
}

/// A call being built: target, event, metadata, timeout; then sent as a request
/// ([`send`](Call::send)), a scatter-gather ([`gather`](Call::gather)) or a tick
/// ([`tick`](Call::tick)). Made by [`Node::call`].
///
/// | target | `send` | `tick` | `gather` |
/// |---|---|---|---|
/// | an id | its reply | that node | [`Error::InvalidTarget`] |
/// | [`Target::any`] / a [`Filter`](crate::Filter) | one match's reply | one match | every match's outcome |
/// | [`Target::all`] | [`Error::InvalidTarget`] | every match | every match's outcome |
///
/// Payloads are values encoded as MessagePack, and replies are decoded into the type asked
/// for (or kept whole: a [`Reply`], the way to read a reply's metadata). After
/// [`raw`](Call::raw) the same three calls take [`Bytes`], passed through untouched, and
/// give whole [`Reply`]s.
#[must_use = "a call does nothing until it is sent"]
#[derive(Debug)]
pub struct Call<'a, Mode = Typed> {
    node: &'a Node,
    to: Target,
    event: &'a str,
    meta: Meta,
    /// The first bad metadata entry, reported when the call is sent.
    invalid: Option<MetaError>,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    inherit: Inherit,
    /// For ticks to all and gathers: one member of each group (by this option key).
    groups: Option<String>,
    /// For `gather`: stop at this many replies.
    min_replies: Option<usize>,
    mode: PhantomData<Mode>,
}

impl Node {
    /// Starts a call to `to` for `event`: an id, a [`Filter`](crate::Filter) (any match) or
    /// a [`Target`] ([`Target::all`] for every match). Set metadata, a timeout or a
    /// deadline, then [`send`](Call::send), [`gather`](Call::gather) or
    /// [`tick`](Call::tick) it.
    pub fn call<'a>(&'a self, to: impl Into<Target>, event: &'a str) -> Call<'a> {
        Call {
            node: self,
            to: to.into(),
            event,
            meta: Meta::new(),
            invalid: None,
            timeout: None,
            deadline: None,
            inherit: Inherit::Current,
            groups: None,
            min_replies: None,
            mode: PhantomData,
        }
    }
}

impl<'a, Mode> Call<'a, Mode> {
    /// Adds the text metadata entry `key` = `value` (replacing an earlier one). A key that
    /// is empty, longer than 255 bytes, or starts with `:` (the framework's) fails the call
    /// with [`Error::Metadata`] when it is sent.
    pub fn meta(mut self, key: &str, value: &str) -> Self {
        if let Err(e) = self.meta.insert(key, value) {
            self.invalid.get_or_insert(e);
        }
        self
    }

    /// Adds the raw-bytes metadata entry `key` = `value`.
    pub fn meta_bytes(mut self, key: &str, value: &[u8]) -> Self {
        if let Err(e) = self.meta.insert_bytes(key, value) {
            self.invalid.get_or_insert(e);
        }
        self
    }

    /// Sends these entries (the user's of `meta`: a request's metadata passed on, for
    /// example) in place of any set so far.
    pub fn with_meta(mut self, meta: &Meta) -> Self {
        self.meta = meta.user_only();
        self
    }

    /// The time to wait for the answer (default: the node's
    /// [`request_timeout`](crate::Config::request_timeout)), cut to any deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Gives up at `deadline` at the latest.
    pub fn deadline(mut self, deadline: std::time::Instant) -> Self {
        self.deadline = Some(Instant::from_std(deadline));
        self
    }

    /// Inherits the deadline of `request` (for a call made on another task than its
    /// handler's, which does not inherit it by itself).
    pub fn parent(mut self, request: &Request) -> Self {
        self.inherit = Inherit::From(request.tokio_deadline());
        self
    }

    /// Inherits no deadline, even inside a handler: the call has its own timeout only.
    pub fn detached(mut self) -> Self {
        self.inherit = Inherit::Nothing;
        self
    }

    /// For a tick to [`Target::all`] and for gathers: one member of each group instead of
    /// every match, where a group is the nodes with the same value of option `key` (nodes
    /// without it are in no group); the node's strategy picks inside a group. Across the
    /// mesh each group is served once.
    pub fn groups(mut self, key: &str) -> Self {
        self.groups = Some(key.to_owned());
        self
    }

    /// For [`gather`](Call::gather): return as soon as `replies` successful replies came
    /// (the first N); the others are not waited for.
    pub fn min_replies(mut self, replies: usize) -> Self {
        self.min_replies = Some(replies.max(1));
        self
    }

    /// The node the call is made from.
    pub(crate) fn node(&self) -> &'a Node {
        self.node
    }

    /// The call's target.
    pub(crate) fn target(&self) -> &Target {
        &self.to
    }

    /// The same call (event, metadata, timeout, deadline) to another target: one source of
    /// a stream from every match (`find.rs`).
    pub(crate) fn to_one(&self, to: Target) -> Call<'a, Mode> {
        Call {
            node: self.node,
            to,
            event: self.event,
            meta: self.meta.clone(),
            invalid: self.invalid.clone(),
            timeout: self.timeout,
            deadline: self.deadline,
            inherit: self.inherit,
            groups: None,
            min_replies: None,
            mode: PhantomData,
        }
    }

    /// The request, sent as prepared; the answer as it came.
    fn request(self, payload: Bytes) -> impl Future<Output = Result<Answer>> + 'a {
        // Prepared before the future: the future holds what the send needs, not the
        // builder (a request's future is moved at each level that awaits it).
        let prepared = self.prepare();
        async move {
            let mut prepared = prepared?;
            let result = prepared
                .node
                .send_request(&prepared.to, prepared.event, payload, &prepared.outgoing)
                .await;
            prepared.finished(false, &result);
            result
        }
    }

    /// Scatter-gather to the target's matches, each outcome as it arrives.
    fn replies(
        mut self,
        payload: Bytes,
    ) -> Result<impl futures::Stream<Item = (NodeId, Result<Reply>)> + 'a> {
        let spread = match self.groups.take() {
            Some(key) => Spread::Groups(key),
            None => Spread::All,
        };
        let outgoing = self.resolve()?;
        let (node, to, event) = (self.node, self.to, self.event);
        let (filter, scope) = match to {
            Target::Any(filter, scope) | Target::All(filter, scope) => (filter, scope),
            Target::Id(_) => {
                return Err(Error::InvalidTarget {
                    reason: "a gather goes to the nodes matching a filter, not to an id",
                })
            }
        };
        node.inner
            .relay()
            .gather(&filter, scope, spread, event, payload, outgoing)
    }

    /// Scatter-gather, collected (up to `min_replies` successes).
    async fn collect(self, payload: Bytes) -> Result<Vec<(NodeId, Result<Reply>)>> {
        let wanted = self.min_replies;
        let mut stream = self.replies(payload)?;
        let mut all = Vec::new();
        let mut replies = 0;
        while let Some((id, outcome)) = futures::StreamExt::next(&mut stream).await {
            replies += usize::from(outcome.is_ok());
            all.push((id, outcome));
            if wanted.is_some_and(|wanted| replies >= wanted) {
                break;
            }
        }
        if all.is_empty() {
            return Err(Error::NoNodesMatchFilter);
        }
        Ok(all)
    }

    /// The tick, where the target says: one node for an id or any match, every match for
    /// all.
    async fn send_tick(mut self, payload: Bytes) -> Result<Sent> {
        spend_budget().await;
        if matches!(self.to, Target::All(..)) {
            let outgoing = self.resolve()?;
            let Call {
                node,
                to,
                event,
                groups,
                ..
            } = self;
            let Target::All(filter, scope) = to else {
                return Err(Error::InvalidTarget {
                    reason: "a tick to all goes to the nodes matching a filter",
                });
            };
            let started = watch_from(node);
            let result = match groups {
                Some(key) => {
                    node.inner
                        .relay()
                        .tick_groups(&filter, scope, &key, event, payload, &outgoing)
                        .await
                }
                None => {
                    node.send_tick_all(&filter, scope, event, payload, &outgoing)
                        .await
                }
            };
            if let Some(started) = started {
                node.inner.observers().called(&Called {
                    event,
                    tick: true,
                    outcome: Outcome::of(&result),
                    duration: started.elapsed(),
                });
            }
            return result.map(|nodes| Sent { nodes });
        }
        let mut prepared = self.prepare()?;
        let result = prepared
            .node
            .send_tick(&prepared.to, prepared.event, payload, &prepared.outgoing)
            .await;
        prepared.finished(true, &result);
        result.map(|()| Sent { nodes: 1 })
    }

    /// The call resolved (metadata checked, timeout cut), its span made and its trace
    /// context taken.
    pub(crate) fn prepare(mut self) -> Result<Prepared<'a>> {
        let span = trace::call_span(self.node.inner.config().span_level, self.event, &self.to);
        // With `otel`, the span is current while the call is resolved and its trace
        // context taken (so the call carries it as the parent of the receiver's span);
        // never at every poll of the wait: entering a span costs the subscriber work, and
        // nothing of ours logs inside the wait.
        let outgoing = if !trace::ENTER_CALL_SPAN || span.is_disabled() {
            self.resolve()?
        } else {
            span.in_scope(|| self.resolve())?
        };
        let (node, to, event) = (self.node, self.to, self.event);
        let started = watch_from(node);
        Ok(Prepared {
            node,
            to,
            event,
            outgoing,
            span: trace::Unended::new(span),
            started,
        })
    }

    /// The metadata checked, the trace context put in it, and the timeout cut to the
    /// deadline; a deadline that passed already is a timeout, nothing sent.
    fn resolve(&mut self) -> Result<Outgoing> {
        if let Some(invalid) = self.invalid.take() {
            return Err(Error::Metadata(invalid));
        }
        let config = &self.node.inner.config();
        self.meta.check(&config.max_metadata)?;
        let own = self.timeout.unwrap_or(config.request_timeout);
        // Read once: the deadline and the trace the call inherits.
        let current = context::current();
        let inherited = match self.inherit {
            Inherit::Current => current.as_ref().and_then(|c| c.deadline),
            Inherit::From(deadline) => deadline,
            Inherit::Nothing => None,
        };
        let deadline = match (self.deadline, inherited) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The clock is read only for a call with a deadline.
        let timeout = match deadline {
            None => own,
            Some(_) => {
                call_timeout(own, deadline, Instant::now()).ok_or_else(|| Error::Timeout {
                    event: self.event.to_owned(),
                    timeout: Duration::ZERO,
                })?
            }
        };
        let mut meta = std::mem::take(&mut self.meta);
        trace::inject_unless_set(&mut meta, current.and_then(|c| c.trace));
        Ok(Outgoing { meta, timeout })
    }
}

impl<'a> Call<'a, Typed> {
    /// Switches to raw payloads: `send`, `gather` and `tick` take [`Bytes`] (passed through
    /// untouched), and replies are whole [`Reply`]s.
    ///
    /// ```no_run
    /// # async fn example(node: node::Node) -> node::Result<()> {
    /// use bytes::Bytes;
    ///
    /// let reply = node
    ///     .call("blob-store", "put")
    ///     .meta("content-type", "image/png")
    ///     .raw()
    ///     .send(Bytes::from_static(b"\x89PNG..."))
    ///     .await?;
    /// println!("{} bytes back, etag {:?}", reply.payload().len(), reply.meta().get_str("etag"));
    /// # Ok(()) }
    /// ```
    pub fn raw(self) -> Call<'a, Raw> {
        Call {
            node: self.node,
            to: self.to,
            event: self.event,
            meta: self.meta,
            invalid: self.invalid,
            timeout: self.timeout,
            deadline: self.deadline,
            inherit: self.inherit,
            groups: self.groups,
            min_replies: self.min_replies,
            mode: PhantomData,
        }
    }

    /// Sends the request with `data` encoded as MessagePack and waits for its reply,
    /// decoded as `R` (or kept whole when `R` is [`Reply`]). To an id, or to one node
    /// matching a filter (picked by the node's [`Strategy`](crate::Strategy); a pick that
    /// ran nothing, because the node was closing or had forgotten us, is made again among
    /// the others). [`Target::all`] is [`Error::InvalidTarget`]: use
    /// [`gather`](Call::gather) for one reply from each match.
    pub fn send<T, R>(self, data: &T) -> impl Future<Output = Result<R>> + 'a
    where
        T: Serialize + ?Sized,
        R: FromReply + 'a,
    {
        let limits = self.node.inner.config().max_metadata;
        // Combinators, not an `async` block around the request's future: a block would
        // hold that future twice (as the captured value and as the one awaited), and a
        // request's future is moved at each level that awaits it.
        match encode_value(data) {
            Ok(payload) => Either::Left(
                self.request(payload)
                    .map(move |answer| R::from_answer(answer?, &limits)),
            ),
            Err(e) => Either::Right(std::future::ready(Err(e.into()))),
        }
    }

    /// Scatter-gather: sends the request to every node the target's filter matches
    /// ([`Target::any`] and [`Target::all`] alike; an id is [`Error::InvalidTarget`]), here
    /// and through the routers, under one deadline, and returns each one's outcome in the
    /// order they came, decoded as `R` (a node that did not answer in time: its
    /// `Error::Timeout`). No match anywhere is [`Error::NoNodesMatchFilter`].
    pub async fn gather<T, R>(self, data: &T) -> Result<Vec<(NodeId, Result<R>)>>
    where
        T: Serialize + ?Sized,
        R: FromReply,
    {
        let payload = encode_value(data)?;
        let gathered = self.collect(payload).await?;
        Ok(gathered
            .into_iter()
            .map(|(id, reply)| (id, reply.and_then(R::from_reply)))
            .collect())
    }

    /// [`gather`](Call::gather) as a stream: each node's outcome as it arrives (the ones
    /// reached through a router come when that router answers), for a caller that acts on
    /// each reply as it comes or stops on a condition of its own (`min_replies` stops on a
    /// count). Empty when nothing matches.
    pub fn gather_stream<T: Serialize + ?Sized>(
        self,
        data: &T,
    ) -> Result<impl futures::Stream<Item = (NodeId, Result<Reply>)> + 'a> {
        self.replies(encode_value(data)?)
    }

    /// Sends a tick (no answer) with `data` encoded as MessagePack, where the target says:
    /// to an id or one match ([`Sent`] of 1), or to every match for [`Target::all`] (how
    /// many it was sent to). No match anywhere is [`Error::NoNodesMatchFilter`].
    pub async fn tick<T: Serialize + ?Sized>(self, data: &T) -> Result<Sent> {
        let payload = encode_value(data)?;
        self.send_tick(payload).await
    }
}

impl<'a> Call<'a, Raw> {
    /// Sends the request with a raw payload (a payload over the receiver's limit, which its
    /// handshake said, is [`Error::PayloadTooLarge`] at once, nothing sent) and returns the
    /// whole reply. Targets as for the typed [`send`](Call::send).
    pub fn send(self, payload: Bytes) -> impl Future<Output = Result<Reply>> + 'a {
        let limits = self.node.inner.config().max_metadata;
        // A combinator, not an `async` block (see the typed `send`).
        self.request(payload)
            .map(move |answer| Reply::from_answer(answer?, &limits))
    }

    /// The typed [`gather`](Call::gather) with a raw payload and whole replies.
    pub async fn gather(self, payload: Bytes) -> Result<Vec<(NodeId, Result<Reply>)>> {
        self.collect(payload).await
    }

    /// The typed [`gather_stream`](Call::gather_stream) with a raw payload.
    pub fn gather_stream(
        self,
        payload: Bytes,
    ) -> Result<impl futures::Stream<Item = (NodeId, Result<Reply>)> + 'a> {
        self.replies(payload)
    }

    /// The typed [`tick`](Call::tick) with a raw payload.
    pub async fn tick(self, payload: Bytes) -> Result<Sent> {
        self.send_tick(payload).await
    }
}

/// A tick that the socket takes at once completes without waiting, so a loop of them
/// would hold its thread for as long as the peers keep reading, and every other task on it
/// (the heartbeats too, and then its peers take the node for dead) would wait. Each tick
/// call (a fan-out counts once) spends a unit of the task's budget, as a send on a tokio
/// channel does, and every 128th lets the others run. Not per target of a fan-out: yielding
/// in the middle of one splits the connections' write batches (at 1,000 peers, a tick to all
/// ran at 0.27 of its rate with a unit per target, `benches scale`).
async fn spend_budget() {
    tokio::task::coop::consume_budget().await;
}
