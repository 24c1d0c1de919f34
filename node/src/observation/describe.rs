//! A node describes itself: who it is, what it handles, whom it is joined to, its limits,
//! and how its events fare (counts by outcome, in flight, recent latency quantiles). Any
//! joined peer may ask with the system request `_system:describe` ([`Node::describe`](crate::Node::describe));
//! routers forward it like a request by id, so one connection to a router describes the
//! mesh behind it (`zeronode info`, `ls`, `top`).
//!
//! What it costs a request: while describing is on ([`DescribePolicy`], on by default), the
//! handler job that [`Observers`](crate::observation::observe::Observers) already watches adds a count
//! when it starts, and a count and a histogram record when it ends, in a fixed table of
//! per-event slots ([`Load`]). Building the description happens only when one is asked
//! for, at most every [`REBUILD_AFTER`] (a flood of asks reuses the last answer).
//!
//! Latency quantiles come from a fixed-memory histogram per event (the `histogram` crate:
//! buckets of about 6% relative width, microseconds up to about 71 minutes). "Recent"
//! means since the newest snapshot (taken by an earlier ask) at least [`WINDOW`] old: one
//! to two windows for a node asked regularly, as [`Latency::window_ms`] says; until there
//! is such a snapshot, the node's whole life.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use histogram::{AtomicHistogram, Histogram};
use parking_lot::Mutex;
use protocol::RemoteError;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use transport::Key;

use crate::codes::system::{NOT_AUTHORIZED, NO_HANDLER};
use crate::mesh::peer::{Direction, NodeId};
use crate::observation::metrics::table::Table;
use crate::observation::observe::Outcome;
use crate::options::Options;

/// The system request a node answers with its [`Description`] (`crate::node::system::describe`).
pub(crate) const DESCRIBE: &str = "_system:describe";

/// The most distinct event names with a slot of their own; later ones share `_other`
/// (event names are chosen by peers: a pattern handler matches names without bound).
pub const MAX_DESCRIBED_EVENTS: usize = 64;
/// The slot of every event past [`MAX_DESCRIBED_EVENTS`].
const OTHER: &str = "_other";
/// How long a latency window lasts at least (see the module docs).
pub(crate) const WINDOW: Duration = Duration::from_secs(10);
/// How long a built description is served again before a new one is built.
pub(crate) const REBUILD_AFTER: Duration = Duration::from_millis(100);
/// The histogram's buckets: 2^-4 relative width (about 6%), values below 2^32 µs.
const GROUPING_POWER: u8 = 4;
const MAX_VALUE_POWER: u8 = 32;

/// Who may ask this node to describe itself ([`NodeBuilder::describe`](crate::NodeBuilder::describe)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DescribePolicy {
    /// Any joined peer (the default): a node joined to this one can already call it.
    #[default]
    Anyone,
    /// Only peers whose CURVE key is in the list (a plaintext asker is refused). A router
    /// forwards an ask only from a peer its own policy admits, and the node checks the
    /// key of the router that delivered it: allow your routers' keys too.
    Keys(Vec<Key>),
    /// Nobody: the node answers `NO_HANDLER` and records nothing per request for it.
    Off,
}

impl DescribePolicy {
    /// Whether anyone may be answered at all (the node then records its load).
    pub(crate) fn is_on(&self) -> bool {
        *self != DescribePolicy::Off
    }

    /// Whether an asker with CURVE key `key` (`None`: plaintext) may be answered.
    pub(crate) fn admits(&self, key: Option<&Key>) -> std::result::Result<(), RemoteError> {
        match (self, key) {
            (DescribePolicy::Anyone, _) => Ok(()),
            (DescribePolicy::Off, _) => Err(RemoteError::system_error(
                NO_HANDLER,
                "this node does not describe itself",
            )),
            (DescribePolicy::Keys(keys), Some(key)) if keys.contains(key) => Ok(()),
            (DescribePolicy::Keys(_), Some(key)) => Err(RemoteError::system_error(
                NOT_AUTHORIZED,
                format!("key {key} may not ask for a description"),
            )),
            (DescribePolicy::Keys(_), None) => Err(RemoteError::system_error(
                NOT_AUTHORIZED,
                "a description is given only over CURVE",
            )),
        }
    }
}

