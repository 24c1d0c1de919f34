//! Join time through discovery: how long a node takes from `discover(..)` until it is
//! joined to all of 100 workers, when a DNS name answers their 100 addresses (a real name
//! server on loopback: hickory-server) and when the same 100 are a static list.
//!
//! `cargo bench -p node --bench discovery`. Group `join/100`, functions `dns` and
//! `listed`. The workers listen on 127.0.0.1 to 127.0.0.100 at one port (all of 127/8 is
//! loopback on Linux); each sample is a fresh gateway that joins them all and closes.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

#[path = "../tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use node::discover::{Dns, Static};
use node::Node;

const WORKERS: u8 = 100;

fn builder(id: &str) -> node::NodeBuilder {
    // Slow heartbeats: between samples the runtime is idle.
    Node::builder()
        .id(id)
        .heartbeat_interval(Duration::from_secs(60))
}

async fn join(gateway: Node, discovery: node::Discovery) -> Duration {
    let start = Instant::now();
    while discovery.joined().len() < usize::from(WORKERS) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let took = start.elapsed();
    gateway.close().await;
    took
}

fn joins(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (workers, port, server) = runtime.block_on(async {
        let first = builder("w1")
            .bind("tcp://127.0.0.1:0")
            .build()
            .await
            .unwrap();
        let address = first.address().unwrap();
        let port: u16 = address.rsplit(':').next().unwrap().parse().unwrap();
        let mut workers = vec![first];
        for n in 2..=WORKERS {
            let bind = format!("tcp://127.0.0.{n}:{port}");
            workers.push(builder(&format!("w{n}")).bind(bind).build().await.unwrap());
        }
        let server = dns::TestDns::start().await;
        let ips: Vec<IpAddr> = (1..=WORKERS)
            .map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)))
            .collect();
        server.set("workers", &ips, 60).await;
        (workers, port, server)
    });
    let listed: Vec<String> = (1..=WORKERS)
        .map(|n| format!("tcp://127.0.0.{n}:{port}"))
        .collect();
    let mut group = c.benchmark_group(format!("join/{WORKERS}"));
    let mut round = 0u64;
    group.bench_function("dns", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    round += 1;
                    let gateway = builder(&format!("g{round}")).build().await.unwrap();
                    let name = format!("workers.{}:{port}", dns::ZONE);
                    let discovery = gateway.discover(Dns::new(name).name_server(server.address));
                    total += join(gateway, discovery).await;
                }
                total
            })
        })
    });
    group.bench_function("listed", |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    round += 1;
                    let gateway = builder(&format!("g{round}")).build().await.unwrap();
                    let discovery = gateway.discover(Static::new(listed.clone()));
                    total += join(gateway, discovery).await;
                }
                total
            })
        })
    });
    group.finish();
    runtime.block_on(async {
        for worker in workers {
            worker.close().await;
        }
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = joins
}
criterion_main!(benches);
