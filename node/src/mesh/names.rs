//! Who a peer is, as every room speaks of it: its id (`NodeId`), the direction we reach it
//! in (`Direction`), where a call looks for it (`Scope`) and how it picks one (`Strategy`),
//! what it told us (`PeerInfo`), why it left (`LeaveReason`), and the secret of its join
//! (`Ticket`). Plain data: the registry that keeps them is `peer.rs`.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::options::Options;

/// A join's ticket (see `Hello::token` in handshake.rs): a secret, so it is compared in constant time,
/// wiped from memory when dropped, and never printed.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Ticket(pub(crate) String);

impl Ticket {
    /// A new random ticket (128 bits, in hex).
    pub(crate) fn random() -> Ticket {
        Ticket(format!("{:032x}", rand::random::<u128>()))
    }

    /// No ticket (a first join).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `other` is this ticket, in time that does not depend on where they differ
    /// (a timing probe learns nothing of the ticket byte by byte).
    pub(crate) fn matches(&self, other: &Ticket) -> bool {
        bool::from(subtle::ConstantTimeEq::ct_eq(
            self.0.as_bytes(),
            other.0.as_bytes(),
        ))
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_empty() {
            "Ticket(none)"
        } else {
            "Ticket(<hidden>)"
        })
    }
}

#[cfg(test)]
impl From<&str> for Ticket {
    fn from(text: &str) -> Ticket {
        Ticket(text.to_owned())
    }
}

/// A node's id: unique in a mesh; the handshake refuses duplicates.
///
/// Cheap to clone (a shared string).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(Arc<str>);

impl NodeId {
    /// An id from a string.
    pub fn new(id: impl AsRef<str>) -> NodeId {
        NodeId(Arc::from(id.as_ref()))
    }

    /// A readable id that does not collide in practice: `node-` and 12 random hex digits.
    pub fn generate() -> NodeId {
        let random = uuid::Uuid::new_v4().simple().to_string();
        NodeId::new(format!("node-{}", &random[..12]))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for NodeId {
    fn from(id: &str) -> NodeId {
        NodeId::new(id)
    }
}

impl From<String> for NodeId {
    fn from(id: String) -> NodeId {
        NodeId(Arc::from(id))
    }
}

impl Serialize for NodeId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NodeId, D::Error> {
        String::deserialize(d).map(NodeId::from)
    }
}

impl From<&NodeId> for NodeId {
    fn from(id: &NodeId) -> NodeId {
        id.clone()
    }
}

/// Which way a peer is joined to this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Direction {
    /// This node connected to the peer (the peer is our server).
    Upstream,
    /// The peer connected to this node (we are its server).
    Downstream,
}

/// Which peers a `*_any` / `*_all` call may pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Scope {
    /// Only upstream peers (the nodes we connected to).
    Up,
    /// Only downstream peers (the nodes connected to us).
    Down,
    /// Either.
    #[default]
    Both,
}

impl Scope {
    pub(crate) fn admits(self, direction: Direction) -> bool {
        matches!(
            (self, direction),
            (Scope::Both, _)
                | (Scope::Up, Direction::Upstream)
                | (Scope::Down, Direction::Downstream)
        )
    }
}

/// How `*_any` picks among matching peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Uniformly at random (the JavaScript zeronode's only strategy).
    #[default]
    Random,
    /// In turn, by id order.
    RoundRobin,
    /// The peer with the fewest of our requests in flight (ties: random).
    LeastInFlight,
}

/// What the registry knows about one joined peer, as a user sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerInfo {
    /// The peer's id.
    pub id: NodeId,
    /// How it is joined to us.
    pub direction: Direction,
    /// The options it advertised (kept current by its `set_options`).
    pub options: Options,
    /// Requests this node has waiting on it: its own, those it forwards to it as a router,
    /// and streams open to it.
    pub in_flight: usize,
    /// Whether it is a router node (it forwards messages for its peers).
    pub router: bool,
    /// Its CURVE public key, on a secured connection: the key libzmq authenticated (a
    /// downstream peer's client key, or the server key we connected with).
    pub key: Option<transport::Key>,
    /// Whether it said it is stopping: it finishes what it has and is no longer picked for
    /// `any`, `all` or group calls (nor forwarded to by routers).
    pub draining: bool,
}

/// Why a peer left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaveReason {
    /// It closed gracefully and said goodbye.
    Stopped,
    /// Its heartbeats stopped: it died, or the network between us did.
    TimedOut,
    /// Its connection dropped.
    Disconnected,
    /// We disconnected from it, or we are closing.
    Local,
    /// Its CURVE key was taken off our allow-list.
    Revoked,
}

impl LeaveReason {
    /// A stable lower-case name (the metrics' `reason` label).
    pub fn as_str(self) -> &'static str {
        match self {
            LeaveReason::Stopped => "stopped",
            LeaveReason::TimedOut => "timed_out",
            LeaveReason::Disconnected => "disconnected",
            LeaveReason::Local => "local",
            LeaveReason::Revoked => "revoked",
        }
    }
}
