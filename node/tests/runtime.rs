//! The node as a service runtime, over loopback: handlers off the socket drivers, the
//! node-wide handler limit and its busy policies, at-most-once through routers, middleware
//! over the whole node, lifecycle (drop, weak handles), connect and reconnection policies.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use node::{
    BusyPolicy, ConnectOptions, Error, ErrorCode, EventStream, Filter, HandlerError, LeaveReason,
    Node, NodeBuilder, NodeEvent, Reconnect, ReconnectPolicy, Request,
};
use support::*;
use tower::limit::ConcurrencyLimitLayer;
use tower::ServiceExt;

// ---- helpers ------------------------------------------------------------------------

fn joined(id: &'static str) -> impl FnMut(&NodeEvent) -> Option<()> {
    move |e| match e {
        NodeEvent::PeerJoined { id: who, .. } if who.as_str() == id => Some(()),
        _ => None,
    }
}

fn left(id: &'static str, reason: LeaveReason) -> impl FnMut(&NodeEvent) -> Option<()> {
    move |e| match e {
        NodeEvent::PeerLeft {
            id: who,
            reason: why,
            ..
        } if who.as_str() == id && *why == reason => Some(()),
        _ => None,
    }
}

/// Every event already delivered to `events`, without waiting. (The stream keeps its
/// pending receive between polls, so a poll that finds nothing loses nothing.)
fn delivered(events: &mut EventStream) -> Vec<NodeEvent> {
    let mut seen = Vec::new();
    while let Some(Some(event)) = events.recv().now_or_never() {
        seen.push(event);
    }
    seen
}

/// The events `events` receives during `window`.
async fn events_during(events: &mut EventStream, window: Duration) -> Vec<NodeEvent> {
    let end = tokio::time::Instant::now() + window;
    let mut seen = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout_at(end, events.recv()).await {
        seen.push(event);
    }
    seen
}

/// Waits (bounded) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    within(what, async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Counts the handlers of a group running at once, and the most there ever were.
#[derive(Default)]
struct Overlap {
    running: AtomicUsize,
    most: AtomicUsize,
}

impl Overlap {
    async fn run_for(&self, time: Duration) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(time).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// A request handler that counts itself in `overlap` for `time`.
fn overlapping(
    overlap: &Arc<Overlap>,
    time: Duration,
) -> impl Fn(Request) -> futures::future::BoxFuture<'static, Result<&'static str, HandlerError>>
       + Send
       + Sync
       + Clone
       + 'static {
    let overlap = Arc::clone(overlap);
    move |_req: Request| {
        let overlap = Arc::clone(&overlap);
        Box::pin(async move {
            overlap.run_for(time).await;
            Ok("done")
        })
    }
}

