//! Nodes over loopback: handshake, routing, filters, strategies, handlers, middleware.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use node::{
    Direction, Error, ErrorCode, Filter, HandlerError, Node, NodeEvent, Request, Response, Scope,
    Strategy, Value,
};
use regex::Regex;
use support::*;

#[tokio::test]
async fn handshake_exchanges_ids_and_options_both_ways() {
    let a = support::builder("a")
        .option("role", "api")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let mut a_events = a.events();
    let b = support::builder("b")
        .option("role", "worker")
        .build()
        .await
        .unwrap();
    let peer = b.connect(&address(&a)).await.unwrap();
    assert_eq!(peer.id.as_str(), "a");
    assert_eq!(peer.direction, Direction::Upstream);
    assert_eq!(peer.options.get("role"), Some(&Value::from("api")));

    let (id, options) = wait_for(&mut a_events, "a sees b join", |e| match e {
        NodeEvent::PeerJoined {
            id,
            direction: Direction::Downstream,
            options,
        } => Some((id.clone(), options.clone())),
        _ => None,
    })
    .await;
    assert_eq!(id.as_str(), "b");
    assert_eq!(options.get("role"), Some(&Value::from("worker")));
    assert_eq!(a.peers().get("b").unwrap().direction, Direction::Downstream);
    assert_eq!(b.peers().get("a").unwrap().direction, Direction::Upstream);
}

#[tokio::test]
async fn both_directions_of_a_joined_pair_can_send() {
    let a = server("a").await;
    let b = client("b").await;
    for node in [&a, &b] {
        let me = node.id().to_string();
        node.on_request("whoami", move |_req: Request| {
            let me = me.clone();
            async move { Ok::<_, HandlerError>(me) }
        });
    }
    b.connect(&address(&a)).await.unwrap();
    let from_a: String = a.request("b", "whoami", &()).await.unwrap();
    let from_b: String = b.request("a", "whoami", &()).await.unwrap();
    assert_eq!((from_a.as_str(), from_b.as_str()), ("b", "a"));
}

#[tokio::test]
async fn nodes_join_and_talk_over_ipc() {
    // The default engine (native unless ZERONODE_ENGINE says libzmq) over a Unix socket.
    let hub = builder("ipc-hub").bind("ipc://*").build().await.unwrap();
    let endpoint = address(&hub);
    assert!(endpoint.starts_with("ipc://"), "{endpoint}");
    hub.on_request("whoami", |req: Request| {
        let from = req.from().to_string();
        async move { Ok::<_, HandlerError>(from) }
    });
    let ticks = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ticks);
    hub.on_tick("ping", move |_req: Request| {
        counted.fetch_add(1, Ordering::Relaxed);
        async {}
    });
    let worker = client("ipc-worker").await;
    worker.connect(&endpoint).await.unwrap();
    let seen: String = worker.request("ipc-hub", "whoami", &()).await.unwrap();
    assert_eq!(seen, "ipc-worker");
    worker.tick("ipc-hub", "ping", &()).await.unwrap();
    within("the tick", async {
        while ticks.load(Ordering::Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    worker.close().await;
    hub.close().await;
}

#[tokio::test]
async fn handlers_see_the_sender_bound_to_its_connection() {
    let a = server("a").await;
    a.on_request("who-sent", |req: Request| async move {
        Ok::<_, HandlerError>(req.from().to_string())
    });
    let b = client("b").await;
    let c = client("c").await;
    b.connect(&address(&a)).await.unwrap();
    c.connect(&address(&a)).await.unwrap();
    let seen_b: String = b.request("a", "who-sent", &()).await.unwrap();
    let seen_c: String = c.request("a", "who-sent", &()).await.unwrap();
    assert_eq!((seen_b.as_str(), seen_c.as_str()), ("b", "c"));
}

#[tokio::test]
async fn a_duplicate_id_is_refused_on_both_sides() {
    let a = server("a").await;
    let mut a_events = a.events();
    let first = client("same").await;
    first.connect(&address(&a)).await.unwrap();
    let second = client("same").await;
    let err = second.connect(&address(&a)).await.unwrap_err();
    assert!(
        matches!(err, Error::DuplicateId { ref id } if id == "same"),
        "{err:?}"
    );
    assert_eq!(err.code(), ErrorCode::DuplicateId);
    wait_for(&mut a_events, "a reports the refusal", |e| match e {
        NodeEvent::Error { message, .. } if message.contains("same") => Some(()),
        _ => None,
    })
    .await;
    // The first node is still joined and served.
    assert!(a.peers().get("same").is_some());

    // A node may not join a node with its own id either.
    let twin = client("a").await;
    assert!(matches!(
        twin.connect(&address(&a)).await.unwrap_err(),
        Error::DuplicateId { .. }
    ));
}

/// A node restarted under its id while its old instance is still leaving: the restart's
/// hello may reach the other side before the old instance's goodbye. It gets in once the
/// old one is gone, not a `DuplicateId`.
#[tokio::test]
async fn a_node_restarted_under_its_id_joins_once_its_old_instance_leaves() {
    let a = server("a").await;
    let old = client("worker").await;
    old.connect(&address(&a)).await.unwrap();
    let new = client("worker").await;
    new.on_request("which", |_req: Request| async move {
        Ok::<_, HandlerError>("new")
    });
    // The old instance leaves a little after the new one first asks to join (the new one
    // asks again for about 1.5 s; 100 ms leaves room for a slow machine).
    let leaving = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        old.close().await;
    });
    within("the restart joins", new.connect(&address(&a)))
        .await
        .unwrap();
    leaving.await.unwrap();
    let which: String = a.request("worker", "which", &()).await.unwrap();
    assert_eq!(which, "new");
}

