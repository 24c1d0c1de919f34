//! What an orchestrator's probes read: [`Node::health`], a node's state as one typed value
//! (starting and what it waits for, ready, draining, closed), and what it is computed
//! from: the program's say-so ([`Node::mark_started`]), the `connect` calls under way, the
//! discoveries that have joined no peer yet, the node's phase and its timer task.
//! Serving it over HTTP is `health/http.rs`.
//!
//! Readiness latches at startup: once every wait is over, the node stays ready until its
//! drain begins. A gateway whose workers all left is still ready: taking it out of its
//! Service would only move the same failure to its callers (Kubernetes' own advice is that
//! readiness should not follow dependencies), and the workers' discovery brings them back.

pub mod http;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::discover::Shared;
use crate::inner::Inner;

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

/// What a starting node waits for ([`Health::Starting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waiting {
    /// The program has not said it is set up ([`Node::mark_started`](crate::Node::mark_started),
    /// which [`Node::run_until_signal`](crate::Node::run_until_signal) calls).
    Program,
    /// A [`connect`](crate::Node::connect) call under way.
    Connect {
        /// The address it connects to.
        address: String,
    },
    /// A followed source ([`Node::discover`](crate::Node::discover)) that has joined no
    /// peer yet.
    Discovery {
        /// The source ([`Discover::describe`](crate::Discover::describe)).
        source: String,
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

/// What a node's startup waits for (a part of [`Inner`]).
#[derive(Default)]
pub(crate) struct Startup {
    /// The program said it is set up.
    program: AtomicBool,
    /// Every wait was over once: ready from then on (until the drain).
    started: AtomicBool,
    /// `connect` calls under way, by a number of their own.
    connects: Mutex<Vec<(u64, String)>>,
    next: AtomicU64,
    /// The discoveries started, with their shared state (weak: a stopped one is forgotten).
    discoveries: Mutex<Vec<(String, Weak<Shared>)>>,
}

impl Startup {
    /// The program is set up.
    pub(crate) fn mark_program_done(&self) {
        self.program.store(true, Ordering::Release);
    }

    /// A `connect` call begins: it is waited for until the guard drops.
    pub(crate) fn connecting<'a>(&'a self, address: &str) -> ConnectWait<'a> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.connects.lock().push((id, address.to_owned()));
        ConnectWait { startup: self, id }
    }

    /// A discovery began.
    pub(crate) fn discovering(&self, source: String, shared: &Arc<Shared>) {
        self.discoveries
            .lock()
            .push((source, Arc::downgrade(shared)));
    }

    /// Whether startup is over, and if not, what it waits for. Latches: once over, over.
    fn waits(&self) -> Vec<Waiting> {
        if self.started.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut waiting = Vec::new();
        if !self.program.load(Ordering::Acquire) {
            waiting.push(Waiting::Program);
        }
        waiting.extend(
            self.connects
                .lock()
                .iter()
                .map(|(_, address)| Waiting::Connect {
                    address: address.clone(),
                }),
        );
        waiting.extend(
            self.discoveries
                .lock()
                .iter()
                .filter_map(|(source, shared)| {
                    let shared = shared.upgrade()?;
                    let none = shared.joined.lock().is_empty();
                    none.then(|| Waiting::Discovery {
                        source: source.clone(),
                    })
                }),
        );
        if waiting.is_empty() {
            self.started.store(true, Ordering::Release);
        }
        waiting
    }
}

/// A `connect` call being waited for; dropping it (joined, failed or abandoned) ends the
/// wait.
pub(crate) struct ConnectWait<'a> {
    startup: &'a Startup,
    id: u64,
}

impl Drop for ConnectWait<'_> {
    fn drop(&mut self) {
        self.startup
            .connects
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

impl Inner {
    /// The node's health now (see [`Health`]).
    pub(crate) fn health(&self) -> Health {
        if self.life.closed_report().borrow().is_some() {
            return Health::Closed;
        }
        if self.life.is_stopping() {
            return Health::Draining;
        }
        let heartbeat_ended = self
            .links
            .heartbeat
            .lock()
            .as_ref()
            .is_some_and(|task| task.is_finished());
        if heartbeat_ended {
            return Health::Failed { task: "heartbeat" };
        }
        let waiting_for = self.startup.waits();
        if waiting_for.is_empty() {
            Health::Ready
        } else {
            Health::Starting { waiting_for }
        }
    }
}

impl crate::Node {
    /// The node's health, for an orchestrator's probes (see [`Health`] and the helper that
    /// serves it over HTTP, [`health::http::serve`](crate::health::http::serve)).
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
        self.inner.health()
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
    fn startup_waits_for_the_program_and_every_connect_then_latches() {
        let startup = Startup::default();
        assert_eq!(startup.waits(), vec![Waiting::Program]);
        let wait = startup.connecting("tcp://a:1");
        startup.mark_program_done();
        assert_eq!(
            startup.waits(),
            vec![Waiting::Connect {
                address: "tcp://a:1".into()
            }]
        );
        drop(wait);
        assert!(startup.waits().is_empty());
        // A connect after startup does not make the node unready.
        let _later = startup.connecting("tcp://b:1");
        assert!(startup.waits().is_empty());
    }

    #[test]
    fn a_discovery_waits_until_it_joined_a_peer() {
        let startup = Startup::default();
        startup.mark_program_done();
        let shared = Arc::new(Shared::default());
        startup.discovering("workers:5555".into(), &shared);
        assert_eq!(
            startup.waits(),
            vec![Waiting::Discovery {
                source: "workers:5555".into()
            }]
        );
        shared
            .joined
            .lock()
            .insert("tcp://10.0.0.1:5555".into(), "w1".into());
        assert!(startup.waits().is_empty());
    }

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
