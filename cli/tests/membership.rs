//! A membership change fails nothing, across processes: a `zeronode node --router` gateway
//! follows a DNS name (a real name server, hickory-server, on loopback) listing three
//! workers, each its own `zeronode node` process on 127.0.0.N; a caller (this process)
//! keeps 100 `delay 20` requests in flight to `any role=work` through the gateway; the first
//! worker's record is removed. The gateway stops picking that worker at once and lets it go
//! once the requests it forwards to it are answered: every request is answered.

mod support;

#[path = "../../node/tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dns::TestDns;
use node::{Filter, Node, Reply};
use support::NodeProcess;

/// 127.0.0.N.
fn loopback(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// Requests in flight at once through the gateway.
const IN_FLIGHT: usize = 100;

#[test]
fn a_router_following_a_name_fails_no_request_when_a_record_goes() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dns = runtime.block_on(TestDns::start());
    // Worker 1 picks the port; the others listen at it on their own address, as pods
    // behind a headless Service do.
    let mut workers = vec![NodeProcess::start(&[
        "--id",
        "worker-1",
        "--bind",
        "tcp://127.0.0.1:0",
        "-o",
        "role=work",
        "--verbose",
    ])];
    let port = workers[0].address.rsplit(':').next().unwrap().to_owned();
    for n in 2..=3 {
        let bind = format!("tcp://127.0.0.{n}:{port}");
        let id = format!("worker-{n}");
        let args = ["--id", &id, "--bind", &bind, "-o", "role=work"];
        workers.push(NodeProcess::start(&args));
    }
    let ttl = 1;
    let all: Vec<IpAddr> = (1..=3).map(loopback).collect();
    runtime.block_on(dns.set("work", &all, ttl));
    let name = format!("work.{}:{port}", dns::ZONE);
    let server = dns.address.to_string();
    let mut gateway = NodeProcess::start(&[
        "--id",
        "gateway",
        "--router",
        "--bind",
        "tcp://127.0.0.1:0",
        "--discover",
        &name,
        "--dns-server",
        &server,
    ]);
    let mut joined = std::collections::BTreeSet::new();
    while joined.len() < 3 {
        let line = gateway.wait_for("each worker joined", |l| {
            l.starts_with("peer joined worker-")
        });
        joined.insert(line);
    }

    // The caller: no worker of its own, so every request goes through the gateway.
    let caller = runtime.block_on(async {
        let caller = Node::builder().id("caller").build().await.unwrap();
        caller.connect(&gateway.address).await.unwrap();
        caller
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (sent, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let failed = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (caller, stop) = (caller.clone(), stop.clone());
            let (sent, answered, failed) = (sent.clone(), answered.clone(), failed.clone());
            runtime.spawn(async move {
                let work = Filter::new().eq("role", "work");
                while !stop.load(Ordering::Relaxed) {
                    sent.fetch_add(1, Ordering::Relaxed);
                    match caller.request::<_, Reply>(&work, "delay", &20u64).await {
                        Ok(_) => {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failed.lock().unwrap().push(format!("{e:?}")),
                    }
                }
            })
        })
        .collect();

    // Worker 1 is being asked through the gateway: about a third of the 100 are there
    // whenever its record goes.
    workers[0].wait_for("worker-1 asked", |l| l == "request delay from gateway");
    runtime.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    runtime.block_on(dns.set("work", &all[1..], ttl));
    gateway.wait_for("worker-1 let go", |l| {
        l.starts_with("peer left worker-1 (upstream")
    });
    // Requests go on to the two that stay.
    let after = answered.load(Ordering::Relaxed);
    runtime.block_on(async {
        let deadline = tokio::time::Instant::now() + support::PATIENCE;
        while answered.load(Ordering::Relaxed) < after + 500 {
            assert!(tokio::time::Instant::now() < deadline, "requests stopped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
    });
    let failed = failed.lock().unwrap().clone();
    let (sent, answered) = (
        sent.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
    );
    println!("{sent} requests through the gateway, {answered} answered");
    assert!(failed.is_empty(), "every request answered: {failed:?}");
    assert_eq!(sent, answered);
    let rest = gateway.rest_so_far();
    assert!(
        !rest
            .iter()
            .any(|l| l.starts_with("peer left worker-2") || l.starts_with("peer left worker-3")),
        "the other workers stayed: {rest:?}"
    );
    runtime.block_on(caller.close());
}
