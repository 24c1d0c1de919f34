//! A call being made: the request builder behind every send.
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
//! [`Node::request`] and the other shorthands are calls with no metadata and the default
//! timeout. Every call made while a request handler runs inherits that request's deadline
//! (the smaller of the two wins) unless it is [`detached`](Call::detached): see
//! ARCHITECTURE.md, "Request context".

use std::time::Duration;

use bytes::Bytes;
use protocol::{decode_value, encode_value, Meta, MetaError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use crate::context::{self, call_timeout, Outgoing};
use crate::error::{Error, Result};
use crate::fanout::Spread;
use crate::handler::Request;
use crate::link::Target;
use crate::node::Node;
use crate::observe::{Called, Outcome};
use crate::trace;

/// When a call started, if a hook or metrics watch the node: otherwise the clock is not
/// read.
fn watch_from(node: &Node) -> Option<std::time::Instant> {
    node.inner.observers.active().then(std::time::Instant::now)
}

/// A call ready to go: see [`Call::prepare`].
struct Prepared<'a> {
    node: &'a Node,
    to: Target,
    event: &'a str,
    outgoing: Outgoing,
    /// The call's span: `cancelled` if the call is dropped before it ends.
    span: trace::Unended<tracing::Span>,
    started: Option<std::time::Instant>,
}

impl Prepared<'_> {
    /// Records how the call ended: in its span, and for the hooks and metrics.
    fn finished<T>(&mut self, tick: bool, result: &Result<T>) {
        let outcome = Outcome::of(result);
        self.span.ended(outcome);
        if let Some(started) = self.started {
            self.node.inner.observers.called(&Called {
                event: self.event,
                tick,
                outcome,
                duration: started.elapsed(),
            });
        }
    }
}

/// A reply: its payload and the metadata its handler set.
#[derive(Debug, Clone)]
pub struct Reply {
    payload: Bytes,
    meta: Meta,
}

impl Reply {
    /// The reply's metadata, checked (its size against
    /// [`Config::max_metadata`](crate::Config::max_metadata)).
    pub(crate) fn from_answer(
        answer: protocol::Answer,
        limits: &protocol::MetaLimits,
    ) -> Result<Reply> {
        Ok(Reply {
            meta: Meta::parse(answer.metadata, limits)?,
            payload: answer.payload,
        })
    }

    /// The raw payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Takes the payload out.
    pub fn into_payload(self) -> Bytes {
        self.payload
    }

    /// The metadata the handler answered with.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Decodes the payload from MessagePack.
    pub fn decode<R: DeserializeOwned>(&self) -> Result<R> {
        Ok(decode_value(&self.payload)?)
    }
}

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

/// A request or tick being built: target, event, metadata, timeout; sent by
/// [`send`](Self::send) (and its raw and tick forms). Made by [`Node::call`].
#[must_use = "a call does nothing until it is sent"]
#[derive(Debug)]
pub struct Call<'a> {
    node: &'a Node,
    to: Target,
    event: &'a str,
    meta: Meta,
    /// The first bad metadata entry, reported when the call is sent.
    invalid: Option<MetaError>,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    inherit: Inherit,
    /// For `tick_all` and `gather`: one member of each group (by this option key).
    groups: Option<String>,
    /// For `gather`: stop at this many replies.
    min_replies: Option<usize>,
}

impl Node {
    /// Starts a call to `to` (an id, or any node matching a filter) for `event`: set
    /// metadata and a timeout, then [`send`](Call::send) it (or send it as a tick).
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
        }
    }

    /// Sends a request to every node matching `filter` in `scope` (here and through the
    /// routers), under one deadline; each one's outcome, in the order they came. See
    /// [`Call::gather`].
    pub async fn request_all<T, R>(
        &self,
        filter: &crate::Filter,
        scope: crate::Scope,
        event: &str,
        data: &T,
    ) -> Result<Vec<(crate::NodeId, Result<R>)>>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        self.call(Target::Any(filter.clone(), scope), event)
            .gather(data)
            .await
    }
}

impl<'a> Call<'a> {
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

    /// For [`tick_all`](Self::tick_all) and the gathers: one member of each group instead
    /// of every match, where a group is the nodes with the same value of option `key`
    /// (nodes without it are in no group); the node's strategy picks inside a group.
    /// Across the mesh each group is served once.
    pub fn groups(mut self, key: &str) -> Self {
        self.groups = Some(key.to_owned());
        self
    }

    /// For [`gather`](Self::gather): return as soon as `replies` successful replies came
    /// (the first N); the others are not waited for.
    pub fn min_replies(mut self, replies: usize) -> Self {
        self.min_replies = Some(replies.max(1));
        self
    }

