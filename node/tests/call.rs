//! The one way to call: targets made from an id, a filter (any match) or `Target::all`, the
//! three sends of a `Call` (`send`, `gather`, `tick`), raw payloads with `.raw()`, the reply's
//! metadata, and `connect_with` (a timeout, a CURVE server key).

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node::{
    ConnectOptions, Error, ErrorCode, Filter, HandlerError, KeyPair, Node, Reply, Request, Scope,
    Sent, Target,
};
use parking_lot::Mutex;
use support::*;

/// Three `role=shard` nodes and one `role=gateway`, all connected to `caller`; every node
/// records the ticks it handles, and answers `who` with its id.
async fn shards() -> (Node, Vec<Node>, Arc<Mutex<Vec<String>>>) {
    let ticks = Arc::new(Mutex::new(Vec::new()));
    let caller = client("caller").await;
    let mut nodes = Vec::new();
    for (id, role) in [
        ("shard-1", "shard"),
        ("shard-2", "shard"),
        ("shard-3", "shard"),
        ("gw", "gateway"),
    ] {
        let node = builder(id)
            .option("role", role)
            .bind("tcp://127.0.0.1:0")
            .build()
            .await
            .unwrap();
        let me = id.to_owned();
        node.on_request("who", move |_req: Request| {
            let me = me.clone();
            async move { Ok::<_, HandlerError>(me) }
        });
        let (seen, me) = (Arc::clone(&ticks), id.to_owned());
        node.on_tick("flush", move |_req: Request| {
            seen.lock().push(me.clone());
            async {}
        });
        caller.connect(&address(&node)).await.unwrap();
        nodes.push(node);
    }
    (caller, nodes, ticks)
}

/// Waits until `ticks` holds `count` entries, then a little longer for any stray one.
async fn settled(ticks: &Mutex<Vec<String>>, count: usize) -> Vec<String> {
    within("the ticks to arrive", async {
        while ticks.lock().len() < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // A tick to a node it should not reach would arrive about as fast as the others.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut seen = ticks.lock().clone();
    seen.sort();
    seen
}

#[tokio::test]
async fn a_filter_as_target_reaches_one_match() {
    let (caller, _nodes, ticks) = shards().await;
    let shard = Filter::new().eq("role", "shard");

    // `&Filter`, `Filter` and `Target::any` are the same target: one match.
    let who: String = caller.request(&shard, "who", &()).await.unwrap();
    assert!(who.starts_with("shard-"), "{who}");
    let who: String = caller.request(shard.clone(), "who", &()).await.unwrap();
    assert!(who.starts_with("shard-"), "{who}");
    let who: String = caller
        .call(Target::any(shard.clone()).scope(Scope::Up), "who")
        .send(&())
        .await
        .unwrap();
    assert!(who.starts_with("shard-"), "{who}");

    // A tick to a filter goes to one node, and says so.
    let sent = caller.tick(&shard, "flush", &()).await.unwrap();
    assert_eq!(sent, Sent { nodes: 1 });
    let seen = settled(&ticks, 1).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].starts_with("shard-"), "{seen:?}");

    // Our peers are downstream of nothing: no match downstream is a typed error.
    let none = caller
        .request::<_, String>(Target::any(shard).scope(Scope::Down), "who", &())
        .await;
    assert!(matches!(none, Err(Error::NoNodesMatchFilter)), "{none:?}");
}

#[tokio::test]
async fn a_tick_to_all_reaches_every_match_and_counts_the_nodes_sent_to() {
    let (caller, _nodes, ticks) = shards().await;
    let shard = Filter::new().eq("role", "shard");

    let sent = caller
        .tick(Target::all(shard.clone()), "flush", &())
        .await
        .unwrap();
    assert_eq!(sent.nodes, 3);
    assert_eq!(
        settled(&ticks, 3).await,
        ["shard-1", "shard-2", "shard-3"],
        "every shard once, the gateway never"
    );

    // The builder's tick goes where the target says, the same way.
    let sent = caller
        .call(Target::all(shard), "flush")
        .meta("reason", "test")
        .tick(&())
        .await
        .unwrap();
    assert_eq!(sent, Sent { nodes: 3 });
    assert_eq!(settled(&ticks, 6).await.len(), 6);

    // Nothing matching anywhere is a typed error, not a count of zero.
    let none = caller
        .tick(
            Target::all(Filter::new().eq("role", "nobody")),
            "flush",
            &(),
        )
        .await;
    assert!(matches!(none, Err(Error::NoNodesMatchFilter)), "{none:?}");
}

#[tokio::test]
async fn a_target_that_does_not_fit_the_call_is_a_typed_error() {
    let (caller, _nodes, _ticks) = shards().await;
    let shard = Filter::new().eq("role", "shard");

    // A request has one reply: to all matches it is refused before anything is sent.
    let all = caller
        .request::<_, String>(Target::all(shard.clone()), "who", &())
        .await
        .unwrap_err();
    assert_eq!(all.code(), ErrorCode::InvalidTarget, "{all:?}");

    // A gather goes to the matches of a filter, any or all alike; an id is refused.
    let by_id = caller
        .call("shard-1", "who")
        .gather::<_, String>(&())
        .await
        .unwrap_err();
    assert_eq!(by_id.code(), ErrorCode::InvalidTarget, "{by_id:?}");
    for target in [Target::any(shard.clone()), Target::all(shard)] {
        let mut answers: Vec<String> = caller
            .call(target, "who")
            .gather::<_, String>(&())
            .await
            .unwrap()
            .into_iter()
            .map(|(id, reply)| {
                assert_eq!(id.as_str(), reply.as_ref().unwrap());
                id.to_string()
            })
            .collect();
        answers.sort();
        assert_eq!(answers, ["shard-1", "shard-2", "shard-3"]);
    }
}

