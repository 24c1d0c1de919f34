//! What a starting node waits for before it is ready: the program's say-so
//! (`Node::mark_started`), the `connect` calls under way, the discoveries that have joined
//! no peer yet. Read by `Node::health` (`health.rs`); once nothing is left, startup is over
//! for good.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::discovery::discover::Shared;

/// What a starting node waits for ([`Health::Starting`](crate::Health::Starting)).
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

/// What a node's startup waits for (a part of `Inner`).
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
    pub(crate) fn waits(&self) -> Vec<Waiting> {
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
}