#[tokio::test]
async fn unknown_ids_and_unmatched_filters_are_typed_errors() {
    let a = server("a").await;
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let err = b.request::<_, ()>("nobody", "x", &()).await.unwrap_err();
    assert!(matches!(err, Error::NodeNotFound { ref id } if id == "nobody"));
    assert_eq!(err.code(), ErrorCode::NodeNotFound);

    let none = Filter::new().eq("role", "does-not-exist");
    let err = b.request::<_, ()>(&none, "x", &()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::NoNodesMatchFilter);
    assert!(matches!(
        b.tick(node::Target::all(none.clone()), "x", &())
            .await
            .map(|sent| sent.nodes),
        Err(Error::NoNodesMatchFilter)
    ));
    assert!(matches!(
        b.tick(&none, "x", &()).await.map(drop),
        Err(Error::NoNodesMatchFilter)
    ));
}

/// A hub with downstream workers w1..w3 (load 1..3, region eu/us) and one upstream node.
async fn hub_with_workers() -> (Node, Vec<Node>, Node) {
    let hub = support::builder("hub")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let mut workers = Vec::new();
    for (i, region) in [(1, "eu-west"), (2, "eu-north"), (3, "us-east")] {
        let worker = support::builder(&format!("w{i}"))
            .option("role", "worker")
            .option("load", i)
            .option("region", region)
            .option("tags", vec!["gpu", if i == 3 { "big" } else { "small" }])
            .build()
            .await
            .unwrap();
        let me = worker.id().to_string();
        worker.on_request("name", move |_req: Request| {
            let me = me.clone();
            async move { Ok::<_, HandlerError>(me) }
        });
        worker.connect(&address(&hub)).await.unwrap();
        workers.push(worker);
    }
    let upstream = support::builder("up")
        .option("role", "worker")
        .option("load", 9)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    upstream.on_request("name", |_req: Request| async move {
        Ok::<_, HandlerError>("up".to_string())
    });
    hub.connect(&address(&upstream)).await.unwrap();
    (hub, workers, upstream)
}

