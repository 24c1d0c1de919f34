//! Router nodes: reaching nodes we are not joined to, by id or by filter, across hops.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::{Error, ErrorCode, Filter, HandlerError, Node, NodeEvent, Request};
use support::*;

/// A leaf with options, connected to `to`, answering `whoami` with its id and the route the
/// request took, and counting the ticks it receives.
async fn leaf(id: &str, side: i64, to: &Node, ticks: Arc<AtomicUsize>) -> Node {
    let node = support::builder(id)
        .option("role", "worker")
        .option("side", side)
        .build()
        .await
        .unwrap();
    let me = id.to_string();
    node.on_request("whoami", move |req: Request| {
        let me = me.clone();
        async move {
            let via: Vec<String> = req
                .route()
                .map(|r| r.via.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            Ok::<_, HandlerError>((me, via))
        }
    });
    node.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok::<_, HandlerError>(())
    });
    node.on_tick("note", move |_req: Request| {
        let ticks = Arc::clone(&ticks);
        async move {
            ticks.fetch_add(1, Ordering::SeqCst);
        }
    });
    node.connect(&address(to)).await.unwrap();
    node
}

struct TwoSides {
    r1: Node,
    r2: Node,
    l1a: Node,
    _l1b: Node,
    _l2a: Node,
    _l2b: Node,
    ticks: [Arc<AtomicUsize>; 4],
}

async fn two_sides() -> TwoSides {
    let r1 = router("r1").await;
    let r2 = router("r2").await;
    r2.connect(&address(&r1)).await.unwrap();
    let ticks: [Arc<AtomicUsize>; 4] = Default::default();
    let l1a = leaf("l1a", 1, &r1, Arc::clone(&ticks[0])).await;
    let l1b = leaf("l1b", 1, &r1, Arc::clone(&ticks[1])).await;
    let l2a = leaf("l2a", 2, &r2, Arc::clone(&ticks[2])).await;
    let l2b = leaf("l2b", 2, &r2, Arc::clone(&ticks[3])).await;
    TwoSides {
        r1,
        r2,
        l1a,
        _l1b: l1b,
        _l2a: l2a,
        _l2b: l2b,
        ticks,
    }
}

#[tokio::test]
async fn a_leaf_reaches_a_leaf_behind_another_router_by_filter_and_by_id() {
    let mesh = two_sides().await;
    assert!(mesh.l1a.peers().get("r1").unwrap().router);

    let side2 = Filter::new().eq("side", 2);
    let (who, via): (String, Vec<String>) = mesh.l1a.request(&side2, "whoami", &()).await.unwrap();
    assert!(who == "l2a" || who == "l2b", "{who}");
    assert_eq!(via, ["r1", "r2"]);

    let (who, via): (String, Vec<String>) = mesh.l1a.request("l2b", "whoami", &()).await.unwrap();
    assert_eq!(
        (who.as_str(), via),
        ("l2b", vec!["r1".to_string(), "r2".to_string()])
    );

    // A leaf on the same side is reached through one router.
    let (who, via): (String, Vec<String>) = mesh.l1a.request("l1b", "whoami", &()).await.unwrap();
    assert_eq!((who.as_str(), via), ("l1b", vec!["r1".to_string()]));

    // Ticks, by id and by filter.
    mesh.l1a.tick("l2a", "note", &()).await.unwrap();
    mesh.l1a.tick(&side2, "note", &()).await.map(drop).unwrap();
    within("two ticks on side 2", async {
        while mesh.ticks[2].load(Ordering::SeqCst) + mesh.ticks[3].load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(
        mesh.r1.stats().router.forwarded >= 4,
        "{:?}",
        mesh.r1.stats().router
    );
    assert!(
        mesh.r2.stats().router.forwarded >= 3,
        "{:?}",
        mesh.r2.stats().router
    );
}

#[tokio::test]
async fn tick_all_reaches_every_matching_leaf_on_both_sides_exactly_once() {
    let mesh = two_sides().await;
    let workers = Filter::new().eq("role", "worker");
    let reached = mesh
        .l1a
        .tick(node::Target::all(workers.clone()), "note", &())
        .await
        .map(|sent| sent.nodes)
        .unwrap();
    // l1b, l2a, l2b: not the sender itself.
    assert_eq!(reached, 3);
    within("ticks delivered", async {
        while mesh.ticks[1..]
            .iter()
            .map(|t| t.load(Ordering::SeqCst))
            .sum::<usize>()
            < 3
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let counts: Vec<usize> = mesh
        .ticks
        .iter()
        .map(|t| t.load(Ordering::SeqCst))
        .collect();
    assert_eq!(counts, [0, 1, 1, 1]);
}

#[tokio::test]
async fn nothing_matching_anywhere_is_a_typed_error_at_once() {
    let mesh = two_sides().await;
    let started = Instant::now();
    let nobody = Filter::new().eq("role", "nobody");
    let err = mesh
        .l1a
        .request::<_, ()>(&nobody, "whoami", &())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNodesMatchFilter, "{err:?}");
    let err = mesh
        .l1a
        .request::<_, ()>("ghost", "whoami", &())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NodeNotFound, "{err:?}");
    let err = mesh
        .l1a
        .tick(node::Target::all(nobody.clone()), "note", &())
        .await
        .map(|sent| sent.nodes)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNodesMatchFilter, "{err:?}");
    // Well before the default request timeout: the answer came from the routers.
    assert!(started.elapsed() < mesh.l1a.config().request_timeout);

    // A predicate (Rust code) cannot travel: refused at once.
    let predicate = Filter::predicate(|_| true).eq("role", "nobody");
    let err = mesh
        .l1a
        .request::<_, ()>(&predicate, "whoami", &())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PredicateNotSerializable), "{err:?}");
}

