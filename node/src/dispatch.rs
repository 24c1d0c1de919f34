//! What a node does with each message its sockets receive: the dispatchers the protocol
//! calls. They run on a driver (for a native server socket each connection's own, so two
//! peers' messages may be dispatched at once on two threads; else the socket's) and never
//! wait: a system message (handshake, heartbeat, options, goodbye) is handled there; a
//! user request or tick is checked (joined? a handler? closing?), its deadline computed
//! and its handler found, once, and handed to the handler runtime (`runtime.rs`).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use protocol::{Answer, Client, Incoming, Meta, RemoteError, Responder, Server};
use tokio::sync::watch;
use tokio::time::Instant;
use transport::Key;

use crate::codes::system::{BAD_METADATA, NOT_JOINED, NO_HANDLER, SHUTTING_DOWN};
use crate::context::deadline_of;
use crate::describe::DESCRIBE;
use crate::events::{ErrorSource, LeaveReason, NodeEvent};
use crate::forward::FORWARD;
use crate::handshake::{BYE, DRAINING, HANDSHAKE, HEARTBEAT, OPTIONS, REJOIN};
use crate::inner::Inner;
use crate::join::handshake_downstream;
use crate::link::Link;
use crate::options::Options;
use crate::peer::{Direction, NodeId, PeerInfo, PeerWork};
use crate::runtime::Received;