// ---- 1. handlers never run on the socket's driver -------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_blocks_its_thread_delays_neither_other_requests_nor_heartbeats() {
    let a = server("a").await;
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    a.on_request("block", move |_req: Request| {
        let started = started_tx.clone();
        async move {
            let _ = started.send(());
            // Blocks its worker thread, as CPU-bound or blocking code in a handler does.
            std::thread::sleep(Duration::from_millis(1500));
            Ok::<_, HandlerError>("slept")
        }
    });
    a.on_request("quick", |_req: Request| async move {
        Ok::<_, HandlerError>("quick")
    });
    let b = client("b").await;
    let c = client("c").await;
    b.connect(&address(&a)).await.unwrap();
    c.connect(&address(&a)).await.unwrap();
    let mut a_events = a.events();
    let mut b_events = b.events();
    let mut c_events = c.events();

    let blocker = b.clone();
    let blocking =
        tokio::spawn(async move { blocker.request::<_, String>("a", "block", &()).await });
    within("the blocking handler starts", started.recv())
        .await
        .unwrap();

    let sent = Instant::now();
    let quick: String = within("quick", c.request("a", "quick", &())).await.unwrap();
    let took = sent.elapsed();
    assert_eq!(quick, "quick");
    // On loopback the answer takes about a millisecond; 100 ms leaves room for a loaded CI
    // machine and still fails clearly if requests queue behind the blocking handler again
    // (before handlers ran as tasks of their own, this waited ~1.4 s for it to finish).
    assert!(
        took < Duration::from_millis(100),
        "answered after {took:?} while a handler blocked"
    );
    assert!(!blocking.is_finished(), "the blocking handler still runs");

    assert_eq!(
        within("the blocking request", blocking)
            .await
            .unwrap()
            .unwrap(),
        "slept"
    );
    // The handler blocked for 1.5 s, three times the 500 ms after which a silent peer is
    // declared dead (heartbeat 200 ms): had it stalled a driver or the heartbeats, a peer
    // would have left.
    for (node, events) in [
        ("a", &mut a_events),
        ("b", &mut b_events),
        ("c", &mut c_events),
    ] {
        let gone: Vec<NodeEvent> = delivered(events)
            .into_iter()
            .filter(|e| matches!(e, NodeEvent::PeerLeft { .. }))
            .collect();
        assert!(gone.is_empty(), "{node} saw peers leave: {gone:?}");
    }
    assert!(a.peers().get("b").is_some() && a.peers().get("c").is_some());
    assert!(b.peers().get("a").is_some() && c.peers().get("a").is_some());
}

// ---- 2. the node-wide handler limit and the busy policies ------------------------------

const BURST: usize = 20;

/// A server with `slots` handler slots and `policy`, whose handler `work` takes 1 s, and a
/// client that has just sent it `BURST` requests at once. Returns the server, the count of
/// handler runs, and the burst's results to come.
async fn start_burst(
    policy: BusyPolicy,
    slots: usize,
) -> (
    Node,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<Vec<node::Result<String>>>,
) {
    let srv = support::builder("srv")
        .max_concurrent_handlers(slots)
        .when_busy(policy)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    srv.on_request("work", move |_req: Request| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, HandlerError>("worked".to_string())
        }
    });
    // Queued requests are answered up to 4 s after the burst: more than the default.
    let b = support::builder("b")
        .request_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    b.connect(&address(&srv)).await.unwrap();
    let burst = tokio::spawn(async move {
        let calls = (0..BURST).map(|_| b.request::<_, String>("srv", "work", &()));
        futures::future::join_all(calls).await
    });
    // Every request of the burst reached the server: refused, running or queued.
    until("the burst reaches the server", || {
        let stats = srv.stats();
        stats.busy_refused as usize + stats.handlers_active == BURST
    })
    .await;
    (srv, runs, burst)
}

/// How many requests were answered and how many refused as busy; any other outcome fails.
fn tally(results: &[node::Result<String>]) -> (usize, usize) {
    let (mut answered, mut busy) = (0, 0);
    for result in results {
        match result {
            Ok(reply) => {
                assert_eq!(reply, "worked");
                answered += 1;
            }
            Err(err @ Error::Busy { .. }) => {
                assert_eq!(err.code(), ErrorCode::Busy);
                busy += 1;
            }
            Err(other) => panic!("neither answered nor busy: {other:?}"),
        }
    }
    (answered, busy)
}

#[tokio::test]
async fn refuse_answers_busy_beyond_the_handler_limit() {
    let (srv, runs, burst) = start_burst(BusyPolicy::Refuse, 2).await;
    let now = srv.stats();
    assert_eq!(
        (now.handlers_active, now.handlers_queued),
        (2, 0),
        "{now:?}"
    );

    let results = within("the burst", burst).await.unwrap();
    let (answered, busy) = tally(&results);
    assert_eq!(answered + busy, BURST);
    // Two slots, each held for 1 s, and all 20 requests arrive within milliseconds: two
    // run, the other 18 find both slots taken. No slack is needed.
    assert!(busy >= 18, "busy {busy}");
    assert!(answered >= 2, "answered {answered}");
    let stats = srv.stats();
    assert_eq!(stats.busy_refused, busy as u64, "{stats:?}");
    assert_eq!(stats.requests_handled, answered as u64, "{stats:?}");
    // A refused request ran nothing.
    assert_eq!(runs.load(Ordering::SeqCst), answered);
}

