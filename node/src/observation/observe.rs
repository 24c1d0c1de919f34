//! Watching a node's requests: per-request hooks (the JavaScript zeronode's
//! `REQUEST_RECEIVED { event, duration }`, without writing a tower service) and the metrics
//! recorded through the `metrics` facade (`metrics.rs`).
//!
//! Both are off until asked for, and cost one relaxed load per request while off. The
//! per-event load a node's description reports (`describe.rs`) is recorded here too, while
//! describing is on (the default): a count when a job starts, a count and a histogram
//! record when it ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::mesh::peer::NodeId;
use crate::observation::describe::{Load, Slot};
use crate::observation::events::{ErrorSource, EventChannel, NodeEvent};
use crate::observation::metrics::Metrics;
use crate::observation::ratelimit::Reports;

/// How a request or tick ended, as hooks and metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Answered (a reply), or a tick handled.
    Ok,
    /// The handler answered with an error of its own (a [`HandlerError`](crate::HandlerError))
    /// that is not a refusal.
    Error,
    /// It was refused: by the framework, or it failed there (busy, no handler, metadata, a
    /// router's failure, the peer left, closing), or by a handler or middleware with a
    /// refusal's code ([`Code::is_refusal`](crate::Code::is_refusal): unauthenticated,
    /// permission denied, resource exhausted).
    Refused,
    /// Its deadline passed: the caller timed out, or the handler was not run or stopped.
    Timeout,
    /// The handler was stopped because its requester left or the node was aborted.
    Cancelled,
    /// The handler (or its middleware) panicked.
    Panicked,
}

impl Outcome {
    /// A stable lower-case name, used as the metrics' `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Refused => "refused",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Panicked => "panicked",
        }
    }

    /// Every outcome, in a fixed order (the index of each is its position).
    pub(crate) const ALL: [Outcome; 6] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Refused,
        Outcome::Timeout,
        Outcome::Cancelled,
        Outcome::Panicked,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The outcome of an error reply this node's handler (or the framework in front of it)
    /// made, counted as its caller will count it ([`of`](Self::of)).
    pub(crate) fn of_reply(error: &protocol::RemoteError) -> Outcome {
        use crate::Code;
        let refusal = [
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::ResourceExhausted,
        ]
        .iter()
        .any(|code| code.as_str() == error.code && code.is_refusal());
        if error.system || refusal {
            Outcome::Refused
        } else {
            Outcome::Error
        }
    }

    /// The outcome of a call's result, as its caller saw it.
    pub(crate) fn of<T>(result: &crate::Result<T>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(crate::Error::Handler { code, .. }) if code.is_refusal() => Outcome::Refused,
            Err(crate::Error::Handler { .. }) => Outcome::Error,
            Err(crate::Error::HandlerPanicked) => Outcome::Panicked,
            Err(crate::Error::Cancelled) => Outcome::Cancelled,
            Err(e) if e.is_timeout() => Outcome::Timeout,
            Err(_) => Outcome::Refused,
        }
    }
}

/// A request or tick this node's handlers ran, for [`Hooks::on_handled`](crate::Hooks::on_handled).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Handled<'a> {
    /// The event.
    pub event: &'a str,
    /// The node it came from.
    pub from: &'a NodeId,
    /// A tick rather than a request.
    pub tick: bool,
    /// How it ended.
    pub outcome: Outcome,
    /// From its arrival to its answer (any wait for a handler slot included).
    pub duration: Duration,
}

/// A request or tick this node sent, for [`Hooks::on_called`](crate::Hooks::on_called).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Called<'a> {
    /// The event.
    pub event: &'a str,
    /// A tick rather than a request.
    pub tick: bool,
    /// How it ended, as the caller saw it.
    pub outcome: Outcome,
    /// The round trip (for a tick: until it was handed to the transport).
    pub duration: Duration,
}

/// What a handler job keeps to report its end (see [`Observers::watch`]).
pub(crate) struct Watch {
    series: Option<crate::observation::metrics::SeriesId>,
    /// The event's slot in the description's load.
    slot: Option<Slot>,
    hook: Option<(String, NodeId)>,
    arrived: tokio::time::Instant,
}

impl Watch {
    /// When the watched message arrived.
    pub(crate) fn arrived(&self) -> tokio::time::Instant {
        self.arrived
    }
}