#[tokio::test]
async fn a_deadline_that_expires_at_the_second_hop_gives_the_caller_a_timeout_in_time() {
    let mesh = two_sides().await;
    let timeout = Duration::from_millis(400);
    let started = Instant::now();
    let err = mesh
        .l1a
        .call("l2a", "slow")
        .timeout(timeout)
        .send::<_, ()>(&())
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    // The slow handler takes 3 s; the caller's 400 ms deadline is what ended the request.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    within("r2 counts the expiry", async {
        while mesh.r2.stats().router.expired == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_ring_of_routers_does_not_loop() {
    // r1 <- r2 <- r3 <- r1: every router joined to two others.
    let r1 = router("ring1").await;
    let r2 = router("ring2").await;
    let r3 = router("ring3").await;
    r2.connect(&address(&r1)).await.unwrap();
    r3.connect(&address(&r2)).await.unwrap();
    r1.connect(&address(&r3)).await.unwrap();
    let ticks: [Arc<AtomicUsize>; 3] = Default::default();
    let a = leaf("ring-a", 1, &r1, Arc::clone(&ticks[0])).await;
    let _b = leaf("ring-b", 2, &r2, Arc::clone(&ticks[1])).await;
    let _c = leaf("ring-c", 3, &r3, Arc::clone(&ticks[2])).await;

    let nobody = Filter::new().eq("role", "nobody");
    let err = a
        .request::<_, ()>(&nobody, "whoami", &())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNodesMatchFilter, "{err:?}");

    let (who, _via): (String, Vec<String>) = a.request("ring-c", "whoami", &()).await.unwrap();
    assert_eq!(who, "ring-c");

    let reached = a
        .tick(
            node::Target::all(Filter::new().eq("role", "worker")),
            "note",
            &(),
        )
        .await
        .map(|sent| sent.nodes)
        .unwrap();
    assert_eq!(reached, 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts: Vec<usize> = ticks.iter().map(|t| t.load(Ordering::SeqCst)).collect();
    assert_eq!(counts, [0, 1, 1], "each leaf exactly once");
}

#[tokio::test]
async fn a_hop_limit_stops_long_routes() {
    let r1 = support::builder("h1")
        .router(true)
        .hop_limit(1)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let r2 = router("h2").await;
    let r3 = router("h3").await;
    r2.connect(&address(&r1)).await.unwrap();
    r3.connect(&address(&r2)).await.unwrap();
    let far = leaf("far", 3, &r3, Arc::default()).await;
    let near = support::builder("near").hop_limit(1).build().await.unwrap();
    near.connect(&address(&r1)).await.unwrap();
    // near -> h1 (the one allowed hop) -> h2: out of hops before h3.
    let err = near
        .request::<_, ()>("far", "whoami", &())
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), ErrorCode::RouteLoop | ErrorCode::NodeNotFound),
        "{err:?}"
    );
    drop(far);
}

#[tokio::test]
async fn a_router_restarted_mid_traffic_is_rejoined_and_forwarding_resumes() {
    let r1 = router("rr1").await;
    let r2 = router("rr2").await;
    let r2_address = address(&r2);
    r2.connect(&address(&r1)).await.unwrap();
    let caller = leaf("caller", 1, &r1, Arc::default()).await;
    let far = leaf("far-leaf", 2, &r2, Arc::default()).await;
    let mut far_events = far.events();
    let (who, _): (String, Vec<String>) = caller.request("far-leaf", "whoami", &()).await.unwrap();
    assert_eq!(who, "far-leaf");

    r2.close().await;
    let err = caller
        .call("far-leaf", "whoami")
        .timeout(Duration::from_secs(2))
        .send::<_, (String, Vec<String>)>(&())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.code(),
            ErrorCode::NodeNotFound | ErrorCode::RequestTimeout | ErrorCode::PeerLeft
        ),
        "{err:?}"
    );

    let r2 = support::builder("rr2")
        .router(true)
        .bind(r2_address.as_str())
        .build()
        .await
        .unwrap();
    r2.connect(&address(&r1)).await.unwrap();
    wait_for(
        &mut far_events,
        "the leaf rejoins its router",
        |e| match e {
            NodeEvent::PeerJoined { id, .. } if id.as_str() == "rr2" => Some(()),
            _ => None,
        },
    )
    .await;
    let (who, via): (String, Vec<String>) =
        caller.request("far-leaf", "whoami", &()).await.unwrap();
    assert_eq!(
        (who.as_str(), via),
        ("far-leaf", vec!["rr1".to_string(), "rr2".to_string()])
    );
}
