//! Fairness across peers, as a hostile user would try it: a `zeronode node` child with the
//! library's default limits; one peer floods it with 50,000 requests to `delay 600000` (a
//! handler that waits ten minutes) while another sends about 300 `echo` requests a second.
//! The quick peer loses nothing and stays quick; the flooder holds its own share (256
//! running, 1,024 waiting) and gets a typed `Error::Busy` for everything above it.
//!
//! Both engines, one after the other (the flood would blur a second one's latencies), in
//! this one test binary so that CI runs both whatever `ZERONODE_ENGINE` says.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use node::{Config, Engine, Error, Node};
use support::NodeProcess;

/// The flood: more than the node-wide limits (1,024 running + 8,192 waiting), all from one
/// peer.
const FLOOD: u64 = 50_000;
/// The quick peer's rate, and how long it keeps it up at least (and at least 2 s after
/// the flood is all in).
const QUICK_PER_SECOND: u64 = 300;
const QUICK_FOR: Duration = Duration::from_secs(6);
/// When the flood starts, into the quick peer's run: before it, the quick peer's requests
/// meet an idle node; after it, a node whose one peer holds its whole share.
const FLOOD_AFTER: Duration = Duration::from_secs(1);
/// How long the flood may take to be all in (refused or held): 11-15 s measured in a debug
/// build on a 2-core machine that other builds shared. Both engines in one binary stay
/// under a minute.
const FLOOD_IN: Duration = Duration::from_secs(20);
/// The bound on the quick peer's 99th percentile. On an idle machine an echo takes well
/// under a millisecond; here the server (a debug build) also reads and refuses 50,000
/// requests in the first seconds, on a machine whose cores the test's own two client nodes
/// share (and CI shares with others), so its requests queue behind that work for a while.
/// Measured there: p50 about 2 ms, p99 24-43 ms, max 60-125 ms. What the bound tells
/// apart is starvation: before the per-peer bounds and the lanes, the quick peer got no
/// reply at all (every request a `RequestTimeout` after 10 s).
const P99_BOUND: Duration = Duration::from_secs(2);

/// One engine at a time (see the module's doc).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn a_flooding_peer_leaves_a_quick_one_served_on_the_native_engine() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    flood_and_quick(Engine::Native, "native");
}

#[test]
fn a_flooding_peer_leaves_a_quick_one_served_on_libzmq() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    flood_and_quick(Engine::Libzmq, "libzmq");
}

/// How the flood's requests ended, once everything above the flooder's share was refused
/// (the rest is held by the server: a ten-minute handler).
#[derive(Debug, Default)]
struct Flood {
    busy: u64,
    answered: u64,
    other: Vec<String>,
}

fn flood_and_quick(engine: Engine, name: &str) {
    let mut srv = NodeProcess::start(&[
        "--id",
        "srv",
        "--bind",
        "tcp://127.0.0.1:0",
        "--engine",
        name,
    ]);
    assert_eq!(srv.next_line(), "node srv ready");
    let defaults = Config::default();
    // What one peer may hold: running, then waiting in its lane.
    let share = (defaults.max_handlers_per_peer + defaults.max_queued_per_peer) as u64;
    assert!(share < FLOOD, "the flood exceeds the flooder's share");
    let refused = FLOOD - share;

    // Each client node on a runtime of its own: the flooder's 50,000 calls do not hold up
    // the quick peer's own sending (two clients, as two processes would be).
    let runtime = |workers| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let (quick_runtime, flood_runtime) = (runtime(1), runtime(1));
    let address = srv.address.clone();
    quick_runtime.block_on(async {
        let quick = client("quick", engine, &address, Duration::from_secs(10)).await;
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let quick_run = tokio::spawn(quick_requests(quick.clone(), Arc::clone(&stop)));
        tokio::time::sleep(FLOOD_AFTER).await;

        let (flood_in, flood_in_rx) = tokio::sync::oneshot::channel();
        let (leave, leave_rx) = tokio::sync::oneshot::channel::<()>();
        let flood =
            flood_runtime.spawn(flood(engine, address.clone(), refused, flood_in, leave_rx));
        let report = flood_in_rx.await.expect("the flood's report");
        // The quick peer keeps going for a while with the flooder holding its whole share.
        let until = (started + QUICK_FOR).max(Instant::now() + Duration::from_secs(2));
        tokio::time::sleep_until(until.into()).await;
        stop.store(true, Ordering::SeqCst);
        let latencies = quick_run.await.expect("the quick peer's run");
        let elapsed = started.elapsed();

        // Everything above the flooder's share was refused BUSY, and only that: the rest is
        // running or waiting on the server, not answered, not lost.
        assert!(
            report.other.is_empty(),
            "{name}: {} of the flood's requests ended otherwise, the first: {:?}",
            report.other.len(),
            &report.other[..report.other.len().min(3)]
        );
        assert_eq!(
            (
                report.busy,
                report.answered,
                FLOOD - report.busy - report.answered
            ),
            (refused, 0, share),
            "{name}: (refused BUSY, answered, still held by the server)"
        );

        // The quick peer: every request answered with its own data, and quickly.
        let sent = latencies.len() as u64;
        let mut times: Vec<Duration> = latencies
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{name}: a quick request failed: {e}"));
        times.sort();
        let p50 = times[times.len() / 2];
        let p99 = times[times.len() * 99 / 100];
        let max = times[times.len() - 1];
        eprintln!(
            "{name}: quick peer {sent} requests in {elapsed:.1?}, p50 {p50:.1?} p99 {p99:.1?} \
             max {max:.1?}; flood {refused} refused BUSY, {share} held"
        );
        let expected = QUICK_PER_SECOND * elapsed.as_millis() as u64 / 1000;
        assert!(
            sent >= expected * 9 / 10,
            "{name}: the quick peer sent {sent} of about {expected}"
        );
        assert!(
            p99 < P99_BOUND,
            "{name}: the quick peer's p99 {p99:?} (p50 {p50:?}, max {max:?})"
        );

        // The flooder leaves: its held work goes with it, and the server still answers.
        let _ = leave.send(());
        flood.await.expect("the flooder closed");
        let after: u64 = quick.request("srv", "echo", &7u64).await.expect("echo");
        assert_eq!(after, 7);
        quick.close().await;
    });
}

