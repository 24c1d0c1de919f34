//! A node describes itself to a peer that asks, directly or through routers; a node can
//! turn that off or keep it to some CURVE keys.

mod support;

use node::middleware::{from_fn, Next};
use node::{
    Body, Code, ConnectOptions, DescribePolicy, Direction, Error, ErrorCode, HandlerError, KeyPair,
    Node, Request, Sink,
};
use support::*;

/// A server answering `echo` (and failing `boom`), streaming `count`, taking the upload
/// `store`, handling the tick `note`.
async fn worker(id: &str, policy: DescribePolicy) -> Node {
    let node = builder(id)
        .option("role", "worker")
        .describe(policy)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    node.on_request("echo", |req: Request| async move {
        let text: String = req.decode()?;
        Ok::<_, HandlerError>(text)
    });
    node.on_request("boom", |_req: Request| async move {
        Err::<(), _>(HandlerError::new("E_BOOM", "no"))
    });
    node.on_request("guarded", |_req: Request| async move {
        Ok::<_, HandlerError>(())
    });
    // A middleware refusing what carries no tenant, as a service would check one.
    node.layer_for(
        "guarded",
        from_fn(|req: Request, next: Next| async move {
            if req.meta().get_str("tenant").is_none() {
                return Err(HandlerError::new(Code::Unauthenticated, "no tenant").into());
            }
            next.run(req).await
        }),
    );
    node.on_tick(regex::Regex::new("^note").unwrap(), |_req: Request| async {
    });
    node.on_stream("count", |_req: Request, mut sink: Sink| async move {
        sink.send(&1u32).await?;
        Ok(())
    });
    node.on_upload("store", |_req: Request, _body: Body| async move {
        Ok::<_, HandlerError>(())
    });
    node
}

