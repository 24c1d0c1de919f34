//! Router nodes at run time: sending a message through the routers we are joined to, and
//! forwarding for our peers (`forward.rs` holds the message and the pure decisions).
//!
//! At most once: a router answers with typed outcomes, never by reading the user's error
//! codes. Its own failures are system errors (`RemoteError::system`) with the codes of
//! `codes::route`; a leaf's error reply is passed back as it came (a handler's error
//! stays a handler's error, whatever its code). The origin tries another router only when
//! [`forward::retry_elsewhere`] says the message provably reached no handler.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::{decode_value, encode_value, Answer, Incoming, Meta, MetaValue, RemoteError};
use tokio::time::Instant;

use crate::codes::route as code;
use crate::codes::system::{BAD_FORWARD, DEADLINE_EXCEEDED, NOT_JOINED, NO_HANDLER};
use crate::config::Config;
use crate::context::{millis, Outgoing};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::mesh::link::{Link, Target};
use crate::mesh::peer::{Direction, InFlight, LeaveReason, NodeId, Reach};
use crate::mesh::peers::State;
use crate::mesh::phase::Life;
use crate::observation::describe::DESCRIBE;
use crate::routing::forward::{
    hop_budget, retry_elsewhere, undelivered, Action, Admission, Destination, Forward, FORWARD,
};
use crate::routing::forward::{pick_again, Routing};
use crate::serving::handler::{Route, ROUTE};
use crate::serving::runtime::Received;

/// Routing and forwarding at run time: the node's [`Routing`] (its counters, the ids it
/// has seen, the fan-outs' turn) with what it reads of the rest of the node. The node makes
/// one per use (`Inner::relay`); its methods are here and in `fanout.rs`.
#[derive(Clone, Copy)]
pub(crate) struct Relay<'a> {
    pub(crate) id: &'a NodeId,
    pub(crate) config: &'a Config,
    /// The peer registry: where messages can go.
    pub(crate) state: &'a parking_lot::Mutex<State>,
    pub(crate) life: &'a Life,
    pub(crate) routing: &'a Routing,
    /// Told when a peer turns out to count us as gone.
    pub(crate) departures: &'a dyn Departures,
}

/// What forwarding tells the node: a peer turned out to count us as gone.
pub(crate) trait Departures: Sync {
    /// Forget `id` in `direction`, fail what waits on it, tell its supervisor, say so.
    fn peer_left(&self, id: &NodeId, direction: Direction, reason: LeaveReason);
}

impl<'a> Relay<'a> {
    /// The caller's error for a request to the joined peer `id` (through `link`) that
    /// failed with `error`.
    pub(crate) fn link_error(
        self,
        id: &NodeId,
        link: &Link,
        event: &str,
        timeout: Duration,
        error: protocol::Error,
    ) -> Error {
        match error {
            // The peer's connection dropped (before or while waiting): for the caller the
            // peer left, whether or not the node has noticed it yet.
            protocol::Error::ConnectionLost | protocol::Error::NotConnected => Error::PeerLeft {
                peer: id.to_string(),
                hop: None,
            },
            protocol::Error::Remote(remote) if remote.is_system(NOT_JOINED) => {
                // The peer no longer counts us as joined (it declared us dead, or it
                // restarted): it left, as far as we are concerned, and the connection's
                // supervisor joins again.
                self.departures
                    .peer_left(id, link.direction(), LeaveReason::Disconnected);
                Error::PeerLeft {
                    peer: id.to_string(),
                    hop: None,
                }
            }
            protocol::Error::Remote(remote) if remote.is_system(DEADLINE_EXCEEDED) => {
                Error::Timeout {
                    event: event.to_owned(),
                    timeout,
                }
            }
            e => e.into(),
        }
    }
}

