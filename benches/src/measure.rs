//! One measurement point on the client side: the warm-up and measured phases, the per-request
//! timings, and the loop that keeps a window of requests in flight.
//!
//! Every point runs continuously from its first request to its last: the warm-up phase and
//! the measured phase are one loop, and only replies that arrive inside the measured phase
//! are counted and timed. The window is never drained between the two phases, so what is
//! measured is the steady state, not a ramp.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::layers::Layer;
use crate::stats::{self, Latency};

/// The result of one point, as the client process prints it (one JSON line) and as the
/// report keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Point {
    /// The layer measured.
    pub(crate) layer: Layer,
    /// Payload bytes per request.
    pub(crate) size: usize,
    /// Requests kept in flight; 0 for a one-way stream (`node-tick`), which has no window.
    pub(crate) window: usize,
    /// Replies (or ticks counted by the receiver) inside the measured phase.
    pub(crate) completed: u64,
    /// Length of the measured phase in seconds.
    pub(crate) seconds: f64,
    /// `completed / seconds`: requests (or ticks) per second.
    pub(crate) rate: f64,
    /// Per-request latency; `None` for a one-way stream.
    pub(crate) latency_us: Option<Latency>,
}

/// When the measured phase starts and ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    /// Replies before this instant are warm-up: not counted.
    pub(crate) measure_from: Instant,
    /// No request is started at or after this instant; replies after it are not counted.
    pub(crate) measure_until: Instant,
}

impl Plan {
    /// A plan whose warm-up starts now.
    pub(crate) fn starting_now(warmup: Duration, duration: Duration) -> Plan {
        let measure_from = Instant::now() + warmup;
        Plan {
            measure_from,
            measure_until: measure_from + duration,
        }
    }

    /// Length of the measured phase.
    pub(crate) fn duration(&self) -> Duration {
        self.measure_until - self.measure_from
    }
}

/// Collects the round-trip time of every reply that lands in the measured phase.
#[derive(Debug)]
pub(crate) struct Recorder {
    plan: Plan,
    /// Nanoseconds from send to reply, one per counted request.
    timings_ns: Vec<u64>,
}

impl Recorder {
    /// An empty recorder. Room for a million timings is reserved up front so that growing
    /// the vector does not show up as a latency spike in the first second.
    pub(crate) fn new(plan: Plan) -> Recorder {
        Recorder::with_room(plan, 1 << 20)
    }

    /// An empty recorder with room for `timings` timings reserved up front.
    pub(crate) fn with_room(plan: Plan, timings: usize) -> Recorder {
        Recorder {
            plan,
            timings_ns: Vec::with_capacity(timings),
        }
    }

    /// Adds the timings another recorder of the same plan collected.
    pub(crate) fn merge(&mut self, other: Recorder) {
        self.timings_ns.extend(other.timings_ns);
    }

    /// Records a round trip sent at `sent` and answered at `done`, if `done` falls in the
    /// measured phase.
    pub(crate) fn record(&mut self, sent: Instant, done: Instant) {
        if done >= self.plan.measure_from && done < self.plan.measure_until {
            let ns = done.saturating_duration_since(sent).as_nanos();
            self.timings_ns.push(u64::try_from(ns).unwrap_or(u64::MAX));
        }
    }

    /// Whether a new request may start at `now`.
    pub(crate) fn keep_sending(&self, now: Instant) -> bool {
        now < self.plan.measure_until
    }

    /// The point: throughput over the measured phase and the latency summary.
    pub(crate) fn finish(mut self, layer: Layer, size: usize, window: usize) -> Point {
        let seconds = self.plan.duration().as_secs_f64();
        let completed = self.timings_ns.len() as u64;
        Point {
            layer,
            size,
            window,
            completed,
            seconds,
            rate: completed as f64 / seconds,
            latency_us: stats::summarize(&mut self.timings_ns),
        }
    }
}

/// Keeps `window` calls in flight from the start of `plan` to its end, then waits for the
/// last ones; each call is timed from its creation to its completion. For the layers that
/// correlate replies themselves (protocol, node): completions may come in any order.
///
/// The window is `window` loops, each with one call in flight at a time, all polled by this
/// one task (as a client holding that many concurrent callers would). Each loop keeps its
/// call's future in place: an earlier version pushed a new future into a `FuturesUnordered`
/// per request, which allocated a node and moved the future (760 bytes for a protocol
/// request) several times per request: about 1,700 instructions per request of the
/// harness's own (callgrind, protocol client, 500 B, window 100), charged to the library.
/// Each loop records into a recorder of its own, merged at the end: one shared behind a
/// mutex cost two atomic read-modify-writes per request (spawned tasks instead of one
/// `FuturesUnordered` cost about 300 instructions per request more; callgrind, protocol
/// client, 1000 B, window 100).
///
/// The first failed call ends the point with its error: a benchmark that lost requests
/// measured something else.
pub(crate) async fn drive_concurrent<F, Fut>(window: usize, plan: Plan, call: F) -> Result<Recorder>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let window = window.max(1);
    // Room for a million timings in all, as `Recorder::new` reserves for one loop.
    let room = (1 << 20) / window + 1024;
    let call = &call;
    let one_loop = || async move {
        let mut recorder = Recorder::with_room(plan, room);
        loop {
            let sent = Instant::now();
            call().await?;
            let now = Instant::now();
            recorder.record(sent, now);
            if !recorder.keep_sending(now) {
                return Ok::<Recorder, crate::error::Error>(recorder);
            }
        }
    };
    let mut loops: FuturesUnordered<_> = (0..window).map(|_| one_loop()).collect();
    let mut all = Recorder::with_room(plan, 0);
    while let Some(done) = loops.next().await {
        all.merge(done?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_replies_inside_the_measured_phase_count() {
        let start = Instant::now();
        let plan = Plan {
            measure_from: start + Duration::from_secs(1),
            measure_until: start + Duration::from_secs(3),
        };
        let mut recorder = Recorder::new(plan);
        let at = |ms: u64| start + Duration::from_millis(ms);
        recorder.record(at(0), at(999)); // warm-up
        recorder.record(at(900), at(1000)); // first instant counted: 100 ms
        recorder.record(at(2000), at(2002)); // 2 ms
        recorder.record(at(2999), at(3000)); // end is exclusive
        assert!(recorder.keep_sending(at(2999)));
        assert!(!recorder.keep_sending(at(3000)));
        let point = recorder.finish(Layer::Raw, 100, 1);
        assert_eq!(point.completed, 2);
        assert_eq!(point.seconds, 2.0);
        assert_eq!(point.rate, 1.0);
        let latency = point.latency_us.unwrap();
        assert_eq!(latency.p50, 2000.0);
        assert_eq!(latency.p99, 100_000.0);
    }
}
