//! Where handler work runs: one task per request or tick on the tokio runtime, never on a
//! socket's driver, under node-wide and per-peer bounds with a stated policy when they
//! are reached.
//!
//! The driver of each socket only decodes and dispatches (`dispatch.rs`); for a user
//! message it asks [`Runtime::admit_for`] for a slot and hands the work to a runner (a task
//! reused from one job to the next, `protocol::Runners`). So on a multi-thread
//! runtime handlers run in parallel, and a handler that blocks its thread or computes for a
//! long time delays nothing but itself: other peers' requests, heartbeats, handshakes and
//! replies keep flowing on the drivers.
//!
//! The bounds: at most `max_concurrent_handlers` run at once node-wide, and at most
//! `max_handlers_per_peer` for one peer (counters of taken slots, both taken for a job).
//! Above them, [`BusyPolicy::Wait`] queues a message in its peer's lane (`fair.rs`: one FIFO
//! lane per peer, the lanes served in turn as slots are given back) up to `max_queued`
//! messages node-wide and `max_queued_per_peer` of one peer, then refuses;
//! [`BusyPolicy::Refuse`] refuses at once. A queued message is a runner waiting for its
//! turn (a few hundred bytes and the message). A refused request is answered with the
//! system error `BUSY` ([`Error::Busy`](crate::Error::Busy) for its caller), saying whose
//! share was full; a refused tick is dropped and counted. Either way what the node holds
//! is bounded by the four numbers, and one peer holds at most its share of it.
//!
//! The common case takes no lock: a message of a peer with nothing waiting takes its two
//! slots with compare-and-swaps. Only a message that finds no slot, or whose peer has work
//! waiting, takes the lanes' lock; a slot given back takes it only while work waits.

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use futures::future::{BoxFuture, Either};
use futures::FutureExt;
use parking_lot::Mutex;
use protocol::{Answer, Incoming, Limit, Meta, RemoteError, Responder};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::codes::system::{
    BUSY, CANCELLED, DEADLINE_EXCEEDED, PANICKED, PAYLOAD_TOO_LARGE, SHUTTING_DOWN,
};
use crate::config::{BusyPolicy, Config};
use crate::context::{self, Context, Expiry};
use crate::mesh::peer::{NodeId, PeerWork, Stop};
use crate::observation::events::ErrorSource;
use crate::observation::observe::{Observers, Outcome, Watch};
use crate::observation::trace;
use crate::serving::fair::{self, Bounds, Full, Lanes, Slot};
use crate::serving::handler::{to_remote, Request};
use crate::serving::middleware::First;
use protocol::Runners;

mod job;

#[cfg(test)]
use job::fitting;
use job::Job;

/// What a request brought beside its payload, checked on the driver: its metadata and
/// the deadline it arrived with.
pub(crate) struct Received {
    pub(crate) meta: Meta,
    pub(crate) deadline: Option<Instant>,
    pub(crate) arrived: Instant,
}

/// What the handler runtime needs of the node that owns it: its own part, the hooks, the
/// error reports, and a router's forward (`routing/relay.rs`). A job holds its node through
/// this, so the node lives while its handlers run; the runtime names nothing else of the
/// node.
pub(crate) trait Host: Send + Sync + 'static {
    /// The runtime part itself.
    fn runtime(&self) -> &Runtime;
    /// The per-request hooks and metrics.
    fn observers(&self) -> &Observers;
    /// Runs a forward (a request a router passes on) to its answer.
    fn forward(
        self: Arc<Self>,
        from: NodeId,
        incoming: Incoming,
        received: Received,
    ) -> BoxFuture<'static, Result<Answer, RemoteError>>;
}

/// A peer's work as the key of its lane: the same peer is the same allocation.
#[derive(Clone)]
struct ByPeer(Arc<PeerWork>);

