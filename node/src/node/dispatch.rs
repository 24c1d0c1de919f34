//! What a node does with each message its sockets receive: the dispatchers the protocol
//! calls. They run on a driver (for a native server socket each connection's own, so two
//! peers' messages may be dispatched at once on two threads; else the socket's) and never
//! wait. A system message is decoded once here ([`System`]) and its effect, in its own file
//! under `node/system/`, runs here (a forward, which waits on its next hop, goes to the handler
//! runtime); a user request or tick is checked (joined? a handler? closing?), its deadline
//! computed and its handler found, once, and handed to the handler runtime (`runtime.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use protocol::{Client, Incoming, Meta, RemoteError, Responder, Serve, Server};
use tokio::sync::watch;
use tokio::time::Instant;
use transport::Key;

use crate::codes::system::{BAD_METADATA, NOT_JOINED, SHUTTING_DOWN};
use crate::context::deadline_of;
use crate::mesh::peer::{Direction, NodeId, PeerInfo, PeerWork};
use crate::node::inner::Inner;
use crate::node::system::{self, System};
use crate::observation::events::ErrorSource;
use crate::serving::runtime::Received;

impl Inner {
    /// A request from a joined peer (`system`: the system message it is, decoded once):
    /// a system request's effect here; a user request (or a forward) refused at once when
    /// closing or when nothing handles it, else run as a task.
    fn dispatch_request(
        self: &Arc<Self>,
        (from, peer): (NodeId, Arc<PeerWork>),
        (direction, system): (Direction, Option<System>),
        incoming: Incoming,
        responder: Responder,
        arrived: Instant,
    ) {
        if system == Some(System::Draining) {
            responder.answer(system::draining::answer(self, &from, direction));
            return;
        }
        if self.life.is_closing() {
            responder.answer(Err(RemoteError::system_error(
                SHUTTING_DOWN,
                "the node is closing and takes no new requests",
            )));
            return;
        }
        if system == Some(System::Describe) {
            responder.answer(system::describe::answer(self, &incoming));
            return;
        }
        // Most requests carry the budget alone: no section to check or to keep.
        let budget = incoming.budget();
        let meta = if budget.is_some() && incoming.metadata().len() == protocol::BUDGET_ENTRY {
            Meta::new()
        } else {
            match incoming.meta(&self.config.max_metadata) {
                Ok(meta) => meta,
                Err(refused) => {
                    self.observers
                        .metadata_refused
                        .fetch_add(1, Ordering::Relaxed);
                    responder.answer(Err(metadata_refusal(&refused)));
                    return;
                }
            }
        };
        let received = Received {
            deadline: deadline_of(arrived, budget),
            meta,
            arrived,
        };
        let first = if system == Some(System::Forward) {
            None
        } else {
            let Some(first) = self.handlers.first(incoming.event(), false) else {
                responder.no_handler(incoming.event());
                return;
            };
            Some(first)
        };
        self.runtime
            .spawn_request(self, (from, peer), incoming, received, first, responder);
    }

    /// A tick from a joined peer: system ticks here, user ticks as a task.
    fn dispatch_tick(
        self: &Arc<Self>,
        (from, peer): (NodeId, Arc<PeerWork>),
        direction: Direction,
        incoming: Incoming,
    ) {
        if incoming.envelope().is_system() {
            self.system_tick(&from, direction, &incoming);
            return;
        }
        if self.life.is_closing() {
        } else if let Some(first) = self.handlers.first(incoming.event(), true) {
            match incoming.meta(&self.config.max_metadata) {
                Ok(meta) => self
                    .runtime
                    .spawn_tick(self, (from, peer), incoming, meta, first),
                Err(refused) => {
                    self.observers
                        .metadata_refused
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(node = %self.id, event = incoming.event(), %refused, "tick dropped");
                }
            }
        } else {
            tracing::trace!(node = %self.id, event = incoming.event(), "tick with no handler");
        }
    }

    /// A message from a connection that never joined: counted, reported, refused.
    fn unjoined(&self, kind: &str, incoming: &Incoming) {
        self.observers
            .unjoined
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.observers.report(
            ErrorSource::Peer,
            format!(
                "{kind} {:?} from a connection that has not joined",
                incoming.event()
            ),
        );
    }

    /// A system tick from a joined peer (heartbeat, options, bye, rejoin), decoded once.
    /// Runs on the socket's driver: nothing here waits.
    fn system_tick(&self, from: &NodeId, direction: Direction, incoming: &Incoming) {
        match System::tick(incoming.event()) {
            // Its arrival was the sign of life.
            Some(System::Heartbeat) => {}
            Some(System::Options) => system::options::apply(self, from, direction, incoming),
            Some(System::Bye) => system::bye::apply(self, from, direction),
            Some(System::Rejoin) => system::rejoin::apply(self, from, direction),
            _ => self.observers.report(
                ErrorSource::Peer,
                format!("unknown system event {:?} from {from}", incoming.event()),
            ),
        }
    }
}

