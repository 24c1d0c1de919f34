//! What an orchestrator's probes read: [`Health`], a node's state as one typed value
//! (starting and what it waits for, ready, draining, closed), and how it is read
//! from what a starting node waits for (`startup.rs`): the program's say-so
//! ([`Node::mark_started`](crate::Node::mark_started)), the `connect` calls under way, the
//! discoveries that have joined no peer yet. `Node::health` adds the node's phase and
//! its timer task. Serving it over HTTP is `health/http.rs`.
//!
//! Readiness latches at startup: once every wait is over, the node stays ready until its
//! drain begins. A gateway whose workers all left is still ready: taking it out of its
//! Service would only move the same failure to its callers (Kubernetes' own advice is that
//! readiness should not follow dependencies), and the workers' discovery brings them back.

pub mod http;

use crate::startup::Startup;
pub use crate::startup::Waiting;

/// A node's health, as a probe reads it ([`Node::health`](crate::Node::health)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// Not ready yet: these are what it waits for.
    Starting {
        /// Every wait still open (never empty).
        waiting_for: Vec<Waiting>,
    },
    /// Bound, joined what it was told to join, serving.
    Ready,
    /// [`close`](crate::Node::close) began: it finishes its work and takes no new peers.
    /// Not ready from the first moment, before any connection closes, so an orchestrator
    /// stops sending it traffic while its requests in flight still get their replies.
    Draining,
    /// Closed: its sockets and tasks are gone.
    Closed,
    /// A task the node cannot work without ended while the node was open (it panicked):
    /// the process should be restarted.
    Failed {
        /// Which task.
        task: &'static str,
    },
}

impl Health {
    /// Whether the node is running: a liveness probe restarts the process when not.
    /// A starting or draining node is live.
    pub fn is_live(&self) -> bool {
        !matches!(self, Health::Closed | Health::Failed { .. })
    }

    /// Whether the node should get traffic: a readiness probe.
    pub fn is_ready(&self) -> bool {
        matches!(self, Health::Ready)
    }

    /// Whether the node has finished starting (a startup probe): ready, or past that.
    pub fn is_started(&self) -> bool {
        !matches!(self, Health::Starting { .. })
    }

    /// The state in a word (`starting`, `ready`, `draining`, `closed`, `failed`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Health::Starting { .. } => "starting",
            Health::Ready => "ready",
            Health::Draining => "draining",
            Health::Closed => "closed",
            Health::Failed { .. } => "failed",
        }
    }
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Health::Starting { waiting_for } => {
                f.write_str("starting: waiting for")?;
                for (i, wait) in waiting_for.iter().enumerate() {
                    f.write_str(if i == 0 { " " } else { ", " })?;
                    match wait {
                        Waiting::Program => f.write_str("the program to finish setting up")?,
                        Waiting::Connect { address } => write!(f, "a connect to {address}")?,
                        Waiting::Discovery { source } => write!(f, "a peer from {source}")?,
                    }
                }
                Ok(())
            }
            Health::Failed { task } => write!(f, "failed: its {task} task ended"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// A node's health from its parts: whether its close finished, began, whether its timer
/// task ended, and what its startup waits for.
pub(crate) fn assess(closed: bool, stopping: bool, timer_ended: bool, startup: &Startup) -> Health {
    if closed {
        return Health::Closed;
    }
    if stopping {
        return Health::Draining;
    }
    if timer_ended {
        return Health::Failed { task: "heartbeat" };
    }
    let waiting_for = startup.waits();
    if waiting_for.is_empty() {
        Health::Ready
    } else {
        Health::Starting { waiting_for }
    }
}

impl crate::Node {
    /// The node's health, for an orchestrator's probes (see [`Health`] and the helper that
    /// serves it over HTTP, [`health::http::serve`](crate::node::health::http::serve)).
    ///
    /// Starting until the program has said it is set up ([`mark_started`](Self::mark_started)),
    /// no [`connect`](Self::connect) call is under way and every followed source has joined
    /// at least one peer; then ready until [`close`](Self::close) begins (draining), then
    /// closed.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> node::Result<()> {
    /// use node::{Health, Node, Waiting};
    ///
    /// let node = Node::builder().bind("tcp://127.0.0.1:0").build().await?;
    /// assert_eq!(node.health(), Health::Starting { waiting_for: vec![Waiting::Program] });
    /// node.mark_started();
    /// assert!(node.health().is_ready());
    /// node.close().await;
    /// assert_eq!(node.health(), Health::Closed);
    /// # Ok(()) }
    /// ```
    pub fn health(&self) -> Health {
        let inner = &self.inner;
        let closed = inner.life.closed_report().borrow().is_some();
        // The heartbeat task ends only at the close (when it is taken from here) or if it
        // panicked: ended while open, the node no longer notices dead peers.
        let timer_ended = inner
            .links
            .heartbeat
            .lock()
            .as_ref()
            .is_some_and(|task| task.is_finished());
        assess(
            closed,
            inner.life.is_stopping(),
            timer_ended,
            &inner.startup,
        )
    }

    /// Says the program has set the node up (handlers registered, connects made, sources
    /// followed): from now on it is ready once its connects and discoveries are.
    /// [`run_until_signal`](Self::run_until_signal) calls it.
    pub fn mark_started(&self) {
        self.inner.startup.mark_program_done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ready_is_ready_and_only_closed_or_failed_is_dead() {
        let starting = Health::Starting {
            waiting_for: vec![Waiting::Program],
        };
        assert!(!starting.is_ready() && starting.is_live() && !starting.is_started());
        assert!(Health::Ready.is_ready() && Health::Ready.is_started());
        assert!(!Health::Draining.is_ready() && Health::Draining.is_live());
        assert!(!Health::Closed.is_live());
        assert!(!Health::Failed { task: "heartbeat" }.is_live());
        assert_eq!(
            starting.to_string(),
            "starting: waiting for the program to finish setting up"
        );
    }
}