async fn names_for(
    hub: &Node,
    filter: &Filter,
    scope: Scope,
    calls: usize,
) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for _ in 0..calls {
        let name: String = hub
            .request(node::Target::any(filter.clone()).scope(scope), "name", &())
            .await
            .unwrap();
        *seen.entry(name).or_insert(0) += 1;
    }
    seen
}

#[tokio::test]
async fn filters_select_peers_by_each_operator() {
    let (hub, _workers, _up) = hub_with_workers().await;
    let cases: Vec<(Filter, Vec<&str>)> = vec![
        (Filter::new().eq("region", "eu-west"), vec!["w1"]),
        // `up` advertises no region: `$ne` fails on a missing key, as in JavaScript.
        (
            Filter::new().ne("region", "eu-west").eq("role", "worker"),
            vec!["w2", "w3"],
        ),
        (Filter::new().gt("load", 2), vec!["up", "w3"]),
        (Filter::new().gte("load", 2), vec!["up", "w2", "w3"]),
        (Filter::new().lt("load", 2), vec!["w1"]),
        (Filter::new().lte("load", 2), vec!["w1", "w2"]),
        (Filter::new().between("load", 2, 3), vec!["w2", "w3"]),
        (
            Filter::new().is_in("region", ["eu-north", "us-east"]),
            vec!["w2", "w3"],
        ),
        (Filter::new().not_in("load", [1, 2, 9]), vec!["w3"]),
        (Filter::new().contains("tags", "big"), vec!["w3"]),
        (
            Filter::new().contains_any("tags", ["big", "small"]),
            vec!["w1", "w2", "w3"],
        ),
        // `up` has no tags: `$containsNone` fails on a missing key too.
        (
            Filter::new()
                .contains_none("tags", ["big"])
                .eq("role", "worker"),
            vec!["w1", "w2"],
        ),
        (
            Filter::new().regex("region", "^eu-").unwrap(),
            vec!["w1", "w2"],
        ),
        (
            Filter::new().matching("region", Regex::new("east$").unwrap()),
            vec!["w3"],
        ),
        (
            Filter::predicate(|o| {
                o.get("load")
                    .and_then(Value::as_i64)
                    .is_some_and(|l| l % 2 == 1)
            }),
            vec!["up", "w1", "w3"],
        ),
    ];
    for (filter, expected) in cases {
        let seen = names_for(&hub, &filter, Scope::Both, 40).await;
        let mut got: Vec<&str> = seen.keys().map(String::as_str).collect();
        got.sort();
        assert_eq!(got, expected, "filter {filter:?}");
    }
}

#[tokio::test]
async fn scope_restricts_to_upstream_or_downstream() {
    let (hub, _workers, _up) = hub_with_workers().await;
    let workers = Filter::new().eq("role", "worker");
    let up = names_for(&hub, &workers, Scope::Up, 10).await;
    assert_eq!(up.keys().collect::<Vec<_>>(), ["up"]);
    let down = names_for(&hub, &workers, Scope::Down, 60).await;
    let mut got: Vec<&String> = down.keys().collect();
    got.sort();
    assert_eq!(got, ["w1", "w2", "w3"]);
}