/// The refusal of a message from a connection that has not joined.
/// The refusal of a request's metadata: over the limits, with their numbers as data.
fn metadata_refusal(refused: &protocol::MetaError) -> RemoteError {
    let refusal = RemoteError::system_error(BAD_METADATA, refused.to_string());
    match *refused {
        protocol::MetaError::TooLarge {
            entries,
            bytes,
            max_entries,
            max_bytes,
        } => refusal.with_limit(protocol::Limit::Metadata {
            entries: entries as u64,
            bytes: bytes as u64,
            max_entries: max_entries as u64,
            max_bytes: max_bytes as u64,
        }),
        _ => refusal,
    }
}

fn not_joined() -> RemoteError {
    RemoteError::system_error(NOT_JOINED, "handshake first")
}

/// The receiver of our bound server's requests and ticks (`protocol::Serve`): the
/// node's own table is the only one looked in. It holds the node weakly and not the server
/// (which holds it: a cycle would keep a closed server's state forever); the server is the
/// node's bound one, taken when a handshake needs it.
struct Downstream(Weak<Inner>);

impl Serve for Downstream {
    fn request(&self, incoming: Incoming, responder: Responder) {
        let Some(inner) = self.0.upgrade() else {
            responder.answer(Err(RemoteError::system_error(SHUTTING_DOWN, "node closed")));
            return;
        };
        let system = System::request(incoming.event());
        if system == Some(System::Handshake) {
            responder.answer(system::handshake::answer(&inner, &incoming));
            return;
        }
        // Identity is bound to the connection: no handshake, no service.
        let now = Instant::now();
        let found = inner
            .state
            .lock()
            .downstream(&incoming.from, now.into_std());
        let Some(from) = found else {
            inner.unjoined("request", &incoming);
            responder.answer(Err(not_joined()));
            return;
        };
        let how = (Direction::Downstream, system);
        inner.dispatch_request(from, how, incoming, responder, now);
    }

    fn tick(&self, incoming: Incoming) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let found = inner
            .state
            .lock()
            .downstream(&incoming.from, Instant::now().into_std());
        let Some(from) = found else {
            if System::tick(incoming.event()) == Some(System::Heartbeat) {
                system::heartbeat::from_unjoined(&inner, incoming);
            } else {
                inner.unjoined("tick", &incoming);
            }
            return;
        };
        inner.dispatch_tick(from, Direction::Downstream, incoming);
    }
}

/// Makes the node the receiver of our bound server's requests and ticks.
pub(crate) fn install_downstream(inner: &Arc<Inner>, server: &Server) {
    server.serve(Arc::new(Downstream(Arc::downgrade(inner))));
}

/// The receiver of an upstream connection's requests and ticks: what our server-side peer
/// sends us through our client. `joined` says who the peer is once the handshake is done.
struct Upstream {
    inner: Weak<Inner>,
    joined: watch::Receiver<Option<PeerInfo>>,
    /// The key of the server we checked, on a CURVE connection.
    server_key: Option<Key>,
}

impl Upstream {
    /// The peer, once joined, and its record in the registry (a sign of life).
    fn peer(&self, now: Instant) -> Option<(Arc<Inner>, NodeId, Arc<PeerWork>)> {
        let from = self.joined.borrow().as_ref().map(|p| p.id.clone())?;
        let inner = self.inner.upgrade()?;
        let work =
            inner
                .state
                .lock()
                .registry
                .seen_work(&from, Direction::Upstream, now.into_std())?;
        Some((inner, from, work))
    }
}

impl Serve for Upstream {
    fn request(&self, incoming: Incoming, responder: Responder) {
        let now = Instant::now();
        let Some((inner, from, work)) = self.peer(now) else {
            responder.answer(Err(not_joined()));
            return;
        };
        // Our side of a CURVE connection: the peer is the server whose key we checked.
        let incoming = match self.server_key {
            Some(key) => Incoming::new(
                incoming.from.clone(),
                Some(key),
                incoming.envelope().clone(),
            ),
            None => incoming,
        };
        let how = (Direction::Upstream, System::request(incoming.event()));
        inner.dispatch_request((from, work), how, incoming, responder, now);
    }

    fn tick(&self, incoming: Incoming) {
        if let Some((inner, from, work)) = self.peer(Instant::now()) {
            inner.dispatch_tick((from, work), Direction::Upstream, incoming);
        }
    }
}

/// Makes the node the receiver of an upstream connection's requests and ticks.
pub(crate) fn install_upstream(
    inner: Weak<Inner>,
    client: &Client,
    joined: watch::Receiver<Option<PeerInfo>>,
    server_key: Option<Key>,
) {
    client.serve(Arc::new(Upstream {
        inner,
        joined,
        server_key,
    }));
}