#[tokio::test]
async fn a_peer_is_described_with_its_handlers_peers_and_per_event_counts() {
    let server = worker("billing", DescribePolicy::Anyone).await;
    let client = client("desk").await;
    client.connect(&address(&server)).await.unwrap();
    for _ in 0..5 {
        let _: String = client.request("billing", "echo", "hi").await.unwrap();
    }
    let failed: Result<(), Error> = client.request("billing", "boom", &()).await;
    assert_eq!(failed.unwrap_err().code(), ErrorCode::HandlerError);

    let described = within("describe", client.describe("billing"))
        .await
        .unwrap();
    assert_eq!(described.id.as_str(), "billing");
    assert_eq!(described.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(described.engine, server.config().engine.to_string());
    assert!(!described.curve);
    assert!(!described.router);
    assert_eq!(described.address, server.address());
    assert_eq!(described.options, server.options());
    assert_eq!(described.requests, ["echo", "boom", "guarded"]);
    assert_eq!(described.streams, ["count"]);
    assert_eq!(described.uploads, ["store"]);
    assert_eq!(described.ticks, ["/^note/"]);
    assert_eq!(described.peers.len(), 1);
    assert_eq!(described.peers[0].id.as_str(), "desk");
    assert_eq!(described.peers[0].direction, Direction::Downstream);
    assert_eq!(
        described.limits.max_payload,
        server.config().max_payload as u64
    );
    assert!(described.routing.is_none());

    let echo = described.events.iter().find(|e| e.event == "echo").unwrap();
    assert_eq!(echo.requests.ok, 5);
    assert_eq!(echo.requests.failed(), 0);
    assert_eq!(echo.in_flight, 0);
    let latency = echo.latency.expect("five requests timed");
    assert_eq!(latency.count, 5);
    assert!(latency.p50_us <= latency.p99_us && latency.p99_us <= latency.max_us);
    let boom = described.events.iter().find(|e| e.event == "boom").unwrap();
    assert_eq!(boom.requests.error, 1);

    // The node describes itself the same way.
    let local = server.description();
    assert_eq!(local.instance, described.instance);
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn a_router_forwards_the_ask_and_adds_what_it_forwarded() {
    let hub = router("hub").await;
    let leaf = worker("leaf", DescribePolicy::Anyone).await;
    leaf.connect(&address(&hub)).await.unwrap();
    let asker = client("asker").await;
    asker.connect(&address(&hub)).await.unwrap();
    let _: String = asker.request("leaf", "echo", "via hub").await.unwrap();
    let failed: Result<(), Error> = asker.request("leaf", "boom", &()).await;
    assert_eq!(failed.unwrap_err().code(), ErrorCode::HandlerError);
    let refused: Result<(), Error> = asker.request("leaf", "guarded", &()).await;
    assert!(
        matches!(
            &refused,
            Err(Error::Handler {
                code: Code::Unauthenticated,
                ..
            })
        ),
        "{refused:?}"
    );

    let far = within("describe through the router", asker.describe("leaf"))
        .await
        .unwrap();
    assert_eq!(far.id.as_str(), "leaf");
    assert_eq!(far.peers[0].id.as_str(), "hub");
    assert_eq!(far.peers[0].direction, Direction::Upstream);
    assert!(far.peers[0].router);
    let echo = far.events.iter().find(|e| e.event == "echo").unwrap();
    assert_eq!(echo.requests.ok, 1);
    // The leaf counts the handler's error as an error and the middleware's refusal as a
    // refusal, by their codes.
    let boom = far.events.iter().find(|e| e.event == "boom").unwrap();
    assert_eq!((boom.requests.error, boom.requests.refused), (1, 0));
    let guarded = far.events.iter().find(|e| e.event == "guarded").unwrap();
    assert_eq!((guarded.requests.error, guarded.requests.refused), (0, 1));

    let router = asker.describe("hub").await.unwrap();
    assert!(router.router);
    let counts = router.routing.expect("a router says what it forwarded");
    // The echo, the handler's error, the refusal and the description each reached the
    // leaf: four forwarded. An error the leaf answered is a hop that worked.
    assert_eq!((counts.forwarded, counts.failed), (4, 0), "{counts:?}");
    // All of it went to the leaf, the one next hop.
    let hops: Vec<_> = counts
        .hops
        .iter()
        .map(|h| (h.to.as_str(), h.forwarded, h.failed))
        .collect();
    assert_eq!(hops, [("leaf", 4, 0)]);
    let mut ids: Vec<_> = router.peers.iter().map(|p| p.id.to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["asker", "leaf"]);

    // An id nobody has: the router's typed answer.
    let missing = asker.describe("nobody").await.unwrap_err();
    assert_eq!(missing.code(), ErrorCode::NodeNotFound, "{missing}");
    asker.close().await;
    leaf.close().await;
    hub.close().await;
}

#[tokio::test]
async fn a_node_that_turned_it_off_answers_no_handler() {
    let quiet = worker("quiet", DescribePolicy::Off).await;
    let client = client("c").await;
    client.connect(&address(&quiet)).await.unwrap();
    let _: String = client.request("quiet", "echo", "x").await.unwrap();
    let refused = client.describe("quiet").await.unwrap_err();
    assert!(
        matches!(&refused, Error::NoHandler { event } if event == "_system:describe"),
        "{refused:?}"
    );
    // Its own description says nothing of its events: nothing was recorded.
    assert!(quiet.description().events.is_empty());
    client.close().await;
    quiet.close().await;
}

#[tokio::test]
async fn under_curve_only_the_allowed_keys_are_answered() {
    let (server_keys, allowed, other) = (
        KeyPair::generate().unwrap(),
        KeyPair::generate().unwrap(),
        KeyPair::generate().unwrap(),
    );
    let vault = builder("vault")
        .curve(server_keys.clone())
        .describe(DescribePolicy::Keys(vec![allowed.public]))
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let secure = ConnectOptions::new().server_key(server_keys.public);
    let operator = builder("operator").curve(allowed).build().await.unwrap();
    operator
        .connect_with(&address(&vault), secure)
        .await
        .unwrap();
    let stranger = builder("stranger").curve(other).build().await.unwrap();
    stranger
        .connect_with(&address(&vault), secure)
        .await
        .unwrap();

    let described = within("describe", operator.describe("vault"))
        .await
        .unwrap();
    assert!(described.curve);
    let refused = stranger.describe("vault").await.unwrap_err();
    assert!(
        matches!(&refused, Error::Handler { code, .. } if code.as_str() == "NOT_AUTHORIZED"),
        "{refused:?}"
    );
    operator.close().await;
    stranger.close().await;
    vault.close().await;
}