/// Whether a router passes on a description asked for by a peer with CURVE key `key`:
/// under [`DescribePolicy::Keys`] only for the keys it admits itself (a router's own
/// policy `Off` hides the router, not the nodes behind it).
pub(crate) fn may_forward(
    policy: &DescribePolicy,
    key: Option<&Key>,
) -> std::result::Result<(), RemoteError> {
    match policy {
        DescribePolicy::Keys(_) => policy.admits(key),
        DescribePolicy::Anyone | DescribePolicy::Off => Ok(()),
    }
}

/// What a node says about itself ([`Node::describe`](crate::Node::describe)). Fields added later decode as their
/// defaults from an older node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Description {
    /// Its id.
    pub id: NodeId,
    /// Random per process: a restart shows as a new instance.
    #[serde(default)]
    pub instance: String,
    /// The zeronode version it runs.
    #[serde(default)]
    pub version: String,
    /// Its node protocol version.
    #[serde(default)]
    pub protocol: u32,
    /// The ZMTP engine its sockets run on (`native` or `libzmq`).
    #[serde(default)]
    pub engine: String,
    /// Whether it has a CURVE key pair (its bound address then takes only CURVE).
    #[serde(default)]
    pub curve: bool,
    /// Whether it is a router.
    #[serde(default)]
    pub router: bool,
    /// The address it is bound to, if any.
    #[serde(default)]
    pub address: Option<String>,
    /// The options it advertises.
    #[serde(default)]
    pub options: Options,
    /// The request events and patterns it answers with one reply (a regex as `/regex/`).
    #[serde(default)]
    pub requests: Vec<String>,
    /// The events and patterns whose reply it streams (`on_stream`).
    #[serde(default)]
    pub streams: Vec<String>,
    /// The events and patterns that take a streamed body (`on_upload`).
    #[serde(default)]
    pub uploads: Vec<String>,
    /// The tick events and patterns it handles.
    #[serde(default)]
    pub ticks: Vec<String>,
    /// Its joined peers (a node joined both ways is there twice).
    #[serde(default)]
    pub peers: Vec<PeerSummary>,
    /// Milliseconds since it was built.
    #[serde(default)]
    pub uptime_ms: u64,
    /// Whether it is closing.
    #[serde(default)]
    pub closing: bool,
    /// Its limits.
    #[serde(default)]
    pub limits: Limits,
    /// Its node-wide counters.
    #[serde(default)]
    pub totals: Totals,
    /// Per event its handlers ran, in name order.
    #[serde(default)]
    pub events: Vec<EventStats>,
    /// What it forwarded, for a router.
    #[serde(default)]
    pub routing: Option<RouterCounts>,
}

/// One joined peer, as a [`Description`] lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeerSummary {
    /// Its id.
    pub id: NodeId,
    /// How it is joined to the described node.
    pub direction: Direction,
    /// Whether it is a router.
    #[serde(default)]
    pub router: bool,
    /// The described node's requests to it waiting for an answer.
    #[serde(default)]
    pub in_flight: u64,
    /// Whether it said it is stopping.
    #[serde(default)]
    pub draining: bool,
    /// Its options, as it advertised them (empty from a node of an older version).
    #[serde(default)]
    pub options: Options,
}

/// A node's limits (see [`Config`](crate::Config)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Limits {
    /// Largest payload accepted, in bytes.
    pub max_payload: u64,
    /// Handlers running at once, node-wide.
    pub max_concurrent_handlers: u64,
    /// Handlers one peer may have running at once.
    pub max_handlers_per_peer: u64,
    /// Messages of one peer that may wait for a handler slot.
    pub max_queued_per_peer: u64,
    /// Messages that may wait for a slot node-wide (0: refused at once when busy).
    pub max_queued: u64,
    /// The default request timeout, in milliseconds.
    pub request_timeout_ms: u64,
    /// The heartbeat interval, in milliseconds.
    pub heartbeat_ms: u64,
    /// Router hops a forwarded message may take.
    pub hop_limit: u8,
}

/// A node's counters since it was built (see [`NodeStats`](crate::NodeStats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Totals {
    /// Requests its handlers answered.
    pub requests_handled: u64,
    /// Requests it sent (system requests included).
    pub requests_sent: u64,
    /// Ticks it received (heartbeats included).
    pub ticks_received: u64,
    /// Requests of its own that timed out.
    pub timeouts: u64,
    /// Requests refused with `BUSY`.
    pub busy_refused: u64,
    /// Handler jobs running or waiting for a slot now.
    pub handlers_active: u64,
    /// Of those, the ones waiting.
    pub handlers_queued: u64,
}

