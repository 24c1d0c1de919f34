//! Heartbeats, dead peers, restarts and rejoin, graceful close.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node::{Direction, Error, ErrorCode, HandlerError, LeaveReason, NodeEvent, Request};
use support::*;

fn left(id: &'static str, reason: LeaveReason) -> impl FnMut(&NodeEvent) -> Option<Direction> {
    move |e| match e {
        NodeEvent::PeerLeft {
            id: who,
            direction,
            reason: why,
        } if who.as_str() == id && *why == reason => Some(*direction),
        _ => None,
    }
}

fn joined(id: &'static str) -> impl FnMut(&NodeEvent) -> Option<Direction> {
    move |e| match e {
        NodeEvent::PeerJoined {
            id: who, direction, ..
        } if who.as_str() == id => Some(*direction),
        _ => None,
    }
}

#[tokio::test]
async fn both_sides_detect_a_silent_peer_and_rejoin_when_the_path_heals() {
    let a = server("a").await;
    a.on_request("ping", |_req: Request| async move {
        Ok::<_, HandlerError>("pong")
    });
    let proxy = Proxy::start(&address(&a)).await;
    let b = client("b").await;
    b.connect(&proxy.address).await.unwrap();
    let mut a_events = a.events();
    let mut b_events = b.events();
    let _: String = b.request("a", "ping", &()).await.unwrap();

    // A request pending when the path is cut fails as soon as the peer is declared gone,
    // long before its own 60 s timeout.
    let waiting = b.clone();
    let pending = tokio::spawn(async move {
        waiting
            .call("a", "never-answered")
            .timeout(Duration::from_secs(60))
            .send::<_, String>(&())
            .await
    });
    a.on_request("never-answered", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(120)).await;
        Ok::<_, HandlerError>(String::new())
    });
    tokio::time::sleep(Duration::from_millis(50)).await;

    let cut_at = Instant::now();
    proxy.set_cut(true);
    let a_saw = wait_for(
        &mut a_events,
        "a sees b time out",
        left("b", LeaveReason::TimedOut),
    )
    .await;
    let b_saw = wait_for(
        &mut b_events,
        "b sees a time out",
        left("a", LeaveReason::TimedOut),
    )
    .await;
    let detected = cut_at.elapsed();
    assert_eq!((a_saw, b_saw), (Direction::Downstream, Direction::Upstream));
    // Three intervals is the design target (dead-peer timeout 2.5 intervals, checked every
    // quarter); five leaves room for a loaded CI machine while still catching a regression
    // to the JavaScript original's ~90 s.
    assert!(detected < HEARTBEAT * 5, "detected after {detected:?}");

    let err = within("pending request", pending)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::PeerLeft, "{err:?}");
    assert!(b.peers().get("a").is_none());
    assert!(matches!(
        b.request::<_, String>("a", "ping", &()).await,
        Err(Error::NodeNotFound { .. })
    ));

    proxy.set_cut(false);
    wait_for(&mut b_events, "b rejoins a", joined("a")).await;
    wait_for(&mut a_events, "a sees b rejoin", joined("b")).await;
    let pong: String = within("ping after heal", b.request("a", "ping", &()))
        .await
        .unwrap();
    assert_eq!(pong, "pong");
}

#[tokio::test]
async fn clients_rejoin_a_restarted_server_by_themselves() {
    let first = server("svc").await;
    first.on_request(
        "gen",
        |_req: Request| async move { Ok::<_, HandlerError>(1) },
    );
    let endpoint = address(&first);
    let c = client("c").await;
    let mut events = c.events();
    c.connect(&endpoint).await.unwrap();
    assert_eq!(c.request::<_, i32>("svc", "gen", &()).await.unwrap(), 1);

    first.close().await;
    let reason = wait_for(&mut events, "svc left", |e| match e {
        NodeEvent::PeerLeft { id, reason, .. } if id.as_str() == "svc" => Some(*reason),
        _ => None,
    })
    .await;
    assert!(
        matches!(reason, LeaveReason::Stopped | LeaveReason::Disconnected),
        "{reason:?}"
    );

    let second = support::builder("svc")
        .bind(endpoint.as_str())
        .build()
        .await
        .unwrap();
    second.on_request(
        "gen",
        |_req: Request| async move { Ok::<_, HandlerError>(2) },
    );
    wait_for(&mut events, "svc joined again", joined("svc")).await;
    assert_eq!(c.request::<_, i32>("svc", "gen", &()).await.unwrap(), 2);
}

