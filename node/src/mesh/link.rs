//! How to reach a joined peer: through our client connected to it (upstream) or through our
//! server, by the routing id of its connection (downstream); and who a message is for.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use protocol::{Client, Peer, PeerId, Server};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::filter::Filter;
use crate::mesh::peer::LeaveReason;
use crate::mesh::peer::{Direction, NodeId, PeerInfo, Scope};

/// What the supervisor of an upstream connection is told (see `upstream::supervise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The peer was declared gone (heartbeats, a goodbye), for this reason.
    Left(LeaveReason),
    /// The peer asked us to handshake again (it forgot us): the peer is not gone until a
    /// new handshake fails.
    Rejoin,
}

/// Set when the peer of an upstream connection is declared gone (by whatever noticed:
/// heartbeats, a goodbye) or asks for a new handshake, and wakes the connection's
/// supervisor, which decides what to do.
#[derive(Debug, Default)]
pub(crate) struct Left {
    state: Mutex<Reported>,
}

/// What was reported since the supervisor last looked, and the token that wakes it.
#[derive(Debug, Default)]
struct Reported {
    /// The peer left, and why.
    reason: Option<LeaveReason>,
    /// The peer asked for a new handshake.
    rejoin: bool,
    /// Cancelled when either is set; a fresh one once the supervisor took what was set
    /// (a token cannot be reset), so that its next wait is for the next report.
    told: CancellationToken,
}

impl Left {
    /// The peer left for `reason`.
    pub(crate) fn set(&self, reason: LeaveReason) {
        let mut state = self.state.lock();
        state.reason = Some(reason);
        state.told.cancel();
    }

    /// The peer asked for a new handshake.
    pub(crate) fn ask_rejoin(&self) {
        let mut state = self.state.lock();
        state.rejoin = true;
        state.told.cancel();
    }

    /// Waits for the next signal (taken: the next wait is for the next one). A loss wins
    /// over a rejoin request.
    pub(crate) async fn wait(&self) -> Signal {
        loop {
            let told = {
                let mut state = self.state.lock();
                let signal = if let Some(reason) = state.reason.take() {
                    Some(Signal::Left(reason))
                } else if std::mem::take(&mut state.rejoin) {
                    Some(Signal::Rejoin)
                } else {
                    None
                };
                if let Some(signal) = signal {
                    state.renew();
                    return signal;
                }
                state.told.clone()
            };
            told.cancelled().await;
        }
    }

    /// Forgets what was reported before a new join.
    pub(crate) fn clear(&self) {
        let mut state = self.state.lock();
        state.reason = None;
        state.rejoin = false;
        state.renew();
    }
}

impl Reported {
    /// A fresh token if the old one was used and nothing is left to tell.
    fn renew(&mut self) {
        if self.told.is_cancelled() && self.reason.is_none() && !self.rejoin {
            self.told = CancellationToken::new();
        }
    }
}

/// How to reach a joined peer: the conversation with it (a [`protocol::Peer`], the same
/// whichever side connected), and what only an upstream peer has.
#[derive(Clone)]
pub(crate) struct Link {
    /// Our client's server (upstream), or the client of our server with the routing id of
    /// the peer's connection (downstream).
    peer: Peer,
    /// The same, for `_system:` events.
    system: Peer,
    /// The largest payload the peer accepts (its handshake said).
    limit: usize,
    /// Upstream only: our client connected to the peer, and what tells the upstream
    /// supervisor that the peer is declared gone, and why.
    upstream: Option<(Client, Arc<Left>)>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.upstream {
            Some((client, _)) => write!(f, "Up({})", client.endpoint()),
            None => write!(f, "Down({})", self.peer.route()),
        }
    }
}

impl Link {
    /// Through our client connected to the peer.
    pub(crate) fn up(client: Client, left: Arc<Left>, limit: usize) -> Link {
        let peer = client.peer();
        Link {
            system: peer.system(),
            peer,
            limit,
            upstream: Some((client, left)),
        }
    }

    /// Through our server, to the routing id of the peer's connection.
    pub(crate) fn down(server: &Server, route: &PeerId, limit: usize) -> Link {
        let peer = server.peer(route);
        Link {
            system: peer.system(),
            peer,
            limit,
            upstream: None,
        }
    }

    /// Our client connected to the peer (upstream only).
    pub(crate) fn client(&self) -> Option<&Client> {
        self.upstream.as_ref().map(|(client, _)| client)
    }

    /// What tells the upstream supervisor the peer is gone (upstream only).
    pub(crate) fn left(&self) -> Option<&Arc<Left>> {
        self.upstream.as_ref().map(|(_, left)| left)
    }

    /// The routing id of the peer's connection to our server (downstream only).
    pub(crate) fn route(&self) -> Option<&PeerId> {
        self.upstream.is_none().then(|| self.peer.route())
    }

    pub(crate) fn direction(&self) -> Direction {
        match self.upstream {
            Some(_) => Direction::Upstream,
            None => Direction::Downstream,
        }
    }

    /// The conversation with the peer, for user events.
    pub(crate) fn peer(&self) -> &Peer {
        &self.peer
    }

    /// The conversation with the peer, for `_system:` events (the handshake, heartbeats,
    /// forwards).
    pub(crate) fn system(&self) -> &Peer {
        &self.system
    }

    /// The largest payload the peer accepts.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Refuses a payload the peer would not accept, before anything is sent.
    pub(crate) fn check_size(&self, payload: &Bytes) -> crate::Result<()> {
        check_size(payload.len(), self.limit())
    }

