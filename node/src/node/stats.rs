//! What a node tells about itself: its counters ([`NodeStats`]), the metrics sampler, and
//! the per-request hooks. Reads the parts; changes none.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::node::inner::Inner;
use crate::node::{Node, NodeStats};
use crate::observation::metrics::Sample;
use crate::observation::observe::{Called, Handled};

impl Inner {
    /// The node's counters (see [`Node::stats`](crate::Node::stats)).
    pub(crate) fn stats(&self) -> NodeStats {
        let mut stats = NodeStats {
            peers: self.state.lock().registry.all().count(),
            requests_handled: self.runtime.answered.load(Ordering::Relaxed),
            busy_refused: self.runtime.refused.load(Ordering::Relaxed),
            ticks_dropped: self.runtime.ticks_dropped.load(Ordering::Relaxed),
            ticks_refused: self.runtime.ticks_refused.load(Ordering::Relaxed),
            handlers_active: self.runtime.active(),
            handlers_queued: self.runtime.queued(),
            handlers_cancelled: self.runtime.cancelled.load(Ordering::Relaxed),
            handlers_expired: self.runtime.expired.load(Ordering::Relaxed),
            metadata_refused: self.observers.metadata_refused.load(Ordering::Relaxed),
            unjoined_messages: self.observers.unjoined.load(Ordering::Relaxed),
            ..NodeStats::default()
        };
        let server = self.links.server.lock().clone();
        let clients: Vec<protocol::Client> = self
            .links
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
            stats.streams.add(&c);
        }
        stats
    }
}

impl Node {
    /// The hooks that observe this node's work: each handler run ([`Hooks::on_handled`])
    /// and each call sent ([`Hooks::on_called`]), for logs and metrics of your own.
    pub fn hooks(&self) -> Hooks<'_> {
        Hooks { node: self }
    }
}

/// Where to add hooks that observe a node's work ([`Node::hooks`]). Hooks run on the task
/// that did the work, after it: keep them cheap (count, record, send to a channel).
#[derive(Debug, Clone, Copy)]
pub struct Hooks<'a> {
    node: &'a Node,
}

impl Hooks<'_> {
    /// Calls `hook` each time one of this node's handlers has run a request or tick: its
    /// event, sender, outcome and duration. The hook runs on the handler's task, after
    /// the answer went out.
    ///
    /// ```no_run
    /// # async fn example(node: node::Node) {
    /// node.hooks().on_handled(|handled| {
    ///     println!("{} from {} took {:?}", handled.event, handled.from, handled.duration);
    /// });
    /// # }
    /// ```
    pub fn on_handled(&self, hook: impl Fn(&Handled<'_>) + Send + Sync + 'static) {
        self.node.inner.observers.add_handled(Arc::new(hook));
    }

    /// Calls `hook` each time a request or tick this node sent has ended, with its round
    /// trip (on the caller's task).
    pub fn on_called(&self, hook: impl Fn(&Called<'_>) + Send + Sync + 'static) {
        self.node.inner.observers.add_called(Arc::new(hook));
    }
}

/// Samples a node's stats into its metrics every second, until the node is gone.
pub(crate) async fn sample_metrics(inner: Weak<Inner>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.life.is_closing() {
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
        metrics.sample(&Sample {
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
