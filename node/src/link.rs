//! How to reach a joined peer: through our client connected to it (upstream) or through our
//! server, by the routing id of its connection (downstream); and who a message is for.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use protocol::{Client, Envelope, PeerId, Server};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::events::LeaveReason;
use crate::filter::Filter;
use crate::peer::{Direction, NodeId, PeerInfo, Scope};

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
    reason: Mutex<Option<LeaveReason>>,
    rejoin: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl Left {
    /// The peer left for `reason`.
    pub(crate) fn set(&self, reason: LeaveReason) {
        *self.reason.lock() = Some(reason);
        self.notify.notify_one();
    }

    /// The peer asked for a new handshake.
    pub(crate) fn ask_rejoin(&self) {
        self.rejoin
            .store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_one();
    }

    /// Waits for the next signal (taken: the next wait is for the next one). A loss wins
    /// over a rejoin request.
    pub(crate) async fn wait(&self) -> Signal {
        loop {
            if let Some(reason) = self.reason.lock().take() {
                return Signal::Left(reason);
            }
            if self.rejoin.swap(false, std::sync::atomic::Ordering::AcqRel) {
                return Signal::Rejoin;
            }
            self.notify.notified().await;
        }
    }

    /// Forgets what was reported before a new join.
    pub(crate) fn clear(&self) {
        self.reason.lock().take();
        self.rejoin
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// How to reach a joined peer.
#[derive(Clone)]
pub(crate) enum Link {
    /// Through our client connected to it.
    Up {
        client: Client,
        /// Tells the upstream supervisor that the peer is declared gone, and why.
        left: Arc<Left>,
        /// The largest payload the peer accepts (its handshake said).
        limit: usize,
    },
    /// Through our server, to the routing id of its connection.
    Down {
        server: Server,
        route: PeerId,
        /// The largest payload the peer accepts (its handshake said).
        limit: usize,
    },
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Link::Up { client, .. } => write!(f, "Up({})", client.endpoint()),
            Link::Down { route, .. } => write!(f, "Down({route})"),
        }
    }
}

impl Link {
    /// Sends a user request and waits for its reply.
    pub(crate) async fn request(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> protocol::Result<Envelope> {
        self.send_request(false, event, metadata, payload, timeout)
            .await
    }

    /// Sends a system request (`_system:` namespace) and waits for its reply.
    pub(crate) async fn system_request(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> protocol::Result<Envelope> {
        self.send_request(true, event, metadata, payload, timeout)
            .await
    }

    async fn send_request(
        &self,
        system: bool,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> protocol::Result<Envelope> {
        match (self, system) {
            (Link::Up { client, .. }, false) => {
                client.request_with(event, metadata, payload, timeout).await
            }
            (Link::Up { client, .. }, true) => {
                client
                    .system_request(event, metadata, payload, timeout)
                    .await
            }
            (Link::Down { server, route, .. }, false) => {
                server
                    .request_with(route, event, metadata, payload, timeout)
                    .await
            }
            (Link::Down { server, route, .. }, true) => {
                server
                    .system_request(route, event, metadata, payload, timeout)
                    .await
            }
        }
    }

    /// Sends a user tick.
    pub(crate) async fn tick(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
    ) -> protocol::Result<()> {
        match self {
            Link::Up { client, .. } => client.tick_with(event, metadata, payload).await,
            Link::Down { server, route, .. } => {
                server.tick_with(route, event, metadata, payload).await
            }
        }
    }

    /// The largest payload the peer accepts.
    pub(crate) fn limit(&self) -> usize {
        match self {
            Link::Up { limit, .. } | Link::Down { limit, .. } => *limit,
        }
    }

    /// Refuses a payload the peer would not accept, before anything is sent.
    pub(crate) fn check_size(&self, payload: &Bytes) -> crate::Result<()> {
        check_size(payload.len(), self.limit())
    }

    pub(crate) fn direction(&self) -> Direction {
        match self {
            Link::Up { .. } => Direction::Upstream,
            Link::Down { .. } => Direction::Downstream,
        }
    }

    pub(crate) async fn system_tick(&self, event: &str, payload: Bytes) -> protocol::Result<()> {
        match self {
            Link::Up { client, .. } => client.system_tick(event, payload).await,
            Link::Down { server, route, .. } => server.system_tick(route, event, payload).await,
        }
    }

    /// Sends a system tick only if the peer's queue has room now (heartbeats: a peer that
    /// does not read must not hold up the others' heartbeats).
    pub(crate) async fn try_system_tick(
        &self,
        event: &str,
        payload: Bytes,
    ) -> protocol::Result<()> {
        match self {
            Link::Up { client, .. } => client.try_system_tick(event, payload).await,
            Link::Down { server, route, .. } => server.try_system_tick(route, event, payload).await,
        }
    }

    /// Fails at once the requests waiting on this link.
    pub(crate) fn fail_pending(&self) {
        match self {
            Link::Up { client, .. } => {
                client.fail_pending(|| protocol::Error::ConnectionLost);
            }
            Link::Down { server, route, .. } => {
                server.fail_pending(route, || protocol::Error::ConnectionLost);
            }
        }
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

/// Who a message goes to.
#[derive(Debug, Clone)]
pub enum Target {
    /// The joined node with this id.
    Id(NodeId),
    /// One joined node matching the filter, in the scope, picked by the node's strategy.
    Any(Filter, Scope),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Id(id) => write!(f, "{id}"),
            Target::Any(_, scope) => write!(f, "any matching node ({scope:?})"),
        }
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
