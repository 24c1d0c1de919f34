//! The node's shared state: the parts a node is made of, composed. Each part owns its
//! state and its methods, in its own file; `Inner` only holds them together and does what
//! spans parts (a peer leaving: the registry forgets it, its work stops, the event goes
//! out).
//!
//! The parts (see ARCHITECTURE.md, "The node's parts"):
//! - the peer registry, [`State`] and [`BoundKeys`] (`peers.rs`): who is joined, by
//!   which link, under one lock;
//! - the handler runtime, [`Runtime`] (`runtime.rs`) with the handler table
//!   ([`Handlers`], `middleware.rs`): where handler work runs and its limits; it reaches
//!   the node only through [`Host`];
//! - routing and forwarding, [`Routing`] (`forward.rs`, run by `routing.rs` and
//!   `fanout.rs`);
//! - the connections: our bound server, the upstream links ([`Upstream`], supervised by
//!   `upstream.rs`), the heartbeat task (`heartbeat.rs`);
//! - the node's life, [`Life`] (`phase.rs`, moved by `drain.rs`);
//! - observability: the events channel, the hooks and metrics ([`Observers`]), the
//!   rate-limited error reports ([`Reports`], `ratelimit.rs`), and the counters of refused
//!   messages (read by `stats.rs`).
//!
//! Who runs what: on the native engine each connection's driver (in `transport`) receives
//! and calls the node's dispatchers (`dispatch.rs`), which only decide: a system message is
//! answered there, anything else becomes a handler job (`runtime.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::{Mutex, RwLock};
use protocol::{Answer, Incoming, RemoteError, Server};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::events::{ErrorSource, EventChannel, LeaveReason, NodeEvent};
use crate::forward::Routing;
use crate::link::{Link, Upstream};
use crate::middleware::Handlers;
use crate::observe::Observers;
use crate::options::Options;
use crate::peer::{Direction, NodeId};
use crate::peers::{BoundKeys, State};
use crate::phase::Life;
use crate::ratelimit::Reports;
use crate::runtime::{Host, Received, Runtime};

/// A node's parts (the state its handles and tasks share).
pub(crate) struct Inner {
    pub(crate) id: NodeId,
    /// Random per process (see `Hello::instance`).
    pub(crate) instance: String,
    pub(crate) options: RwLock<Options>,
    pub(crate) config: Config,
    /// The peer registry and the routes (`peers.rs`).
    pub(crate) state: Mutex<State>,
    /// With CURVE: the key each id is bound to.
    pub(crate) keys: BoundKeys,
    /// Our bound server, once bound.
    pub(crate) server: Mutex<Option<Server>>,
    /// Upstream connections by address.
    pub(crate) upstreams: Mutex<HashMap<String, Upstream>>,
    pub(crate) heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// The handlers and the middleware in front of them.
    pub(crate) handlers: Handlers,
    /// Where handler work runs, and its limits.
    pub(crate) runtime: Runtime,
    /// Router state: counters and the `tick_all` ids seen.
    pub(crate) routing: Routing,
    /// The round-robin turn of group fan-outs (one step per fan-out, so the members of
    /// each group take turns).
    pub(crate) fan_turn: AtomicUsize,
    /// Where the node is in its life: open, draining, closing.
    pub(crate) life: Life,
    pub(crate) events: EventChannel,
    /// Per-request hooks and metrics.
    pub(crate) observers: Observers,
    /// How many error events each [`ErrorSource`] may make: hostile peers can cause them
    /// at the rate they send.
    reports: Reports,
    /// Messages refused because their connection had not joined.
    pub(crate) unjoined: AtomicU64,
    /// Messages refused for their metadata (over the limits, or malformed).
    pub(crate) metadata_refused: AtomicU64,
}

impl Inner {
    pub(crate) fn new(id: NodeId, options: Options, config: Config) -> Inner {
        let observers = Observers::new(&id, config.metrics, config.describe.is_on());
        Inner {
            instance: uuid::Uuid::new_v4().to_string(),
            options: RwLock::new(options),
            runtime: Runtime::new(&config, &id),
            id,
            config,
            state: Mutex::new(State::default()),
            keys: BoundKeys::default(),
            server: Mutex::new(None),
            upstreams: Mutex::new(HashMap::new()),
            heartbeat: Mutex::new(None),
            handlers: Handlers::default(),
            routing: Routing::default(),
            fan_turn: AtomicUsize::new(0),
            life: Life::default(),
            events: EventChannel::default(),
            observers,
            reports: Reports::default(),
            unjoined: AtomicU64::new(0),
            metadata_refused: AtomicU64::new(0),
        }
    }

    /// Sends an event to the node's streams (and counts it in the metrics).
    pub(crate) fn emit(&self, event: NodeEvent) {
        if let Some(metrics) = &self.observers.metrics {
            match &event {
                NodeEvent::PeerJoined { .. } => metrics.joined(),
                NodeEvent::PeerLeft { reason, .. } => metrics.left(reason.as_str()),
                NodeEvent::ConnectionRefused { .. } => metrics.refused_connection(),
                NodeEvent::AcceptPaused { .. } => metrics.accept_paused(),
                _ => {}
            }
        }
        self.events.send(event);
    }

    /// Reports an error as a [`NodeEvent::Error`], rate-limited per source (see
    /// [`Reports`]).
    pub(crate) fn report(&self, source: ErrorSource, message: String) {
        self.reports.report(&self.id, &self.events, source, message);
    }

    /// A peer left: forget it, fail what waits on it, tell its supervisor, say so.
    pub(crate) fn peer_left(&self, id: &NodeId, direction: Direction, reason: LeaveReason) {
        let Some(entry) = self.state.lock().leave(id, direction) else {
            return;
        };
        entry.link().fail_pending();
        // Its handlers' answers could go nowhere: they stop, their memory goes.
        entry.work.cancel();
        if let Link::Up { left, .. } = &**entry.link() {
            left.set(reason);
        }
        tracing::debug!(node = %self.id, peer = %id, ?direction, ?reason, "peer left");
        self.emit(NodeEvent::PeerLeft {
            id: id.clone(),
            direction,
            reason,
        });
    }
}

/// The handler runtime reaches the node through this: its own part, the hooks, the error
/// reports, and the forward of a router (the job's hold on its node keeps the node alive
/// while it runs).
impl Host for Inner {
    fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    fn observers(&self) -> &Observers {
        &self.observers
    }

    fn report(&self, source: ErrorSource, message: String) {
        Inner::report(self, source, message);
    }

    fn forward(
        self: Arc<Self>,
        from: NodeId,
        incoming: Incoming,
        received: Received,
    ) -> BoxFuture<'static, std::result::Result<Answer, RemoteError>> {
        // Boxed: a forward's future is large, and without the box every handler job
        // would be that large (the job is copied into its runner at each start: 1.8% of
        // an echo server's time in `memmove` under `spawn`, perf).
        Box::pin(async move { self.handle_forward(from, incoming, received).await })
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