    /// Scatter-gather: sends the request to every node the target's filter matches
    /// (`Target::Any`; an id is [`Error::InvalidFilter`]), here and through the routers, under one deadline, and returns each one's
    /// outcome in the order they came (a node that did not answer in time: its
    /// `Error::Timeout`). No match anywhere is [`Error::NoNodesMatchFilter`].
    pub async fn gather<T, R>(self, data: &T) -> Result<Vec<(crate::NodeId, Result<R>)>>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let payload = encode_value(data)?;
        let gathered = self.gather_raw(payload).await?;
        Ok(gathered
            .into_iter()
            .map(|(id, reply)| (id, reply.and_then(|r| r.decode())))
            .collect())
    }

    /// [`gather`](Self::gather) with a raw payload and whole replies.
    pub async fn gather_raw(self, payload: Bytes) -> Result<Vec<(crate::NodeId, Result<Reply>)>> {
        let wanted = self.min_replies;
        let mut stream = self.gather_stream(payload)?;
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

    /// Scatter-gather as a stream: each node's outcome as it arrives (the ones reached
    /// through a router come when that router answers). Empty when nothing matches.
    pub fn gather_stream(
        mut self,
        payload: Bytes,
    ) -> Result<impl futures::Stream<Item = (crate::NodeId, Result<Reply>)> + 'a> {
        let spread = match self.groups.take() {
            Some(key) => Spread::Groups(key),
            None => Spread::All,
        };
        let outgoing = self.resolve()?;
        let (node, to, event) = (self.node, self.to, self.event);
        let (filter, scope) = match to {
            Target::Any(filter, scope) => (filter, scope),
            Target::Id(_) => {
                return Err(Error::InvalidFilter {
                    reason: "a gather goes to the nodes matching a filter (Target::Any)".into(),
                })
            }
        };
        node.inner
            .gather(&filter, scope, spread, event, payload, outgoing)
    }

    /// Inherits no deadline, even inside a handler: the call has its own timeout only.
    pub fn detached(mut self) -> Self {
        self.inherit = Inherit::Nothing;
        self
    }

    /// Sends the request with `data` encoded as MessagePack and decodes the reply.
    pub async fn send<T, R>(self, data: &T) -> Result<R>
    where
        T: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let payload = encode_value(data)?;
        let reply = self.send_raw(payload).await?;
        Ok(decode_value(&reply)?)
    }

    /// Sends the request with `data` encoded as MessagePack and returns the whole reply:
    /// payload and metadata.
    pub async fn send_reply<T: Serialize + ?Sized>(self, data: &T) -> Result<Reply> {
        let payload = encode_value(data)?;
        self.send_raw_reply(payload).await
    }

    /// Sends the request with a raw payload (passed through untouched) and returns the raw
    /// reply.
    pub fn send_raw(self, payload: Bytes) -> impl std::future::Future<Output = Result<Bytes>> + 'a {
        // Prepared before the future: the future holds what the send needs, not the
        // builder (a request's future is moved at each level that awaits it).
        let prepared = self.prepare();
        async move {
            let mut prepared = prepared?;
            let result = prepared
                .node
                .send_request(&prepared.to, prepared.event, payload, &prepared.outgoing)
                .await
                .map(|answer| answer.payload);
            prepared.finished(false, &result);
            result
        }
    }

    /// Sends the request with a raw payload and returns the whole reply: its payload and
    /// the metadata the handler set ([`Response::with_meta`](crate::Response::with_meta)).
    pub async fn send_raw_reply(self, payload: Bytes) -> Result<Reply> {
        let limits = self.node.inner.config.max_metadata;
        let mut prepared = self.prepare()?;
        let result = prepared
            .node
            .send_request(&prepared.to, prepared.event, payload, &prepared.outgoing)
            .await
            .and_then(|answer| Reply::from_answer(answer, &limits));
        prepared.finished(false, &result);
        result
    }

    /// Sends it as a tick (no answer) with `data` encoded as MessagePack.
    pub async fn tick<T: Serialize + ?Sized>(self, data: &T) -> Result<()> {
        let payload = encode_value(data)?;
        self.tick_raw(payload).await
    }

    /// Sends it as a tick with a raw payload.
    pub async fn tick_raw(self, payload: Bytes) -> Result<()> {
        spend_budget().await;
        let mut prepared = self.prepare()?;
        let result = prepared
            .node
            .send_tick(&prepared.to, prepared.event, payload, &prepared.outgoing)
            .await;
        prepared.finished(true, &result);
        result
    }

    /// The call resolved (metadata checked, timeout cut), its span made and its trace
    /// context taken.
    fn prepare(mut self) -> Result<Prepared<'a>> {
        let span = trace::call_span(self.node.inner.config.span_level, self.event, &self.to);
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

    /// Sends it as a tick to every node the target matches (one for an id); how many it
    /// reached.
    pub async fn tick_all<T: Serialize + ?Sized>(mut self, data: &T) -> Result<usize> {
        spend_budget().await;
        let payload = encode_value(data)?;
        let outgoing = self.resolve()?;
        let (node, to, event, groups) = (self.node, self.to, self.event, self.groups);
        match to {
            Target::Any(filter, scope) => match groups {
                Some(key) => {
                    node.inner
                        .tick_groups(&filter, scope, &key, event, payload, &outgoing)
                        .await
                }
                None => {
                    node.send_tick_all(&filter, scope, event, payload, &outgoing)
                        .await
                }
            },
            id @ Target::Id(_) => node
                .send_tick(&id, event, payload, &outgoing)
                .await
                .map(|()| 1),
        }
    }

    /// The metadata checked, the trace context put in it, and the timeout cut to the
    /// deadline; a deadline that passed already is a timeout, nothing sent.
    fn resolve(&mut self) -> Result<Outgoing> {
        if let Some(invalid) = self.invalid.take() {
            return Err(Error::Metadata(invalid));
        }
        let config = &self.node.inner.config;
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

/// A tick that the socket takes at once completes without waiting, so a loop of them
/// would hold its thread for as long as the peers keep reading, and every other task on it
/// (the heartbeats too, and then its peers take the node for dead) would wait. Each tick
/// call (a fan-out counts once) spends a unit of the task's budget, as a send on a tokio
/// channel does, and every 128th lets the others run. Not per target of a fan-out: yielding
/// in the middle of one splits the connections' write batches (at 1,000 peers, `tick_all`
/// ran at 0.27 of its rate with a unit per target, `benches scale`).
async fn spend_budget() {
    tokio::task::coop::consume_budget().await;
}
