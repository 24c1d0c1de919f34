//! Router nodes: the message that travels between routers, and the decisions a router makes
//! about it. Pure code: no I/O, no clock.
//!
//! A node built as a router (`NodeBuilder::router`) advertises it in its handshake. When a
//! call to a filter (`Target::Any`, one match, or `Target::All`, every match) finds no
//! matching joined peer, or a call to a `Target::Id` names an id that is not joined, the node
//! sends a [`Forward`] to a joined router, which applies the same target to its own peers
//! and, failing that, passes it on to the routers it is joined to. The caller's deadline
//! travels with the message (each hop gets only what is left); a hop limit and the list of
//! routers already visited stop loops; every tick to all matches carries a random id that
//! routers remember for a while, so a message that reaches a router twice (meshes of
//! routers have cycles) is delivered once.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::codes::route as code;
use crate::codes::system::{NOT_JOINED, SHUTTING_DOWN};
use crate::filter::FilterSpec;
use crate::mesh::peer::{NodeId, Scope};

/// The system event that carries a [`Forward`] (as metadata; the payload is the user's;
/// `crate::node::system::forward`).
pub(crate) const FORWARD: &str = "_system:forward";

/// What is forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Action {
    /// A request: the reply travels back the same way.
    Request,
    /// A tick to one node.
    Tick,
    /// A tick to every matching node (with `groups`: to one member of each group).
    TickAll,
    /// A request to every matching node (with `groups`: to one member of each group); the
    /// answer lists each one's outcome (scatter-gather).
    Gather,
}

/// Where it goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Destination {
    /// The node with this id.
    Id(NodeId),
    /// Nodes matching this filter, in this scope (as seen from each router).
    Filter(FilterSpec, Scope),
}

/// The header of a forwarded message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Forward {
    /// Random; routers drop a `TickAll` whose id they have seen.
    pub(crate) id: u64,
    pub(crate) action: Action,
    pub(crate) to: Destination,
    pub(crate) event: String,
    /// Milliseconds left before the original caller gives up.
    pub(crate) remaining_ms: u64,
    /// Hops still allowed.
    pub(crate) hops_left: u8,
    /// The node that sent the original message.
    pub(crate) origin: NodeId,
    /// Routers the message went through, in order.
    pub(crate) visited: Vec<NodeId>,
    /// For `TickAll` and `Gather` to groups: the option key whose values name the groups.
    #[serde(default)]
    pub(crate) groups: Option<String>,
    /// Nodes already reached (a node joined to several routers is reached once).
    #[serde(default)]
    pub(crate) skip: Vec<NodeId>,
    /// Groups already served (their values, as JSON), for `groups`.
    #[serde(default)]
    pub(crate) served: Vec<String>,
}

/// What a router decides before doing anything.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Go ahead, with this much time left for the whole subtree.
    Accept(Duration),
    /// A `TickAll` seen before: already delivered.
    Duplicate,
    /// Back at a router it had visited, or out of hops.
    Loop,
    /// No time left.
    Expired,
}

impl Forward {
    /// Checks a forward arriving at router `me`.
    pub(crate) fn admit(&self, me: &NodeId, seen: &mut Seen) -> Admission {
        if self.visited.contains(me) || self.hops_left == 0 {
            return Admission::Loop;
        }
        if matches!(self.action, Action::TickAll | Action::Gather) && !seen.insert(self.id) {
            return Admission::Duplicate;
        }
        if self.remaining_ms == 0 {
            return Admission::Expired;
        }
        Admission::Accept(Duration::from_millis(self.remaining_ms))
    }

    /// The forward this router passes on to the next ones, with `left` time remaining.
    pub(crate) fn next_hop(&self, me: &NodeId, left: Duration) -> Forward {
        let mut next = self.clone();
        next.visited.push(me.clone());
        next.hops_left = self.hops_left.saturating_sub(1);
        next.remaining_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        next
    }

    /// Whether `id` must not receive this message from us: its origin, or a router it went
    /// through.
    pub(crate) fn excludes(&self, id: &NodeId) -> bool {
        &self.origin == id || self.visited.contains(id) || self.skip.contains(id)
    }
}

/// Whether a router's error reply proves that the message reached no handler, so another
/// router may be tried: only the router's own "nothing here" outcomes (no match, not found,
/// a loop, not a router), which it sends as system errors. Anything else (a handler's error
/// whatever its code, a timeout, a leaf that left) may have run a handler: trying another
/// path could run it twice.
pub(crate) fn retry_elsewhere(error: &protocol::RemoteError) -> bool {
    error.system
        && [
            code::NO_MATCH,
            code::NOT_FOUND,
            code::LOOP,
            code::NOT_A_ROUTER,
        ]
        .contains(&error.code.as_str())
}