impl PartialEq for ByPeer {
    fn eq(&self, other: &ByPeer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ByPeer {}

impl Hash for ByPeer {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(Arc::as_ptr(&self.0), state);
    }
}

/// A queued job's place in its peer's lane: its ticket, and where its turn is told.
pub(crate) struct Waiter {
    ticket: u64,
    /// Sent when the job is served, its slots taken for it.
    served: oneshot::Receiver<()>,
}

/// What became of one more message.
pub(crate) enum Admitted {
    /// It holds its slots: it runs now.
    Run,
    /// It waits in its peer's lane.
    Queued(Waiter),
    /// Refused: this share was full.
    Refused(Full),
}

/// Takes one of `count`'s places below `bound`, if there is one.
fn take_below(count: &AtomicUsize, bound: usize) -> bool {
    let mut now = count.load(Ordering::SeqCst);
    loop {
        if now >= bound {
            return false;
        }
        match count.compare_exchange_weak(now, now + 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return true,
            Err(seen) => now = seen,
        }
    }
}

/// The node's handler execution: limits and counters.
pub(crate) struct Runtime {
    /// The node's id, for its logs.
    node: NodeId,
    /// The level of the handlers' spans (`Config::span_level`).
    span_level: tracing::Level,
    /// Handler slots taken node-wide: a counter taken with a compare-and-swap and given
    /// back with a subtraction. Not tokio's `Semaphore`: nobody waits on it (waiting work
    /// is in the fair lanes, which a first-come semaphore cannot order), and its release
    /// takes its waiters' lock every time: a slot taken and given back costs 11 ns here
    /// against 21 ns, 23 against 51 ns with a second thread at it (same run, `cargo bench
    /// -p node --bench admission`; PERFORMANCE.md, "Fairness").
    taken: AtomicUsize,
    max: usize,
    /// The most slots one peer may hold (its count is `PeerWork::running`).
    per_peer: usize,
    /// The places in line, node-wide and per peer.
    bounds: Bounds,
    /// The waiting work, a lane per peer.
    lanes: Mutex<Lanes<ByPeer, oneshot::Sender<()>>>,
    /// Messages waiting now (the lanes' length, kept beside them to be read without the
    /// lock: a slot given back looks at it to know whether anyone waits).
    queued: AtomicUsize,
    /// Handler tasks alive (running or queued): a graceful close waits for zero.
    active: AtomicUsize,
    idle: Notify,
    /// Requests answered by this node's handlers (a reply or an error reply).
    pub(crate) answered: AtomicU64,
    /// Requests refused with `BUSY`.
    pub(crate) refused: AtomicU64,
    /// The runners handler work runs on.
    pool: Arc<Runners<Job>>,
    /// Ticks dropped at the limit.
    pub(crate) ticks_dropped: AtomicU64,
    /// Ticks a middleware refused.
    pub(crate) ticks_refused: AtomicU64,
    /// Jobs stopped because their peer left.
    pub(crate) cancelled: AtomicU64,
    /// Requests not run, or stopped, because their deadline passed.
    pub(crate) expired: AtomicU64,
    /// Cancelled when the close grace runs out: every peer's work token is its child
    /// (`PeerWork::new`), so all handlers stop at once, for [`Stop::Grace`].
    stopping: CancellationToken,
}

impl Runtime {
    pub(crate) fn new(config: &Config, node: &NodeId) -> Runtime {
        let queued = match config.when_busy {
            BusyPolicy::Wait { max_queued } => max_queued,
            BusyPolicy::Refuse => 0,
        };
        Runtime {
            node: node.clone(),
            span_level: config.span_level,
            taken: AtomicUsize::new(0),
            max: config.max_concurrent_handlers.max(1),
            per_peer: config.max_handlers_per_peer.max(1),
            bounds: Bounds {
                queued,
                queued_per_peer: config.max_queued_per_peer,
            },
            lanes: Mutex::new(Lanes::default()),
            queued: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            answered: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            ticks_dropped: AtomicU64::new(0),
            ticks_refused: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            stopping: CancellationToken::new(),
            pool: Runners::new(),
        }
    }

    /// Takes a slot for a job of `peer`: one of its own share, then one of the node's;
    /// whose was full otherwise.
    ///
    /// Every count here and in [`give_back`](Self::give_back) is sequentially consistent
    /// with the count of the queued: a job that queues counts itself, then looks at the
    /// slots once more; a slot given back is counted, then the queued are looked at. Each
    /// side writes one and reads the other, so one of them sees the other and no job waits
    /// beside a free slot.
    fn try_take(&self, peer: &PeerWork) -> Result<(), Full> {
        if !take_below(&peer.running, self.per_peer) {
            return Err(Full::Peer);
        }
        if !take_below(&self.taken, self.max) {
            // Given back at once: whoever saw the peer at its bound meanwhile holds the
            // lanes' lock or will take it (see `admit_waiting`).
            peer.running.fetch_sub(1, Ordering::SeqCst);
            return Err(Full::Node);
        }
        Ok(())
    }

