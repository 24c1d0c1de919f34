//! `zeronode node --health`: what an orchestrator's probes read, across processes. A
//! worker reads ready once bound; at SIGTERM `/readyz` turns 503 while the requests it
//! holds are still running, and those requests still get their replies. A gateway that
//! follows a name over CURVE reads starting until discovery has joined a worker (through
//! a secured connection: the discovered connections use `--server-key`), then ready.

mod support;

#[path = "../../node/tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use dns::TestDns;
use node::Node;
use support::{health_address, http_get, zeronode, NodeProcess, PATIENCE};

/// Polls `GET path` until its status is `status`; fails after [`PATIENCE`].
fn wait_status(address: &str, path: &str, status: u16) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (got, body) = http_get(address, path);
        if got == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still {got} ({body:?}) after {PATIENCE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn readiness_turns_503_at_sigterm_while_requests_in_flight_get_their_replies() {
    let mut worker = NodeProcess::start(&[
        "--id",
        "w1",
        "--bind",
        "tcp://127.0.0.1:0",
        "--health",
        "127.0.0.1:0",
        "--grace",
        "20",
        "--verbose",
    ]);
    let health = health_address(&mut worker);
    worker.wait_for("ready", |l| l == "node w1 ready");
    assert_eq!(http_get(&health, "/readyz"), (200, "ready\n".into()));
    assert_eq!(http_get(&health, "/livez").0, 200);
    assert_eq!(http_get(&health, "/startupz").0, 200);

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let client = runtime.block_on(async {
        let client = Node::builder().id("client").build().await.expect("a node");
        client.connect(&worker.address).await.expect("joined");
        client
    });
    // Three requests the worker holds for 3 s each: long enough to see the probe flip
    // before they end (the probe is polled every 20 ms), short enough for a quick test.
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            runtime.spawn(async move {
                let reply: node::Result<u64> = client.request("w1", "delay", &3000u64).await;
                reply
            })
        })
        .collect();
    for _ in 0..3 {
        worker.wait_for("a delay request", |l| l.starts_with("request delay from"));
    }
    worker.signal("TERM");
    let body = wait_status(&health, "/readyz", 503);
    assert_eq!(body, "draining\n");
    assert!(
        calls.iter().all(|call| !call.is_finished()),
        "not ready before any request in flight ended"
    );
    // Still live while it drains: a liveness probe must not kill a draining node.
    assert_eq!(http_get(&health, "/livez"), (200, "draining\n".into()));
    for call in calls {
        let reply = runtime
            .block_on(async { tokio::time::timeout(PATIENCE, call).await })
            .expect("answered within the patience")
            .expect("the task ran");
        assert_eq!(reply.expect("a reply, not an error"), 3000);
    }
    assert!(worker.wait_exit().success(), "{worker}");
    runtime.block_on(client.close());
}

/// `zeronode keygen DIR/NAME`; the pair file and the public file.
fn keygen(dir: &Path, name: &str) -> (String, String) {
    let pair = dir.join(name).display().to_string();
    zeronode(&["keygen", &pair]).ok();
    let public = format!("{pair}.pub");
    (pair, public)
}

#[test]
fn a_gateway_following_a_name_over_curve_is_ready_once_it_joined_a_worker() {
    let dir = std::env::temp_dir().join(format!("zeronode-health-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let (worker_key, worker_pub) = keygen(&dir, "worker");
    let (gateway_key, gateway_pub) = keygen(&dir, "gateway");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let dns = runtime.block_on(TestDns::start());

    let worker = NodeProcess::start(&[
        "--id",
        "w1",
        "--bind",
        "tcp://127.0.0.1:0",
        "--key",
        &worker_key,
        "--allow",
        &gateway_pub,
    ]);
    let port = worker
        .address
        .rsplit(':')
        .next()
        .expect("a port")
        .to_owned();
    let name = format!("workers.{}", dns::ZONE.trim_end_matches('.'));
    let followed = format!("{name}:{port}");
    let dns_server = dns.address.to_string();
    let mut gateway = NodeProcess::start(&[
        "--id",
        "gateway",
        "--health",
        "127.0.0.1:0",
        "--key",
        &gateway_key,
        "--server-key",
        &worker_pub,
        "--discover",
        &followed,
        "--dns-server",
        &dns_server,
    ]);
    let health = health_address(&mut gateway);
    gateway.wait_for("ready", |l| l == "node gateway ready");
    // The name lists nobody yet: live, not ready, and it says what it waits for.
    let (status, body) = http_get(&health, "/readyz");
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body,
        format!("starting: waiting for a peer from {followed}\n")
    );
    assert_eq!(http_get(&health, "/startupz").0, 503);
    assert_eq!(http_get(&health, "/livez").0, 200);

    let loopback = [IpAddr::V4(Ipv4Addr::LOCALHOST)];
    runtime.block_on(dns.set("workers", &loopback, 1));
    // Joined through CURVE: the worker allows only the gateway's key, so a plaintext
    // connect (a discovery without the server key) would never join.
    assert_eq!(wait_status(&health, "/readyz", 200), "ready\n");
    gateway.wait_for("the worker joined", |l| l.starts_with("peer joined w1"));
    let _ = std::fs::remove_dir_all(&dir);
}
