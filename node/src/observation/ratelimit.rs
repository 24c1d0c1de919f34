//! A limit on how often one kind of report (a log line, an event) is made, so that a flood
//! of hostile connections cannot flood the logs and the event stream too.
//!
//! [`RateLimit`] is pure: time is passed in, it neither sleeps nor logs. The first `burst`
//! reports of each interval go through; the rest are counted, and the count comes back as
//! one summary ("suppressed K more in the last S s") with the first report let through
//! after the interval, or from [`RateLimit::summary`] once the interval is over (for a
//! caller with a timer, so that the count is told even when the flood stops). [`Reports`]
//! applies it to a node's error events, one limit per [`ErrorSource`].

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::mesh::peer::NodeId;
use crate::observation::events::{ErrorSource, EventChannel, NodeEvent};

/// How many reports were held back, over how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Suppressed {
    /// Reports held back.
    pub(crate) count: u64,
    /// From the start of the interval they fell in to the moment of the summary.
    pub(crate) over: Duration,
}

impl std::fmt::Display for Suppressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "suppressed {} more in the last {:.1} s",
            self.count,
            self.over.as_secs_f64()
        )
    }
}

/// What to do with one report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Make it; first say how many were held back before it, if any.
    Report(Option<Suppressed>),
    /// Hold it back (it is counted).
    Suppress,
}

/// The first `burst` reports of each `interval`, then a count.
#[derive(Debug, Clone)]
pub(crate) struct RateLimit {
    burst: u32,
    interval: Duration,
    /// When the current interval began (its first report); `None` before any.
    since: Option<Instant>,
    /// Reports let through in the current interval.
    passed: u32,
    /// Reports held back in the current interval.
    held: u64,
}

impl RateLimit {
    /// At most `burst` reports per `interval`.
    pub(crate) fn new(burst: u32, interval: Duration) -> RateLimit {
        RateLimit {
            burst,
            interval,
            since: None,
            passed: 0,
            held: 0,
        }
    }

    /// Decides about one report made at `now`.
    pub(crate) fn check(&mut self, now: Instant) -> Verdict {
        let summary = match self.since {
            Some(since) if now.saturating_duration_since(since) < self.interval => None,
            _ => self.restart(now),
        };
        if self.passed < self.burst {
            self.passed += 1;
            Verdict::Report(summary)
        } else {
            // `summary` is always `None` here: a fresh interval lets its first report through
            // (a burst of 0 reports nothing, so it never has a count to tell either).
            self.held += 1;
            Verdict::Suppress
        }
    }

    /// Reports held back in the current interval.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// When a summary is due: the end of an interval in which reports were held back.
    pub(crate) fn due(&self) -> Option<Instant> {
        match self.since {
            Some(since) if self.held > 0 => Some(since + self.interval),
            _ => None,
        }
    }

    /// The count of the reports held back, once their interval is over (`None` before, or
    /// when none were); the next report starts a new interval.
    pub(crate) fn summary(&mut self, now: Instant) -> Option<Suppressed> {
        let since = self.since?;
        if self.held == 0 || now.saturating_duration_since(since) < self.interval {
            return None;
        }
        let told = self.restart(now);
        self.since = None;
        told
    }

    /// Starts an interval at `now`; returns the count of the one that ended, if any.
    fn restart(&mut self, now: Instant) -> Option<Suppressed> {
        let told = self
            .since
            .filter(|_| self.held > 0)
            .map(|since| Suppressed {
                count: self.held,
                over: now.saturating_duration_since(since),
            });
        self.since = Some(now);
        self.passed = 0;
        self.held = 0;
        told
    }
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

/// How many error events each [`ErrorSource`] may make: hostile peers can cause them at
/// the rate they send, so past a burst they are counted, and one event tells the count.
pub(crate) struct Reports {
    limits: [Arc<Mutex<RateLimit>>; 4],
}

impl Default for Reports {
    fn default() -> Reports {
        Reports {
            limits: std::array::from_fn(|_| {
                Arc::new(Mutex::new(RateLimit::new(REPORTS_BURST, REPORTS_INTERVAL)))
            }),
        }
    }
}

impl Reports {
    /// Reports an error of node `node` as a [`NodeEvent::Error`] on `events`, rate-limited
    /// per source: past the burst, errors are counted, and one event tells the count when
    /// the interval is over.
    pub(crate) fn report(
        &self,
        node: &NodeId,
        events: &EventChannel,
        source: ErrorSource,
        message: String,
    ) {
        let limit = &self.limits[match source {
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
                    tracing::debug!(%node, ?source, "error events {told}");
                    events.send(summary_event(source, told));
                }
                tracing::debug!(%node, ?source, %message, "error event");
                events.send(NodeEvent::Error { source, message });
            }
            // The first one held back: tell the count at the interval's end, even if no
            // error follows to carry it.
            Verdict::Suppress if first_held => {
                let (Some(due), Ok(runtime)) = (due, tokio::runtime::Handle::try_current()) else {
                    return;
                };
                let (limit, events, node) = (Arc::clone(limit), events.clone(), node.clone());
                runtime.spawn(async move {
                    tokio::time::sleep_until(due).await;
                    let told = limit.lock().summary(tokio::time::Instant::now());
                    if let Some(told) = told {
                        tracing::debug!(%node, ?source, "error events {told}");
                        events.send(summary_event(source, told));
                    }
                });
            }
            Verdict::Suppress => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_burst_passes_then_reports_are_counted() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(3, ms(1000));
        for i in 0..3 {
            assert_eq!(limit.check(t0 + ms(i)), Verdict::Report(None));
        }
        for i in 3..10 {
            assert_eq!(limit.check(t0 + ms(i)), Verdict::Suppress);
        }
        assert_eq!(limit.due(), Some(t0 + ms(1000)));
        // The next interval's first report tells the count first.
        assert_eq!(
            limit.check(t0 + ms(1500)),
            Verdict::Report(Some(Suppressed {
                count: 7,
                over: ms(1500)
            }))
        );
        assert_eq!(limit.check(t0 + ms(1501)), Verdict::Report(None));
        assert_eq!(limit.due(), None);
    }

    #[test]
    fn a_quiet_source_is_never_limited() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(2, ms(1000));
        for i in 0..50 {
            assert_eq!(limit.check(t0 + ms(i * 600)), Verdict::Report(None));
        }
        assert_eq!(limit.summary(t0 + ms(60_000)), None);
    }

    #[test]
    fn the_count_is_told_when_the_flood_stops() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(1, ms(1000));
        assert_eq!(limit.check(t0), Verdict::Report(None));
        assert_eq!(limit.check(t0 + ms(10)), Verdict::Suppress);
        assert_eq!(limit.check(t0 + ms(20)), Verdict::Suppress);
        // Not before the interval is over.
        assert_eq!(limit.summary(t0 + ms(999)), None);
        assert_eq!(
            limit.summary(t0 + ms(1000)),
            Some(Suppressed {
                count: 2,
                over: ms(1000)
            })
        );
        // Told once.
        assert_eq!(limit.summary(t0 + ms(5000)), None);
        assert_eq!(limit.due(), None);
        // And the next report is not limited by the old interval, nor tells it again.
        assert_eq!(limit.check(t0 + ms(1200)), Verdict::Report(None));
    }

    #[test]
    fn the_summary_reads_as_a_sentence() {
        let told = Suppressed {
            count: 1998,
            over: ms(10_000),
        };
        assert_eq!(told.to_string(), "suppressed 1998 more in the last 10.0 s");
    }
}