#[tokio::test]
async fn wait_queues_up_to_its_bound_then_answers_busy() {
    let (srv, runs, burst) = start_burst(BusyPolicy::Wait { max_queued: 5 }, 2).await;
    // All 20 arrived while the first two handlers still had most of their second to go:
    // two run, five wait for a slot, the other 13 find the queue full.
    let now = srv.stats();
    assert_eq!(
        (now.handlers_active, now.handlers_queued),
        (7, 5),
        "{now:?}"
    );
    assert_eq!(now.busy_refused, 13, "{now:?}");

    let results = within("the burst", burst).await.unwrap();
    let (answered, busy) = tally(&results);
    assert_eq!(answered + busy, BURST);
    // The two running and the five queued (run two by two as slots free up) are answered.
    assert_eq!(answered, 7);
    assert_eq!(busy, 13);
    let stats = srv.stats();
    assert_eq!(stats.busy_refused, 13, "{stats:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 7);
    assert_eq!((stats.handlers_active, stats.handlers_queued), (0, 0));
}

#[tokio::test]
async fn ticks_beyond_the_handler_limit_are_dropped_and_counted() {
    let srv = support::builder("srv")
        .max_concurrent_handlers(1)
        .when_busy(BusyPolicy::Refuse)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&handled);
    srv.on_tick("slow-tick", move |_req: Request| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    let b = client("b").await;
    b.connect(&address(&srv)).await.unwrap();
    for i in 0..50 {
        b.tick("srv", "slow-tick", &i).await.unwrap();
    }
    let accounted = || handled.load(Ordering::SeqCst) + srv.stats().ticks_dropped as usize;
    until("every tick handled or dropped", || accounted() == 50).await;
    until("the handlers finish", || srv.stats().handlers_active == 0).await;

    let (handled, dropped) = (handled.load(Ordering::SeqCst), srv.stats().ticks_dropped);
    assert_eq!(
        handled + dropped as usize,
        50,
        "handled {handled}, dropped {dropped}"
    );
    // One slot held 500 ms while the 50 ticks arrive in milliseconds: some ran, some were
    // dropped.
    assert!(
        handled >= 1 && dropped >= 1,
        "handled {handled}, dropped {dropped}"
    );
}

// ---- 3. at most once through routers ------------------------------------------------------

/// Codes a leaf's handler uses on purpose that routers also use for their own outcomes.
const ROUTER_CODES: [&str; 6] = [
    "NOT_FOUND",
    "TIMEOUT",
    "NO_MATCH",
    "ROUTE_LOOP",
    "NOT_A_ROUTER",
    "BUSY",
];

#[tokio::test]
async fn a_handler_error_behind_two_routers_reaches_the_caller_unchanged_and_runs_once() {
    let r1 = router("r1").await;
    let r2 = router("r2").await;
    let leaf = support::builder("leaf")
        .option("role", "leaf")
        .build()
        .await
        .unwrap();
    let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let counts = Arc::clone(&runs);
    leaf.on_request("fail", move |req: Request| {
        let counts = Arc::clone(&counts);
        async move {
            let code: String = req.decode()?;
            *counts.lock().unwrap().entry(code.clone()).or_default() += 1;
            Err::<(), _>(HandlerError::new(code, "the leaf fails on purpose"))
        }
    });
    leaf.connect(&address(&r1)).await.unwrap();
    leaf.connect(&address(&r2)).await.unwrap();
    let origin = client("origin").await;
    origin.connect(&address(&r1)).await.unwrap();
    origin.connect(&address(&r2)).await.unwrap();
    // The origin reaches the leaf only through a router, and has two of them.
    assert!(origin.peers().get("leaf").is_none());
    assert!(origin.peers().get("r1").unwrap().router && origin.peers().get("r2").unwrap().router);

    let by_filter = Filter::new().eq("role", "leaf");
    for code in ROUTER_CODES {
        let by_id = within(code, origin.request::<_, ()>("leaf", "fail", code)).await;
        let by_filter = within(code, origin.request::<_, ()>(&by_filter, "fail", code)).await;
        for result in [by_id, by_filter] {
            match result {
                Err(Error::Handler { code: got, message }) => {
                    assert_eq!(got, code);
                    assert_eq!(message, "the leaf fails on purpose");
                }
                other => panic!("{code}: expected the handler's error, got {other:?}"),
            }
        }
    }
    // A second run through the other router would follow the first within milliseconds.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let runs = runs.lock().unwrap().clone();
    for code in ROUTER_CODES {
        assert_eq!(
            runs.get(code),
            Some(&2),
            "{code}: once by id, once by filter"
        );
    }
}

#[tokio::test]
async fn a_handler_error_coded_timeout_is_the_handlers_error_not_a_timeout() {
    let a = server("a").await;
    a.on_request("fail", |_req: Request| async move {
        Err::<(), _>(HandlerError::new(HandlerError::TIMEOUT, "my own timeout"))
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let err = b.request::<_, ()>("a", "fail", &()).await.unwrap_err();
    assert!(!err.is_timeout(), "{err:?}");
    assert_eq!(err.code(), ErrorCode::HandlerError);
    assert!(
        matches!(&err, Error::Handler { code, .. } if code == HandlerError::TIMEOUT),
        "{err:?}"
    );
}

// ---- 4. middleware over the whole node ---------------------------------------------------

#[tokio::test]
async fn a_node_wide_concurrency_limit_covers_every_event() {
    let a = server("a").await;
    let overlap = Arc::new(Overlap::default());
    for event in ["one", "two"] {
        a.on_request(event, overlapping(&overlap, Duration::from_millis(200)));
    }
    a.layer(ConcurrencyLimitLayer::new(1));
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let (one, two) = within(
        "both requests",
        futures::future::join(
            b.request::<_, String>("a", "one", &()),
            b.request::<_, String>("a", "two", &()),
        ),
    )
    .await;
    assert_eq!((one.unwrap(), two.unwrap()), ("done".into(), "done".into()));
    assert_eq!(overlap.most(), 1, "two events never ran at once");
}

#[tokio::test]
async fn a_per_pattern_concurrency_limit_covers_only_its_event() {
    let a = server("a").await;
    let slow = Arc::new(Overlap::default());
    a.on_request("slow", overlapping(&slow, Duration::from_millis(200)));
    let watch = Arc::clone(&slow);
    a.on_request("fast", move |_req: Request| {
        let watch = Arc::clone(&watch);
        async move { Ok::<_, HandlerError>(watch.running.load(Ordering::SeqCst)) }
    });
    a.layer_for("slow", ConcurrencyLimitLayer::new(1));
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();

    let slows: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.request::<_, String>("a", "slow", &()).await })
        })
        .collect();
    until("a slow request runs", || {
        slow.running.load(Ordering::SeqCst) == 1
    })
    .await;
    // Sent while the slow ones hold (and wait for) their limit: it is not held up.
    let slow_running: usize = within("fast", b.request("a", "fast", &())).await.unwrap();
    assert_eq!(slow_running, 1, "fast ran alongside a slow one");
    for call in slows {
        assert_eq!(within("slow", call).await.unwrap().unwrap(), "done");
    }
    assert_eq!(slow.most(), 1, "two slow requests never ran at once");
}