    /// One more message of `peer`: it runs at once when its peer has nothing waiting and
    /// there is a slot (no lock taken), else as [`fair::slot`] decides under the lanes'
    /// lock (counted as queued when it must wait).
    pub(crate) fn admit_for(&self, peer: &Arc<PeerWork>) -> Admitted {
        if peer.queued.load(Ordering::SeqCst) == 0 && self.try_take(peer).is_ok() {
            return Admitted::Run;
        }
        self.admit_waiting(peer)
    }

    /// What a new job holds once admitted, or which share refused it.
    fn hold_for(&self, peer: &Arc<PeerWork>) -> Result<Hold, Full> {
        match self.admit_for(peer) {
            Admitted::Run => Ok(Hold::Slot),
            Admitted::Queued(waiter) => Ok(Hold::Waiting(waiter)),
            Admitted::Refused(full) => Err(full),
        }
    }

    /// The rest of [`admit_for`](Self::admit_for), under the lanes' lock.
    fn admit_waiting(&self, peer: &Arc<PeerWork>) -> Admitted {
        let mut lanes = self.lanes.lock();
        // Work that waits goes first: a slot freed a moment ago (or left by a failed
        // take above) is offered to the lanes in turn before this message sees it.
        self.serve(&mut lanes);
        let key = ByPeer(Arc::clone(peer));
        let mine = lanes.len_of(&key);
        // Behind its own peer's waiting work whatever the slots: a peer's jobs start in
        // the order they came.
        let taken = if mine == 0 {
            self.try_take(peer)
        } else {
            Err(Full::Peer)
        };
        match fair::slot(taken, lanes.len(), mine, &self.bounds) {
            Slot::Run(()) => Admitted::Run,
            Slot::Refuse(full) => Admitted::Refused(full),
            Slot::Queue => {
                self.queued.fetch_add(1, Ordering::SeqCst);
                peer.queued.fetch_add(1, Ordering::SeqCst);
                // One more look after counting itself (see `try_take`).
                if mine == 0 && self.try_take(peer).is_ok() {
                    self.queued.fetch_sub(1, Ordering::SeqCst);
                    peer.queued.fetch_sub(1, Ordering::SeqCst);
                    return Admitted::Run;
                }
                let (tell, served) = oneshot::channel();
                let ticket = lanes.push(key, tell);
                Admitted::Queued(Waiter { ticket, served })
            }
        }
    }

    /// Gives a slot of `peer` back, and serves the lanes if work waits.
    fn give_back(&self, peer: &PeerWork) {
        peer.running.fetch_sub(1, Ordering::SeqCst);
        self.taken.fetch_sub(1, Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.serve(&mut self.lanes.lock());
        }
    }

