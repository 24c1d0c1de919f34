//! Fan-out: scatter-gather (a request to every matching node, each one's outcome back) and
//! balanced groups (a tick or a request to exactly one member of each group), here and
//! through router nodes.
//!
//! Who gets the message is decided by [`plan`], pure over plain data: every candidate, or
//! one per group, where a group is the value of an option key the caller names (nodes
//! without that key are in no group). Inside a group the node's strategy picks.
//!
//! Exactly once across the mesh: the origin sends to its own matches first, then offers the
//! rest to its routers **one after the other**, each told which nodes were reached and which
//! groups served so far (`Forward::skip`, `Forward::served`); a router does the same on its
//! side. So a node joined to two routers is asked once, and a group with members on both
//! sides is served once. Gathers and group ticks carry an id routers remember, as
//! a tick to all matches does, so a cyclic mesh of routers delivers once.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};
use protocol::{decode_value, encode_value, Answer, Meta, MetaLimits, MetaValue, RemoteError};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::codes::route as code;
use crate::codes::system::BAD_FORWARD;
use crate::context::{millis, Outgoing};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::mesh::link::{Link, Target};
use crate::mesh::peer::{InFlight, NodeId, Scope, Strategy};
use crate::options::Options;
use crate::routing::forward::{Action, Destination, Forward, FORWARD};
use crate::routing::relay::Relay;
use crate::serving::handler::Reply;

/// Who of the matches gets the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Spread {
    /// Every match.
    All,
    /// One member of each group: the nodes with the same value of this option key.
    Groups(String),
}

impl Spread {
    fn key(&self) -> Option<&str> {
        match self {
            Spread::All => None,
            Spread::Groups(key) => Some(key),
        }
    }
}

/// A group's name: its value, as JSON (so that values of any type compare).
fn group_of(options: &Options, key: &str) -> Option<String> {
    options
        .get(key)
        .and_then(|value| serde_json::to_string(value).ok())
}