impl Relay<'_> {
    /// The routers joined to this node, but the one a forward came from (a forward never
    /// goes back where it came from).
    pub(crate) fn routers_except(&self, from: &NodeId) -> Vec<(NodeId, Arc<Link>)> {
        let mut routers = self.state.lock().registry.routers();
        routers.retain(|(id, _)| id != from);
        routers
    }

    /// Sends a message that found no joined destination here through the routers we are
    /// joined to. `local` is the error when there is no router. Returns the reply payload
    /// (requests) and how many nodes were reached (ticks).
    pub(crate) async fn forward_from_here(
        &self,
        action: Action,
        target: &Target,
        event: &str,
        payload: Bytes,
        outgoing: &Outgoing,
        local: Error,
    ) -> Result<(Answer, usize)> {
        let timeout = outgoing.timeout;
        let routers = self.state.lock().registry.routers();
        if routers.is_empty() {
            return Err(local);
        }
        // The receiver is not known yet: our own limit (the mesh's, by default).
        crate::mesh::link::check_size(payload.len(), self.config.max_payload)?;
        let forward = self.origin_header(action, target, event, timeout)?;
        let deadline = Instant::now() + timeout;
        self.forward_via(&forward, routers, payload, deadline, &outgoing.meta)
            .await
            .map_err(|remote| forward_error(remote, target, event, timeout, self.id))
    }

    /// The header of a message this node sends through routers (as its origin) to
    /// `target`, with `timeout` to spend. A predicate filter (Rust code) cannot travel: it
    /// is refused here.
    pub(crate) fn origin_header(
        &self,
        action: Action,
        target: &Target,
        event: &str,
        timeout: Duration,
    ) -> Result<Forward> {
        let to = match target {
            Target::Id(id) => Destination::Id(id.clone()),
            Target::Any(filter, scope) | Target::All(filter, scope) => {
                Destination::Filter(filter.to_spec()?, *scope)
            }
        };
        Ok(Forward {
            id: rand::random(),
            action,
            to,
            event: event.to_owned(),
            remaining_ms: millis(timeout),
            hops_left: self.config.hop_limit,
            origin: self.id.clone(),
            visited: Vec::new(),
            groups: None,
            skip: Vec::new(),
            served: Vec::new(),
        })
    }

    /// A system error this node makes about routing: it names this node as the hop.
    pub(crate) fn refuse(&self, code: &str, message: impl Into<String>) -> RemoteError {
        RemoteError::system_error(code, message).with_hop(self.id.as_str())
    }

    /// What this node answers when the hop it made to `to` failed (`hop_error`).
    pub(crate) fn hop_failed(&self, to: &NodeId, error: protocol::Error) -> RemoteError {
        hop_error(error, self.id, to)
    }

    /// Offers `forward` to `routers` in turn (all of them for `TickAll`), each with the time
    /// left before `deadline`, with the user's metadata `user`.
    async fn forward_via(
        &self,
        forward: &Forward,
        routers: Vec<(NodeId, Arc<Link>)>,
        payload: Bytes,
        deadline: Instant,
        user: &Meta,
    ) -> std::result::Result<(Answer, usize), RemoteError> {
        let mut delivered = 0usize;
        let mut last: Option<RemoteError> = None;
        for (id, _) in routers {
            if forward.excludes(&id) || id == *self.id {
                continue;
            }
            // Counted in flight to that router from here (it may be being let go: then
            // it is not picked, and the next one is tried).
            let Some(router) = self.state.lock().registry.start_to(&id) else {
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.refuse(code::TIMEOUT, "the deadline passed"));
            }
            let mut header = forward.clone();
            header.remaining_ms = millis(left);
            let header = encode_value(&header).map_err(|e| RemoteError::handler(e.to_string()))?;
            let mut meta = user.clone();
            meta.set(FORWARD_KEY, MetaValue::Bytes(&header));
            let metadata = meta.as_bytes().clone();
            let sent = (router.link)
                .system()
                .request_with(FORWARD, &metadata, payload.clone(), left)
                .await;
            drop(router);
            self.passed(&id, &sent);
            match sent {
                Ok(reply) if forward.action == Action::TickAll => {
                    delivered += decode_value::<u64>(reply.payload()).unwrap_or(0) as usize;
                }
                Ok(reply) => {
                    let reached = match forward.action {
                        Action::Tick => decode_value::<u64>(reply.payload()).unwrap_or(1) as usize,
                        _ => 1,
                    };
                    return Ok((answer_of(reply), reached));
                }
                // This router's side of the mesh has nothing (it said so, as data): try the
                // others.
                Err(protocol::Error::Remote(remote)) if retry_elsewhere(&remote) => {
                    last = Some(remote);
                }
                // Delivered, or maybe delivered: whatever it is (a handler's own error
                // included) it is the answer; another path could run the handler twice.
                Err(protocol::Error::Remote(remote)) => return Err(remote),
                // That router could not be given the message at all: try the others.
                Err(e) if undelivered(&e) => {
                    last = Some(self.refuse(code::NO_MATCH, e.to_string()))
                }
                // It may have arrived (the connection went while we waited), it timed out,
                // or the router has no forwarding: stop here, naming the router.
                Err(e) => return Err(self.hop_failed(&id, e)),
            }
        }
        if forward.action == Action::TickAll && delivered > 0 {
            return Ok((Answer::default(), delivered));
        }
        Err(last
            .filter(|r| !r.is_system(code::NOT_A_ROUTER))
            .unwrap_or_else(|| self.unreached(&forward.to)))
    }

    /// What this node answers when nothing it can reach is the destination.
    pub(crate) fn unreached(&self, to: &Destination) -> RemoteError {
        match to {
            Destination::Id(id) => {
                // The id in the message too: a router of an older version read it there.
                self.refuse(code::NOT_FOUND, id.to_string())
                    .with_peer(id.as_str())
            }
            Destination::Filter(..) => self.refuse(code::NO_MATCH, "no node matches"),
        }
    }

    /// Counts a message this router passed to its next hop `to`, by what came back
    /// ([`reached`]); a node that is not a router, fanning out its own calls, counts
    /// nothing.
    pub(crate) fn passed<T>(&self, to: &NodeId, sent: &protocol::Result<T>) {
        self.passed_to(to, reached(sent));
    }

    /// Counts a message this router passed to `to`, forwarded (`ok`) or failed there.
    pub(crate) fn passed_to(&self, to: &NodeId, ok: bool) {
        if self.config.router {
            self.routing.hops.record(to, ok);
        }
    }

    /// A router receives a forwarded message from its peer `from`.
    pub(crate) async fn handle_forward(
        &self,
        from: NodeId,
        incoming: Incoming,
        received: Received,
    ) -> std::result::Result<Answer, RemoteError> {
        if !self.config.router {
            return Err(self.refuse(code::NOT_A_ROUTER, self.id.to_string()));
        }
        let header = received
            .meta
            .get(FORWARD_KEY)
            .ok_or_else(|| RemoteError::system_error(BAD_FORWARD, "no forward header"))?;
        let forward: Forward = decode_value(header.as_bytes())
            .map_err(|e| RemoteError::system_error(BAD_FORWARD, e.to_string()))?;
        if forward.event == DESCRIBE {
            crate::observation::describe::may_forward(&self.config.describe, incoming.peer_key())?;
        }
        let mut user = received.meta.user_only();
        // Every hop from here carries the trace on under this router's span.
        crate::observation::trace::inject(&mut user);
        let routing = self.routing;
        let admission = forward.admit(self.id, &mut routing.seen.lock());
        let left = match admission {
            Admission::Accept(left) => left,
            Admission::Duplicate if fans_out(&forward) => {
                return crate::routing::fanout::Fanned::default().answer()
            }
            Admission::Duplicate => return Ok(count_answer(0)),
            Admission::Loop => {
                routing.looped.fetch_add(1, Ordering::Relaxed);
                return Err(self.refuse(
                    code::LOOP,
                    format!(
                        "visited {:?}, {} hops left",
                        forward.visited, forward.hops_left
                    ),
                ));
            }
            Admission::Expired => {
                routing.expired.fetch_add(1, Ordering::Relaxed);
                return Err(self.refuse(code::TIMEOUT, "no time left"));
            }
        };
        let deadline = Instant::now() + hop_budget(left);
        let mut via = forward.visited.clone();
        via.push(self.id.clone());
        let route = Route {
            origin: forward.origin.clone(),
            via,
        };
        let route = encode_value(&route).map_err(|e| RemoteError::handler(e.to_string()))?;
        let mut leaf = user.clone();
        leaf.set(ROUTE, MetaValue::Bytes(&route));
        let payload = incoming.payload().clone();
        let hop = Hop {
            from: &from,
            leaf: leaf.as_bytes().clone(),
            user: &user,
            deadline,
        };
        // A streamed reply or body is relayed item by item (`stream_route.rs`).
        let streamed = !fans_out(&forward);
        let (sink, body) = (incoming.take_sink(), incoming.take_body());
        let result = match (sink.filter(|_| streamed), body.filter(|_| streamed)) {
            // A streamed reply, with a body too for a stream both ways.
            (Some(sink), body) => {
                let leaf = (hop.leaf, &user);
                let ends = (sink, body);
                let here = self.stream_here(&forward, &from, leaf, payload, deadline, ends);
                Box::pin(here).await
            }
            (None, Some(body)) => {
                let leaf = (hop.leaf, &user);
                Box::pin(self.upload_here(&forward, &from, leaf, deadline, body)).await
            }
            (None, None) if !streamed => {
                Box::pin(self.fan_here(&forward, &from, hop.leaf, &user, payload, deadline)).await
            }
            (None, None) => match forward.action {
                Action::TickAll => self.forward_tick_all(&forward, hop, payload).await,
                _ => self.forward_one(&forward, hop, payload).await,
            },
        };
        let counter = match &result {
            Ok(_) => &routing.forwarded,
            // The destination answered, with an error of its own or a refusal: the hops
            // worked.
            Err(e) if answered_there(e) => &routing.forwarded,
            Err(e) if e.is_system(code::TIMEOUT) => &routing.expired,
            Err(e) if e.is_system(code::LOOP) => &routing.looped,
            Err(_) => &routing.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Delivers a forwarded request or tick to one local peer, or passes it on.
    async fn forward_one(
        &self,
        forward: &Forward,
        hop: Hop<'_>,
        payload: Bytes,
    ) -> std::result::Result<Answer, RemoteError> {
        let Hop {
            from,
            leaf: metadata,
            user,
            deadline,
        } = hop;
        let by_filter = matches!(forward.to, Destination::Filter(..));
        let mut attempt = 0;
        let mut tried: Vec<NodeId> = Vec::new();
        loop {
            let local = self.pick_for(forward, from, &tried)?;
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(reach) = local else {
                let next = forward.next_hop(self.id, left);
                let routers = self.routers_except(from);
                let (reply, reached) = self
                    .forward_via(&next, routers, payload, deadline, user)
                    .await?;
                return Ok(match forward.action {
                    Action::Request => reply,
                    _ => count_answer(reached as u64),
                });
            };
            if left.is_zero() {
                return Err(self.refuse(code::TIMEOUT, "no time left"));
            }
            let link = &reach.link;
            return match forward.action {
                Action::Request => {
                    // A description is the one system request a router passes on.
                    let sent = if forward.event == DESCRIBE {
                        link.system()
                            .request_with(DESCRIBE, &metadata, payload.clone(), left)
                            .await
                    } else {
                        link.peer()
                            .request_with(&forward.event, &metadata, payload.clone(), left)
                            .await
                    };
                    self.passed(&reach.id, &sent);
                    match sent {
                        Ok(reply) => Ok(answer_of(reply)),
                        // Nothing ran on the peer picked (stopping, and marked draining
                        // by now; or the request never left): pick again.
                        Err(e) if pick_again(&e, by_filter, attempt) => {
                            attempt += 1;
                            tried.push(reach.id.clone());
                            continue;
                        }
                        Err(e) => Err(self.hop_failed(&reach.id, e)),
                    }
                }
                _ => {
                    let sent = link
                        .peer()
                        .tick_with(&forward.event, &metadata, payload)
                        .await;
                    self.passed(&reach.id, &sent);
                    match sent {
                        Ok(()) => Ok(count_answer(1)),
                        Err(e) => Err(self.hop_failed(&reach.id, e)),
                    }
                }
            };
        }
    }

    /// Delivers a forwarded tick to all matches to every local match and passes it on to the other
    /// routers; answers how many nodes it reached.
    async fn forward_tick_all(
        &self,
        forward: &Forward,
        hop: Hop<'_>,
        payload: Bytes,
    ) -> std::result::Result<Answer, RemoteError> {
        let Hop {
            from,
            leaf: metadata,
            user,
            deadline,
        } = hop;
        let Destination::Filter(spec, scope) = &forward.to else {
            return Err(RemoteError::system_error(
                BAD_FORWARD,
                "tick_all needs a filter",
            ));
        };
        let filter = Filter::from_spec(spec.clone())
            .map_err(|e| RemoteError::system_error(BAD_FORWARD, e.to_string()))?;
        let links: Vec<(NodeId, Arc<Link>)> = self
            .state
            .lock()
            .registry
            .matching(&filter, *scope)
            .into_iter()
            .filter(|e| !forward.excludes(e.id()) && e.id() != from)
            .map(|e| (e.id().clone(), e.link().clone()))
            .collect();
        let mut reached = 0usize;
        for (id, link) in links {
            let sent = link
                .peer()
                .tick_with(&forward.event, &metadata, payload.clone())
                .await;
            self.passed(&id, &sent);
            reached += usize::from(sent.is_ok());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let next = forward.next_hop(self.id, left);
        let routers = self.routers_except(from);
        if !routers.is_empty() && next.hops_left > 0 {
            if let Ok((_, further)) = self
                .forward_via(&next, routers, payload, deadline, user)
                .await
            {
                reached += further;
            }
        }
        if reached == 0 {
            return Err(self.refuse(code::NO_MATCH, "no node matches"));
        }
        Ok(count_answer(reached as u64))
    }

    /// The local peer a forwarded request or tick goes to, if any, leaving out the peers in
    /// `tried` (picked before for this message, and nothing ran there). What is forwarded
    /// to it counts as in flight to it from the pick (under the registry's lock) until the
    /// guard drops: a let-go of that peer waits for it.
    pub(crate) fn pick_for(
        &self,
        forward: &Forward,
        from: &NodeId,
        tried: &[NodeId],
    ) -> std::result::Result<Option<InFlight<Arc<Link>>>, RemoteError> {
        let mut state = self.state.lock();
        let picked = match &forward.to {
            Destination::Id(id) if forward.excludes(id) => None,
            Destination::Id(id) => state.registry.route(id),
            Destination::Filter(spec, scope) => {
                let filter = Filter::from_spec(spec.clone())
                    .map_err(|e| RemoteError::system_error(BAD_FORWARD, e.to_string()))?;
                state.registry.pick_except(
                    &filter,
                    *scope,
                    self.config.strategy,
                    rand::random::<u32>() as usize,
                    |id| forward.excludes(id) || id == from || tried.contains(id),
                )
            }
        };
        Ok(picked.map(Reach::start_request))
    }
}

/// The metadata key of a forwarded message's [`Forward`] header (the framework's).
pub(crate) const FORWARD_KEY: &str = ":forward";

/// What a router passes on with a forwarded message: where it came from, the metadata for
/// a local destination (the user's and the route) and for a next router (the user's), and
/// when the origin stops waiting.
struct Hop<'a> {
    from: &'a NodeId,
    leaf: Bytes,
    user: &'a Meta,
    deadline: Instant,
}

/// A reply passed back as it came: its payload and its metadata.
fn answer_of(reply: protocol::Envelope) -> Answer {
    Answer {
        metadata: reply.metadata().clone(),
        payload: reply.into_payload(),
    }
}

/// An answer carrying how many nodes a forwarded tick reached.
fn count_answer(count: u64) -> Answer {
    Answer::from(encode_value(&count).unwrap_or_default())
}

/// Whether a forward is a gather or a group tick (`fanout.rs` handles those).
fn fans_out(forward: &Forward) -> bool {
    forward.action == Action::Gather
        || (forward.action == Action::TickAll && forward.groups.is_some())
}

/// Whether a hop reached the node it was made to, from what came back: a reply, or an
/// error reply that node made about the request itself ([`answered_there`]). A failure of
/// the hop (the connection, no answer in time) is not.
pub(crate) fn reached<T>(sent: &protocol::Result<T>) -> bool {
    match sent {
        Ok(_) | Err(protocol::Error::NoHandler { .. }) => true,
        Err(protocol::Error::Remote(remote)) => answered_there(remote),
        Err(_) => false,
    }
}

/// Whether an error reply is the answer of the node a message was for, not a failure on
/// the way: a handler's or a middleware's error (a refusal included), or the node's own
/// refusal (busy, closing, no handler, over a limit). A router's failure names the router
/// as `hop`; a connection that never joined answers `NOT_JOINED`.
pub(crate) fn answered_there(remote: &RemoteError) -> bool {
    !remote.system
        || remote.is_system(NO_HANDLER)
        || (remote.hop().is_none() && !remote.is_system(NOT_JOINED))
}

/// What a router (`me`) answers when the hop it made to `to` failed: an error reply from
/// further on passes unchanged (a handler's error stays the handler's, a router's keeps the
/// router that made it); a failure of the hop itself names the router and the node, as
/// fields.
pub(crate) fn hop_error(error: protocol::Error, me: &NodeId, to: &NodeId) -> RemoteError {
    let failed = |code: &str, message: String| {
        RemoteError::system_error(code, message)
            .with_hop(me.as_str())
            .with_peer(to.as_str())
    };
    match error {
        protocol::Error::Remote(remote) => remote,
        protocol::Error::Timeout { timeout, .. } => {
            failed(code::TIMEOUT, "no answer in time".into()).with_timeout(timeout)
        }
        protocol::Error::NoHandler { event } => RemoteError::no_handler(&event)
            .with_hop(me.as_str())
            .with_peer(to.as_str()),
        protocol::Error::ConnectionLost | protocol::Error::NotConnected => {
            failed(code::PEER_LEFT, "the node left before answering".into())
        }
        other => failed(code::HOP_FAILED, other.to_string()),
    }
}

/// The caller's typed error for a forward that failed: the routers' own outcomes are typed
/// from their fields ([`Error::from_remote`]); a handler's error (not a system error) is the
/// handler's, whatever its code. `me` is the caller: a hop it made itself is not reported
/// as a router's.
pub(crate) fn forward_error(
    mut remote: RemoteError,
    target: &Target,
    event: &str,
    timeout: Duration,
    me: &NodeId,
) -> Error {
    if !remote.system {
        return Error::from_remote(remote);
    }
    let by_us = remote.hop() == Some(me.as_str());
    let error = match remote.code.as_str() {
        code::TIMEOUT | DEADLINE_EXCEEDED => Error::Timeout {
            event: event.to_owned(),
            timeout,
        },
        NO_HANDLER => Error::NoHandler {
            event: event.to_owned(),
        },
        code::PEER_LEFT if remote.peer().is_none() => {
            // A router of an older version says who left only in words: the id asked
            // for is who it was, when the call named one.
            if let Target::Id(id) = target {
                remote = remote.with_peer(id.as_str());
            }
            Error::from_remote(remote)
        }
        _ => Error::from_remote(remote),
    };
    if by_us {
        return seen_here(error);
    }
    error
}

/// The same error as this node's own observation (no router named).
fn seen_here(error: Error) -> Error {
    match error {
        Error::PeerLeft { peer, .. } => Error::PeerLeft { peer, hop: None },
        Error::HopFailed { peer, message, .. } => Error::HopFailed {
            peer,
            message,
            hop: None,
        },
        Error::RouteLoop { reason, .. } => Error::RouteLoop { reason, hop: None },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_that_brought_back_the_destinations_answer_reached_it() {
        let me = NodeId::from("r1");
        let to = NodeId::from("w1");
        // A handler's error and a middleware's refusal: the destination answered.
        let handler: protocol::Result<()> = Err(protocol::Error::Remote(RemoteError::new(
            "UNAUTHENTICATED",
            "no tenant",
        )));
        assert!(reached(&handler));
        // The destination's own refusal (busy) and a missing handler: answered there too.
        let busy = RemoteError::system_error(crate::codes::system::BUSY, "full");
        assert!(reached::<()>(&Err(protocol::Error::Remote(busy))));
        let none = protocol::Error::NoHandler { event: "x".into() };
        assert!(reached::<()>(&Err(none)));
        // The hop itself failed: not reached.
        assert!(!reached::<()>(&Err(protocol::Error::ConnectionLost)));
        let timeout = protocol::Error::Timeout {
            event: "x".into(),
            timeout: Duration::from_secs(1),
        };
        assert!(!reached::<()>(&Err(timeout)));
        // A router further on failed (it names itself): not reached.
        let further = hop_error(protocol::Error::ConnectionLost, &NodeId::from("r2"), &to);
        assert!(!reached::<()>(&Err(protocol::Error::Remote(
            further.clone()
        ))));
        assert!(!answered_there(&further));
        // What this router answers for it names the node and itself.
        let here = hop_error(protocol::Error::ConnectionLost, &me, &to);
        assert_eq!((here.peer(), here.hop()), (Some("w1"), Some("r1")));
        assert!(here.is_system(code::PEER_LEFT));
    }
}
