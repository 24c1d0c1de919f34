//! The state a node's handles and tasks share, and what changes it: peers joining and
//! leaving, system ticks, closing.
//!
//! Who owns what (see ARCHITECTURE.md, "What runs where"):
//! - on the native engine each connection's driver (in `transport`) receives and
//!   dispatches (on a Client busy with its own requests, and on libzmq, the socket's
//!   driver task in `protocol` does); the node's dispatchers (`dispatch.rs`) run there and
//!   only decide: a system message is answered there, anything else becomes a handler task
//!   (`runtime.rs`);
//! - each upstream connection has one supervisor task (`upstream.rs`) that owns its
//!   joining and rejoining;
//! - one heartbeat task per node (`heartbeat.rs`);
//! - the registry and the route map live in [`State`], under one lock, so that they stay in
//!   step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use protocol::{Incoming, PeerId, Server};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::drain::{Closed, Phase};
use crate::events::{ErrorSource, LeaveReason, NodeEvent};
use crate::handshake::{Hello, Refusal, BYE, HEARTBEAT, OPTIONS, REJOIN};
use crate::link::Link;
use crate::middleware::Handlers;
use crate::options::Options;
use crate::peer::{Direction, Entry, NodeId, Registry};
use crate::ratelimit::{RateLimit, Suppressed, Verdict};
use crate::routing::Routing;
use crate::runtime::Runtime;
use crate::upstream::Upstream;

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
            if matches!(&**old.link(), Link::Down { route: r, .. } if r == &route) {
                old.work.set_limit(entry.work.limit());
                entry.work = Arc::clone(&old.work);
            }
        }
        let replaced = self
            .registry
            .join(entry)
            .map_err(|_| Refusal::DuplicateId)?;
        if let Some(old) = &replaced {
            if let Link::Down {
                route: old_route, ..
            } = &**old.link()
            {
                if old_route != &route {
                    old.work.stop_for(crate::peer::Stop::Replaced);
                    old.link().fail_pending();
                }
                self.routes.remove(old_route);
            }
        }
        self.routes.insert(route, id);
        Ok(replaced.is_none())
    }

    /// Forgets a peer; its entry, if it was joined.
    fn leave(&mut self, id: &NodeId, direction: Direction) -> Option<Entry<Arc<Link>>> {
        let entry = self.registry.leave(id, direction);
        if let Some(entry) = &entry {
            if let Link::Down { route, .. } = &**entry.link() {
                self.routes.remove(route);
            }
        }
        entry
    }
}

/// The node's shared state.
pub(crate) struct Inner {
    pub(crate) id: NodeId,
    /// Random per process (see `Hello::instance`).
    pub(crate) instance: String,
    pub(crate) options: RwLock<Options>,
    pub(crate) config: Config,
    pub(crate) state: Mutex<State>,
    pub(crate) server: Mutex<Option<Server>>,
    /// Upstream connections by address.
    pub(crate) upstreams: Mutex<HashMap<String, Upstream>>,
    pub(crate) handlers: Handlers,
    pub(crate) events: crate::events::EventChannel,
    /// Where the node is in its life: open, draining, closing (see [`Phase`]).
    phase: AtomicU8,
    /// The report of the close, once it has finished (a second `close` waits for it).
    closed: tokio::sync::watch::Sender<Option<Closed>>,
    /// Where handler work runs, and its limits.
    pub(crate) runtime: Runtime,
    pub(crate) heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// Messages refused because their connection had not joined.
    pub(crate) unjoined: AtomicU64,
    /// Messages refused for their metadata (over the limits, or malformed).
    pub(crate) metadata_refused: AtomicU64,
    /// Router state: counters and the `tick_all` ids seen.
    pub(crate) routing: Routing,
    /// Per-request hooks and metrics.
    pub(crate) observers: crate::observe::Observers,
    /// The round-robin turn of group fan-outs (one step per fan-out, so the members of
    /// each group take turns).
    pub(crate) fan_turn: std::sync::atomic::AtomicUsize,
    /// With CURVE: the key each id first joined with (an id is bound to it). Bounded: past
    /// `MAX_BOUND_KEYS` ids, new ones are not bound (the allow-list still applies).
    bound_keys: Mutex<HashMap<NodeId, transport::Key>>,
    /// How many error events each [`ErrorSource`] may make (ratelimit.rs): hostile peers
    /// can cause them at the rate they send.
    reports: [Arc<Mutex<RateLimit>>; 4],
}

