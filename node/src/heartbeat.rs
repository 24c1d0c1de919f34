//! Heartbeats: one task per node sends `_system:heartbeat` to every joined peer each
//! interval and declares dead the peers gone silent.
//!
//! A heartbeat never waits on a peer's queue: it is sent only if the queue has room now
//! (a peer that does not read gets none, and is the one that looks silent), so the others'
//! heartbeats leave on time whatever one peer does.

use std::sync::Weak;

use bytes::Bytes;
use tokio::time::Instant;

use crate::events::LeaveReason;
use crate::handshake::HEARTBEAT;
use crate::inner::Inner;

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
        ticker.tick().await;
        let Some(inner) = weak.upgrade() else { return };
        if inner.is_closing() {
            return;
        }
        if beat % 4 == 0 {
            for link in inner.links(None) {
                if let Err(e) = link.try_system_tick(HEARTBEAT, Bytes::new()).await {
                    tracing::debug!(node = %inner.id, cause = %e, ?link, "heartbeat not sent");
                }
            }
        }
        beat = beat.wrapping_add(1);
        let dead = inner
            .state
            .lock()
            .registry
            .silent(Instant::now().into_std());
        for (id, direction) in dead {
            inner.peer_left(&id, direction, LeaveReason::TimedOut);
        }
    }
}