type HandledHook = Arc<dyn Fn(&Handled<'_>) + Send + Sync>;
type CalledHook = Arc<dyn Fn(&Called<'_>) + Send + Sync>;

/// The hooks and metrics of one node.
pub(crate) struct Observers {
    /// Whether anything watches (a hook, or metrics): the one load a request pays while
    /// nothing does.
    active: AtomicBool,
    /// Whether `handled` has a hook: read instead of its lock on every request (a lock
    /// and unlock were about 10 ns a request on each side, measured with `perf`).
    any_handled: AtomicBool,
    /// Whether `called` has a hook.
    any_called: AtomicBool,
    /// Whether calls are watched (a `called` hook, or metrics): the description watches
    /// only the handled side, so while it alone is on a call reads no clock.
    calls: AtomicBool,
    handled: RwLock<Vec<HandledHook>>,
    called: RwLock<Vec<CalledHook>>,
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// The node's id, for its logs.
    node: NodeId,
    /// The node's events, to every [`EventStream`](crate::EventStream).
    pub(crate) events: EventChannel,
    /// How many error events each [`ErrorSource`] may make: hostile peers can cause them
    /// at the rate they send.
    reports: Reports,
    /// Messages refused because their connection had not joined.
    pub(crate) unjoined: AtomicU64,
    /// Messages refused for their metadata (over the limits, or malformed).
    pub(crate) metadata_refused: AtomicU64,
    /// The per-event load a description reports (`None`: describing is off).
    pub(crate) load: Option<Load>,
}

impl Observers {
    pub(crate) fn new(node: &NodeId, metrics: bool, describe: bool) -> Observers {
        let load = describe.then(Load::new);
        Observers {
            active: AtomicBool::new(metrics || load.is_some()),
            any_handled: AtomicBool::new(false),
            any_called: AtomicBool::new(false),
            calls: AtomicBool::new(metrics),
            handled: RwLock::new(Vec::new()),
            called: RwLock::new(Vec::new()),
            metrics: metrics.then(|| Arc::new(Metrics::new(node))),
            node: node.clone(),
            events: EventChannel::default(),
            reports: Reports::default(),
            unjoined: AtomicU64::new(0),
            metadata_refused: AtomicU64::new(0),
            load,
        }
    }

    /// Sends an event to the node's streams (and counts it in the metrics).
    pub(crate) fn emit(&self, event: NodeEvent) {
        if let Some(metrics) = &self.metrics {
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
        self.reports
            .report(&self.node, &self.events, source, message);
    }

    /// Whether anything watches: when not, callers skip reading the clock.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether a call's end is watched: when not, callers skip reading the clock.
    pub(crate) fn calls_watched(&self) -> bool {
        self.calls.load(Ordering::Relaxed)
    }

    pub(crate) fn add_handled(&self, hook: HandledHook) {
        self.handled.write().push(hook);
        self.any_handled.store(true, Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    pub(crate) fn add_called(&self, hook: CalledHook) {
        self.called.write().push(hook);
        self.any_called.store(true, Ordering::Relaxed);
        self.calls.store(true, Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    /// What a handler job keeps to report its end: its event's metrics series, and for
    /// hooks its event's name and sender (copied only when a hook watches). `None` while
    /// nothing watches.
    pub(crate) fn watch(
        &self,
        event: &str,
        from: &NodeId,
        arrived: tokio::time::Instant,
    ) -> Option<Watch> {
        if !self.active() {
            return None;
        }
        let hooked = self.any_handled.load(Ordering::Relaxed);
        Some(Watch {
            series: self.metrics.as_ref().map(|m| m.series(event)),
            slot: self.load.as_ref().map(|l| l.start(event)),
            hook: hooked.then(|| (event.to_owned(), from.clone())),
            arrived,
        })
    }

    /// A handler job that `watch` watched ended.
    pub(crate) fn ended(&self, watch: Watch, tick: bool, outcome: Outcome) {
        let duration = watch.arrived.elapsed();
        if let (Some(metrics), Some(series)) = (&self.metrics, watch.series) {
            metrics.handled_in(series, tick, outcome, duration);
        }
        if let (Some(load), Some(slot)) = (&self.load, watch.slot) {
            load.ended(slot, tick, outcome, duration);
        }
        if let Some((event, from)) = &watch.hook {
            let handled = Handled {
                event,
                from,
                tick,
                outcome,
                duration,
            };
            for hook in self.handled.read().iter() {
                hook(&handled);
            }
        }
    }

    /// A call ended.
    pub(crate) fn called(&self, called: &Called<'_>) {
        if let Some(metrics) = &self.metrics {
            metrics.called(called);
        }
        if self.any_called.load(Ordering::Relaxed) {
            for hook in self.called.read().iter() {
                hook(called);
            }
        }
    }
}