    /// Hands free slots to waiting work, a lane at a time in turn, passing over the
    /// peers that hold their share (at most `max / per_peer` of them can).
    fn serve(&self, lanes: &mut Lanes<ByPeer, oneshot::Sender<()>>) {
        while self.taken.load(Ordering::SeqCst) < self.max {
            let Some((peer, tell)) = lanes.pop(|peer| self.try_take(&peer.0).is_ok()) else {
                return;
            };
            self.queued.fetch_sub(1, Ordering::SeqCst);
            peer.0.queued.fetch_sub(1, Ordering::SeqCst);
            if tell.send(()).is_err() {
                // Unreachable in practice: a job takes itself out of its lane under this
                // lock before it goes. Its slots back all the same.
                peer.0.running.fetch_sub(1, Ordering::SeqCst);
                self.taken.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// A queued job stops waiting (its peer left, its deadline passed, or it is dropped);
    /// whether it holds slots even so (it was served meanwhile: they are its to give back).
    fn leave_line(&self, peer: &Arc<PeerWork>, ticket: u64) -> bool {
        let mut lanes = self.lanes.lock();
        if lanes.remove(&ByPeer(Arc::clone(peer)), ticket).is_some() {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            peer.queued.fetch_sub(1, Ordering::SeqCst);
            false
        } else {
            true
        }
    }

    /// Peers with work waiting now (each has a lane while it has).
    #[cfg(test)]
    fn lanes(&self) -> usize {
        self.lanes.lock().lanes()
    }

    /// The refusal of a request whose share `full` was: its bound as data.
    fn busy(&self, full: Full) -> RemoteError {
        let (max, per_peer) = match full {
            Full::Node => (self.max, false),
            Full::Peer => (self.per_peer, true),
        };
        RemoteError::system_error(BUSY, full.message()).with_limit(Limit::Handlers {
            max: max as u64,
            per_peer,
        })
    }

    /// The node's token, parent of every peer's work token.
    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// The close grace ran out: every handler stops, and its caller is told
    /// (`CANCELLED`).
    pub(crate) fn stop_all(&self) {
        self.stopping.cancel();
    }

    /// Handler tasks running or queued now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Messages waiting for a handler slot now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Waits until no handler task is left, until `deadline` at most; whether none is.
    pub(crate) async fn drain_until(&self, deadline: Instant) -> bool {
        tokio::time::timeout_at(deadline, async {
            loop {
                let idle = self.idle.notified();
                if self.active() == 0 {
                    break;
                }
                idle.await;
            }
        })
        .await
        .is_ok()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // The node is gone: its idle runners end.
        self.pool.close();
    }
}

/// A handler task's hold on the node: counted alive for graceful close, and holding its
/// slots (the node's and its peer's) or its place in line; all are given back however
/// the task ends.
pub(crate) struct Work {
    /// The node (its runtime, hooks and forward), alive while the job is.
    node: Arc<dyn Host>,
    /// The peer the work is for: its counts, and the signal that it left.
    peer: Arc<PeerWork>,
    hold: Hold,
}

/// What a job holds of the limits.
enum Hold {
    /// Its slots.
    Slot,
    /// Its place in its peer's lane.
    Waiting(Waiter),
    /// Nothing (it left the line without a slot).
    Nothing,
}

impl Work {
    /// The hold of a job admitted (with its slots, or a place in line): given back by its
    /// drop even if the job never runs.
    fn start(node: Arc<dyn Host>, peer: Arc<PeerWork>, hold: Hold) -> Work {
        node.runtime().active.fetch_add(1, Ordering::AcqRel);
        Work { node, peer, hold }
    }

    /// Waits for its turn if the job had to queue, unless its peer leaves first (counted
    /// as cancelled) or `deadline` passes (then it leaves the line). A job admitted with
    /// its slots runs at once: only the queued one pays for a second handle on its peer.
    async fn slot_before(&mut self, deadline: Option<Instant>, arrived: Option<Instant>) -> Waited {
        let Hold::Waiting(waiter) = &mut self.hold else {
            return Waited::AtOnce;
        };
        let peer = Arc::clone(&self.peer);
        let waited = tokio::select! {
            biased;
            // First: a job whose peer left, or whose node's grace ran out, does not start
            // even if it is served at the same moment.
            why = peer.gone() => {
                self.node.runtime().cancelled.fetch_add(1, Ordering::Relaxed);
                Waited::Stopped(why)
            }
            served = &mut waiter.served => match served {
                Ok(()) => Waited::Slot,
                // Its sender is dropped only by taking the job out of its lane, which the
                // job does itself: left as if its peer had gone.
                Err(_) => Waited::Stopped(Stop::Left),
            },
            () = Expiry::new(deadline) => Waited::Expired,
        };
        if waited == Waited::Slot {
            self.hold = Hold::Slot;
            if let (Some(metrics), Some(arrived)) = (&self.node.observers().metrics, arrived) {
                metrics.queue_wait(arrived.elapsed());
            }
        } else {
            self.leave_line();
        }
        waited
    }

    /// Leaves its peer's lane if it waits there: its slots, if it was served meanwhile,
    /// are kept until the job's end gives them back.
    fn leave_line(&mut self) {
        if let Hold::Waiting(waiter) = &self.hold {
            let served = self.node.runtime().leave_line(&self.peer, waiter.ticket);
            self.hold = if served { Hold::Slot } else { Hold::Nothing };
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        // Dropped while waiting (the runtime is shutting down): out of the line first.
        self.leave_line();
        let runtime = self.node.runtime();
        if let Hold::Slot = self.hold {
            runtime.give_back(&self.peer);
        }
        if runtime.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            runtime.idle.notify_waiters();
        }
    }
}

/// How a job's wait for a slot ended.
#[derive(Debug, PartialEq, Eq)]
enum Waited {
    /// It had one from the start (admitted with a slot, when it arrived).
    AtOnce,
    /// It got one after waiting.
    Slot,
    /// Its peer left, or the close grace ran out, first.
    Stopped(Stop),
    Expired,
}

#[cfg(test)]
mod tests;
