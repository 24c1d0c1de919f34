//! Sending: requests and ticks to an id, to one node matching a filter, or to all of them;
//! through a router when no joined peer fits.

use std::sync::Arc;

use bytes::Bytes;
use protocol::Answer;
use serde::Serialize;

use crate::calling::call::{FromReply, Sent};
use crate::codes::system::NOT_JOINED;
use crate::context::Outgoing;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::mesh::link::{Link, Target};
use crate::mesh::peer::{InFlight, LeaveReason, NodeId, Reach, Scope};
use crate::node::Node;
use crate::routing::forward::{pick_again, Action};

impl Node {
    /// Sends a request and decodes the reply (or keeps it whole: `R` = [`Reply`]), with the
    /// node's default timeout and no metadata: `node.call(to, event).send(data)`, where
    /// [`Call`](crate::Call) sets those. `to` is an id or a filter (one match).
    ///
    /// [`Reply`]: crate::Reply
    pub async fn request<T, R>(&self, to: impl Into<Target>, event: &str, data: &T) -> Result<R>
    where
        T: Serialize + ?Sized,
        R: FromReply,
    {
        self.call(to, event).send(data).await
    }

    /// Sends a tick (fire and forget) where `to` says: an id or one match of a filter, or
    /// every match of [`Target::all`]; how many nodes it was sent to:
    /// `node.call(to, event).tick(data)`.
    pub async fn tick<T>(&self, to: impl Into<Target>, event: &str, data: &T) -> Result<Sent>
    where
        T: Serialize + ?Sized,
    {
        self.call(to, event).tick(data).await
    }

    /// Sends a request as `outgoing` says (see [`Call`](crate::Call)).
    pub(crate) async fn send_request(
        &self,
        target: &Target,
        event: &str,
        payload: Bytes,
        outgoing: &Outgoing,
    ) -> Result<Answer> {
        if self.inner.life().is_closing() {
            return Err(Error::Closed);
        }
        if let Target::All(..) = target {
            return Err(Error::InvalidTarget {
                reason: "a request has one reply: to all matches, gather",
            });
        }
        let timeout = outgoing.timeout;
        let by_filter = matches!(target, Target::Any(..));
        let mut attempt = 0;
        let mut timeout = timeout;
        // A pick made again keeps the call's deadline.
        let started = by_filter.then(std::time::Instant::now);
        let mut tried: Vec<NodeId> = Vec::new();
        loop {
            let reach = match self.resolve_except(target, &tried) {
                Ok(found) => found,
                // Boxed: the way through a router is the rare one, and its future, held
                // inline, would make every request's future several times larger, and a
                // request's future is moved at each level that awaits it.
                Err(local) => {
                    let relay = self.inner.relay();
                    let forward = relay.forward_from_here(
                        Action::Request,
                        target,
                        event,
                        payload,
                        outgoing,
                        local,
                    );
                    return Box::pin(forward).await.map(|(reply, _)| reply);
                }
            };
            reach.link.check_size(&payload)?;
            let metadata = outgoing.meta.as_bytes();
            match reach
                .link
                .peer()
                .request_with(event, metadata, payload.clone(), timeout)
                .await
            {
                Ok(reply) => {
                    return Ok(Answer {
                        metadata: reply.metadata().clone(),
                        payload: reply.into_payload(),
                    })
                }
                // Nothing ran on the peer picked (`drain::pick_again` says when): it is
                // stopping, does not count us as joined, or the request never left. The
                // next pick leaves it out.
                Err(e) if pick_again(&e, by_filter, attempt) => {
                    if matches!(&e, protocol::Error::Remote(r) if r.is_system(NOT_JOINED)) {
                        // As for a request by id: it forgot us, and we join again.
                        self.inner.peer_left(
                            &reach.id,
                            reach.link.direction(),
                            LeaveReason::Disconnected,
                        );
                    }
                    attempt += 1;
                    tried.push(reach.id.clone());
                    let spent = started.map(|at| at.elapsed()).unwrap_or_default();
                    timeout = outgoing.timeout.saturating_sub(spent);
                }
                Err(e) => {
                    return Err(self.inner.relay().link_error(
                        &reach.id,
                        &reach.link,
                        event,
                        timeout,
                        e,
                    ))
                }
            }
        }
    }