/// The targets among `candidates` (in order; each with its options and in-flight count):
/// every one, or per group not in `served` one picked by `strategy` (`turn` for round
/// robin, `random` otherwise), as (index, group). Pure.
pub(crate) fn plan(
    candidates: &[(&Options, usize)],
    spread: &Spread,
    served: &HashSet<String>,
    strategy: Strategy,
    turn: usize,
    random: usize,
) -> Vec<(usize, Option<String>)> {
    let Some(key) = spread.key() else {
        return (0..candidates.len()).map(|i| (i, None)).collect();
    };
    // Groups in the order their first member appears.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, (options, _)) in candidates.iter().enumerate() {
        let Some(group) = group_of(options, key) else {
            continue;
        };
        if served.contains(&group) {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(i),
            None => groups.push((group, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(group, members)| {
            let chosen = match strategy {
                Strategy::Random => members[random % members.len()],
                Strategy::RoundRobin => members[turn % members.len()],
                Strategy::LeastInFlight => {
                    let least = members.iter().map(|&i| candidates[i].1).min().unwrap_or(0);
                    let tied: Vec<usize> = members
                        .iter()
                        .copied()
                        .filter(|&i| candidates[i].1 == least)
                        .collect();
                    tied[random % tied.len()]
                }
            };
            (chosen, Some(group))
        })
        .collect()
}

/// One node's outcome of a gather, as a router passes it back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    id: NodeId,
    group: Option<String>,
    outcome: Outcome,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Outcome {
    Reply { payload: Bytes, meta: Bytes },
    Failed(RemoteError),
}

/// What a router answers a fan-out with.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Fanned {
    /// Ticks delivered.
    pub(crate) delivered: u64,
    /// Groups served (for group ticks and gathers).
    pub(crate) served: Vec<String>,
    /// Each node's outcome (gathers).
    pub(crate) entries: Vec<Entry>,
}

impl Fanned {
    pub(crate) fn answer(&self) -> std::result::Result<Answer, RemoteError> {
        encode_value(self)
            .map(Answer::from)
            .map_err(|e| RemoteError::handler(e.to_string()))
    }
}

/// The local targets of a fan-out: each peer (counted in flight to it while its guard
/// lives) and its group.
type Targets = Vec<(InFlight<Arc<Link>>, Option<String>)>;

/// A gather's stream of outcomes.
pub(crate) type Outcomes<'a> = BoxStream<'a, (NodeId, Result<Reply>)>;

impl Relay<'_> {
    /// The local targets of a fan-out to `filter` in `scope`, leaving out what `exclude`
    /// rules out and the groups already `served`.
    fn local_targets(
        &self,
        filter: &Filter,
        scope: Scope,
        spread: &Spread,
        served: &HashSet<String>,
        exclude: impl Fn(&NodeId) -> bool,
    ) -> Targets {
        let state = self.state.lock();
        let matching: Vec<_> = state
            .registry
            .matching(filter, scope)
            .into_iter()
            .filter(|e| !exclude(e.id()))
            .collect();
        let candidates: Vec<(&Options, usize)> = matching
            .iter()
            .map(|e| (&e.options, e.in_flight()))
            .collect();
        let turn = self.routing.fan_turn.fetch_add(1, Ordering::Relaxed);
        plan(
            &candidates,
            spread,
            served,
            self.config.strategy,
            turn,
            rand::random::<u32>() as usize,
        )
        .into_iter()
        // Counted from the pick, under the registry's lock (see `Reach::in_flight`).
        .map(|(i, group)| (Arc::clone(&matching[i].reach).start_request(), group))
        .collect()
    }

    /// The routers a fan-out is offered to next: those joined here, less what `exclude`
    /// rules out.
    fn next_routers(&self, exclude: impl Fn(&NodeId) -> bool) -> Vec<(NodeId, Arc<Link>)> {
        let routers = self.state.lock().registry.routers();
        routers
            .into_iter()
            .filter(|(id, _)| id != self.id && !exclude(id))
            .collect()
    }

    /// Offers `forward` to `routers` one after the other, each told what was reached and
    /// served before it; everything they reached.
    async fn fan_to_routers(
        &self,
        mut forward: Forward,
        routers: Vec<(NodeId, Arc<Link>)>,
        user: &Meta,
        payload: Bytes,
        deadline: Instant,
    ) -> Fanned {
        let mut all = Fanned::default();
        for (id, _) in routers {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            // Counted in flight to that router from here; one being let go is skipped.
            let Some(router) = self.state.lock().registry.start_to(&id) else {
                continue;
            };
            forward.remaining_ms = millis(left);
            let Ok(header) = encode_value(&forward) else {
                break;
            };
            let mut meta = user.clone();
            meta.set(":forward", MetaValue::Bytes(&header));
            let sent = (router.link)
                .system()
                .request_with(FORWARD, meta.as_bytes(), payload.clone(), left)
                .await;
            drop(router);
            self.passed(&id, &sent);
            let Ok(reply) = sent else {
                // That router reached nobody we can count on; the others may.
                continue;
            };
            let Ok(fanned) = decode_value::<Fanned>(reply.payload()) else {
                continue;
            };
            forward
                .skip
                .extend(fanned.entries.iter().map(|e| e.id.clone()));
            forward.served.extend(fanned.served.iter().cloned());
            all.delivered += fanned.delivered;
            all.served.extend(fanned.served);
            all.entries.extend(fanned.entries);
        }
        all
    }

    /// A router's part of a forwarded gather or group tick: its own matches (not the
    /// sender, nor anyone already reached), then the routers after it.
    pub(crate) async fn fan_here(
        &self,
        forward: &Forward,
        from: &NodeId,
        leaf: Bytes,
        user: &Meta,
        payload: Bytes,
        deadline: Instant,
    ) -> std::result::Result<Answer, RemoteError> {
        let Destination::Filter(spec, scope) = &forward.to else {
            return Err(RemoteError::system_error(
                BAD_FORWARD,
                "a fan-out needs a filter",
            ));
        };
        let filter = Filter::from_spec(spec.clone())
            .map_err(|e| RemoteError::system_error(BAD_FORWARD, e.to_string()))?;
        let spread = match &forward.groups {
            Some(key) => Spread::Groups(key.clone()),
            None => Spread::All,
        };
        let served: HashSet<String> = forward.served.iter().cloned().collect();
        let exclude = |id: &NodeId| forward.excludes(id) || id == from;
        let targets = self.local_targets(&filter, *scope, &spread, &served, exclude);
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fanned = Fanned::default();
        match forward.action {
            Action::Gather => {
                let asks = targets.iter().map(|(peer, group)| {
                    let (leaf, payload) = (leaf.clone(), payload.clone());
                    async move {
                        let sent =
                            peer.link
                                .peer()
                                .request_with(&forward.event, &leaf, payload, left);
                        let outcome = match sent.await {
                            Ok(reply) => Outcome::Reply {
                                meta: reply.metadata().clone(),
                                payload: reply.into_payload(),
                            },
                            Err(e) => Outcome::Failed(self.hop_failed(&peer.id, e)),
                        };
                        Entry {
                            id: peer.id.clone(),
                            group: group.clone(),
                            outcome,
                        }
                    }
                });
                fanned.entries = futures::future::join_all(asks).await;
                for entry in &fanned.entries {
                    let reached = match &entry.outcome {
                        Outcome::Reply { .. } => true,
                        Outcome::Failed(remote) => crate::routing::relay::answered_there(remote),
                    };
                    self.passed_to(&entry.id, reached);
                }
            }
            _ => {
                // A group tick answers with what it delivered and served: a node belongs
                // to one group, so the groups served are what keeps it exactly once.
                for (peer, group) in &targets {
                    let sent = peer
                        .link
                        .peer()
                        .tick_with(&forward.event, &leaf, payload.clone())
                        .await;
                    self.passed(&peer.id, &sent);
                    if sent.is_ok() {
                        fanned.delivered += 1;
                        fanned.served.extend(group.clone());
                    }
                }
            }
        }
        if forward.action == Action::Gather {
            fanned
                .served
                .extend(targets.iter().filter_map(|(_, g)| g.clone()));
        }
        let mut next = forward.next_hop(self.id, left);
        next.skip
            .extend(targets.iter().map(|(peer, _)| peer.id.clone()));
        next.served.extend(fanned.served.iter().cloned());
        let routers = self.next_routers(|id| next.excludes(id) || id == from);
        if !routers.is_empty() && next.hops_left > 0 {
            let further = self
                .fan_to_routers(next, routers, user, payload, deadline)
                .await;
            fanned.delivered += further.delivered;
            fanned.served.extend(further.served);
            fanned.entries.extend(further.entries);
        }
        fanned.answer()
    }

    /// The forward header of a fan-out from this node.
    fn fan_forward(
        &self,
        action: Action,
        filter: &Filter,
        scope: Scope,
        spread: &Spread,
        event: &str,
        timeout: Duration,
    ) -> Result<Forward> {
        Ok(Forward {
            id: rand::random(),
            action,
            to: Destination::Filter(filter.to_spec()?, scope),
            event: event.to_owned(),
            remaining_ms: millis(timeout),
            hops_left: self.config.hop_limit,
            origin: self.id.clone(),
            visited: Vec::new(),
            groups: spread.key().map(str::to_owned),
            skip: Vec::new(),
            served: Vec::new(),
        })
    }

    /// A tick to one member of each group here, then through the routers: how many it
    /// reached. Nothing anywhere is [`Error::NoNodesMatchFilter`].
    pub(crate) async fn tick_groups(
        &self,
        filter: &Filter,
        scope: Scope,
        key: &str,
        event: &str,
        payload: Bytes,
        outgoing: &Outgoing,
    ) -> Result<usize> {
        if self.life.is_closing() {
            return Err(Error::Closed);
        }
        let spread = Spread::Groups(key.to_owned());
        let targets = self.local_targets(filter, scope, &spread, &HashSet::new(), |_| false);
        let metadata = outgoing.meta.as_bytes();
        let mut delivered = 0;
        let mut served = Vec::new();
        for (peer, group) in &targets {
            peer.link.check_size(&payload)?;
            if peer
                .link
                .peer()
                .tick_with(event, metadata, payload.clone())
                .await
                .is_ok()
            {
                delivered += 1;
                served.extend(group.clone());
            }
        }
        let routers = self.next_routers(|_| false);
        if !routers.is_empty() && filter.to_spec().is_ok() {
            let mut forward = self.fan_forward(
                Action::TickAll,
                filter,
                scope,
                &spread,
                event,
                outgoing.timeout,
            )?;
            forward.skip = targets.iter().map(|(peer, _)| peer.id.clone()).collect();
            forward.served = served;
            let deadline = Instant::now() + outgoing.timeout;
            let further = self
                .fan_to_routers(forward, routers, &outgoing.meta, payload, deadline)
                .await;
            delivered += further.delivered as usize;
        }
        if delivered == 0 {
            return Err(Error::NoNodesMatchFilter);
        }
        Ok(delivered)
    }
}

