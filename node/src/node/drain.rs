//! A graceful close: the node tells its peers it is draining, finishes the work it has and
//! what is on its way to it within the close grace, stops what outlives the grace (its
//! callers are told), waits (within the grace too) for the answers to its own calls still
//! out, sends the last answers, says goodbye and closes its sockets.
//!
//! The order is what keeps every answer: peers stop picking the node before it stops
//! taking requests (their acknowledgement of `DRAINING` travels the same connection as
//! anything they sent before it), and the sockets close only after the last answer is
//! written.

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::mesh::handshake::{BYE, DRAINING};
use crate::mesh::link::Upstream;
use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::mesh::phase::{Closed, Phase};
use crate::node::inner::Inner;
use crate::observation::events::NodeEvent;

/// The longest a draining node waits for its peers to acknowledge `DRAINING` (a peer
/// answers on its socket's driver at once; one that does not within this is slow or gone,
/// and the grace still bounds the whole close).
const ACK_WAIT: Duration = Duration::from_secs(1);

/// How long handlers stopped at the end of the grace have to send their `CANCELLED`: they
/// stop at their next poll, so this is only the time for their tasks to run once.
const STOP_WAIT: Duration = Duration::from_millis(500);

/// How often a close looks at the node's own calls still out.
const OUTGOING_POLL: Duration = Duration::from_millis(10);

impl Inner {
    /// Graceful close (see the module's docs). Idempotent: a second call waits for the
    /// first to finish and returns its report.
    pub(crate) async fn close(&self) -> Closed {
        if self.life.begin_draining().is_err() {
            let mut closed = self.life.closed_report().subscribe();
            return match closed.wait_for(Option::is_some).await {
                Ok(report) => report.unwrap_or_default(),
                Err(_) => Closed::default(),
            };
        }
        let report = self.drain().await;
        self.shut().await;
        self.life.closed_report().send_replace(Some(report));
        report
    }

    /// Tells the peers, then lets the work finish within the grace; what outlives it stops.
    async fn drain(&self) -> Closed {
        let grace_end = Instant::now() + self.config.close_grace;
        self.observers.emit(NodeEvent::Draining);
        tracing::debug!(node = %self.id, grace = ?self.config.close_grace, "draining");
        self.announce_draining(grace_end).await;
        // New requests are still taken until the node is idle: requests by id and those
        // sent before a peer saw `DRAINING` are handled, not refused.
        let mut idle = self.runtime.drain_until(grace_end).await;
        self.life.set_phase(Phase::Closing);
        if idle {
            // Requests taken between the idle moment and the switch.
            idle = self.runtime.drain_until(grace_end).await;
        }
        if idle {
            // The node's own calls still out (new ones are refused from now): their
            // answers come before the sockets close, within the grace.
            self.outgoing_until(grace_end).await;
            return Closed::default();
        }
        let cancelled = self.runtime.active();
        tracing::warn!(node = %self.id, cancelled, "close: grace period over with handlers still running; stopping them");
        // Every peer's work is a child of the node's token.
        self.runtime.stop_all();
        // Their callers are told (`CANCELLED`) as they stop: before the sockets close.
        self.runtime.drain_until(Instant::now() + STOP_WAIT).await;
        Closed { cancelled }
    }

    /// Waits, until `deadline` at most, for nothing to be in flight from this node to any
    /// peer (see `Reach::in_flight`).
    async fn outgoing_until(&self, deadline: Instant) {
        loop {
            let out: usize = self
                .state
                .lock()
                .registry
                .all()
                .map(|e| e.in_flight())
                .sum();
            if out == 0 || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(OUTGOING_POLL).await;
        }
    }

    /// Sends `DRAINING` to every joined peer and waits (bounded) for their
    /// acknowledgements: once a peer's is here, everything it sent before marking this
    /// node draining has arrived (one connection keeps its order).
    /// Tells peers we are leaving (all, or one direction).
    pub(crate) async fn say_bye(&self, only: Option<Direction>) {
        let links = self.state.lock().links(only);
        for link in links {
            let _ = tokio::time::timeout(
                Duration::from_millis(200),
                link.system().tick(BYE, Bytes::new()),
            )
            .await;
        }
    }

    async fn announce_draining(&self, grace_end: Instant) {
        let wait = ACK_WAIT.min(grace_end.saturating_duration_since(Instant::now()));
        let links = self.state.lock().links(None);
        let acks = links.iter().map(|link| {
            link.system()
                .request_with(DRAINING, &[], Bytes::new(), wait)
        });
        // A peer that does not know `DRAINING` (an older version) answers with an error at
        // once: it goes on picking this node until its goodbye, as before.
        futures::future::join_all(acks).await;
    }

    /// A joined peer said it is draining: no longer picked by a filter.
    pub(crate) fn peer_draining(&self, id: &NodeId, direction: Direction) {
        if self.state.lock().registry.set_draining(id, direction) {
            tracing::debug!(node = %self.id, peer = %id, ?direction, "peer draining");
            self.observers.emit(NodeEvent::PeerDraining {
                id: id.clone(),
                direction,
            });
        }
    }

    /// After the drain: goodbyes after the last answers, then every socket closes (each
    /// writes what is queued first), `Stopped`.
    async fn shut(&self) {
        self.say_bye(None).await;
        if let Some(heartbeat) = self.links.heartbeat.lock().take() {
            heartbeat.abort();
        }
        let upstreams: Vec<Upstream> = self
            .links
            .upstreams
            .lock()
            .drain()
            .map(|(_, u)| u)
            .collect();
        for upstream in upstreams {
            upstream.shut().await;
        }
        let server = self.links.server.lock().take();
        if let Some(server) = server {
            server.close().await;
        }
        let left = {
            let mut state = self.state.lock();
            state.routes.clear();
            state.registry.drain()
        };
        for entry in left {
            entry.link().fail_pending();
            self.observers.emit(NodeEvent::PeerLeft {
                id: entry.id().clone(),
                direction: entry.direction(),
                reason: LeaveReason::Local,
            });
        }
        // Handlers often hold their node (to send from a handler): dropping them here
        // breaks that cycle, so a closed node is freed.
        self.handlers.clear();
        self.observers.emit(NodeEvent::Stopped);
        tracing::debug!(node = %self.id, "closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_with_nothing_stopped_is_complete() {
        assert!(Closed::default().is_complete());
        assert!(!Closed { cancelled: 2 }.is_complete());
    }
}
