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
//!   the node only through [`Host`](crate::serving::runtime::Host) (`host.rs`);
//! - routing and forwarding: its state, [`Routing`] (`forward.rs`), and [`Relay`]
//!   (`routing/relay.rs`, `fanout.rs`), which runs it over a borrowed view of the registry and
//!   the config (made here, `host.rs`), telling the node of departures only through
//!   [`Departures`];
//! - the connections, [`Connections`]: our bound server, the upstream links (supervised by
//!   `upstream.rs`), the heartbeat task (`heartbeat.rs`);
//! - the node's life, [`Life`] (`phase.rs`, moved by `drain.rs`);
//! - observability, [`Observers`] (`observe.rs`): the events channel, the hooks and
//!   metrics, the rate-limited error reports (`ratelimit.rs`), and the counters of refused
//!   messages (read by `stats.rs`).
//!
//! What spans the parts is in this room, `node/`, beside `Inner`: joining (`join.rs`), the
//! close (`drain.rs`), the connections' supervisors (`upstream.rs`), the readings
//! (`stats.rs`, `introspect.rs`, `watch.rs`, `health.rs`).
//!
//! Who runs what: on the native engine each connection's driver (in `transport`) receives
//! and calls the node's dispatchers (`dispatch.rs`), which only decide: a system message is
//! answered there, anything else becomes a handler job (`runtime.rs`).

use parking_lot::{Mutex, RwLock};

use crate::config::Config;
use crate::mesh::link::Connections;
use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::mesh::peers::{BoundKeys, State};
use crate::mesh::phase::Life;
use crate::observation::events::NodeEvent;
use crate::observation::observe::Observers;
use crate::options::Options;
use crate::routing::forward::Routing;
use crate::serving::middleware::Handlers;
use crate::serving::runtime::Runtime;
use crate::startup::Startup;

/// A node's parts (the state its handles and tasks share), private to `node/`: the parts
/// below reach the node through their narrow types (`host.rs`), and the calling side, on
/// top, reads the few it needs through the accessors below.
pub(crate) struct Inner {
    pub(super) id: NodeId,
    /// Random per process (see `Hello::instance`).
    pub(super) instance: String,
    pub(super) options: RwLock<Options>,
    pub(super) config: Config,
    /// The peer registry and the routes (`peers.rs`).
    pub(super) state: Mutex<State>,
    /// With CURVE: the key each id is bound to.
    pub(super) keys: BoundKeys,
    /// Our bound server, the upstream links, the heartbeat task.
    pub(super) links: Connections,
    /// The handlers and the middleware in front of them.
    pub(super) handlers: Handlers,
    /// Where handler work runs, and its limits.
    pub(super) runtime: Runtime,
    /// Routing's own state (counters, ids seen, the fan-outs' turn); the forwarding runs
    /// through [`Inner::relay`].
    pub(super) routing: Routing,
    /// Where the node is in its life: open, draining, closing.
    pub(super) life: Life,
    /// Observability: the events, hooks and metrics, the error reports, the counts of
    /// refused messages.
    pub(super) observers: Observers,
    /// What its startup waits for (`health.rs`).
    pub(super) startup: Startup,
}

/// What the calling side reads of the node: its id, settings, registry, handler table (a
/// stream handler registers there), life and observers.
impl Inner {
    pub(crate) fn id(&self) -> &NodeId {
        &self.id
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn state(&self) -> &Mutex<State> {
        &self.state
    }

    pub(crate) fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    pub(crate) fn life(&self) -> &Life {
        &self.life
    }

    pub(crate) fn observers(&self) -> &Observers {
        &self.observers
    }
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
            links: Connections::default(),
            handlers: Handlers::default(),
            routing: Routing::default(),
            life: Life::default(),
            observers,
            startup: Startup::default(),
        }
    }

    /// Our bound server, once bound (the system messages answer on it).
    pub(crate) fn server(&self) -> Option<protocol::Server> {
        self.links.server.lock().clone()
    }

    /// A peer left: forget it, fail what waits on it, tell its supervisor, say so.
    pub(crate) fn peer_left(&self, id: &NodeId, direction: Direction, reason: LeaveReason) {
        let Some(entry) = self.state.lock().leave(id, direction) else {
            return;
        };
        entry.link().fail_pending();
        // Its handlers' answers could go nowhere: they stop, their memory goes.
        entry.work.cancel();
        if let Some(left) = entry.link().left() {
            left.set(reason);
        }
        tracing::debug!(node = %self.id, peer = %id, ?direction, ?reason, "peer left");
        self.observers.emit(NodeEvent::PeerLeft {
            id: id.clone(),
            direction,
            reason,
        });
    }
}
