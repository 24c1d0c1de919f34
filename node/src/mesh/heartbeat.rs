//! Heartbeats: one task per node sends `_system:heartbeat` to every joined peer each
//! interval and declares dead the peers gone silent.
//!
//! Replies count as signs of life: an upstream peer is alive while its client receives
//! anything from it; a downstream peer while it sends us anything, its replies to our
//! requests included (our server keeps when each peer last answered, and each check
//! drains it). A heartbeat never waits on a peer's queue: it is sent only if the queue has room now
//! (a peer that does not read gets none, and is the one that looks silent), so the others'
//! heartbeats leave on time whatever one peer does.
//!
//! Silence is judged by this node's own clock and tasks: a node too loaded to run its
//! tasks on time (a flood of its own requests on one thread, a machine shared with builds)
//! reads its peers late, and would take a healthy peer for a silent one. Each check
//! measures how late it ran; a peer is given that lateness, several times over, on top of
//! its timeout ([`Lateness`]), and a check a whole interval late is not made at all.

use std::collections::VecDeque;
use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::inner::Inner;
use crate::mesh::handshake::HEARTBEAT;
use crate::mesh::link::Link;
use crate::mesh::peer::Direction;
use crate::observation::events::LeaveReason;

/// Sends heartbeats to every peer and declares dead the ones gone silent, until the node
/// closes or is gone.
pub(crate) async fn heartbeat_loop(weak: Weak<Inner>) {
    let Some(inner) = weak.upgrade() else { return };
    let interval = inner.config.heartbeat_interval;
    let mut lateness = Lateness::new(inner.config.dead_peer_timeout);
    drop(inner);
    // Check four times per interval so that detection is within a quarter interval of the
    // dead-peer timeout.
    let mut ticker = tokio::time::interval(interval / 4);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut beat = 0u64;
    loop {
        let due = ticker.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        if inner.life.is_closing() {
            return;
        }
        if beat % 4 == 0 {
            let links = inner.state.lock().links(None);
            for link in links {
                if let Err(e) = link.try_system_tick(HEARTBEAT, Bytes::new()).await {
                    tracing::debug!(node = %inner.id, cause = %e, ?link, "heartbeat not sent");
                }
            }
        }
        beat = beat.wrapping_add(1);
        // Replies from downstream peers to our requests, since the last check.
        let bound = inner.links.server.lock().clone();
        let answered = bound
            .map(|server| server.take_answered())
            .unwrap_or_default();
        let dead = {
            let state = inner.state.lock();
            for (route, at) in answered {
                if let Some(id) = state.routes.get(&route) {
                    state.registry.seen_at_least(id, Direction::Downstream, at);
                }
            }
            // Anything an upstream peer sent counts as a sign of life, its replies too (a
            // busy peer's heartbeat may come late behind them).
            let heard: Vec<_> = state
                .registry
                .all()
                .filter_map(|e| match &**e.link() {
                    Link::Up { client, .. } => Some((e.id().clone(), client.last_heard()?)),
                    Link::Down { .. } => None,
                })
                .collect();
            for (id, at) in heard {
                state.registry.seen_at_least(&id, Direction::Upstream, at);
            }
            let now = Instant::now();
            lateness.record(now, now.saturating_duration_since(due));
            if stalled(due, now, interval) {
                // This node itself stood still (its thread was blocked): what its peers
                // sent meanwhile waits unread in its sockets. Judged now, every peer would
                // look silent; the next check, a quarter interval on, comes after the
                // drivers have read it.
                tracing::debug!(node = %inner.id, late_ms = (now - due).as_millis() as u64, "liveness check skipped after a stall");
                Vec::new()
            } else {
                // Judged as of `grace` ago: what a peer sent in that time may still be
                // waiting for a task of ours that runs as late as this check did.
                let grace = lateness.grace();
                let judged = now.into_std().checked_sub(grace).unwrap_or(now.into_std());
                state.registry.silent(judged)
            }
        };
        for (id, direction) in dead {
            inner.peer_left(&id, direction, LeaveReason::TimedOut);
        }
    }
}

