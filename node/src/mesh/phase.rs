//! Where a node is in its life (open, draining, closing) and the report of its close: the
//! part every sender and dispatcher asks "may I?", and that only `drain.rs` moves.

use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::watch;

/// Where a node is in its life. Stored as a number in [`Life`]; only ever moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Serving.
    Open = 0,
    /// `close` began: peers are told, work in progress and on its way is still handled,
    /// the node's own calls still go out, heartbeats go on; no new peer joins.
    Draining = 1,
    /// Requests and ticks from peers are refused (`SHUTTING_DOWN`), the node's own calls
    /// are refused (`Closed`), heartbeats stop; the sockets are closing.
    Closing = 2,
}

/// How a graceful close went: what [`Node::close`](crate::Node::close) returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Closed {
    /// Handlers still running (or waiting for a slot) when the close grace ran out: they
    /// were stopped, and their callers got [`Error::Cancelled`](crate::Error::Cancelled)
    /// (or [`Error::ShuttingDown`](crate::Error::ShuttingDown) for those that had not
    /// started).
    pub cancelled: usize,
}

impl Closed {
    /// Whether every request the node took was answered by its handler within the grace.
    pub fn is_complete(&self) -> bool {
        self.cancelled == 0
    }
}

/// The node's phase, and where the report of its close is published.
pub(crate) struct Life {
    /// A [`Phase`] as a number: read without a lock on every message.
    phase: AtomicU8,
    /// The report of the close, once it has finished (a second `close` waits for it).
    closed: watch::Sender<Option<Closed>>,
}

impl Default for Life {
    fn default() -> Life {
        Life {
            phase: AtomicU8::new(Phase::Open as u8),
            closed: watch::Sender::new(None),
        }
    }
}

impl Life {
    /// Whether the node takes no new work: its handlers are done (or their grace ran out)
    /// and requests from peers, calls of its own and heartbeats are refused or stopped.
    pub(crate) fn is_closing(&self) -> bool {
        self.phase.load(Ordering::Acquire) >= Phase::Closing as u8
    }

    /// Whether `close` has begun: the node drains (finishes what it has, takes no new peers,
    /// does not reconnect), or is past that.
    pub(crate) fn is_stopping(&self) -> bool {
        self.phase.load(Ordering::Acquire) >= Phase::Draining as u8
    }

    /// Moves from open to draining; the phase it was in when that fails (a close began
    /// already).
    pub(crate) fn begin_draining(&self) -> Result<u8, u8> {
        self.phase.compare_exchange(
            Phase::Open as u8,
            Phase::Draining as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
    }

    /// Moves forward to `phase` (never back).
    pub(crate) fn set_phase(&self, phase: Phase) {
        self.phase.fetch_max(phase as u8, Ordering::AcqRel);
    }

    /// Where the report of the close is published.
    pub(crate) fn closed_report(&self) -> &watch::Sender<Option<Closed>> {
        &self.closed
    }
}