    /// Fails at once the requests waiting on this link.
    pub(crate) fn fail_pending(&self) {
        self.peer.fail_pending(|| protocol::Error::ConnectionLost);
    }
}

/// A payload of `size` bytes for a receiver whose limit is `max`: refused with a typed
/// error before sending (the receiver would drop it, and the caller wait for nothing).
pub(crate) fn check_size(size: usize, max: usize) -> crate::Result<()> {
    if size > max {
        return Err(crate::Error::PayloadTooLarge { size, max });
    }
    Ok(())
}

/// One address this node connected to (its supervisor, `upstream.rs`, keeps it).
pub(crate) struct Upstream {
    /// Which `connect` made this entry: it installs its socket only into its own entry (a
    /// `disconnect` and another `connect` may have replaced it meanwhile).
    pub(crate) generation: u64,
    /// The socket, once made (`None` while the first `connect` is making it).
    pub(crate) connection: Option<(Client, JoinHandle<()>)>,
    /// Who is joined through it (`None` while not joined). Closed when the connection is
    /// given up.
    pub(crate) joined: watch::Receiver<Option<PeerInfo>>,
}

impl Upstream {
    /// The client, once made.
    pub(crate) fn client(&self) -> Option<&Client> {
        self.connection.as_ref().map(|(client, _)| client)
    }

    /// Stops the supervisor and closes the socket gracefully.
    pub(crate) async fn shut(self) {
        if let Some((client, supervisor)) = self.connection {
            supervisor.abort();
            client.close().await;
        }
    }
}

/// Who a call goes to: one node by id, one node matching a filter, or every node matching
/// it.
///
/// | target | made with | `send` (one reply) | `tick` | `gather` |
/// |---|---|---|---|---|
/// | an id | `"node-1"`, a `String`, a [`NodeId`] | that node | that node | [`Error::InvalidTarget`](crate::Error::InvalidTarget) |
/// | any match | [`Target::any`], or a [`Filter`] (`From`) | one match, picked by the [`Strategy`](crate::Strategy) | one match | every match |
/// | all matches | [`Target::all`] | [`Error::InvalidTarget`](crate::Error::InvalidTarget) | every match | every match |
///
/// A filter target looks both ways (upstream and downstream peers) unless
/// [`scope`](Target::scope) says otherwise. An id or a filter that finds no joined node here
/// goes through a joined router, if any.
///
/// ```
/// use node::{Filter, Scope, Target};
///
/// let shards = Filter::new().eq("role", "shard");
/// let one: Target = shards.clone().into(); // any match, both directions
/// let every = Target::all(shards).scope(Scope::Down);
/// let by_id: Target = "shard-1".into();
/// # let _ = (one, every, by_id);
/// ```
#[derive(Debug, Clone)]
pub enum Target {
    /// The joined node with this id.
    Id(NodeId),
    /// One joined node matching the filter, in the scope, picked by the node's strategy.
    Any(Filter, Scope),
    /// Every joined node matching the filter, in the scope (for ticks and gathers).
    All(Filter, Scope),
}

impl Target {
    /// One node matching `filter`, either direction (the same as `Target::from(filter)`).
    pub fn any(filter: Filter) -> Target {
        Target::Any(filter, Scope::Both)
    }

    /// Every node matching `filter`, either direction: a tick reaches each of them, a
    /// request is [`Error::InvalidTarget`](crate::Error::InvalidTarget) (use
    /// [`Call::gather`](crate::Call::gather) for one reply from each).
    pub fn all(filter: Filter) -> Target {
        Target::All(filter, Scope::Both)
    }

    /// Looks for matches only in `scope` (upstream: the nodes this node connected to;
    /// downstream: the nodes connected to it). An id target is left as it is.
    pub fn scope(self, scope: Scope) -> Target {
        match self {
            Target::Any(filter, _) => Target::Any(filter, scope),
            Target::All(filter, _) => Target::All(filter, scope),
            id @ Target::Id(_) => id,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Id(id) => write!(f, "{id}"),
            Target::Any(_, scope) => write!(f, "any matching node ({scope:?})"),
            Target::All(_, scope) => write!(f, "all matching nodes ({scope:?})"),
        }
    }
}

/// Any node the filter matches, either direction.
impl From<Filter> for Target {
    fn from(filter: Filter) -> Target {
        Target::any(filter)
    }
}

/// Any node the filter matches, either direction (the filter is cloned).
impl From<&Filter> for Target {
    fn from(filter: &Filter) -> Target {
        Target::any(filter.clone())
    }
}

impl From<&str> for Target {
    fn from(id: &str) -> Target {
        Target::Id(NodeId::from(id))
    }
}

impl From<String> for Target {
    fn from(id: String) -> Target {
        Target::Id(NodeId::from(id))
    }
}

impl From<NodeId> for Target {
    fn from(id: NodeId) -> Target {
        Target::Id(id)
    }
}

impl From<&NodeId> for Target {
    fn from(id: &NodeId) -> Target {
        Target::Id(id.clone())
    }
}

/// The node's connections: its bound server, its upstream links by address, and the
/// heartbeat task that keeps them alive.
#[derive(Default)]
pub(crate) struct Connections {
    /// Our bound server, once bound.
    pub(crate) server: Mutex<Option<protocol::Server>>,
    /// Upstream connections by address.
    pub(crate) upstreams: Mutex<std::collections::HashMap<String, Upstream>>,
    pub(crate) heartbeat: Mutex<Option<tokio::task::JoinHandle<()>>>,
}