fn draining(id: &'static str) -> impl FnMut(&NodeEvent) -> Option<Direction> {
    move |e| match e {
        NodeEvent::PeerDraining { id: who, direction } if who.as_str() == id => Some(*direction),
        _ => None,
    }
}

#[tokio::test]
async fn a_draining_node_is_no_longer_picked_yet_finishes_its_work_and_requests_by_id() {
    let a1 = support::builder("a1")
        .option("role", "api")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let a2 = support::builder("a2")
        .option("role", "api")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    for a in [&a1, &a2] {
        let me = a.id().to_string();
        a.on_request("work", move |_req: Request| {
            let me = me.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                Ok::<_, HandlerError>(me)
            }
        });
    }
    let b = client("b").await;
    let mut b_events = b.events();
    b.connect(&address(&a1)).await.unwrap();
    b.connect(&address(&a2)).await.unwrap();
    let mut in_flight = Vec::new();
    for _ in 0..5 {
        let b = b.clone();
        in_flight.push(tokio::spawn(async move {
            b.request::<_, String>("a1", "work", &()).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut a1_events = a1.events();
    let closer = a1.clone();
    let closing = tokio::spawn(async move { closer.close().await });
    wait_for(&mut a1_events, "a1 drains", |e| {
        matches!(e, NodeEvent::Draining).then_some(())
    })
    .await;
    wait_for(&mut b_events, "b sees a1 draining", draining("a1")).await;
    assert!(b.peers().get("a1").expect("still joined").draining);
    assert!(a1.stats().closing);

    // While a1 still has work: a request by id still reaches it, its own calls still go
    // out, and picks by filter go to the other node only.
    let by_id = b.clone();
    let late = tokio::spawn(async move { by_id.request::<_, String>("a1", "work", &()).await });
    let sent = a1.tick("b", "x", &()).await;
    assert!(sent.is_ok(), "{sent:?}");
    let api = node::Filter::new().eq("role", "api");
    let picks: Vec<_> = (0..10)
        .map(|_| {
            let (b, api) = (b.clone(), api.clone());
            tokio::spawn(async move { b.request::<_, String>(&api, "work", &()).await })
        })
        .collect();
    for pick in picks {
        assert_eq!(within("a pick", pick).await.unwrap().unwrap(), "a2");
    }
    for call in in_flight {
        assert_eq!(within("in-flight", call).await.unwrap().unwrap(), "a1");
    }
    assert_eq!(within("by id", late).await.unwrap().unwrap(), "a1");
    let closed = within("close returns", closing).await.unwrap();
    assert!(closed.is_complete(), "{closed:?}");
    wait_for(
        &mut b_events,
        "b sees a1 stop",
        left("a1", LeaveReason::Stopped),
    )
    .await;
    // After its close, the node takes nothing: its own calls are refused.
    assert!(matches!(a1.tick("b", "x", &()).await, Err(Error::Closed)));
}

/// A node that closes while its own calls are out lets its peers go only once they are
/// answered (within its close grace): none fails for the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_node_waits_for_the_answers_to_its_own_calls() {
    let worker = server("worker").await;
    worker.on_request("slow", |_req: Request| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, HandlerError>("done")
    });
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();
    let calls: Vec<_> = (0..100)
        .map(|_| {
            let caller = caller.clone();
            tokio::spawn(async move { caller.request::<_, String>("worker", "slow", &()).await })
        })
        .collect();
    // Every call is out (counted in flight to the worker) before the close begins.
    within("the calls are out", async {
        while caller.peers().get("worker").map(|p| p.in_flight) != Some(100) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let closed = within("close returns", caller.close()).await;
    assert!(closed.is_complete());
    for call in calls {
        let answer = within("a call", call).await.unwrap();
        assert_eq!(answer.unwrap(), "done");
    }
    worker.close().await;
}

#[tokio::test]
async fn a_close_grace_that_runs_out_stops_handlers_and_tells_their_callers() {
    // One handler slot: the first request runs, the second waits for the slot.
    let a = support::builder("a")
        .max_concurrent_handlers(1)
        .close_grace(Duration::from_millis(300))
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    a.on_request("stuck", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, HandlerError>("never")
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move { b.request::<_, String>("a", "stuck", &()).await })
        })
        .collect();
    within("both arrive", async {
        while a.stats().handlers_active < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let closed = within("close", a.close()).await;
    assert_eq!(closed.cancelled, 2, "{closed:?}");
    assert!(!closed.is_complete());
    let mut errors = Vec::new();
    for call in calls {
        errors.push(within("a call ends", call).await.unwrap().unwrap_err());
    }
    errors.sort_by_key(|e| e.code().as_str());
    // The one that ran was stopped: not retry-safe. The one that never had a slot ran
    // nothing: retry-safe.
    assert!(matches!(errors[0], Error::Cancelled), "{errors:?}");
    assert_eq!(errors[0].code(), ErrorCode::Cancelled);
    assert!(!errors[0].is_retry_safe());
    assert!(matches!(errors[1], Error::ShuttingDown), "{errors:?}");
    assert!(errors[1].is_retry_safe());
    // A second close waits for nothing and says the same.
    assert_eq!(within("close again", a.close()).await, closed);
}

#[tokio::test]
async fn a_node_that_is_not_running_refuses_to_connect_in_bounded_time() {
    let probe = server("probe").await;
    let endpoint = address(&probe);
    probe.close().await;
    let lonely = support::builder("lonely")
        .handshake_timeout(Duration::from_millis(300))
        .build()
        .await
        .unwrap();
    let err = lonely.connect(&endpoint).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::HandshakeFailed, "{err:?}");
}

#[tokio::test]
async fn disconnect_and_unbind() {
    let a = server("a").await;
    let b = client("b").await;
    let mut a_events = a.events();
    b.connect(&address(&a)).await.unwrap();
    wait_for(&mut a_events, "b joined", joined("b")).await;
    b.disconnect(&address(&a)).await.unwrap();
    assert!(b.peers().get("a").is_none());
    wait_for(&mut a_events, "b said bye", left("b", LeaveReason::Stopped)).await;
    assert!(matches!(
        b.disconnect(&address(&a)).await,
        Err(Error::NotConnectedTo { .. })
    ));

    let endpoint = address(&a);
    a.unbind().await.unwrap();
    assert!(a.address().is_none());
    let again = support::builder("again")
        .bind(endpoint.as_str())
        .build()
        .await
        .unwrap();
    assert_eq!(address(&again), endpoint);
}

#[tokio::test]
async fn events_report_stop() {
    let a = server("a").await;
    let mut events = a.events();
    a.close().await;
    wait_for(&mut events, "stopped", |e| {
        matches!(e, NodeEvent::Stopped).then_some(())
    })
    .await;
    assert!(matches!(
        a.request::<_, ()>("x", "y", &()).await,
        Err(Error::Closed)
    ));
}

/// Replies count as signs of life: a server that answers every request but sends no
/// heartbeat at all stays joined while its replies come (it would be declared dead after
/// 2.5 heartbeat intervals otherwise).
#[tokio::test]
async fn replies_keep_a_peer_alive_without_its_heartbeats() {
    #[derive(serde::Serialize)]
    struct Hello {
        id: String,
        instance: String,
        version: u32,
        options: node::Options,
    }
    // A server that speaks the node handshake and answers `work`, and never beats.
    let silent = protocol::Server::bind("tcp://127.0.0.1:0").await.unwrap();
    silent.on_request(
        "_system:handshake",
        protocol::request_fn(|_req| async move {
            protocol::encode_value(&Hello {
                id: "quiet".into(),
                instance: "q-1".into(),
                version: node::PROTOCOL_VERSION,
                options: node::Options::new(),
            })
            .map_err(|e| protocol::RemoteError::handler(e.to_string()))
        }),
    );
    silent.on_request(
        "work",
        protocol::request_fn(|_req| async move {
            protocol::encode_value(&"done")
                .map_err(|e| protocol::RemoteError::handler(e.to_string()))
        }),
    );
    let c = client("c").await;
    let mut events = c.events();
    c.connect(silent.endpoint()).await.unwrap();
    // Three times the dead-peer timeout (2.5 x 200 ms), a request every 50 ms.
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < until {
        let done: String = c.request("quiet", "work", &()).await.unwrap();
        assert_eq!(done, "done");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        c.peers().get("quiet").is_some(),
        "declared dead while answering"
    );
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        assert!(!matches!(event, NodeEvent::PeerLeft { .. }), "{event:?}");
    }
}

/// Replies count as signs of life downstream too: a client that never beats but answers
/// the requests its server sends it stays joined for several dead-peer timeouts; once it
/// stops answering (and still does not beat) it is declared dead.
#[tokio::test]
async fn a_downstream_peer_answering_our_requests_stays_alive_without_heartbeats() {
    #[derive(serde::Serialize)]
    struct Hello {
        id: String,
        instance: String,
        version: u32,
        options: node::Options,
    }
    let srv = server("srv").await;
    let mut events = srv.events();
    // A client that speaks the node handshake and answers `work`, and never beats (a
    // protocol client sends nothing by itself).
    let quiet = protocol::Client::connect(&address(&srv), LIMIT)
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    quiet.on_request(
        "work",
        protocol::request_fn(move |_req| {
            let stopped = stopped.load(std::sync::atomic::Ordering::SeqCst);
            async move {
                if stopped {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
                protocol::encode_value(&"done")
                    .map_err(|e| protocol::RemoteError::handler(e.to_string()))
            }
        }),
    );
    let hello = protocol::encode_value(&Hello {
        id: "quiet".into(),
        instance: "q-1".into(),
        version: node::PROTOCOL_VERSION,
        options: node::Options::new(),
    })
    .unwrap();
    quiet
        .peer()
        .system()
        .request_with("_system:handshake", &[], hello, LIMIT)
        .await
        .unwrap();
    within("quiet joins", async {
        while srv.peers().get("quiet").is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Three times the dead-peer timeout (2.5 x 200 ms), a request every 50 ms.
    let until = tokio::time::Instant::now() + Duration::from_millis(1500);
    while tokio::time::Instant::now() < until {
        let done: String = srv.request("quiet", "work", &()).await.unwrap();
        assert_eq!(done, "done");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        srv.peers().get("quiet").is_some(),
        "declared dead while answering"
    );
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        assert!(!matches!(event, NodeEvent::PeerLeft { .. }), "{event:?}");
    }
    // The control: no answers and no heartbeats, and it is dead.
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let parked = {
        let srv = srv.clone();
        tokio::spawn(async move { srv.request::<_, String>("quiet", "work", &()).await })
    };
    wait_for(
        &mut events,
        "quiet declared dead",
        left("quiet", LeaveReason::TimedOut),
    )
    .await;
    assert!(within("the parked request ends", parked)
        .await
        .unwrap()
        .is_err());
    // Not a graceful close: that would wait for the parked handler.
    quiet.abort().await;
}

/// Peers that stop reading fill their queues, and the hub's heartbeats to them cannot be
/// sent: that must not delay the hub's heartbeats to anyone else. A polite client never
/// sees the hub leave while four stuck peers sit on full queues.
#[tokio::test]
async fn stuck_peers_do_not_make_a_healthy_hub_look_dead() {
    #[derive(serde::Serialize)]
    struct Hello {
        id: String,
        instance: String,
        version: u32,
        options: node::Options,
    }
    let hub = builder("hub")
        .hwm(20)
        .option("role", "hub")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    // Four peers that join with a raw handshake and then never read anything.
    let mut stuck = Vec::new();
    for i in 0..4 {
        let dealer =
            transport::Dealer::with_options(transport::Options::default().hwm(20)).unwrap();
        dealer.connect(&address(&hub)).unwrap();
        let hello = protocol::encode_value(&Hello {
            id: format!("stuck-{i}"),
            instance: format!("s-{i}"),
            version: node::PROTOCOL_VERSION,
            options: node::Options::from([("role".to_owned(), node::Value::from("stuck"))]),
        })
        .unwrap();
        let envelope = protocol::Envelope::new(
            protocol::Kind::Request,
            1,
            "_system:handshake",
            Bytes::new(),
            hello,
        );
        within(
            "a stuck peer's handshake",
            dealer.send_frames(&envelope.encode()),
        )
        .await
        .unwrap();
        stuck.push(dealer);
    }
    within("the stuck peers joined", async {
        while hub.peers().len() < 4 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Fill their queues, each by a task of its own: the hub's sends to them block from
    // now on.
    let floods: Vec<_> = (0..4)
        .map(|i| {
            let flooder = hub.clone();
            tokio::spawn(async move {
                loop {
                    let _ = flooder
                        .call(format!("stuck-{i}"), "fill")
                        .raw()
                        .tick(Bytes::from(vec![0u8; 4096]))
                        .await
                        .map(drop);
                    // A send that fails at once must not keep others from running.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let polite = client("polite").await;
    let mut events = polite.events();
    polite.connect(&address(&hub)).await.unwrap();
    // Six times the polite client's dead-peer timeout (2.5 x 200 ms).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        polite.peers().get("hub").is_some(),
        "the hub was declared dead"
    );
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        assert!(!matches!(event, NodeEvent::PeerLeft { .. }), "{event:?}");
    }
    for flood in floods {
        flood.abort();
    }
    drop(stuck);
}

/// A loop of ticks that the socket takes at once (a high-water mark far above the loop)
/// never waits, so without a yield it would hold its thread to the end, and every other task
/// there (this node's heartbeats among them: its peers would take it for dead) would wait.
/// On a one-thread runtime, another task must run while the loop is still going.
#[tokio::test(flavor = "current_thread")]
async fn a_loop_of_ticks_lets_the_other_tasks_run() {
    const TICKS: usize = 10_000;
    let receiver = builder("receiver")
        .hwm(100_000)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    receiver.on_tick("t", |_req: Request| async {});
    let sender = builder("sender").hwm(100_000).build().await.unwrap();
    sender.connect(&address(&receiver)).await.unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Counts its runs that fall in the middle of the loop.
    let observer = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let mut during = 0;
            loop {
                match sent.load(std::sync::atomic::Ordering::Relaxed) {
                    TICKS => return during,
                    0 => {}
                    _ => during += 1,
                }
                tokio::task::yield_now().await;
            }
        }
    });
    for i in 0..TICKS {
        sender
            .call("receiver", "t")
            .raw()
            .tick(Bytes::from_static(b"x"))
            .await
            .map(drop)
            .unwrap();
        sent.store(i + 1, std::sync::atomic::Ordering::Relaxed);
    }
    let during = within("the observer ends", observer).await.unwrap();
    assert!(during > 0, "no other task ran during {TICKS} ticks");
}

/// A node whose own thread stood still (here a handler that blocks the one thread of a
/// current-thread runtime, as a panic hook printing a backtrace can) does not take its
/// peers for dead when it resumes: their heartbeats wait unread in its sockets, and the
/// first check after the stall is skipped while the drivers read them.
#[tokio::test]
async fn a_node_that_stood_still_does_not_take_its_peers_for_dead() {
    let server = server("still").await;
    server.on_request("block", |_req: Request| async move {
        // Three times the dead-peer timeout (2.5 heartbeats of 200 ms): blocking, on
        // purpose, the thread the caller's and the server's drivers share.
        std::thread::sleep(HEARTBEAT * 5 / 2 * 3);
        Ok::<_, HandlerError>("done")
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let mut events = caller.events();
    let answer: String = within(
        "the blocking request",
        caller.request("still", "block", &()),
    )
    .await
    .unwrap();
    assert_eq!(answer, "done");
    // A heartbeat interval later both still count each other as joined.
    tokio::time::sleep(HEARTBEAT * 2).await;
    assert_eq!(caller.peers().list().len(), 1, "the caller lost the server");
    assert_eq!(server.peers().list().len(), 1, "the server lost the caller");
    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, events.recv()).await {
        assert!(!matches!(event, NodeEvent::PeerLeft { .. }), "{event:?}");
    }
}