impl Inner {
    /// A user request from a joined peer: refused at once when closing or when nothing
    /// handles it, else run as a task.
    fn dispatch_request(
        self: &Arc<Self>,
        (from, peer): (NodeId, Arc<PeerWork>),
        incoming: Incoming,
        responder: Responder,
        arrived: Instant,
    ) {
        if self.life.is_closing() {
            responder.answer(Err(RemoteError::system_error(
                SHUTTING_DOWN,
                "the node is closing and takes no new requests",
            )));
            return;
        }
        if incoming.event() == DESCRIBE {
            responder.answer(self.answer_describe(&incoming));
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
        let first = if incoming.event() == FORWARD {
            None
        } else {
            let Some(first) = self.handlers.first(incoming.event(), false) else {
                responder.answer(Err(RemoteError::system_error(
                    NO_HANDLER,
                    format!("no handler for {:?}", incoming.event()),
                )));
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
        } else if self.life.is_closing() {
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

    /// A system tick from a joined peer (heartbeat, options, bye, rejoin). Runs on the
    /// socket's driver: nothing here waits.
    fn system_tick(&self, from: &NodeId, direction: Direction, incoming: &Incoming) {
        match incoming.event() {
            HEARTBEAT => {}
            OPTIONS => match incoming.decode::<Options>() {
                Ok(options) => {
                    self.state
                        .lock()
                        .registry
                        .set_options(from, direction, options.clone());
                    self.observers.emit(NodeEvent::PeerOptionsChanged {
                        id: from.clone(),
                        options,
                    });
                }
                Err(e) => self
                    .observers
                    .report(ErrorSource::Peer, format!("bad options from {from}: {e}")),
            },
            BYE => self.peer_left(from, direction, LeaveReason::Stopped),
            // The peer forgot us (it declared us dead, or restarted): our supervisor
            // handshakes again; the peer counts as left only if that fails (a rejoin request
            // that crossed our own new handshake changes nothing).
            REJOIN if direction == Direction::Upstream => {
                if let Some(Link::Up { left, .. }) = self
                    .state
                    .lock()
                    .registry
                    .get_link(from, Direction::Upstream)
                    .map(|link| &**link)
                {
                    left.ask_rejoin();
                }
            }
            other => self.observers.report(
                ErrorSource::Peer,
                format!("unknown system event {other:?} from {from}"),
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

/// Installs the dispatchers of our bound server. They hold the node weakly and not the
/// server (which holds them: a cycle would keep a closed server's state forever); the
/// server is the node's bound one, taken when a handshake needs it.
pub(crate) fn install_downstream(inner: &Arc<Inner>, server: &Server) {
    let weak = Arc::downgrade(inner);
    server.on_any_request(Some(Arc::new(
        move |incoming: Incoming, responder: Responder| {
            let Some(inner) = weak.upgrade() else {
                responder.answer(Err(RemoteError::system_error(SHUTTING_DOWN, "node closed")));
                return;
            };
            if incoming.event() == HANDSHAKE {
                // A closing node takes no new peers (they would join and be dropped at once).
                let bound = inner.links.server.lock().clone();
                let answer = match bound {
                    Some(server) if !inner.life.is_stopping() => {
                        handshake_downstream(&inner, &server, &incoming)
                    }
                    _ => Err(RemoteError::system_error(
                        SHUTTING_DOWN,
                        "the node is closing",
                    )),
                };
                responder.answer(answer);
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
            if incoming.event() == DRAINING {
                inner.peer_draining(&from.0, Direction::Downstream);
                responder.answer(Ok(Answer::from(Bytes::new())));
                return;
            }
            inner.dispatch_request(from, incoming, responder, now);
        },
    )));
    let weak = Arc::downgrade(inner);
    server.on_any_tick(Some(Arc::new(move |incoming: Incoming| {
        let Some(inner) = weak.upgrade() else { return };
        let found = inner
            .state
            .lock()
            .downstream(&incoming.from, Instant::now().into_std());
        let Some(from) = found else {
            if incoming.event() == HEARTBEAT {
                // A peer that still believes it is joined: tell it to handshake again
                // (without waiting on its queue: the driver never waits).
                inner
                    .observers
                    .unjoined
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(server) = inner.links.server.lock().clone() {
                    tokio::spawn(async move {
                        let _ = server
                            .try_system_tick(&incoming.from, REJOIN, Bytes::new())
                            .await;
                    });
                }
            } else {
                inner.unjoined("tick", &incoming);
            }
            return;
        };
        inner.dispatch_tick(from, Direction::Downstream, incoming);
    })));
}

/// Installs the dispatchers of an upstream connection: messages our server-side peer sends
/// us through `client`. `joined` says who the peer is once the handshake is done.
pub(crate) fn install_upstream(
    weak: Weak<Inner>,
    client: &Client,
    joined: watch::Receiver<Option<PeerInfo>>,
    server_key: Option<Key>,
) {
    let peer = joined.clone();
    let weak_requests = weak.clone();
    client.on_any_request(Some(Arc::new(
        move |incoming: Incoming, responder: Responder| {
            let from = peer.borrow().as_ref().map(|p| p.id.clone());
            let (Some(inner), Some(from)) = (weak_requests.upgrade(), from) else {
                responder.answer(Err(not_joined()));
                return;
            };
            // Our side of a CURVE connection: the peer is the server whose key we checked.
            let incoming = match server_key {
                Some(key) => Incoming::new(
                    incoming.from.clone(),
                    Some(key),
                    incoming.envelope().clone(),
                ),
                None => incoming,
            };
            let now = Instant::now();
            let work =
                inner
                    .state
                    .lock()
                    .registry
                    .seen_work(&from, Direction::Upstream, now.into_std());
            let Some(work) = work else {
                responder.answer(Err(not_joined()));
                return;
            };
            if incoming.event() == DRAINING {
                inner.peer_draining(&from, Direction::Upstream);
                responder.answer(Ok(Answer::from(Bytes::new())));
                return;
            }
            inner.dispatch_request((from, work), incoming, responder, now);
        },
    )));
    client.on_any_tick(Some(Arc::new(move |incoming: Incoming| {
        let from = joined.borrow().as_ref().map(|p| p.id.clone());
        let (Some(inner), Some(from)) = (weak.upgrade(), from) else {
            return;
        };
        let work = inner.state.lock().registry.seen_work(
            &from,
            Direction::Upstream,
            Instant::now().into_std(),
        );
        if let Some(work) = work {
            inner.dispatch_tick((from, work), Direction::Upstream, incoming);
        }
    })));
}