#[tokio::test]
async fn tick_all_reaches_every_match_once() {
    let (hub, workers, up) = hub_with_workers().await;
    let count = Arc::new(AtomicUsize::new(0));
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for node in workers.iter().chain([&up]) {
        let count = Arc::clone(&count);
        let done = done_tx.clone();
        let me = node.id().to_string();
        node.on_tick("announce", move |req: Request| {
            let count = Arc::clone(&count);
            let done = done.clone();
            let me = me.clone();
            async move {
                let text: String = req.decode().unwrap();
                assert_eq!(text, "hello");
                count.fetch_add(1, Ordering::SeqCst);
                let _ = done.send(me);
            }
        });
    }
    let eu = Filter::new().regex("region", "^eu-").unwrap();
    let reached = hub
        .tick(node::Target::all(eu.clone()), "announce", "hello")
        .await
        .map(|sent| sent.nodes)
        .unwrap();
    assert_eq!(reached, 2);
    let mut got = vec![
        within("tick 1", done_rx.recv()).await.unwrap(),
        within("tick 2", done_rx.recv()).await.unwrap(),
    ];
    got.sort();
    assert_eq!(got, ["w1", "w2"]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(count.load(Ordering::SeqCst), 2, "no duplicates, no extras");
}

#[tokio::test]
async fn strategies_spread_requests() {
    let hub = support::builder("hub")
        .strategy(Strategy::RoundRobin)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let mut workers = Vec::new();
    for i in 1..=3 {
        let worker = client(&format!("w{i}")).await;
        let me = worker.id().to_string();
        worker.on_request("name", move |_req: Request| {
            let me = me.clone();
            async move { Ok::<_, HandlerError>(me) }
        });
        worker.connect(&address(&hub)).await.unwrap();
        workers.push(worker);
    }
    let seen = names_for(&hub, &Filter::any(), Scope::Down, 30).await;
    assert_eq!(seen.len(), 3);
    assert!(seen.values().all(|&n| n == 10), "round-robin: {seen:?}");

    // Least in flight: w1 is busy with a slow request, so quick ones go elsewhere.
    let hub2 = support::builder("hub2")
        .strategy(Strategy::LeastInFlight)
        .build()
        .await
        .unwrap();
    let slow = server("slow").await;
    slow.on_request("name", |_req: Request| async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Ok::<_, HandlerError>("slow".to_string())
    });
    let fast = server("fast").await;
    fast.on_request("name", |_req: Request| async move {
        Ok::<_, HandlerError>("fast".to_string())
    });
    hub2.connect(&address(&slow)).await.unwrap();
    hub2.connect(&address(&fast)).await.unwrap();
    let busy = hub2.clone();
    let pending = tokio::spawn(async move { busy.request::<_, String>("slow", "name", &()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(hub2.peers().get("slow").map_or(0, |p| p.in_flight), 1);
    let quick = names_for(&hub2, &Filter::any(), Scope::Both, 10).await;
    assert_eq!(quick.get("fast"), Some(&10), "{quick:?}");
    within("slow", pending).await.unwrap().unwrap();
}

#[tokio::test]
async fn regex_handlers_and_off() {
    let a = server("a").await;
    a.on_request(Regex::new("^user:").unwrap(), |req: Request| async move {
        Ok::<_, HandlerError>(format!("user handler for {}", req.event()))
    });
    a.on_request("user:special", |_req: Request| async move {
        Ok::<_, HandlerError>("exact".to_string())
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let got: String = b.request("a", "user:create", &()).await.unwrap();
    assert_eq!(got, "user handler for user:create");
    let got: String = b.request("a", "user:special", &()).await.unwrap();
    assert_eq!(got, "exact");
    assert!(a.off_request("user:special"));
    let got: String = b.request("a", "user:special", &()).await.unwrap();
    assert_eq!(got, "user handler for user:special");
    assert!(a.off_request(Regex::new("^user:").unwrap()));
    let err = b
        .request::<_, String>("a", "user:create", &())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoHandler { .. }), "{err:?}");
}

#[tokio::test]
async fn all_matching_tick_handlers_run() {
    let a = server("a").await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (name, pattern) in [
        ("exact", "job:done"),
        ("any-job", "^job:"),
        ("other", "^mail:"),
    ] {
        let tx = tx.clone();
        let run = move |_req: Request| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(name);
            }
        };
        if name == "exact" {
            a.on_tick(pattern, run);
        } else {
            a.on_tick(Regex::new(pattern).unwrap(), run);
        }
    }
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    b.tick("a", "job:done", &1).await.unwrap();
    let mut got = vec![
        within("first", rx.recv()).await.unwrap(),
        within("second", rx.recv()).await.unwrap(),
    ];
    got.sort();
    assert_eq!(got, ["any-job", "exact"]);
    assert!(a.off_tick("job:done"));
    b.tick("a", "job:done", &1).await.unwrap();
    assert_eq!(within("after off", rx.recv()).await.unwrap(), "any-job");
}

#[tokio::test]
async fn handler_errors_reach_the_caller_with_code_and_message() {
    let a = server("a").await;
    a.on_request("pay", |req: Request| async move {
        let amount: u64 = req.decode()?;
        if amount > 100 {
            return Err(HandlerError::new(
                "LIMIT",
                format!("{amount} is over the limit"),
            ));
        }
        Ok(amount)
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    assert_eq!(b.request::<_, u64>("a", "pay", &50u64).await.unwrap(), 50);
    match b.request::<_, u64>("a", "pay", &500u64).await {
        Err(Error::Handler { code, message }) => {
            assert_eq!(code, "LIMIT");
            assert_eq!(message, "500 is over the limit");
        }
        other => panic!("expected a handler error, got {other:?}"),
    }
    // A payload of the wrong type is the handler's BAD_REQUEST.
    let err = b.request::<_, u64>("a", "pay", "fifty").await.unwrap_err();
    assert!(matches!(err, Error::Handler { ref code, .. } if code == HandlerError::BAD_REQUEST));
}

#[tokio::test]
async fn raw_payloads_pass_through_untouched() {
    let a = server("a").await;
    a.on_request_service(
        "raw",
        tower::service_fn(|req: Request| async move {
            let mut reversed = req.payload().to_vec();
            reversed.reverse();
            Ok::<_, node::BoxError>(Response::raw(Bytes::from(reversed)))
        }),
    );
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let reply = b
        .call("a", "raw")
        .timeout(Duration::from_secs(2))
        .raw()
        .send(Bytes::from_static(&[1, 2, 3, 0xff]))
        .await
        .map(node::Reply::into_payload)
        .unwrap();
    assert_eq!(&reply[..], &[0xff, 3, 2, 1]);
}

#[tokio::test]
async fn tower_middleware_in_order_with_timeout_and_error_mapping() {
    use tower::ServiceExt;
    let a = server("a").await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for name in ["outer", "inner"] {
        let order = Arc::clone(&order);
        a.layer(tower::layer::layer_fn(
            move |inner: node::HandlerService| {
                let order = Arc::clone(&order);
                tower::util::BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                    order.lock().unwrap().push(name);
                    inner.clone().oneshot(req)
                }))
            },
        ));
    }
    // An auth layer for admin events only: refuses requests without a token.
    a.layer_for(
        Regex::new("^admin:").unwrap(),
        tower::layer::layer_fn(|inner: node::HandlerService| {
            tower::util::BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                let inner = inner.clone();
                async move {
                    let token: Option<String> = req.decode().ok();
                    if token.as_deref() != Some("secret") {
                        return Err(HandlerError::new("UNAUTHORIZED", "bad token").into());
                    }
                    inner.oneshot(req).await
                }
            }))
        }),
    );
    // A timeout for slow events.
    a.layer_for(
        "slow",
        tower::timeout::TimeoutLayer::new(Duration::from_millis(100)),
    );
    a.on_request("admin:reset", |_req: Request| async move {
        Ok::<_, HandlerError>("reset")
    });
    a.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(2)).await;
        Ok::<_, HandlerError>("too late")
    });
    a.on_request("fails", |_req: Request| async move {
        Err::<(), _>(HandlerError::new("ORIGINAL", "x"))
    });
    // Error middleware: turn one failure into a successful fallback reply.
    a.layer_for(
        "fails",
        tower::util::MapResultLayer::new(|result: Result<Response, node::BoxError>| {
            result.or_else(|_| Response::encode("fallback").map_err(Into::into))
        }),
    );

    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();

    let ok: String = b.request("a", "admin:reset", "secret").await.unwrap();
    assert_eq!(ok, "reset");
    assert_eq!(&order.lock().unwrap()[..2], ["outer", "inner"]);

    let denied = b
        .request::<_, String>("a", "admin:reset", "guess")
        .await
        .unwrap_err();
    assert!(matches!(denied, Error::Handler { ref code, .. } if code == "UNAUTHORIZED"));

    let slow = b.request::<_, String>("a", "slow", &()).await.unwrap_err();
    assert!(
        matches!(slow, Error::Handler { ref code, .. } if code == HandlerError::TIMEOUT),
        "{slow:?}"
    );

    let mapped: String = b.request("a", "fails", &()).await.unwrap();
    assert_eq!(mapped, "fallback");
}

