//! Watching a node's requests: per-request hooks (the JavaScript zeronode's
//! `REQUEST_RECEIVED { event, duration }`, without writing a tower service) and the metrics
//! recorded through the `metrics` facade (`metrics.rs`).
//!
//! Both are off until asked for, and cost one relaxed load per request while off.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::metrics::Metrics;
use crate::peer::NodeId;

/// How a request or tick ended, as hooks and metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Answered (a reply), or a tick handled.
    Ok,
    /// The handler answered with an error of its own (a [`HandlerError`](crate::HandlerError)).
    Error,
    /// The framework refused or failed it (busy, no handler, metadata, a router's failure,
    /// the peer left, closing).
    Refused,
    /// Its deadline passed: the caller timed out, or the handler was not run or stopped.
    Timeout,
    /// The handler was stopped because its requester left or the node was aborted.
    Cancelled,
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
        }
    }

    /// Every outcome, in a fixed order (the index of each is its position).
    pub(crate) const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::Refused,
        Outcome::Timeout,
        Outcome::Cancelled,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The outcome of a call's result, as its caller saw it.
    pub(crate) fn of<T>(result: &crate::Result<T>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(crate::Error::Handler { .. }) => Outcome::Error,
            Err(e) if e.is_timeout() => Outcome::Timeout,
            Err(_) => Outcome::Refused,
        }
    }
}

/// A request or tick this node's handlers ran, for [`Node::on_handled`](crate::Node::on_handled).
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

/// A request or tick this node sent, for [`Node::on_called`](crate::Node::on_called).
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
    series: Option<crate::metrics::SeriesId>,
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
    handled: RwLock<Vec<HandledHook>>,
    called: RwLock<Vec<CalledHook>>,
    pub(crate) metrics: Option<Metrics>,
}

impl Observers {
    pub(crate) fn new(node: &NodeId, metrics: bool) -> Observers {
        Observers {
            active: AtomicBool::new(metrics),
            any_handled: AtomicBool::new(false),
            any_called: AtomicBool::new(false),
            handled: RwLock::new(Vec::new()),
            called: RwLock::new(Vec::new()),
            metrics: metrics.then(|| Metrics::new(node)),
        }
    }

    /// Whether anything watches: when not, callers skip reading the clock.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub(crate) fn add_handled(&self, hook: HandledHook) {
        self.handled.write().push(hook);
        self.any_handled.store(true, Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    pub(crate) fn add_called(&self, hook: CalledHook) {
        self.called.write().push(hook);
        self.any_called.store(true, Ordering::Relaxed);
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

impl crate::Node {
    /// Calls `hook` each time one of this node's handlers has run a request or tick: its
    /// event, sender, outcome and duration. The hook runs on the handler's task, after
    /// the answer went out: keep it cheap (count, record, send to a channel).
    ///
    /// ```no_run
    /// # async fn example(node: node::Node) {
    /// node.on_handled(|handled| {
    ///     println!("{} from {} took {:?}", handled.event, handled.from, handled.duration);
    /// });
    /// # }
    /// ```
    pub fn on_handled(&self, hook: impl Fn(&Handled<'_>) + Send + Sync + 'static) {
        self.inner.observers.add_handled(Arc::new(hook));
    }

    /// Calls `hook` each time a request or tick this node sent has ended, with its round
    /// trip (on the caller's task: keep it cheap).
    pub fn on_called(&self, hook: impl Fn(&Called<'_>) + Send + Sync + 'static) {
        self.inner.observers.add_called(Arc::new(hook));
    }
}

/// Samples a node's stats into its metrics every second, until the node is gone.
pub(crate) async fn sample_metrics(inner: std::sync::Weak<crate::inner::Inner>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.is_closing() {
            return;
        }
        let Some(metrics) = &inner.observers.metrics else {
            return;
        };
        let stats = inner.stats();
        let routing = &inner.routing;
        let in_flight = inner
            .state
            .lock()
            .registry
            .all()
            .map(|entry| entry.in_flight())
            .sum();
        metrics.sample(&crate::metrics::Sample {
            peers: stats.peers,
            in_flight,
            handlers_active: stats.handlers_active,
            handlers_queued: stats.handlers_queued,
            busy: stats.busy_refused,
            metadata: stats.metadata_refused,
            unjoined: stats.unjoined_messages,
            invalid_envelopes: stats.invalid_envelopes,
            ticks_dropped: stats.ticks_dropped,
            ticks_refused: stats.ticks_refused,
            cancelled: stats.handlers_cancelled,
            expired: stats.handlers_expired,
            timeouts: stats.timeouts,
            forwarded: routing.forwarded.load(Ordering::Relaxed),
            forward_failed: routing.failed.load(Ordering::Relaxed)
                + routing.looped.load(Ordering::Relaxed)
                + routing.expired.load(Ordering::Relaxed),
        });
    }
}