/// Error events of one source let through per interval, before they are counted.
const REPORTS_BURST: u32 = 20;
const REPORTS_INTERVAL: Duration = Duration::from_secs(10);

/// The event that tells how many errors of `source` were not reported one by one.
fn summary_event(source: ErrorSource, told: Suppressed) -> NodeEvent {
    NodeEvent::Error {
        source,
        message: format!("{source:?} errors: {told}"),
    }
}

/// The most ids whose CURVE key a node remembers.
const MAX_BOUND_KEYS: usize = 65_536;

impl Inner {
    pub(crate) fn new(id: NodeId, options: Options, config: Config) -> Inner {
        let observers = crate::observe::Observers::new(&id, config.metrics);
        Inner {
            id,
            instance: uuid::Uuid::new_v4().to_string(),
            options: RwLock::new(options),
            runtime: Runtime::new(&config),
            config,
            state: Mutex::new(State::default()),
            server: Mutex::new(None),
            upstreams: Mutex::new(HashMap::new()),
            handlers: Handlers::default(),
            events: crate::events::EventChannel::default(),
            phase: AtomicU8::new(Phase::Open as u8),
            closed: tokio::sync::watch::Sender::new(None),
            heartbeat: Mutex::new(None),
            unjoined: AtomicU64::new(0),
            metadata_refused: AtomicU64::new(0),
            routing: Routing::default(),
            observers,
            fan_turn: std::sync::atomic::AtomicUsize::new(0),
            bound_keys: Mutex::new(HashMap::new()),
            reports: std::array::from_fn(|_| {
                Arc::new(Mutex::new(RateLimit::new(REPORTS_BURST, REPORTS_INTERVAL)))
            }),
        }
    }

    /// Whether `key` may join with `id`: the id has no key bound, or this one.
    pub(crate) fn key_may_claim(&self, id: &NodeId, key: &transport::Key) -> bool {
        self.bound_keys
            .lock()
            .get(id)
            .is_none_or(|bound| bound == key)
    }

    /// Binds `id` to the key it joined with, if it has none yet.
    pub(crate) fn bind_key(&self, id: &NodeId, key: transport::Key) {
        let mut bound = self.bound_keys.lock();
        if bound.len() < MAX_BOUND_KEYS || bound.contains_key(id) {
            bound.entry(id.clone()).or_insert(key);
        }
    }

    /// The node's counters (see [`Node::stats`](crate::Node::stats)).
    pub(crate) fn stats(&self) -> crate::NodeStats {
        let mut stats = crate::NodeStats {
            peers: self.state.lock().registry.all().count(),
            requests_handled: self.runtime.answered.load(Ordering::Relaxed),
            busy_refused: self.runtime.refused.load(Ordering::Relaxed),
            ticks_dropped: self.runtime.ticks_dropped.load(Ordering::Relaxed),
            ticks_refused: self.runtime.ticks_refused.load(Ordering::Relaxed),
            handlers_active: self.runtime.active(),
            handlers_queued: self.runtime.queued(),
            handlers_cancelled: self.runtime.cancelled.load(Ordering::Relaxed),
            handlers_expired: self.runtime.expired.load(Ordering::Relaxed),
            metadata_refused: self.metadata_refused.load(Ordering::Relaxed),
            unjoined_messages: self.unjoined.load(Ordering::Relaxed),
            ..crate::NodeStats::default()
        };
        let server = self.server.lock().clone();
        let clients: Vec<protocol::Client> = self
            .upstreams
            .lock()
            .values()
            .filter_map(|u| u.client().cloned())
            .collect();
        let conversations = server
            .map(|s| s.stats())
            .into_iter()
            .chain(clients.iter().map(protocol::Client::stats));
        for c in conversations {
            stats.invalid_envelopes += c.invalid_envelopes;
            stats.unmatched_replies += c.unmatched_replies;
            stats.timeouts += c.timeouts;
            stats.requests_sent += c.requests_sent;
            stats.ticks_sent += c.ticks_sent;
            stats.ticks_received += c.ticks_handled;
        }
        stats
    }

    /// Whether the node takes no new work: its handlers are done (or their grace ran out)
    /// and requests from peers, calls of its own and heartbeats are refused or stopped.
    /// The node's phase, as a number (`drain.rs` moves it).
    pub(crate) fn phase(&self) -> &AtomicU8 {
        &self.phase
    }