#[tokio::test]
async fn set_options_reaches_joined_peers() {
    let a = server("a").await;
    let b = support::builder("b")
        .option("state", "starting")
        .build()
        .await
        .unwrap();
    b.connect(&address(&a)).await.unwrap();
    let mut events = a.events();
    let ready = Filter::new().eq("state", "ready");
    assert!(matches!(
        a.tick(&ready, "x", &()).await.map(drop),
        Err(Error::NoNodesMatchFilter)
    ));
    b.set_options(node::options::options([("state", "ready")]))
        .await
        .unwrap();
    wait_for(&mut events, "options changed", |e| match e {
        NodeEvent::PeerOptionsChanged { id, .. } if id.as_str() == "b" => Some(()),
        _ => None,
    })
    .await;
    a.tick(&ready, "x", &()).await.map(drop).unwrap();
    assert_eq!(
        a.peers().get("b").unwrap().options.get("state"),
        Some(&Value::from("ready"))
    );
}

#[tokio::test]
async fn a_ring_of_three_nodes_forwards_around() {
    // n0 <- n1 <- n2 <- n0: each connects to the next; a message goes all the way round.
    let nodes = [server("n0").await, server("n1").await, server("n2").await];
    for i in 0..3 {
        let next = &nodes[(i + 1) % 3];
        nodes[i].connect(&address(next)).await.unwrap();
    }
    for (i, node) in nodes.iter().enumerate() {
        let me = node.clone();
        let next = format!("n{}", (i + 1) % 3);
        node.on_request("hop", move |req: Request| {
            let me = me.clone();
            let next = next.clone();
            async move {
                let mut path: Vec<String> = req.decode()?;
                path.push(me.id().to_string());
                if path.len() == 4 {
                    return Ok(path);
                }
                me.request::<_, Vec<String>>(next.as_str(), "hop", &path)
                    .await
                    .map_err(|e| HandlerError::new("HOP", e.to_string()))
            }
        });
    }
    let path: Vec<String> = nodes[0]
        .request("n1", "hop", &vec!["start".to_string()])
        .await
        .unwrap();
    assert_eq!(path, ["start", "n1", "n2", "n0"]);
}

#[tokio::test]
async fn a_protocol_version_mismatch_is_refused_with_a_typed_error_on_both_sides() {
    #[derive(serde::Serialize)]
    struct Hello {
        id: String,
        instance: String,
        version: u32,
        options: node::Options,
    }
    let a = server("a").await;
    let mut events = a.events();
    // A peer from the future: speaks the envelope, but a node protocol version we do not.
    let client = protocol::Client::connect(&address(&a), LIMIT)
        .await
        .unwrap();
    let hello = Hello {
        id: "future".into(),
        instance: "x".into(),
        version: node::PROTOCOL_VERSION + 1,
        options: node::Options::new(),
    };
    let refused = client
        .peer()
        .system()
        .request_with(
            "_system:handshake",
            &[],
            protocol::encode_value(&hello).unwrap(),
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
    match refused {
        protocol::Error::Remote(remote) => {
            assert_eq!(remote.code, "VERSION_MISMATCH");
            assert_eq!(remote.message, node::PROTOCOL_VERSION.to_string());
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    wait_for(&mut events, "a reports the refusal", |e| match e {
        NodeEvent::Error { message, .. } if message.contains("protocol version") => Some(()),
        _ => None,
    })
    .await;
    assert!(a.peers().get("future").is_none());
}
