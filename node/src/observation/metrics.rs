//! Metrics through the `metrics` facade, so any exporter works (the `zeronode` command
//! serves them in Prometheus text with `metrics-exporter-prometheus`). On with
//! [`NodeBuilder::metrics`](crate::NodeBuilder::metrics); install the recorder before
//! building the node (handles are taken from the recorder of the time). A Prometheus
//! recorder made with `build_recorder` keeps every histogram sample until it is rendered:
//! call its handle's `run_upkeep` every few seconds, as the `zeronode` command does
//! (`install` and the exporter's own listener do it themselves).
//!
//! Every series has the label `node` (the node's id). Per event, with the labels `event`
//! and `outcome` ([`Outcome::as_str`](crate::Outcome::as_str)):
//! - `zeronode_requests_handled_total`, `zeronode_ticks_handled_total`, and the histogram
//!   `zeronode_handler_seconds` (arrival to answer);
//! - `zeronode_requests_sent_total`, `zeronode_ticks_sent_total`, and the histogram
//!   `zeronode_request_seconds` (the round trip);
//! - per stream, when it ends, with the label `side` (`served`: a stream handler's items
//!   out; `read`: a caller's items in), the histograms `zeronode_stream_items`,
//!   `zeronode_stream_bytes` and `zeronode_stream_seconds`.
//!
//! Event names are chosen by peers: the first [`MAX_EVENT_LABELS`] distinct names get a
//! label of their own, every later one is counted under `event="_other"`, so a peer cannot
//! grow the series without bound.
//!
//! Node-wide, sampled from [`NodeStats`](crate::NodeStats) every second: the gauges
//! `zeronode_peers`, `zeronode_in_flight`, `zeronode_handlers_active`,
//! `zeronode_handlers_queued`; the counters `zeronode_refused_total{reason}` (`busy`,
//! `metadata`, `unjoined`, `invalid_envelope`), `zeronode_ticks_dropped_total`,
//! `zeronode_ticks_refused_total` (a middleware refused the tick),
//! `zeronode_handlers_cancelled_total`, `zeronode_handlers_expired_total`,
//! `zeronode_timeouts_total`, `zeronode_forwarded_total`, `zeronode_forward_failed_total`.
//! As they happen: `zeronode_peers_joined_total`, `zeronode_peers_left_total{reason}`,
//! `zeronode_connections_refused_total` (security handshakes refused),
//! `zeronode_accept_paused_total` (out of file descriptors),
//! `zeronode_discovery_total{kind}` (a discovery's answers: `changed`, `empty`, `failed`,
//! and `capped`, see [`DiscoveryEvent`](crate::DiscoveryEvent)), and the histogram
//! `zeronode_queue_wait_seconds` (a message's wait for a handler slot).

use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Histogram, Label, SharedString};

use crate::mesh::peer::NodeId;
use crate::observation::observe::{Called, Outcome};
use table::Table;

pub(crate) mod table;

/// The most distinct event names that get a label of their own, per node.
pub const MAX_EVENT_LABELS: usize = 256;
/// The label of every event past [`MAX_EVENT_LABELS`].
const OTHER: &str = "_other";

/// The handles of one event's series (taken once, then an atomic add per request).
pub(crate) struct EventSeries {
    handled: [Counter; Outcome::ALL.len()],
    ticks_handled: [Counter; Outcome::ALL.len()],
    handler_seconds: Histogram,
    sent: [Counter; Outcome::ALL.len()],
    ticks_sent: [Counter; Outcome::ALL.len()],
    request_seconds: Histogram,
}

impl EventSeries {
    fn new(node: &SharedString, event: &str) -> EventSeries {
        let labels = |outcome: Outcome| {
            vec![
                Label::new("node", node.clone()),
                Label::new("event", event.to_owned()),
                Label::new("outcome", outcome.as_str()),
            ]
        };
        let per_outcome =
            |name: &'static str| Outcome::ALL.map(|outcome| counter!(name, labels(outcome)));
        let timing = vec![
            Label::new("node", node.clone()),
            Label::new("event", event.to_owned()),
        ];
        EventSeries {
            handled: per_outcome("zeronode_requests_handled_total"),
            ticks_handled: per_outcome("zeronode_ticks_handled_total"),
            handler_seconds: histogram!("zeronode_handler_seconds", timing.clone()),
            sent: per_outcome("zeronode_requests_sent_total"),
            ticks_sent: per_outcome("zeronode_ticks_sent_total"),
            request_seconds: histogram!("zeronode_request_seconds", timing),
        }
    }
}

/// Which series an event's messages are recorded in (see [`Metrics::series`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeriesId {
    /// The event's own, at this index of the table.
    Event(usize),
    /// The shared `_other`.
    Other,
}

/// A node's metrics.
pub(crate) struct Metrics {
    node: SharedString,
    events: Table<EventSeries>,
    other: EventSeries,
    queue_wait: Histogram,
}

impl Metrics {
    pub(crate) fn new(node: &NodeId) -> Metrics {
        let node = SharedString::from(node.to_string());
        Metrics {
            other: EventSeries::new(&node, OTHER),
            queue_wait: histogram!("zeronode_queue_wait_seconds", "node" => node.clone()),
            events: Table::new(MAX_EVENT_LABELS),
            node,
        }
    }

    /// The series of `event`: its own while there is room, else the shared `_other`.
    pub(crate) fn series(&self, event: &str) -> SeriesId {
        match self
            .events
            .find_or_insert(event, || EventSeries::new(&self.node, event))
        {
            Some(at) => SeriesId::Event(at),
            None => SeriesId::Other,
        }
    }