/// How one event fared on the described node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventStats {
    /// The event (`_other` for the events past [`MAX_DESCRIBED_EVENTS`]).
    pub event: String,
    /// Requests handled, by outcome.
    #[serde(default)]
    pub requests: Counts,
    /// Ticks handled, by outcome.
    #[serde(default)]
    pub ticks: Counts,
    /// Requests and ticks started and not ended yet.
    #[serde(default)]
    pub in_flight: u64,
    /// The requests' latency (arrival to answer) over a recent window; `None` before any.
    #[serde(default)]
    pub latency: Option<Latency>,
}

/// Counts by [`Outcome`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Counts {
    /// Answered, or a tick handled.
    pub ok: u64,
    /// The handler answered with its own error.
    pub error: u64,
    /// The framework refused or failed it.
    pub refused: u64,
    /// Its deadline passed.
    pub timeout: u64,
    /// Stopped because its requester left or the node was aborted.
    pub cancelled: u64,
    /// The handler panicked.
    #[serde(default)]
    pub panicked: u64,
}

impl Counts {
    /// Every outcome together.
    pub fn total(&self) -> u64 {
        self.ok + self.error + self.refused + self.timeout + self.cancelled + self.panicked
    }

    /// Every outcome but `ok`.
    pub fn failed(&self) -> u64 {
        self.total() - self.ok
    }

    fn from_array(counts: [u64; Outcome::ALL.len()]) -> Counts {
        let [ok, error, refused, timeout, cancelled, panicked] = counts;
        Counts {
            ok,
            error,
            refused,
            timeout,
            cancelled,
            panicked,
        }
    }
}

/// Latency quantiles over a recent window, in microseconds (each the upper end of its
/// histogram bucket: at most about 6% above the true value).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Latency {
    /// How long the window is, in milliseconds.
    pub window_ms: u64,
    /// Requests in the window.
    pub count: u64,
    /// The median.
    pub p50_us: u64,
    /// The 90th percentile.
    pub p90_us: u64,
    /// The 99th percentile.
    pub p99_us: u64,
    /// The largest.
    pub max_us: u64,
}

/// What a router forwarded (see [`RouterStats`](crate::RouterStats)), and to where.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RouterCounts {
    /// Forwarded successfully.
    pub forwarded: u64,
    /// Failed (nothing matched, the destination failed).
    pub failed: u64,
    /// Refused: they looped or ran out of hops.
    pub looped: u64,
    /// Ran out of time here.
    pub expired: u64,
    /// Where it passed messages on: each next hop (a local peer or another router) with
    /// what it took and what failed there, by id, at most
    /// [`MAX_DESCRIBED_HOPS`](crate::MAX_DESCRIBED_HOPS) of them.
    pub hops: Vec<crate::HopCount>,
}

/// One event's slot: written by handler jobs (atomics only), read by a description.
struct EventLoad {
    /// Jobs started (requests and ticks).
    started: AtomicU64,
    /// Jobs ended, `[request, tick]` by outcome index.
    ended: [[AtomicU64; Outcome::ALL.len()]; 2],
    /// The requests' latency in microseconds since the node was built (`None` only if the
    /// crate refused our constant configuration, which a unit test rules out).
    latency: Option<AtomicHistogram>,
    /// Snapshots of `latency`, oldest first: the start of the recent window.
    window: Mutex<VecDeque<(Instant, Histogram)>>,
}

impl EventLoad {
    fn new() -> EventLoad {
        EventLoad {
            started: AtomicU64::new(0),
            ended: Default::default(),
            latency: AtomicHistogram::new(GROUPING_POWER, MAX_VALUE_POWER).ok(),
            window: Mutex::new(VecDeque::new()),
        }
    }

    fn stats(&self, event: &str, born: Instant, now: Instant) -> EventStats {
        let count = |kind: usize| {
            Counts::from_array(std::array::from_fn(|i| {
                self.ended[kind][i].load(Ordering::Relaxed)
            }))
        };
        let (requests, ticks) = (count(0), count(1));
        // Read after the ends, so a job that ended meanwhile never shows as -1 in flight.
        let started = self.started.load(Ordering::Relaxed);
        EventStats {
            event: event.to_owned(),
            in_flight: started.saturating_sub(requests.total() + ticks.total()),
            requests,
            ticks,
            latency: self.recent(born, now),
        }
    }