    /// Where the report of the close is published.
    pub(crate) fn closed_report(&self) -> &tokio::sync::watch::Sender<Option<Closed>> {
        &self.closed
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.phase.load(Ordering::Acquire) >= Phase::Closing as u8
    }

    /// Whether `close` has begun: the node drains (finishes what it has, takes no new peers,
    /// does not reconnect), or is past that.
    pub(crate) fn is_stopping(&self) -> bool {
        self.phase.load(Ordering::Acquire) >= Phase::Draining as u8
    }

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

    /// Reports an error as a [`NodeEvent::Error`], rate-limited per source: past the burst,
    /// errors are counted, and one event tells the count when the interval is over.
    pub(crate) fn report(&self, source: ErrorSource, message: String) {
        let limit = &self.reports[match source {
            ErrorSource::Handshake => 0,
            ErrorSource::Peer => 1,
            ErrorSource::Send => 2,
            ErrorSource::TickRefused => 3,
        }];
        let (verdict, first_held, due) = {
            let mut limit = limit.lock();
            let verdict = limit.check(tokio::time::Instant::now());
            (verdict, limit.held() == 1, limit.due())
        };
        match verdict {
            Verdict::Report(told) => {
                if let Some(told) = told {
                    self.emit_summary(source, told);
                }
                tracing::debug!(node = %self.id, ?source, %message, "error event");
                self.emit(NodeEvent::Error { source, message });
            }
            // The first one held back: tell the count at the interval's end, even if no
            // error follows to carry it.
            Verdict::Suppress if first_held => {
                let (Some(due), Ok(runtime)) = (due, tokio::runtime::Handle::try_current()) else {
                    return;
                };
                let (limit, events, id) = (Arc::clone(limit), self.events.clone(), self.id.clone());
                runtime.spawn(async move {
                    tokio::time::sleep_until(due).await;
                    let told = limit.lock().summary(tokio::time::Instant::now());
                    if let Some(told) = told {
                        tracing::debug!(node = %id, ?source, "error events {told}");
                        events.send(summary_event(source, told));
                    }
                });
            }
            Verdict::Suppress => {}
        }
    }

    fn emit_summary(&self, source: ErrorSource, told: Suppressed) {
        tracing::debug!(node = %self.id, ?source, "error events {told}");
        self.emit(summary_event(source, told));
    }

    /// How long a peer may stay silent: our dead-peer timeout, stretched to two and a half of
    /// the peer's own heartbeat intervals when it beats slower than we do.
    pub(crate) fn dead_after(&self, hello: &Hello) -> Duration {
        let theirs = Duration::from_millis(hello.heartbeat_ms) * 5 / 2;
        self.config.dead_peer_timeout.max(theirs)
    }

    /// The links of the joined peers (all, or one direction).
    pub(crate) fn links(&self, only: Option<Direction>) -> Vec<Arc<Link>> {
        self.state
            .lock()
            .registry
            .all()
            .filter(|e| only.is_none_or(|d| d == e.direction()))
            .map(|e| e.link().clone())
            .collect()
    }

    /// Tells peers we are leaving (all, or one direction).
    pub(crate) async fn say_bye(&self, only: Option<Direction>) {
        for link in self.links(only) {
            let _ = tokio::time::timeout(
                Duration::from_millis(200),
                link.system_tick(BYE, Bytes::new()),
            )
            .await;
        }
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

    /// A system tick from a joined peer (heartbeat, options, bye, rejoin). Runs on the
    /// socket's driver: nothing here waits.
    pub(crate) fn system_tick(&self, from: &NodeId, direction: Direction, incoming: &Incoming) {
        match incoming.event() {
            HEARTBEAT => {}
            OPTIONS => match incoming.decode::<Options>() {
                Ok(options) => {
                    self.state
                        .lock()
                        .registry
                        .set_options(from, direction, options.clone());
                    self.emit(NodeEvent::PeerOptionsChanged {
                        id: from.clone(),
                        options,
                    });
                }
                Err(e) => self.report(ErrorSource::Peer, format!("bad options from {from}: {e}")),
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
            other => self.report(
                ErrorSource::Peer,
                format!("unknown system event {other:?} from {from}"),
            ),
        }
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