#[tokio::test]
async fn ticks_go_through_node_wide_middleware() {
    let a = server("a").await;
    let ticks_seen = Arc::new(AtomicUsize::new(0));
    let requests_seen = Arc::new(AtomicUsize::new(0));
    let (ticks, requests) = (Arc::clone(&ticks_seen), Arc::clone(&requests_seen));
    // Counts what it sees, and refuses the ticks of "blocked" without calling inner.
    a.layer(tower::layer::layer_fn(
        move |inner: node::HandlerService| {
            let (ticks, requests) = (Arc::clone(&ticks), Arc::clone(&requests));
            tower::util::BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                let inner = inner.clone();
                let seen = if req.is_tick() { &ticks } else { &requests };
                seen.fetch_add(1, Ordering::SeqCst);
                async move {
                    if req.is_tick() && req.event() == "blocked" {
                        return Err(HandlerError::new("BLOCKED", "refused by middleware").into());
                    }
                    inner.oneshot(req).await
                }
            }))
        },
    ));
    let blocked_runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&blocked_runs);
    a.on_tick("blocked", move |_req: Request| {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let (open_tx, mut open) = tokio::sync::mpsc::unbounded_channel();
    a.on_tick("open", move |req: Request| {
        let open = open_tx.clone();
        async move {
            let _ = open.send(req.is_tick());
        }
    });
    a.on_request("ask", |_req: Request| async move {
        Ok::<_, HandlerError>("answered")
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();

    b.tick("a", "blocked", &()).await.unwrap();
    b.tick("a", "open", &()).await.unwrap();
    assert!(within("the open tick runs", open.recv()).await.unwrap());
    // The layer decides as it sees a tick: once it saw both, the blocked one was refused.
    until("the layer sees both ticks", || {
        ticks_seen.load(Ordering::SeqCst) == 2
    })
    .await;
    let answer: String = b.request("a", "ask", &()).await.unwrap();
    assert_eq!(answer, "answered");
    assert_eq!(
        blocked_runs.load(Ordering::SeqCst),
        0,
        "refused by the layer"
    );
    assert_eq!(ticks_seen.load(Ordering::SeqCst), 2);
    assert_eq!(requests_seen.load(Ordering::SeqCst), 1);
}

// ---- 5. lifecycle: the last handle closes the node ---------------------------------------

fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

#[tokio::test]
async fn dropping_every_handle_closes_the_node_releases_its_port_and_ends_its_tasks() {
    // `num_alive_tasks` is stable in tokio 1.54 (Cargo.lock). Each test has its own
    // runtime, so this counts only the tasks of the nodes built here.
    let tasks_before = alive_tasks();
    let srv = server("dropped").await;
    srv.on_request("ping", |_req: Request| async move {
        Ok::<_, HandlerError>("pong")
    });
    let endpoint = address(&srv);
    let c = client("c").await;
    let mut events = c.events();
    c.connect(&endpoint).await.unwrap();
    let pong: String = c.request("dropped", "ping", &()).await.unwrap();
    assert_eq!(pong, "pong");

    drop(srv);
    wait_for(
        &mut events,
        "the client sees the server leave",
        left("dropped", LeaveReason::Stopped),
    )
    .await;
    // The close runs in a task: the port is released soon, not necessarily at once.
    let again = within("the port is released", async {
        let started = Instant::now();
        loop {
            match support::builder("again")
                .bind(endpoint.as_str())
                .build()
                .await
            {
                Ok(node) => break node,
                Err(_) if started.elapsed() < Duration::from_secs(5) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{endpoint} still taken after 5 s: {e}"),
            }
        }
    })
    .await;
    assert_eq!(address(&again), endpoint);

    // Every node of this test dropped, none closed: each closes itself, and its tasks end.
    drop(again);
    drop(c);
    drop(events);
    let mut last = alive_tasks();
    within("the nodes' tasks end", async {
        while last > tasks_before {
            tokio::time::sleep(Duration::from_millis(20)).await;
            last = alive_tasks();
        }
    })
    .await;
    assert_eq!(last, tasks_before);
}

#[tokio::test]
async fn a_handler_holding_a_weak_node_does_not_keep_it_alive() {
    let srv = server("self-aware").await;
    let weak = srv.downgrade();
    let me = weak.clone();
    srv.on_request("whoami", move |_req: Request| {
        let me = me.clone();
        async move {
            let node = me
                .upgrade()
                .ok_or_else(|| HandlerError::new("GONE", "closed"))?;
            Ok::<_, HandlerError>(node.id().to_string())
        }
    });
    let c = client("c").await;
    let mut events = c.events();
    c.connect(&address(&srv)).await.unwrap();
    let id: String = c.request("self-aware", "whoami", &()).await.unwrap();
    assert_eq!(id, "self-aware");

    drop(srv);
    assert!(weak.upgrade().is_none(), "no handle is left");
    wait_for(
        &mut events,
        "the node closed (its peer saw it leave)",
        left("self-aware", LeaveReason::Stopped),
    )
    .await;
}

// ---- 6. connect ------------------------------------------------------------------------

#[tokio::test]
async fn concurrent_connects_share_one_join_and_disconnect_says_goodbye() {
    // Heartbeats so slow (a peer is dead after 75 s) that only the goodbye can explain a
    // peer leaving within this test's bounds.
    let slow = Duration::from_secs(30);
    let a = support::builder("a")
        .heartbeat_interval(slow)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let b = support::builder("b")
        .heartbeat_interval(slow)
        .build()
        .await
        .unwrap();
    let endpoint = address(&a);
    let mut a_events = a.events();

    let (first, second) = within(
        "two connects",
        futures::future::join(b.connect(&endpoint), b.connect(&endpoint)),
    )
    .await;
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first.id.as_str(), "a");
    assert_eq!(second.id, first.id);
    // Already joined: the existing peer, without a new handshake.
    let third = tokio::time::timeout(Duration::from_secs(1), b.connect(&endpoint))
        .await
        .expect("connect to a joined address returns at once")
        .unwrap();
    assert_eq!(third.id, first.id);
    let joins = events_during(&mut a_events, Duration::from_millis(300))
        .await
        .into_iter()
        .filter(|e| matches!(e, NodeEvent::PeerJoined { id, .. } if id.as_str() == "b"))
        .count();
    assert_eq!(joins, 1, "one connection, one join");
    assert_eq!(
        a.peers()
            .list()
            .iter()
            .filter(|p| p.id.as_str() == "b")
            .count(),
        1
    );

    b.disconnect(&endpoint).await.unwrap();
    // `Stopped` is the goodbye's reason; the wait is bounded far below the 75 s a
    // heartbeat timeout would take.
    wait_for(
        &mut a_events,
        "a sees b leave",
        left("b", LeaveReason::Stopped),
    )
    .await;
    assert!(a.peers().get("b").is_none());
}

#[tokio::test]
async fn connect_timeout_to_an_address_that_never_answers_is_a_handshake_timeout() {
    // The kernel completes TCP connections into the backlog of a listener that never
    // accepts: the connection is up, and nothing on it ever speaks.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("tcp://{}", silent.local_addr().unwrap());
    let nobody = {
        let released = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("tcp://{}", released.local_addr().unwrap())
    };
    // The node's own handshake timeout is far longer than the bound below: only the
    // timeout given to the call can end it in time.
    let c = support::builder("c")
        .handshake_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let short = Duration::from_millis(300);
    let bound = Duration::from_secs(3);
    for endpoint in [&silent, &nobody] {
        let err = tokio::time::timeout(
            bound,
            c.connect_with(endpoint, node::ConnectOptions::new().timeout(short)),
        )
        .await
        .unwrap_or_else(|_| panic!("connect_timeout to {endpoint} still waiting"))
        .unwrap_err();
        assert!(matches!(err, Error::HandshakeTimeout { .. }), "{err:?}");
        assert_eq!(err.code(), ErrorCode::HandshakeFailed);
        // A failed connect keeps nothing.
        assert!(matches!(
            c.disconnect(endpoint).await,
            Err(Error::NotConnectedTo { .. })
        ));
    }
    let err = tokio::time::timeout(
        bound,
        c.connect_with(&silent, ConnectOptions::new().timeout(short)),
    )
    .await
    .expect("connect_with with a timeout still waiting")
    .unwrap_err();
    assert!(matches!(err, Error::HandshakeTimeout { .. }), "{err:?}");
    assert!(c.peers().is_empty());
}

// ---- 7. reconnection policies ------------------------------------------------------------

/// A client with `policy` and a short backoff, so that a rejoin (allowed or not) would
/// come within a few hundred milliseconds.
fn reconnecting(id: &str, policy: ReconnectPolicy) -> NodeBuilder {
    support::builder(id).reconnect(
        Reconnect::new(policy).backoff(Duration::from_millis(50), Duration::from_millis(200)),
    )
}

/// A server `svc` answering `gen` with `generation`.
async fn service(bind: &str, generation: u32) -> Node {
    let svc = support::builder("svc").bind(bind).build().await.unwrap();
    svc.on_request("gen", move |_req: Request| async move {
        Ok::<_, HandlerError>(generation)
    });
    svc
}

/// A client with `policy` joined to `svc`; `svc` closes gracefully and a new `svc` binds the
/// same address. Returns the client, its events from before the close, the new server and
/// the address.
async fn graceful_restart(policy: ReconnectPolicy) -> (Node, EventStream, Node, String) {
    let first = service("tcp://127.0.0.1:0", 1).await;
    let endpoint = address(&first);
    let c = reconnecting("c", policy).build().await.unwrap();
    let mut events = c.events();
    c.connect(&endpoint).await.unwrap();
    assert_eq!(c.request::<_, u32>("svc", "gen", &()).await.unwrap(), 1);
    first.close().await;
    wait_for(
        &mut events,
        "svc says goodbye",
        left("svc", LeaveReason::Stopped),
    )
    .await;
    let second = service(&endpoint, 2).await;
    (c, events, second, endpoint)
}

/// Whether `id` joins within 1.5 s: several times the backoff, so a rejoin the policy
/// allowed would have come.
async fn rejoined(events: &mut EventStream, id: &str) -> bool {
    events_during(events, Duration::from_millis(1500))
        .await
        .iter()
        .any(|e| matches!(e, NodeEvent::PeerJoined { id: who, .. } if who.as_str() == id))
}

#[tokio::test]
async fn never_does_not_rejoin_a_restarted_server() {
    let (c, mut events, _second, endpoint) = graceful_restart(ReconnectPolicy::Never).await;
    assert!(!rejoined(&mut events, "svc").await, "Never rejoined");
    assert!(c.peers().get("svc").is_none());
    // The connection was given up, the server is there: connecting again joins it.
    c.connect(&endpoint).await.unwrap();
    assert_eq!(c.request::<_, u32>("svc", "gen", &()).await.unwrap(), 2);
}

#[tokio::test]
async fn on_failure_does_not_rejoin_after_a_goodbye() {
    let (c, mut events, _second, _endpoint) = graceful_restart(ReconnectPolicy::OnFailure).await;
    assert!(
        !rejoined(&mut events, "svc").await,
        "rejoined after a goodbye"
    );
    assert!(c.peers().get("svc").is_none());
}

#[tokio::test]
async fn on_failure_rejoins_after_a_heartbeat_timeout() {
    let svc = service("tcp://127.0.0.1:0", 1).await;
    let proxy = Proxy::start(&address(&svc)).await;
    let c = reconnecting("c", ReconnectPolicy::OnFailure)
        .build()
        .await
        .unwrap();
    let mut events = c.events();
    c.connect(&proxy.address).await.unwrap();
    proxy.set_cut(true);
    wait_for(
        &mut events,
        "svc times out",
        left("svc", LeaveReason::TimedOut),
    )
    .await;
    proxy.set_cut(false);
    wait_for(&mut events, "c rejoins svc", joined("svc")).await;
    let generation: u32 = within("gen after heal", c.request("svc", "gen", &()))
        .await
        .unwrap();
    assert_eq!(generation, 1);
}

#[tokio::test]
async fn always_rejoins_a_server_restarted_on_the_same_address() {
    let (c, mut events, _second, _endpoint) = graceful_restart(ReconnectPolicy::Always).await;
    wait_for(&mut events, "c rejoins the new svc", joined("svc")).await;
    assert_eq!(c.request::<_, u32>("svc", "gen", &()).await.unwrap(), 2);
}

// ---- 8. `?` in a handler -------------------------------------------------------------------

#[tokio::test]
async fn a_nested_calls_error_passes_through_a_handler_with_question_mark() {
    let c = server("c").await;
    c.on_request("fail", |_req: Request| async move {
        Err::<(), _>(HandlerError::new("E_C", "c failed"))
    });
    let b = server("b").await;
    let me = b.downgrade();
    b.on_request("relay", move |req: Request| {
        let me = me.clone();
        async move {
            let to: String = req.decode()?;
            let node = me
                .upgrade()
                .ok_or_else(|| HandlerError::new("GONE", "b closed"))?;
            node.request::<_, ()>(to.as_str(), "fail", &()).await?;
            Ok::<_, HandlerError>(())
        }
    });
    b.connect(&address(&c)).await.unwrap();
    let a = client("a").await;
    a.connect(&address(&b)).await.unwrap();

    match a.request::<_, ()>("b", "relay", "c").await {
        Err(Error::Handler { code, message }) => {
            assert_eq!((code.as_str(), message.as_str()), ("E_C", "c failed"));
        }
        other => panic!("expected c's error, got {other:?}"),
    }
    // A failure of the nested call that is not a handler's: its stable code.
    match a.request::<_, ()>("b", "relay", "nobody").await {
        Err(Error::Handler { code, .. }) => {
            assert_eq!(code, ErrorCode::NodeNotFound.as_str());
        }
        other => panic!("expected NODE_NOT_FOUND from b, got {other:?}"),
    }
}

/// A burst that lands in one receive batch: a slow handler at its head delays nothing
/// behind it (each job gets a runner of its own, not the one idle runner in turn).
#[tokio::test]
async fn a_slow_handler_at_the_head_of_a_burst_delays_nothing_behind_it() {
    let srv = server("srv").await;
    srv.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok::<_, HandlerError>("slow")
    });
    srv.on_request("quick", |_req: Request| async move {
        Ok::<_, HandlerError>("quick")
    });
    let c = client("c").await;
    c.connect(&address(&srv)).await.unwrap();
    // Warm: the runners of the first requests are idle now.
    let _: String = c.request("srv", "quick", &()).await.unwrap();
    let started = Instant::now();
    let slow = {
        let c = c.clone();
        tokio::spawn(async move { c.request::<_, String>("srv", "slow", &()).await })
    };
    let quick: Vec<_> = (0..20)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.request::<_, String>("srv", "quick", &()).await })
        })
        .collect();
    for q in quick {
        assert_eq!(
            within("a quick request", q).await.unwrap().unwrap(),
            "quick"
        );
    }
    // Well under the slow handler's 1.5 s (the quick ones take about a millisecond).
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "quick requests waited {:?} behind the slow one",
        started.elapsed()
    );
    assert_eq!(
        within("the slow request", slow).await.unwrap().unwrap(),
        "slow"
    );
}
