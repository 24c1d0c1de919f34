//! The peer registry as the node keeps it: who is joined in each direction (with their
//! links), the map from our server's routing ids to node ids, and the CURVE key each id
//! is bound to. One lock over the registry and the routes keeps them in step; what joins,
//! leaves and looks up goes through the methods here.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use protocol::PeerId;

use crate::mesh::handshake::Refusal;
use crate::mesh::link::Link;
use crate::mesh::peer::{Direction, Entry, NodeId, PeerWork, Registry};

/// The registry and the map from downstream routing ids to node ids, under one lock.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) registry: Registry<Arc<Link>>,
    pub(crate) routes: HashMap<PeerId, NodeId>,
}

impl State {
    /// Registers a downstream peer that `handshake::admit` let in (under this lock) behind
    /// routing id `route`; whether it is new (not the same instance rejoining).
    pub(crate) fn join_downstream(
        &mut self,
        mut entry: Entry<Arc<Link>>,
        route: PeerId,
    ) -> std::result::Result<bool, Refusal> {
        let id = entry.id().clone();
        // The same connection handshaking again keeps its peer's work (and count); a
        // takeover from another connection stops the old connection's work.
        if let Some(old) = self.registry.get(&id, Direction::Downstream) {
            if old.link().route() == Some(&route) {
                old.work.set_limit(entry.work.limit());
                entry.work = Arc::clone(&old.work);
            }
        }
        let replaced = self
            .registry
            .join(entry)
            .map_err(|_| Refusal::DuplicateId)?;
        if let Some(old) = &replaced {
            if let Some(old_route) = old.link().route() {
                if old_route != &route {
                    old.work.stop_for(crate::mesh::peer::Stop::Replaced);
                    old.link().fail_pending();
                }
                self.routes.remove(old_route);
            }
        }
        self.routes.insert(route, id);
        Ok(replaced.is_none())
    }

    /// Forgets a peer; its entry, if it was joined.
    pub(crate) fn leave(&mut self, id: &NodeId, direction: Direction) -> Option<Entry<Arc<Link>>> {
        let entry = self.registry.leave(id, direction);
        if let Some(entry) = &entry {
            if let Some(route) = entry.link().route() {
                self.routes.remove(route);
            }
        }
        entry
    }

    /// The joined peer behind a routing id of our server and its work, marking it alive
    /// (`now`: when the message arrived).
    pub(crate) fn downstream(
        &self,
        route: &PeerId,
        now: Instant,
    ) -> Option<(NodeId, Arc<PeerWork>)> {
        let id = self.routes.get(route)?.clone();
        let work = self.registry.seen_work(&id, Direction::Downstream, now)?;
        Some((id, work))
    }

    /// The links of the joined peers (all, or one direction).
    pub(crate) fn links(&self, only: Option<Direction>) -> Vec<Arc<Link>> {
        self.registry
            .all()
            .filter(|e| only.is_none_or(|d| d == e.direction()))
            .map(|e| e.link().clone())
            .collect()
    }
}

/// With CURVE: the key each id first joined with (an id is bound to it). Bounded: past
/// `MAX_BOUND_KEYS` ids, new ones are not bound (the allow-list still applies).
#[derive(Default)]
pub(crate) struct BoundKeys(Mutex<HashMap<NodeId, transport::Key>>);

/// The most ids whose CURVE key a node remembers.
const MAX_BOUND_KEYS: usize = 65_536;

impl BoundKeys {
    /// Whether `key` may join with `id`: the id has no key bound, or this one.
    pub(crate) fn may_claim(&self, id: &NodeId, key: &transport::Key) -> bool {
        self.0.lock().get(id).is_none_or(|bound| bound == key)
    }

    /// Binds `id` to the key it joined with, if it has none yet.
    pub(crate) fn bind(&self, id: &NodeId, key: transport::Key) {
        let mut bound = self.0.lock();
        if bound.len() < MAX_BOUND_KEYS || bound.contains_key(id) {
            bound.entry(id.clone()).or_insert(key);
        }
    }
}
