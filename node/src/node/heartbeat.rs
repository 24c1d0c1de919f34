//! Heartbeats: one task per node sends `_system:heartbeat` to every joined peer each
//! interval and declares dead the peers gone silent.
//!
//! Replies count as signs of life: an upstream peer is alive while its client receives
//! anything from it; a downstream peer while it sends us anything, its replies to our
//! requests included (our server keeps when each peer last answered, and each check
//! drains it). A heartbeat never waits on a peer's queue: it is sent only if the queue has room now
//! (a peer that does not read gets none, and is the one that looks silent), so the others'
//! heartbeats leave on time whatever one peer does.

use std::sync::Weak;

use bytes::Bytes;
use tokio::time::Instant;

use crate::mesh::handshake::HEARTBEAT;
use crate::mesh::peer::{Direction, LeaveReason};
use crate::node::inner::Inner;

/// Sends heartbeats to every peer and declares dead the ones gone silent, until the node
/// closes or is gone.
pub(crate) async fn heartbeat_loop(weak: Weak<Inner>) {
    let Some(inner) = weak.upgrade() else { return };
    let interval = inner.config.heartbeat_interval;
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
                if let Err(e) = link.system().try_tick(HEARTBEAT, Bytes::new()).await {
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
                .filter_map(|e| Some((e.id().clone(), e.link().client()?.last_heard()?)))
                .collect();
            for (id, at) in heard {
                state.registry.seen_at_least(&id, Direction::Upstream, at);
            }
            let now = Instant::now();
            if stalled(due, now, interval) {
                // This node itself stood still (its thread was blocked): what its peers
                // sent meanwhile waits unread in its sockets. Judged now, every peer would
                // look silent; the next check, a quarter interval on, comes after the
                // drivers have read it.
                tracing::debug!(node = %inner.id, late_ms = (now - due).as_millis() as u64, "liveness check skipped after a stall");
                Vec::new()
            } else {
                state.registry.silent(now.into_std())
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
}
