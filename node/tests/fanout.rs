//! Scatter-gather and balanced groups over loopback, directly and through a router: every
//! matching node's outcome under one deadline (and as a stream), the first N, a tick or a
//! request to exactly one member of each group, each node and each group reached once.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use node::{Error, Filter, HandlerError, Node, Request, Scope, Strategy, Target};
use support::*;

/// A bound worker with `role=worker` and `group=G`: `who` answers its id after the
/// milliseconds its `delay` option says (fail: a handler error), and a tick counter.
async fn worker(id: &str, group: &str, delay: u64, ticks: Arc<AtomicUsize>) -> Node {
    let node = builder(id)
        .option("role", "worker")
        .option("group", group)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let me = id.to_owned();
    node.on_request("who", move |_req: Request| {
        let me = me.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            if me.starts_with("bad") {
                return Err(HandlerError::new("BROKEN", "on purpose"));
            }
            Ok(me)
        }
    });
    node.on_tick("note", move |_req: Request| {
        ticks.fetch_add(1, Ordering::SeqCst);
        async {}
    });
    node
}

fn workers_filter() -> Filter {
    Filter::new().eq("role", "worker")
}

fn by_id<R: std::fmt::Debug>(
    list: Vec<(node::NodeId, node::Result<R>)>,
) -> HashMap<String, node::Result<R>> {
    let mut map = HashMap::new();
    for (id, outcome) in list {
        assert!(
            map.insert(id.to_string(), outcome).is_none(),
            "{id} answered twice"
        );
    }
    map
}

#[tokio::test]
async fn a_gather_returns_every_nodes_outcome_under_one_deadline() {
    let counter = || Arc::new(AtomicUsize::new(0));
    let a = worker("a", "g", 0, counter()).await;
    let b = worker("b", "g", 0, counter()).await;
    let bad = worker("bad", "g", 0, counter()).await;
    let slow = worker("slow", "g", 3_000, counter()).await;
    let caller = client("caller").await;
    for node in [&a, &b, &bad, &slow] {
        caller.connect(&address(node)).await.unwrap();
    }
    let began = Instant::now();
    let all: Vec<(node::NodeId, node::Result<String>)> = caller
        .call(Target::Any(workers_filter(), Scope::Both), "who")
        .timeout(Duration::from_millis(400))
        .gather(&())
        .await
        .unwrap();
    // One deadline for all: about 400 ms, far below the slow one's 3 s.
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    let all = by_id(all);
    assert_eq!(all.len(), 4);
    assert_eq!(all["a"].as_deref().unwrap(), "a");
    assert_eq!(all["b"].as_deref().unwrap(), "b");
    assert!(matches!(&all["bad"], Err(Error::Handler { code, .. }) if code == "BROKEN"));
    assert!(all["slow"].as_ref().unwrap_err().is_timeout());

    // The first N: returns once two replies came, without waiting for the slow one.
    let began = Instant::now();
    let first: Vec<(node::NodeId, node::Result<String>)> = caller
        .call(Target::Any(workers_filter(), Scope::Both), "who")
        .timeout(Duration::from_secs(5))
        .min_replies(2)
        .gather(&())
        .await
        .unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(first.iter().filter(|(_, r)| r.is_ok()).count(), 2);

    // The stream form yields as they arrive: the slow one comes last.
    let stream = caller
        .call(Target::Any(workers_filter(), Scope::Both), "who")
        .timeout(Duration::from_millis(400))
        .raw()
        .gather_stream(bytes::Bytes::from(protocol_nil()))
        .unwrap();
    let order: Vec<String> = stream.map(|(id, _)| id.to_string()).collect().await;
    assert_eq!(order.len(), 4);
    assert_eq!(order.last().unwrap(), "slow");

    // Nothing matching is a typed error.
    let none = caller
        .call(Filter::new().eq("role", "nobody"), "who")
        .gather::<_, String>(&())
        .await;
    assert!(matches!(none, Err(Error::NoNodesMatchFilter)), "{none:?}");
}

/// MessagePack's nil, the payload of `&()`.
fn protocol_nil() -> Vec<u8> {
    vec![0xc0]
}