impl<'a> Relay<'a> {
    /// A gather: each target's outcome as it comes, here and through the routers (whose
    /// outcomes come as each router answers).
    pub(crate) fn gather(
        self,
        filter: &Filter,
        scope: Scope,
        spread: Spread,
        event: &'a str,
        payload: Bytes,
        outgoing: Outgoing,
    ) -> Result<Outcomes<'a>> {
        if self.life.is_closing() {
            return Err(Error::Closed);
        }
        let targets = self.local_targets(filter, scope, &spread, &HashSet::new(), |_| false);
        for (peer, _) in &targets {
            peer.link.check_size(&payload)?;
        }
        let timeout = outgoing.timeout;
        let limits = self.config.max_metadata;
        let local: FuturesUnordered<_> = targets
            .iter()
            .map(|(peer, _)| {
                // Its own count, held until its outcome is in.
                let peer = peer.clone();
                let (meta, payload) = (outgoing.meta.as_bytes().clone(), payload.clone());
                async move {
                    let result = match peer
                        .link
                        .peer()
                        .request_with(event, &meta, payload, timeout)
                        .await
                    {
                        Ok(reply) => Reply::from_answer(
                            Answer {
                                metadata: reply.metadata().clone(),
                                payload: reply.into_payload(),
                            },
                            &limits,
                        ),
                        Err(e) => Err(self.link_error(&peer.id, &peer.link, event, timeout, e)),
                    };
                    (peer.id.clone(), result)
                }
            })
            .collect();
        let routers = self.next_routers(|_| false);
        let remote: Outcomes<'a> = if routers.is_empty() || filter.to_spec().is_err() {
            stream::empty().boxed()
        } else {
            let mut forward =
                self.fan_forward(Action::Gather, filter, scope, &spread, event, timeout)?;
            forward.skip = targets.iter().map(|(peer, _)| peer.id.clone()).collect();
            forward.served = targets.iter().filter_map(|(_, g)| g.clone()).collect();
            let deadline = Instant::now() + timeout;
            let target = Target::Any(filter.clone(), scope);
            stream::once(async move {
                let fanned = self
                    .fan_to_routers(forward, routers, &outgoing.meta, payload, deadline)
                    .await;
                stream::iter(
                    fanned
                        .entries
                        .into_iter()
                        .map(move |entry| {
                            entry_outcome(entry, (&target, event, timeout), &limits, self.id)
                        })
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .boxed()
        };
        Ok(stream::select(local.boxed(), remote).boxed())
    }
}

/// A router's entry as the caller's outcome.
fn entry_outcome(
    entry: Entry,
    (target, event, timeout): (&Target, &str, Duration),
    limits: &MetaLimits,
    me: &NodeId,
) -> (NodeId, Result<Reply>) {
    let result = match entry.outcome {
        Outcome::Reply { payload, meta } => Reply::from_answer(
            Answer {
                metadata: meta,
                payload,
            },
            limits,
        ),
        // The entry is the node that failed: an older router named it only there.
        Outcome::Failed(remote) if remote.is_system(code::PEER_LEFT) && remote.peer().is_none() => {
            Err(crate::routing::relay::forward_error(
                remote.with_peer(entry.id.as_str()),
                target,
                event,
                timeout,
                me,
            ))
        }
        Outcome::Failed(remote) => Err(crate::routing::relay::forward_error(
            remote, target, event, timeout, me,
        )),
    };
    (entry.id, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{options, Value};

    fn group(name: &str) -> Options {
        options([("group", Value::from(name))])
    }

    #[test]
    fn all_takes_every_candidate() {
        let (a, b) = (group("x"), Options::new());
        let candidates = [(&a, 0), (&b, 0)];
        let picked = plan(
            &candidates,
            &Spread::All,
            &HashSet::new(),
            Strategy::Random,
            0,
            7,
        );
        assert_eq!(picked, vec![(0, None), (1, None)]);
    }

    #[test]
    fn one_member_per_group_by_the_strategy_and_none_without_the_key() {
        let members = [
            group("a"),
            group("b"),
            group("a"),
            Options::new(),
            group("b"),
            group("a"),
        ];
        let candidates: Vec<(&Options, usize)> = members.iter().map(|o| (o, 0)).collect();
        let spread = Spread::Groups("group".into());
        for turn in 0..6 {
            let picked = plan(
                &candidates,
                &spread,
                &HashSet::new(),
                Strategy::RoundRobin,
                turn,
                0,
            );
            assert_eq!(
                picked.len(),
                2,
                "two groups; the node without the key is in none"
            );
            let a = [0, 2, 5][turn % 3];
            let b = [1, 4][turn % 2];
            assert_eq!(
                picked,
                vec![
                    (a, Some("\"a\"".to_string())),
                    (b, Some("\"b\"".to_string()))
                ]
            );
        }
    }

    #[test]
    fn served_groups_are_left_out() {
        let members = [group("a"), group("b")];
        let candidates: Vec<(&Options, usize)> = members.iter().map(|o| (o, 0)).collect();
        let served: HashSet<String> = ["\"a\"".to_string()].into();
        let picked = plan(
            &candidates,
            &Spread::Groups("group".into()),
            &served,
            Strategy::Random,
            0,
            3,
        );
        assert_eq!(picked, vec![(1, Some("\"b\"".to_string()))]);
    }

    #[test]
    fn least_in_flight_picks_the_idlest_member() {
        let members = [group("a"), group("a"), group("a")];
        let candidates = [(&members[0], 5), (&members[1], 1), (&members[2], 3)];
        let picked = plan(
            &candidates,
            &Spread::Groups("group".into()),
            &HashSet::new(),
            Strategy::LeastInFlight,
            0,
            99,
        );
        assert_eq!(picked, vec![(1, Some("\"a\"".to_string()))]);
    }
}