/// Whether a failure to send to a router proves the message never left: nothing was
/// sent (no connection, a full or unroutable queue), as opposed to a connection lost after
/// sending or a deadline passed while waiting for the answer.
pub(crate) fn undelivered(error: &protocol::Error) -> bool {
    matches!(
        error,
        protocol::Error::NotConnected | protocol::Error::Transport(_)
    )
}

/// The time a hop keeps for itself out of what is left: enough to pass an answer back
/// before the caller's own deadline.
pub(crate) fn hop_budget(left: Duration) -> Duration {
    let margin = (left / 20).clamp(Duration::from_millis(2), Duration::from_millis(50));
    left.saturating_sub(margin)
}

/// Recently seen `TickAll` ids, bounded (the oldest are forgotten first).
#[derive(Debug, Default)]
pub(crate) struct Seen {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

/// How many ids a router remembers.
const SEEN_CAPACITY: usize = 16_384;

impl Seen {
    /// Records `id`; false if it was there already.
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        if !self.set.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > SEEN_CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
}

/// What routing keeps: a router's counters ([`RouterStats`]), the ids of the ticks to all
/// matches it has seen (its loop protection), and the fan-outs' turn. The forwarding itself
/// is `relay.rs`.
#[derive(Default)]
pub(crate) struct Routing {
    /// The round-robin turn of group fan-outs (one step per fan-out, so the members of
    /// each group take turns).
    pub(crate) fan_turn: std::sync::atomic::AtomicUsize,
    pub(crate) forwarded: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) looped: AtomicU64,
    pub(crate) expired: AtomicU64,
    /// The same, by next hop.
    pub(crate) hops: crate::observation::hops::HopCounts,
    pub(crate) seen: Mutex<Seen>,
}

/// Counters of a router, readable from the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Messages forwarded (to a local peer or to another router) successfully.
    pub forwarded: u64,
    /// Forwards that failed (nothing matched, the destination failed).
    pub failed: u64,
    /// Forwards refused because they looped or ran out of hops.
    pub looped: u64,
    /// Forwards that ran out of time at this router.
    pub expired: u64,
}

/// Whether a request to a peer picked by a filter that failed with `error` goes to
/// another pick: only when the failure proves nothing ran there: the peer is stopping and
/// refused it, or does not count us as joined (it restarted, and its side of the new join
/// is not done), or it never left this node (no connection any more, a queue that refused
/// it). A request by id goes where it was sent; its caller decides.
pub(crate) fn pick_again(error: &protocol::Error, by_filter: bool, attempt: usize) -> bool {
    let nothing_ran = match error {
        // Stopping, or not (yet) counting us as joined: refused before any handler.
        protocol::Error::Remote(refusal) => {
            refusal.system && (refusal.code == SHUTTING_DOWN || refusal.code == NOT_JOINED)
        }
        other => undelivered(other),
    };
    by_filter && attempt < MAX_PICKS && nothing_ran
}