#[tokio::test]
async fn raw_and_typed_calls_give_the_replys_metadata() {
    let worker = server("worker").await;
    worker.on_request_service(
        "echo",
        tower::service_fn(|req: Request| async move {
            node::Response::raw(req.payload().clone())
                .with_all_meta(req.meta())
                .with_meta("served-by", "worker")
                .map_err(node::BoxError::from)
        }),
    );
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();

    // Raw: bytes in, the same bytes and the metadata out.
    let payload = Bytes::from_static(b"\x00not msgpack\xff");
    let reply = caller
        .call("worker", "echo")
        .meta("tenant", "acme")
        .raw()
        .send(payload.clone())
        .await
        .unwrap();
    assert_eq!(reply.payload(), &payload);
    assert_eq!(reply.meta().get_str("tenant"), Some("acme"));
    assert_eq!(reply.meta().get_str("served-by"), Some("worker"));

    // Typed, asking for a `Reply`: the value encoded, the reply whole.
    let reply: Reply = caller
        .call("worker", "echo")
        .meta("tenant", "acme")
        .send(&(7u32, "seven"))
        .await
        .unwrap();
    assert_eq!(
        reply.decode::<(u32, String)>().unwrap(),
        (7, "seven".into())
    );
    assert_eq!(reply.meta().get_str("served-by"), Some("worker"));

    // Raw gather and tick take bytes too.
    let gathered = caller
        .call(Filter::any(), "echo")
        .raw()
        .gather(payload.clone())
        .await
        .unwrap();
    assert_eq!(gathered.len(), 1);
    assert_eq!(gathered[0].1.as_ref().unwrap().payload(), &payload);
    let sent = caller.call("worker", "echo").raw().tick(payload).await;
    assert_eq!(sent.unwrap().nodes, 1);
}

#[tokio::test]
async fn connect_with_a_timeout_gives_up_in_time() {
    // A bound socket that never answers the handshake: a plain TCP listener.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", silent.local_addr().unwrap());
    let caller = client("caller").await;
    let started = Instant::now();
    let options = ConnectOptions::new().timeout(Duration::from_millis(300));
    let err = within(
        "a connect with a timeout",
        caller.connect_with(&address, options),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::HandshakeFailed, "{err:?}");
    // Well under the builder's 3 s handshake timeout: the call's own timeout applied
    // (generous, for a loaded CI machine).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(silent);
}

#[tokio::test]
async fn connect_with_a_server_key_joins_a_curve_node_and_a_wrong_key_is_refused() {
    let (server_keys, client_keys) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
    let vault = builder("vault")
        .curve(server_keys.clone())
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    vault.on_request("secret", |_req: Request| async {
        Ok::<_, HandlerError>(42u32)
    });
    assert_eq!(vault.keys().public(), Some(server_keys.public));
    vault.keys().allow(client_keys.public).await.unwrap();

    let teller = builder("teller").curve(client_keys).build().await.unwrap();
    let wrong = ConnectOptions::new().server_key(KeyPair::generate().unwrap().public);
    let err = within(
        "a connect with the wrong key",
        teller.connect_with(&address(&vault), wrong),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Refused, "{err:?}");

    let right = ConnectOptions::new().server_key(server_keys.public);
    let peer = teller.connect_with(&address(&vault), right).await.unwrap();
    assert_eq!(peer.key, Some(server_keys.public));
    assert_eq!(
        teller
            .request::<_, u32>("vault", "secret", &())
            .await
            .unwrap(),
        42
    );
    assert_eq!(
        teller.peers().by_address(&address(&vault)).unwrap().id,
        peer.id
    );
}

/// A request's future is what every caller moves (into a task, a `FuturesUnordered`, a
/// box) for each request, so its size is paid per request in copies: at 4.8 KB (the way
/// through a router held inline, and the future held twice by the `async` block around
/// it) `memcpy` was 23% of a client's instructions with 100 requests in flight (callgrind).
/// It is 1.2 KB now; 2 KiB leaves room for the compiler's layout without letting the
/// rare paths back in.
#[tokio::test]
async fn a_requests_future_stays_small() {
    const BOUND: usize = 2048;
    let node = Node::builder().id("caller").build().await.unwrap();
    let to = node::NodeId::from("elsewhere".to_string());
    let raw = node.call(&to, "echo").raw().send(Bytes::new());
    assert!(
        std::mem::size_of_val(&raw) <= BOUND,
        "a raw request's future is {} bytes",
        std::mem::size_of_val(&raw)
    );
    let typed = node.call(&to, "echo").send::<_, Reply>(&"x");
    assert!(
        std::mem::size_of_val(&typed) <= BOUND,
        "a typed request's future is {} bytes",
        std::mem::size_of_val(&typed)
    );
    let filtered = node
        .call(Target::any(Filter::new()), "echo")
        .send::<_, Reply>(&"x");
    assert!(
        std::mem::size_of_val(&filtered) <= BOUND,
        "a request by filter's future is {} bytes",
        std::mem::size_of_val(&filtered)
    );
    drop((raw, typed, filtered));
    node.close().await;
}