    /// The latency since the start of the recent window; moves the window on.
    fn recent(&self, born: Instant, now: Instant) -> Option<Latency> {
        let current = self.latency.as_ref()?.load();
        let mut window = self.window.lock();
        if window.back().is_none_or(|(at, _)| now - *at >= WINDOW) {
            window.push_back((now, current.clone()));
        }
        // Keep the newest snapshot at least a window old as the base; drop older ones.
        while window.len() > 1 && window.get(1).is_some_and(|(at, _)| now - *at >= WINDOW) {
            window.pop_front();
        }
        let (since, recent) = match window.front() {
            Some((at, base)) if now - *at >= WINDOW => (*at, current.wrapping_sub(base).ok()?),
            // No snapshot a window old yet: the whole life so far.
            _ => (born, current),
        };
        latency_of(&recent, now.saturating_duration_since(since))
    }
}

/// The quantiles of `histogram`, over `window`; `None` when it is empty.
fn latency_of(histogram: &Histogram, window: Duration) -> Option<Latency> {
    let at = |q: f64| {
        histogram
            .quantile_bucket(q)
            .ok()
            .flatten()
            .map(|bucket| bucket.end())
    };
    let count = histogram.as_slice().iter().sum();
    Some(Latency {
        window_ms: millis(window),
        count,
        p50_us: at(0.5)?,
        p90_us: at(0.9)?,
        p99_us: at(0.99)?,
        max_us: at(1.0)?,
    })
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Which slot an event's jobs are counted in (see [`Load::slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Its own, at this index of the table.
    Event(usize),
    /// The shared `_other`.
    Other,
}

/// A node's per-event load, and its cached description.
pub(crate) struct Load {
    pub(crate) born: Instant,
    events: Table<EventLoad>,
    other: EventLoad,
    /// The names in the table, in insertion order (the table is read by index).
    names: Mutex<Vec<(String, usize)>>,
    /// The last description built (encoded), and when.
    pub(crate) cache: Mutex<Option<(Instant, Bytes)>>,
}

impl Load {
    pub(crate) fn new() -> Load {
        Load {
            born: Instant::now(),
            events: Table::new(MAX_DESCRIBED_EVENTS),
            other: EventLoad::new(),
            names: Mutex::new(Vec::new()),
            cache: Mutex::new(None),
        }
    }