/// How many picks one request to "any" makes at most when the picked peers are stopping.
const MAX_PICKS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(action: Action) -> Forward {
        Forward {
            id: 1,
            action,
            to: Destination::Id(NodeId::from("x")),
            event: "e".into(),
            remaining_ms: 1000,
            hops_left: 2,
            origin: NodeId::from("leaf"),
            visited: vec![NodeId::from("r1")],
            groups: None,
            skip: Vec::new(),
            served: Vec::new(),
        }
    }

    #[test]
    fn a_visited_router_or_no_hops_left_is_a_loop() {
        let mut seen = Seen::default();
        let f = forward(Action::Request);
        assert_eq!(f.admit(&NodeId::from("r1"), &mut seen), Admission::Loop);
        let mut tired = f.clone();
        tired.hops_left = 0;
        assert_eq!(tired.admit(&NodeId::from("r2"), &mut seen), Admission::Loop);
        assert_eq!(
            f.admit(&NodeId::from("r2"), &mut seen),
            Admission::Accept(Duration::from_secs(1))
        );
    }

    #[test]
    fn tick_all_is_delivered_once_per_router() {
        let mut seen = Seen::default();
        let f = forward(Action::TickAll);
        let me = NodeId::from("r2");
        assert!(matches!(f.admit(&me, &mut seen), Admission::Accept(_)));
        assert_eq!(f.admit(&me, &mut seen), Admission::Duplicate);
        // Requests are never deduplicated (each is its own caller).
        let r = forward(Action::Request);
        assert!(matches!(r.admit(&me, &mut seen), Admission::Accept(_)));
        assert!(matches!(r.admit(&me, &mut seen), Admission::Accept(_)));
    }

    #[test]
    fn no_time_left_is_expired() {
        let mut seen = Seen::default();
        let mut f = forward(Action::Request);
        f.remaining_ms = 0;
        assert_eq!(f.admit(&NodeId::from("r2"), &mut seen), Admission::Expired);
    }

    #[test]
    fn the_next_hop_carries_what_is_left() {
        let f = forward(Action::Request);
        let next = f.next_hop(&NodeId::from("r2"), Duration::from_millis(400));
        assert_eq!(next.visited, [NodeId::from("r1"), NodeId::from("r2")]);
        assert_eq!(next.hops_left, 1);
        assert_eq!(next.remaining_ms, 400);
        assert!(next.excludes(&NodeId::from("leaf")));
        assert!(next.excludes(&NodeId::from("r2")));
        assert!(!next.excludes(&NodeId::from("other")));
    }

    #[test]
    fn each_hop_keeps_a_margin() {
        assert_eq!(
            hop_budget(Duration::from_millis(1000)),
            Duration::from_millis(950)
        );
        assert_eq!(
            hop_budget(Duration::from_millis(10)),
            Duration::from_millis(8)
        );
        assert_eq!(
            hop_budget(Duration::from_secs(10)),
            Duration::from_millis(9950)
        );
        assert_eq!(hop_budget(Duration::from_millis(1)), Duration::ZERO);
    }

    #[test]
    fn only_a_routers_own_nothing_here_is_retried_elsewhere() {
        use protocol::RemoteError;
        for code in [
            code::NO_MATCH,
            code::NOT_FOUND,
            code::LOOP,
            code::NOT_A_ROUTER,
        ] {
            assert!(
                retry_elsewhere(&RemoteError::system_error(code, "")),
                "{code}"
            );
            // The same code from a handler is the handler's answer: the handler ran.
            assert!(!retry_elsewhere(&RemoteError::new(code, "")), "{code}");
        }
        for code in [
            code::TIMEOUT,
            code::PEER_LEFT,
            code::HOP_FAILED,
            "BUSY",
            "NO_HANDLER",
        ] {
            assert!(
                !retry_elsewhere(&RemoteError::system_error(code, "")),
                "{code}"
            );
        }
    }

    #[test]
    fn only_a_send_that_never_left_is_undelivered() {
        assert!(undelivered(&protocol::Error::NotConnected));
        assert!(undelivered(&protocol::Error::Transport(
            transport::Error::QueueFull
        )));
        assert!(!undelivered(&protocol::Error::ConnectionLost));
        assert!(!undelivered(&protocol::Error::Timeout {
            event: "e".into(),
            timeout: Duration::from_secs(1),
        }));
    }

    #[test]
    fn seen_ids_are_bounded() {
        let mut seen = Seen::default();
        for id in 0..(SEEN_CAPACITY as u64 + 10) {
            assert!(seen.insert(id));
        }
        assert!(seen.set.len() <= SEEN_CAPACITY);
        assert!(seen.insert(0), "the oldest was forgotten");
    }

    #[test]
    fn only_a_filter_pick_that_ran_nothing_is_picked_again() {
        use protocol::RemoteError;

        let remote = protocol::Error::Remote;
        let stopping = remote(RemoteError::system_error(SHUTTING_DOWN, "x"));
        assert!(pick_again(&stopping, true, 0));
        assert!(pick_again(&stopping, true, MAX_PICKS - 1));
        assert!(!pick_again(&stopping, true, MAX_PICKS), "bounded");
        assert!(!pick_again(&stopping, false, 0), "a request by id stays");
        assert!(
            pick_again(&protocol::Error::NotConnected, true, 0),
            "never sent"
        );
        assert!(
            !pick_again(&protocol::Error::ConnectionLost, true, 0),
            "sent, and the peer left: it may have run"
        );
        let handlers_own = remote(RemoteError::new(SHUTTING_DOWN, "its code"));
        assert!(
            !pick_again(&handlers_own, true, 0),
            "a handler's error may have run"
        );
        let busy = remote(RemoteError::system_error("BUSY", "full"));
        assert!(!pick_again(&busy, true, 0));
        let unjoined = remote(RemoteError::system_error(NOT_JOINED, "handshake first"));
        assert!(pick_again(&unjoined, true, 0), "refused before any handler");
    }
}
