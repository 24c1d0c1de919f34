//! Selecting peers over loopback: nested options and null through the handshake, dotted
//! filter keys, `peers_matching` and `peer_by_address`, and picks that follow option
//! changes, joins and leaves (the selection cache is invalidated by each).

mod support;

use node::options::options;
use node::{Direction, Filter, HandlerError, Node, NodeEvent, Request, Scope, Value};
use support::*;

/// A worker with nested options (`region.zone`, `region.rack`) and a null, joined to `hub`,
/// answering `name` with its id.
async fn worker(id: &str, zone: &str, rack: i64, hub: &Node) -> Node {
    let node = support::builder(id)
        .option("role", "worker")
        .option(
            "region",
            Value::Map(options([
                ("zone", Value::from(zone)),
                ("rack", Value::from(rack)),
            ])),
        )
        .option("spare", Value::Null)
        .build()
        .await
        .unwrap();
    let me = id.to_owned();
    node.on_request("name", move |_req: Request| {
        let me = me.clone();
        async move { Ok::<_, HandlerError>(me) }
    });
    node.connect(&address(hub)).await.unwrap();
    node
}

fn ids(peers: Vec<node::PeerInfo>) -> Vec<String> {
    peers.into_iter().map(|p| p.id.to_string()).collect()
}

/// Asks `hub` for `name` with `filter` until every name in `expected` answered (and no other).
async fn names(hub: &Node, filter: &Filter) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let name: String = hub
            .request(
                node::Target::any(filter.clone()).scope(Scope::Down),
                "name",
                &(),
            )
            .await
            .unwrap();
        seen.insert(name);
    }
    seen.into_iter().collect()
}

#[tokio::test]
async fn nested_options_and_null_travel_in_the_handshake_and_filter_by_path() {
    let hub = server("hub").await;
    let _a = worker("a", "z1", 1, &hub).await;
    let _b = worker("b", "z1", 2, &hub).await;
    let _c = worker("c", "z2", 3, &hub).await;
    within("three joined", async {
        while hub.peers().len() < 3 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;

    let a = hub.peers().get("a").unwrap();
    assert_eq!(
        a.options["region"],
        Value::Map(options([
            ("zone", Value::from("z1")),
            ("rack", Value::from(1))
        ]))
    );
    assert_eq!(a.options["spare"], Value::Null);

    let zone1 = Filter::new().eq("region.zone", "z1");
    assert_eq!(ids(hub.peers().matching(&zone1, Scope::Both)), ["a", "b"]);
    assert_eq!(ids(hub.peers().matching(&zone1, Scope::Down)), ["a", "b"]);
    assert!(hub.peers().matching(&zone1, Scope::Up).is_empty());
    assert_eq!(
        ids(hub
            .peers()
            .matching(&Filter::new().gte("region.rack", 2), Scope::Both)),
        ["b", "c"]
    );
    // A null is no value: `$ne` fails on it as on a missing key.
    assert!(hub
        .peers()
        .matching(&Filter::new().ne("spare", 1), Scope::Both)
        .is_empty());
    assert_eq!(names(&hub, &zone1).await, ["a", "b"]);

    // The same filter from its JSON wire form selects the same peers.
    let from_json =
        Filter::from_json(&serde_json::json!({"region.zone": {"$in": ["z2"]}})).unwrap();
    assert_eq!(ids(hub.peers().matching(&from_json, Scope::Both)), ["c"]);
}

#[tokio::test]
async fn picks_follow_option_changes_joins_and_leaves() {
    let hub = server("hub").await;
    let mut events = hub.events();
    let a = worker("a", "z1", 1, &hub).await;
    let b = worker("b", "z1", 2, &hub).await;
    let zone1 = Filter::new().eq("region.zone", "z1");
    assert_eq!(names(&hub, &zone1).await, ["a", "b"]);

    // `b` moves to z2: the hub stops picking it once it heard.
    let mut moved = b.options();
    moved.insert(
        "region".into(),
        Value::Map(options([
            ("zone", Value::from("z2")),
            ("rack", Value::from(2)),
        ])),
    );
    b.set_options(moved).await.unwrap();
    wait_for(&mut events, "b's new options", |e| match e {
        NodeEvent::PeerOptionsChanged { id, .. } if id.as_str() == "b" => Some(()),
        _ => None,
    })
    .await;
    assert_eq!(names(&hub, &zone1).await, ["a"]);
    assert_eq!(ids(hub.peers().matching(&zone1, Scope::Both)), ["a"]);

    // A new peer in z1 joins: picked from the next call on.
    let _c = worker("c", "z1", 3, &hub).await;
    assert_eq!(names(&hub, &zone1).await, ["a", "c"]);

    // `a` leaves: never picked again.
    a.close().await;
    wait_for(&mut events, "a left", |e| match e {
        NodeEvent::PeerLeft { id, .. } if id.as_str() == "a" => Some(()),
        _ => None,
    })
    .await;
    assert_eq!(names(&hub, &zone1).await, ["c"]);
}

#[tokio::test]
async fn peer_by_address_finds_upstream_peers_by_their_connect_address() {
    let hub = server("hub").await;
    let other = server("other").await;
    let client = support::builder("client")
        .option("role", "client")
        .build()
        .await
        .unwrap();
    client.connect(&address(&hub)).await.unwrap();
    client.connect(&address(&other)).await.unwrap();

    let found = client.peers().by_address(&address(&hub)).unwrap();
    assert_eq!(found.id.as_str(), "hub");
    assert_eq!(found.direction, Direction::Upstream);
    assert_eq!(
        client
            .peers()
            .by_address(&address(&other))
            .unwrap()
            .id
            .as_str(),
        "other"
    );
    assert!(client.peers().by_address("tcp://127.0.0.1:1").is_none());

    // Downstream peers have no address here: the hub cannot look its client up by one.
    within("client joined the hub", async {
        while hub.peers().get("client").is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(hub.peers().by_address(&address(&hub)).is_none());

    // After a disconnect the address finds nobody.
    client.disconnect(&address(&hub)).await.unwrap();
    assert!(client.peers().by_address(&address(&hub)).is_none());
}
