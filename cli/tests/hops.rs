//! What failed, and where, across two routers and separate processes: a caller joined to
//! one router only, a second router behind it, workers behind the second. An error a
//! router makes carries the node it is about and the router itself as fields, and the
//! caller reads them into the same typed variant it would get directly (`Error::PeerLeft {
//! peer, hop }`), on both engines; the CLI's caller names the node in its error line.

mod support;

use std::time::{Duration, Instant};

use node::{Error, Filter, Node};
use support::{zeronode, NodeProcess};

/// Router `r2` (bound), router `r1` joined to it (bound), and the caller's address: r1's.
struct Chain {
    engine: &'static str,
    r1: NodeProcess,
    r2: NodeProcess,
}

impl Chain {
    fn start(engine: &'static str) -> Chain {
        let router = |id: &str, connect: Option<&str>| {
            let mut args = vec!["--engine", engine, "--id", id, "--router"];
            args.extend(["--bind", "tcp://127.0.0.1:0"]);
            if let Some(address) = connect {
                args.extend(["--connect", address]);
            }
            let mut node = NodeProcess::start(&args);
            let ready = format!("node {id} ready");
            node.wait_for(&ready, |l| l == ready);
            node
        };
        let r2 = router("r2", None);
        let r1 = router("r1", Some(&r2.address));
        Chain { engine, r1, r2 }
    }

    /// Starts worker `id` (option `role=work`) joined to r2, and waits until r2 has it.
    fn worker(&mut self, id: &str) -> NodeProcess {
        let mut worker = NodeProcess::start(&[
            "--engine",
            self.engine,
            "--id",
            id,
            "--connect",
            &self.r2.address,
            "-o",
            "role=work",
        ]);
        let ready = format!("node {id} ready");
        worker.wait_for(&ready, |l| l == ready);
        self.r2.wait_for(&format!("{id} joined"), |l| {
            l.starts_with(&format!("peer joined {id} "))
        });
        worker
    }
}

/// Sends `delay` (10 s in the worker) to `target` through the chain, kills `victim` once
/// the request is in its hands, and returns how the request ended.
async fn killed_mid_request(
    caller: &Node,
    to: impl Into<node::Target> + Clone + Send + 'static,
    victim: &mut NodeProcess,
) -> node::Result<u64> {
    let caller = caller.clone();
    let call = tokio::spawn(async move {
        caller
            .call(to, "delay")
            .timeout(Duration::from_secs(15))
            .send::<u64, u64>(&10_000u64)
            .await
    });
    // The request crosses two routers on loopback in about a millisecond; a second is
    // generous even on a loaded machine, and the 10 s handler is still running then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    victim.signal("KILL");
    tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the request ends, it does not hang")
        .expect("the call task")
}