#[tokio::test]
async fn a_gather_through_a_router_asks_each_node_once() {
    let counter = || Arc::new(AtomicUsize::new(0));
    let hub = router("hub").await;
    let near = worker("near", "g", 0, counter()).await;
    let far1 = worker("far1", "g", 0, counter()).await;
    let far2 = worker("far2", "g", 0, counter()).await;
    // `both` is joined to the caller directly and to the hub: it must answer once.
    let both = worker("both", "g", 0, counter()).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&asked);
    both.off_request("who");
    both.on_request("who", move |_req: Request| {
        seen.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>("both".to_string()) }
    });
    for node in [&far1, &far2, &both] {
        node.connect(&address(&hub)).await.unwrap();
    }
    let caller = client("caller").await;
    caller.connect(&address(&near)).await.unwrap();
    caller.connect(&address(&both)).await.unwrap();
    caller.connect(&address(&hub)).await.unwrap();
    let all = by_id(
        caller
            .call(workers_filter(), "who")
            .gather::<_, String>(&())
            .await
            .unwrap(),
    );
    let mut names: Vec<&str> = all.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["both", "far1", "far2", "near"]);
    assert!(all.values().all(Result::is_ok), "{all:?}");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "asked once, not through the hub again"
    );
}

/// Three groups of three nodes: each node, its tick count and its group.
async fn groups_of_three(prefix: &str) -> Vec<(Node, Arc<AtomicUsize>, String)> {
    let mut all = Vec::new();
    for group in ["billing", "search", "mail"] {
        for i in 0..3 {
            let ticks = Arc::new(AtomicUsize::new(0));
            let id = format!("{prefix}{group}-{i}");
            let node = worker(&id, group, 0, Arc::clone(&ticks)).await;
            all.push((node, ticks, group.to_owned()));
        }
    }
    all
}

async fn settled(what: &str, counts: &[Arc<AtomicUsize>], total: usize) {
    within(what, async {
        while counts
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum::<usize>()
            < total
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Exactly: nothing more arrives after a pause (bounded, generous).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sum: usize = counts.iter().map(|c| c.load(Ordering::SeqCst)).sum();
    assert_eq!(sum, total, "{what}");
}

#[tokio::test]
async fn a_group_tick_reaches_exactly_one_member_of_each_group() {
    let nodes = groups_of_three("").await;
    let caller = builder("caller")
        .strategy(Strategy::RoundRobin)
        .build()
        .await
        .unwrap();
    for (node, _, _) in &nodes {
        caller.connect(&address(node)).await.unwrap();
    }
    let to = Target::all(workers_filter());
    for _ in 0..3_000 {
        let reached = caller
            .call(to.clone(), "note")
            .groups("group")
            .tick(&())
            .await
            .unwrap();
        assert_eq!(reached.nodes, 3, "one per group");
    }
    let counts: Vec<Arc<AtomicUsize>> = nodes.iter().map(|(_, c, _)| Arc::clone(c)).collect();
    settled("9,000 ticks", &counts, 9_000).await;
    for group in ["billing", "search", "mail"] {
        let members: Vec<usize> = nodes
            .iter()
            .filter(|(_, _, g)| g == group)
            .map(|(_, c, _)| c.load(Ordering::SeqCst))
            .collect();
        assert_eq!(members.iter().sum::<usize>(), 3_000, "{group}: {members:?}");
        // Round robin inside the group: an even spread.
        assert_eq!(members, [1_000, 1_000, 1_000], "{group}");
    }

    // A request to one member of each group: one reply per group.
    let replies: Vec<(node::NodeId, node::Result<String>)> = caller
        .call(to, "who")
        .groups("group")
        .gather(&())
        .await
        .unwrap();
    let mut groups: Vec<String> = replies
        .iter()
        .map(|(id, _)| id.as_str().rsplit_once('-').unwrap().0.to_owned())
        .collect();
    groups.sort_unstable();
    assert_eq!(groups, ["billing", "mail", "search"]);
}

#[tokio::test]
async fn groups_spanning_a_router_are_served_once() {
    // billing has members both near the caller and behind the hub; search and mail only
    // behind the hub.
    let nodes = groups_of_three("r").await;
    let hub = router("hub").await;
    let caller = client("caller").await;
    for (node, _, group) in &nodes {
        node.connect(&address(&hub)).await.unwrap();
        if group == "billing" {
            caller.connect(&address(node)).await.unwrap();
        }
    }
    caller.connect(&address(&hub)).await.unwrap();
    let to = Target::all(workers_filter());
    within("the hub to see all nine", async {
        while hub.peers().len() < 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    for _ in 0..300 {
        let reached = caller
            .call(to.clone(), "note")
            .groups("group")
            .tick(&())
            .await
            .unwrap();
        assert_eq!(reached.nodes, 3);
    }
    let counts: Vec<Arc<AtomicUsize>> = nodes.iter().map(|(_, c, _)| Arc::clone(c)).collect();
    settled("900 ticks", &counts, 900).await;
    for group in ["billing", "search", "mail"] {
        let sum: usize = nodes
            .iter()
            .filter(|(_, _, g)| g == group)
            .map(|(_, c, _)| c.load(Ordering::SeqCst))
            .sum();
        assert_eq!(sum, 300, "{group}");
    }
}