/// Whether the check due at `due` runs so late (`now`) that this node, not its peers, was
/// the one standing still: later than a whole heartbeat interval. A check is due every
/// quarter interval; a loaded machine delays one by milliseconds, a blocked thread (a
/// handler that blocks a current-thread runtime, a panic hook printing a backtrace) by far
/// more.
fn stalled(due: Instant, now: Instant, interval: std::time::Duration) -> bool {
    now.saturating_duration_since(due) > interval
}

/// How late this node's liveness checks ran over the last while, and the grace that buys
/// its peers. A check's lateness samples how long a woken task of this node waits for a
/// thread: the tasks that read the peers' messages (the connections' drivers, the
/// conversations) wait as long, so a peer whose messages came in time may still look
/// silent by about that much. Pure: time comes in as arguments.
#[derive(Debug)]
struct Lateness {
    /// `(when, how late)` of each check within `window`, oldest first.
    samples: VecDeque<(Instant, Duration)>,
    /// How far back a check's lateness counts.
    window: Duration,
    /// The most grace given, however late the checks ran.
    cap: Duration,
}

impl Lateness {
    /// Samples count for four dead-peer timeouts: a node that ran late a moment ago is
    /// likely to run late again, and its peers' messages read then are what the next
    /// checks judge. The grace is at most two timeouts: a peer that really went silent
    /// is still found, later, however loaded this node is.
    fn new(dead_peer_timeout: Duration) -> Lateness {
        Lateness {
            samples: VecDeque::new(),
            window: dead_peer_timeout * 4,
            cap: dead_peer_timeout * 2,
        }
    }

    /// A check ran at `now`, `late` after it was due.
    fn record(&mut self, now: Instant, late: Duration) {
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.window)
        {
            self.samples.pop_front();
        }
        self.samples.push_back((now, late));
    }

    /// Four times the latest check of the window: a check's lateness is where in a busy
    /// run queue its timer happened to fire, anywhere from no wait to a whole round, and the
    /// task that reads a peer may have waited the whole round, more than once (a flood's
    /// 50,000 tasks on one thread, a 2-core machine shared with builds: checks 0.2-1 s late,
    /// the reader's last look at the peer 2.5 s and more behind).
    fn grace(&self) -> Duration {
        let latest = self
            .samples
            .iter()
            .map(|(_, late)| *late)
            .max()
            .unwrap_or_default();
        (latest * 4).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_check_a_whole_interval_late_is_a_stall_of_our_own_and_a_little_late_is_not() {
        let due = Instant::now();
        let interval = Duration::from_millis(200);
        assert!(!stalled(due, due, interval));
        assert!(!stalled(due, due + Duration::from_millis(30), interval));
        assert!(!stalled(due, due + interval, interval));
        assert!(stalled(due, due + Duration::from_millis(201), interval));
        assert!(stalled(due, due + Duration::from_secs(2), interval));
        // A clock read before the due time (the tick resolved early) is no stall.
        assert!(!stalled(due + Duration::from_millis(5), due, interval));
    }

    #[test]
    fn a_node_running_late_gives_its_peers_that_lateness_over_and_again_for_a_while() {
        let timeout = Duration::from_millis(2500);
        let mut lateness = Lateness::new(timeout);
        let t0 = Instant::now();
        // On time: no grace beyond the timeout.
        assert_eq!(lateness.grace(), Duration::ZERO);
        lateness.record(t0, Duration::from_millis(2));
        assert_eq!(lateness.grace(), Duration::from_millis(8));
        // A loaded node: checks run up to 600 ms late.
        lateness.record(t0 + Duration::from_secs(1), Duration::from_millis(600));
        lateness.record(t0 + Duration::from_secs(2), Duration::from_millis(100));
        assert_eq!(lateness.grace(), Duration::from_millis(2400));
        // A stall: the grace is bounded, a silent peer is still found.
        lateness.record(t0 + Duration::from_secs(3), Duration::from_secs(30));
        assert_eq!(lateness.grace(), timeout * 2);
        // Ten seconds (four timeouts) on, with checks on time again, the late ones no
        // longer count.
        let later = t0 + Duration::from_secs(3) + timeout * 4 + Duration::from_millis(1);
        lateness.record(later, Duration::from_millis(1));
        assert_eq!(lateness.grace(), Duration::from_millis(4));
    }
}