    /// Sends a tick as `outgoing` says.
    pub(crate) async fn send_tick(
        &self,
        target: &Target,
        event: &str,
        payload: Bytes,
        outgoing: &Outgoing,
    ) -> Result<()> {
        if self.inner.life().is_closing() {
            return Err(Error::Closed);
        }
        match self.resolve(target) {
            Ok(reach) => {
                let link = &reach.link;
                link.check_size(&payload)?;
                link.peer()
                    .tick_with(event, outgoing.meta.as_bytes(), payload)
                    .await
                    .map_err(Error::from)
            }
            Err(local) => self
                .inner
                .relay()
                .forward_from_here(Action::Tick, target, event, payload, outgoing, local)
                .await
                .map(|_| ()),
        }
    }

    /// Sends a tick to every match, as `outgoing` says.
    pub(crate) async fn send_tick_all(
        &self,
        filter: &Filter,
        scope: Scope,
        event: &str,
        payload: Bytes,
        outgoing: &Outgoing,
    ) -> Result<usize> {
        if self.inner.life().is_closing() {
            return Err(Error::Closed);
        }
        let links: Vec<Arc<Link>> = self
            .inner
            .state()
            .lock()
            .registry
            .matching(filter, scope)
            .into_iter()
            .map(|e| e.link().clone())
            .collect();
        if links.is_empty() {
            // Nobody here: the routers we are joined to deliver to their side of the mesh.
            let target = Target::Any(filter.clone(), scope);
            return self
                .inner
                .relay()
                .forward_from_here(
                    Action::TickAll,
                    &target,
                    event,
                    payload,
                    outgoing,
                    Error::NoNodesMatchFilter,
                )
                .await
                .map(|(_, delivered)| delivered);
        }
        let metadata = outgoing.meta.as_bytes();
        let mut sent = 0;
        let mut first_error = None;
        for link in &links {
            if let Err(e) = link.check_size(&payload) {
                first_error.get_or_insert(e);
                continue;
            }
            match link
                .peer()
                .tick_with(event, metadata, payload.clone())
                .await
            {
                Ok(()) => sent += 1,
                Err(e) => {
                    first_error.get_or_insert(Error::from(e));
                }
            }
        }
        match (sent, first_error) {
            (0, Some(e)) => Err(e),
            _ => Ok(sent),
        }
    }

    /// Finds the joined peer a target names, or picks one: the request to it counts as in
    /// flight from here until the guard drops.
    pub(crate) fn resolve(&self, target: &Target) -> Result<InFlight<Arc<Link>>> {
        self.resolve_except(target, &[])
    }

    /// [`resolve`](Self::resolve), a pick by filter leaving out the peers in `tried`
    /// (picked before for this request, and nothing ran there). The guard is taken under
    /// the registry's lock, with the pick (see `Reach::in_flight`).
    fn resolve_except(&self, target: &Target, tried: &[NodeId]) -> Result<InFlight<Arc<Link>>> {
        let mut state = self.inner.state().lock();
        let reach = match target {
            Target::Id(id) => state
                .registry
                .route(id)
                .ok_or_else(|| Error::NodeNotFound { id: id.to_string() }),
            Target::Any(filter, scope) => {
                let random = rand::random::<u32>() as usize;
                let strategy = self.inner.config().strategy;
                let picked = if tried.is_empty() {
                    state.registry.pick(filter, *scope, strategy, random)
                } else {
                    state
                        .registry
                        .pick_except(filter, *scope, strategy, random, |id| tried.contains(id))
                };
                picked.ok_or(Error::NoNodesMatchFilter)
            }
            Target::All(..) => Err(Error::InvalidTarget {
                reason: "one node was asked for, and the target is all matches",
            }),
        };
        reach.map(Reach::start_request)
    }
}