/// Waits until a request to `w` through the chain is answered (the routers learn the
/// worker as it joins r2; r1 finds it through r2 on the first try, but the join itself
/// takes a moment).
async fn reachable(caller: &Node, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got: node::Result<u64> = caller.request(id, "delay", &0u64).await;
        match got {
            Ok(_) => return,
            Err(e) if Instant::now() > deadline => panic!("{id} never reachable: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

fn errors_name_the_node_and_the_router(engine: &'static str) {
    let mut chain = Chain::start(engine);
    let mut w1 = chain.worker("w1");
    let mut w2 = chain.worker("w2");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let caller = Node::builder().id("caller").build().await.expect("a node");
        caller.connect(&chain.r1.address).await.expect("r1");
        reachable(&caller, "w1").await;
        reachable(&caller, "w2").await;

        // By id: the worker killed mid-request is named, and so is the router that saw it.
        let got = killed_mid_request(&caller, "w1", &mut w1).await;
        match &got {
            Err(Error::PeerLeft { peer, hop }) => {
                assert_eq!(peer, "w1", "{engine}: {got:?}");
                assert_eq!(hop.as_deref(), Some("r2"), "{engine}: {got:?}");
            }
            other => panic!("{engine}: expected PeerLeft naming w1, got {other:?}"),
        }
        assert!(!got.as_ref().is_err_and(Error::is_retry_safe));

        // By filter: the caller never named the worker, the router's fields do.
        let work = Filter::new().eq("role", "work");
        let got = killed_mid_request(&caller, work, &mut w2).await;
        match &got {
            Err(Error::PeerLeft { peer, hop }) => {
                assert_eq!(peer, "w2", "{engine}: {got:?}");
                assert_eq!(hop.as_deref(), Some("r2"), "{engine}: {got:?}");
            }
            other => panic!("{engine}: expected PeerLeft naming w2, got {other:?}"),
        }

        // An id no router reaches: the id comes back as a field.
        let got: node::Result<u64> = caller.request("ghost", "delay", &0u64).await;
        assert!(
            matches!(&got, Err(Error::NodeNotFound { id }) if id == "ghost"),
            "{engine}: {got:?}"
        );
        caller.close().await;
    });

    // The CLI's caller says who left, from the built binary.
    let w3 = chain.worker("w3");
    let address = chain.r1.address.clone();
    let cli = std::thread::spawn(move || {
        zeronode(&[
            "request",
            "--engine",
            engine,
            "--connect",
            &address,
            "--any",
            "-f",
            "role=work",
            "delay",
            "10000",
        ])
    });
    std::thread::sleep(Duration::from_secs(1));
    w3.signal("KILL");
    let run = cli.join().expect("the CLI thread");
    let line = run.failed();
    assert!(
        line.contains("\"w3\"") && line.contains("\"r2\""),
        "{engine}: the error line names the worker and the router: {line}"
    );
}

#[test]
fn through_two_routers_a_killed_worker_is_named_native() {
    errors_name_the_node_and_the_router("native");
}

#[test]
fn through_two_routers_a_killed_worker_is_named_libzmq() {
    errors_name_the_node_and_the_router("libzmq");
}

/// One stream from every indexer: two behind the routers (one killed mid-stream) and one
/// joined to the caller directly. Each source has its own stream; the killed one ends with
/// its error, tagged with its id and naming it; the others deliver every item.
fn a_stream_from_every_match_survives_one_source_killed(engine: &'static str) {
    use futures::StreamExt;
    use std::collections::BTreeMap;

    let mut chain = Chain::start(engine);
    let _far = chain.worker("far");
    let doomed = chain.worker("doomed");
    let mut near = NodeProcess::start(&[
        "--engine",
        engine,
        "--id",
        "near",
        "--bind",
        "tcp://127.0.0.1:0",
        "-o",
        "role=work",
    ]);
    near.wait_for("near ready", |l| l == "node near ready");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let caller = Node::builder().id("caller").build().await.expect("a node");
        caller.connect(&chain.r1.address).await.expect("r1");
        caller.connect(&near.address).await.expect("near");
        reachable(&caller, "far").await;
        reachable(&caller, "doomed").await;

        // The matches, here and through both routers, with where each is joined.
        let work = Filter::new().eq("role", "work");
        let found = caller.find(&work).await.expect("find");
        let listed: Vec<_> = found
            .iter()
            .map(|f| (f.id.as_str(), f.via.as_ref().map(|v| v.as_str())))
            .collect();
        assert_eq!(
            listed,
            [("doomed", Some("r2")), ("far", Some("r2")), ("near", None)],
            "{engine}"
        );
        assert_eq!(
            found[0].options.get("role").and_then(|v| v.as_str()),
            Some("work")
        );

        // 40 items each, 25 ms apart: about a second per source.
        let count = serde_json::json!({"n": 40, "every_ms": 25});
        let mut items = caller
            .call(node::Target::all(work), "count")
            .timeout(Duration::from_secs(20))
            .stream_all::<u64>(&count)
            .await
            .expect("the streams open");
        let mut got: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut failed: BTreeMap<String, Error> = BTreeMap::new();
        let mut killed = false;
        let ended = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some((from, item)) = items.next().await {
                match item {
                    Ok(n) => got.entry(from.to_string()).or_default().push(n),
                    Err(e) => {
                        assert!(failed.insert(from.to_string(), e).is_none(), "one end each");
                    }
                }
                if !killed && got.get("doomed").is_some_and(|v| v.len() >= 5) {
                    doomed.signal("KILL");
                    killed = true;
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "{engine}: the merged stream ends when its sources do"
        );
        let all: Vec<u64> = (1..=40).collect();
        assert_eq!(
            got["far"], all,
            "{engine}: far delivered everything in order"
        );
        assert_eq!(
            got["near"], all,
            "{engine}: near delivered everything in order"
        );
        assert!(got["doomed"].len() < 40, "{engine}: doomed was cut short");
        assert_eq!(failed.len(), 1, "{engine}: only doomed failed: {failed:?}");
        match &failed["doomed"] {
            Error::PeerLeft { peer, hop } => {
                assert_eq!(peer, "doomed", "{engine}");
                assert_eq!(hop.as_deref(), Some("r2"), "{engine}");
            }
            other => panic!("{engine}: expected PeerLeft naming doomed, got {other:?}"),
        }
        caller.close().await;
    });
}

#[test]
fn a_stream_from_every_match_survives_one_source_killed_native() {
    a_stream_from_every_match_survives_one_source_killed("native");
}

#[test]
fn a_stream_from_every_match_survives_one_source_killed_libzmq() {
    a_stream_from_every_match_survives_one_source_killed("libzmq");
}