/// A client node joined to the server at `address`.
async fn client(id: &str, engine: Engine, address: &str, timeout: Duration) -> Node {
    let node = Node::builder()
        .id(id)
        .engine(engine)
        .request_timeout(timeout)
        .build()
        .await
        .expect("a client node");
    node.connect(address).await.expect("joined the server");
    node
}

/// The flooder: `FLOOD` requests to `delay 600000` at once; reports how they ended on
/// `all_in` once `refused` of them were refused (or `FLOOD_IN` passed), then leaves when
/// told.
async fn flood(
    engine: Engine,
    address: String,
    refused: u64,
    all_in: tokio::sync::oneshot::Sender<Flood>,
    leave: tokio::sync::oneshot::Receiver<()>,
) {
    // Its requests outlive the test: they end when the flooder closes.
    let flooder = client("flooder", engine, &address, Duration::from_secs(120)).await;
    let (busy, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let other = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..FLOOD {
        let (flooder, busy, answered, other) = (
            flooder.clone(),
            Arc::clone(&busy),
            Arc::clone(&answered),
            Arc::clone(&other),
        );
        calls.spawn(async move {
            match flooder.request::<_, u64>("srv", "delay", &600_000u64).await {
                Ok(_) => {
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                Err(Error::Busy { .. }) => {
                    busy.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) => other.lock().expect("lock").push(e.to_string()),
            }
        });
    }
    let began = Instant::now();
    while busy.load(Ordering::SeqCst) < refused && began.elapsed() < FLOOD_IN {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = Flood {
        busy: busy.load(Ordering::SeqCst),
        answered: answered.load(Ordering::SeqCst),
        other: other.lock().expect("lock").clone(),
    };
    let _ = all_in.send(report);
    let _ = leave.await;
    flooder.close().await;
    while calls.join_next().await.is_some() {}
}

/// About `QUICK_PER_SECOND` `echo` requests a second until `stop`, each on a task of its
/// own (a slow reply does not slow the rate; ticks missed while the process was busy are
/// caught up); each one's round trip, or its error.
async fn quick_requests(quick: Node, stop: Arc<AtomicBool>) -> Vec<Result<Duration, String>> {
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / QUICK_PER_SECOND as u32);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut calls = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        ticks.tick().await;
        n += 1;
        let quick = quick.clone();
        calls.push(tokio::spawn(async move {
            let sent = Instant::now();
            match quick.request::<_, u64>("srv", "echo", &n).await {
                Ok(back) if back == n => Ok(sent.elapsed()),
                Ok(back) => Err(format!("echo {n} came back as {back}")),
                Err(e) => Err(format!("echo {n}: {e} ({:?})", e.code())),
            }
        }));
    }
    let mut ended = Vec::with_capacity(calls.len());
    for call in calls {
        ended.push(call.await.unwrap_or_else(|e| Err(format!("task: {e}"))));
    }
    ended
}