    /// The slot of `event`: its own while there is room, else the shared `_other`. A job
    /// started in it.
    pub(crate) fn start(&self, event: &str) -> Slot {
        let slot = match self.events.find_or_insert(event, EventLoad::new) {
            Some(at) => Slot::Event(at),
            None => Slot::Other,
        };
        let load = self.at(slot);
        // The first job of a name: remember the name, for the description's list.
        if load.started.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Slot::Event(at) = slot {
                let mut names = self.names.lock();
                if !names.iter().any(|(_, i)| *i == at) {
                    names.push((event.to_owned(), at));
                }
            }
        }
        slot
    }

    fn at(&self, slot: Slot) -> &EventLoad {
        match slot {
            Slot::Event(at) => self.events.get(at).unwrap_or(&self.other),
            Slot::Other => &self.other,
        }
    }

    /// A job started in `slot` ended.
    pub(crate) fn ended(&self, slot: Slot, tick: bool, outcome: Outcome, duration: Duration) {
        let load = self.at(slot);
        load.ended[usize::from(tick)][outcome.index()].fetch_add(1, Ordering::Relaxed);
        if let (false, Some(latency)) = (tick, &load.latency) {
            let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
            // Clamped into range: the increment then cannot fail.
            let _ = latency.increment(micros.min((1 << MAX_VALUE_POWER) - 1));
        }
    }

    /// Every event's stats, in name order.
    pub(crate) fn events(&self, now: Instant) -> Vec<EventStats> {
        let names = self.names.lock().clone();
        let mut events: Vec<EventStats> = names
            .iter()
            .filter_map(|(name, at)| self.events.get(*at).map(|l| l.stats(name, self.born, now)))
            .collect();
        events.sort_by(|a, b| a.event.cmp(&b.event));
        if self.other.started.load(Ordering::Relaxed) > 0 {
            events.push(self.other.stats(OTHER, self.born, now));
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use protocol::{decode_value, encode_value};

    use super::*;

    #[test]
    fn the_histogram_configuration_is_valid_and_small() {
        let config = histogram::Config::new(GROUPING_POWER, MAX_VALUE_POWER).unwrap();
        assert!(
            config.total_buckets() * 8 < 4096,
            "{}",
            config.total_buckets()
        );
    }

    #[test]
    fn counts_by_outcome_and_quantiles_come_from_what_ended() {
        let load = Load::new();
        for micros in 1..=100u64 {
            let slot = load.start("get");
            load.ended(slot, false, Outcome::Ok, Duration::from_micros(micros * 10));
        }
        let slot = load.start("get");
        load.ended(slot, false, Outcome::Error, Duration::from_millis(5));
        load.start("get"); // still running
        let tick = load.start("hit");
        load.ended(tick, true, Outcome::Ok, Duration::ZERO);
        let events = load.events(Instant::now());
        assert_eq!(events.len(), 2);
        let get = &events[0];
        assert_eq!(get.event, "get");
        assert_eq!(get.requests.ok, 100);
        assert_eq!(get.requests.error, 1);
        assert_eq!(get.in_flight, 1);
        let latency = get.latency.unwrap();
        assert_eq!(latency.count, 101);
        // Each quantile is its bucket's upper end: within about 6% above the value.
        assert!((500..=540).contains(&latency.p50_us), "{latency:?}");
        assert!((990..=1100).contains(&latency.p99_us), "{latency:?}");
        assert!((5000..=5400).contains(&latency.max_us), "{latency:?}");
        assert_eq!(events[1].ticks.ok, 1);
        assert_eq!(events[1].latency, None, "ticks have no latency");
    }

    #[test]
    fn event_slots_are_bounded() {
        let load = Load::new();
        for i in 0..MAX_DESCRIBED_EVENTS + 10 {
            load.start(&format!("e{i}"));
        }
        let events = load.events(Instant::now());
        assert_eq!(events.len(), MAX_DESCRIBED_EVENTS + 1);
        let other = events.last().unwrap();
        assert_eq!(other.event, OTHER);
        assert_eq!(other.in_flight, 10);
    }

    #[tokio::test(start_paused = true)]
    async fn the_latency_window_moves_on() {
        let load = Load::new();
        let slot = load.start("get");
        load.ended(slot, false, Outcome::Ok, Duration::from_secs(1));
        // The first ask covers the whole life.
        let first = load.events(Instant::now())[0].latency.unwrap();
        assert_eq!(first.count, 1);
        tokio::time::advance(WINDOW).await;
        for _ in 0..3 {
            let slot = load.start("get");
            load.ended(slot, false, Outcome::Ok, Duration::from_micros(100));
        }
        // A window later: only what came after the first ask.
        let later = load.events(Instant::now())[0].latency.unwrap();
        assert_eq!(later.count, 3, "{later:?}");
        assert!(later.max_us < 200, "{later:?}");
        assert_eq!(later.window_ms, millis(WINDOW));
        tokio::time::advance(WINDOW * 3).await;
        let quiet = load.events(Instant::now())[0].latency;
        assert_eq!(quiet, None, "nothing in the last window");
    }

    #[test]
    fn the_policy_admits_by_key() {
        let key = transport::KeyPair::generate().unwrap().public;
        let other = transport::KeyPair::generate().unwrap().public;
        assert!(DescribePolicy::Anyone.admits(None).is_ok());
        assert!(DescribePolicy::Off
            .admits(Some(&key))
            .unwrap_err()
            .is_system(NO_HANDLER));
        let keys = DescribePolicy::Keys(vec![key]);
        assert!(keys.admits(Some(&key)).is_ok());
        assert!(keys
            .admits(Some(&other))
            .unwrap_err()
            .is_system(NOT_AUTHORIZED));
        assert!(keys.admits(None).unwrap_err().is_system(NOT_AUTHORIZED));
    }

    #[test]
    fn a_description_travels_and_decodes_with_missing_fields_defaulted() {
        #[derive(Serialize)]
        struct Old {
            id: &'static str,
        }
        let old: Description = decode_value(&encode_value(&Old { id: "n1" }).unwrap()).unwrap();
        assert_eq!(old.id.as_str(), "n1");
        assert!(old.events.is_empty());
    }
}