    fn series_at(&self, id: SeriesId) -> &EventSeries {
        match id {
            SeriesId::Event(at) => self.events.get(at).unwrap_or(&self.other),
            SeriesId::Other => &self.other,
        }
    }

    /// Records a handled message in `series` (its event's, looked up when it arrived).
    pub(crate) fn handled_in(
        &self,
        series: SeriesId,
        tick: bool,
        outcome: Outcome,
        duration: Duration,
    ) {
        let series = self.series_at(series);
        let i = outcome.index();
        if tick {
            series.ticks_handled[i].increment(1);
        } else {
            series.handled[i].increment(1);
            series.handler_seconds.record(duration.as_secs_f64());
        }
    }

    pub(crate) fn called(&self, called: &Called<'_>) {
        let series = self.series_at(self.series(called.event));
        let i = called.outcome.index();
        if called.tick {
            series.ticks_sent[i].increment(1);
        } else {
            series.sent[i].increment(1);
            series.request_seconds.record(called.duration.as_secs_f64());
        }
    }

    /// A stream ended on this node's `side` (`"served"` or `"read"`): its items, bytes and
    /// duration, once per stream.
    pub(crate) fn stream_ended(&self, event: &str, side: &'static str, ended: StreamEnd) {
        let event = match self.series(event) {
            SeriesId::Event(_) => SharedString::from(event.to_owned()),
            SeriesId::Other => SharedString::const_str(OTHER),
        };
        let labels = vec![
            Label::new("node", self.node.clone()),
            Label::new("event", event),
            Label::new("side", side),
        ];
        histogram!("zeronode_stream_items", labels.clone()).record(ended.items as f64);
        histogram!("zeronode_stream_bytes", labels.clone()).record(ended.bytes as f64);
        histogram!("zeronode_stream_seconds", labels).record(ended.duration.as_secs_f64());
    }

    /// A message waited `waited` for a handler slot.
    pub(crate) fn queue_wait(&self, waited: Duration) {
        self.queue_wait.record(waited.as_secs_f64());
    }

    /// A peer joined.
    pub(crate) fn joined(&self) {
        counter!("zeronode_peers_joined_total", "node" => self.node.clone()).increment(1);
    }

    /// A peer left, for `reason`.
    pub(crate) fn left(&self, reason: &'static str) {
        counter!("zeronode_peers_left_total", "node" => self.node.clone(), "reason" => reason)
            .increment(1);
    }

    /// A connection was refused in its security handshake (CURVE key, allow-list,
    /// mechanism).
    pub(crate) fn refused_connection(&self) {
        counter!("zeronode_connections_refused_total", "node" => self.node.clone()).increment(1);
    }

    /// The node stopped listening for a while (out of file descriptors).
    pub(crate) fn accept_paused(&self) {
        counter!("zeronode_accept_paused_total", "node" => self.node.clone()).increment(1);
    }

    /// Records the node-wide numbers sampled from its stats.
    pub(crate) fn sample(&self, sample: &Sample) {
        let node = || self.node.clone();
        gauge!("zeronode_peers", "node" => node()).set(sample.peers as f64);
        gauge!("zeronode_in_flight", "node" => node()).set(sample.in_flight as f64);
        gauge!("zeronode_handlers_active", "node" => node()).set(sample.handlers_active as f64);
        gauge!("zeronode_handlers_queued", "node" => node()).set(sample.handlers_queued as f64);
        for (reason, count) in [
            ("busy", sample.busy),
            ("metadata", sample.metadata),
            ("unjoined", sample.unjoined),
            ("invalid_envelope", sample.invalid_envelopes),
        ] {
            counter!("zeronode_refused_total", "node" => node(), "reason" => reason)
                .absolute(count);
        }
        for (name, count) in [
            ("zeronode_ticks_dropped_total", sample.ticks_dropped),
            ("zeronode_ticks_refused_total", sample.ticks_refused),
            ("zeronode_handlers_cancelled_total", sample.cancelled),
            ("zeronode_handlers_expired_total", sample.expired),
            ("zeronode_timeouts_total", sample.timeouts),
            ("zeronode_forwarded_total", sample.forwarded),
            ("zeronode_forward_failed_total", sample.forward_failed),
        ] {
            counter!(name, "node" => node()).absolute(count);
        }
    }
}

/// What one stream carried, recorded when it ends ([`Metrics::stream_ended`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamEnd {
    pub(crate) items: u64,
    pub(crate) bytes: u64,
    pub(crate) duration: Duration,
}

/// The node-wide numbers [`Metrics::sample`] records.
#[derive(Debug, Default)]
pub(crate) struct Sample {
    pub(crate) peers: usize,
    pub(crate) in_flight: usize,
    pub(crate) handlers_active: usize,
    pub(crate) handlers_queued: usize,
    pub(crate) busy: u64,
    pub(crate) metadata: u64,
    pub(crate) unjoined: u64,
    pub(crate) invalid_envelopes: u64,
    pub(crate) ticks_dropped: u64,
    pub(crate) ticks_refused: u64,
    pub(crate) cancelled: u64,
    pub(crate) expired: u64,
    pub(crate) timeouts: u64,
    pub(crate) forwarded: u64,
    pub(crate) forward_failed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_labels_are_bounded() {
        let metrics = Metrics::new(&NodeId::from("n"));
        for i in 0..MAX_EVENT_LABELS + 50 {
            metrics.series(&format!("event-{i}"));
        }
        assert_eq!(metrics.events.len(), MAX_EVENT_LABELS);
        assert_eq!(
            metrics.series("one-more"),
            SeriesId::Other,
            "folded into _other"
        );
        let early = metrics.series("event-3");
        assert_ne!(early, SeriesId::Other, "the first keep theirs");
        assert_eq!(metrics.series("event-3"), early, "and find it again");
    }
}
