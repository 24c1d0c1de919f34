//! The node layer's cost: node-to-node request/reply beside the protocol layer's
//! Client <-> Server request measured in the same run, and one-way tick throughput.
//!
//! `cargo bench -p node`. Groups: `request/{size}B/window={1,100}` with the functions
//! `protocol` and `node`; `hop/{size}B/window={1,100}` with `direct` and `via-router` (the
//! cost of one router hop); `tick/{size}B` (one way, counted by the receiver).
//! Each server has its own thread and runtime, as a server process would; the client runs on
//! criterion's thread.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

#[path = "../../protocol/benches/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use node::{Node, Request, Response};
use protocol::{request_fn, Client, Server};
use support::{drive, spawn_server};

const SIZES: [usize; 4] = [100, 500, 1000, 2000];
const WINDOWS: [usize; 2] = [1, 100];
const TIMEOUT: Duration = Duration::from_secs(30);

/// The client's runtime runs only while criterion measures; between samples it is idle, so
/// heartbeats are slowed down enough that nobody is declared dead in those pauses.
fn node_builder(id: &str) -> node::NodeBuilder {
    Node::builder()
        .id(id)
        .hwm(100_000)
        .max_payload(64 * 1024 * 1024)
        .heartbeat_interval(Duration::from_secs(60))
}

fn layers(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // The protocol layer alone.
    let (protocol_endpoint, _protocol_server) = spawn_server(|endpoint, stopped| async move {
        let options = transport::Options::default().hwm(100_000);
        let (server, _events) = Server::bind_with("tcp://127.0.0.1:0", options, usize::MAX)
            .await
            .unwrap();
        server.on_request(
            "echo",
            request_fn(|req| async move { Ok(req.payload().clone()) }),
        );
        endpoint.send(server.endpoint().to_owned()).unwrap();
        let _ = stopped.await;
        server.close().await;
    });
    let client = runtime.block_on(async {
        let options = transport::Options::default().hwm(100_000);
        Client::connect_with(&protocol_endpoint, options, usize::MAX, TIMEOUT)
            .await
            .unwrap()
    });

    // A router node, on its own thread as a router process would be.
    let (router_endpoint, _router) = spawn_server(|endpoint, stopped| async move {
        let router = node_builder("bench-router")
            .router(true)
            .bind("tcp://127.0.0.1:0")
            .build()
            .await
            .unwrap();
        endpoint.send(router.address().unwrap()).unwrap();
        let _ = stopped.await;
        router.close().await;
    });

    // A node server with a raw echo handler and a tick counter, also joined to the router.
    let ticks = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&ticks);
    let server_router = router_endpoint.clone();
    let (node_endpoint, _node_server) = spawn_server(move |endpoint, stopped| async move {
        let server = node_builder("bench-server")
            .bind("tcp://127.0.0.1:0")
            .build()
            .await
            .unwrap();
        server.connect(&server_router).await.unwrap();
        server.on_request_service(
            "echo",
            tower::service_fn(|req: Request| async move {
                Ok::<_, node::BoxError>(Response::raw(req.payload().clone()))
            }),
        );
        server.on_tick("count", move |_req: Request| {
            counted.fetch_add(1, Ordering::Relaxed);
            async {}
        });
        endpoint.send(server.address().unwrap()).unwrap();
        let _ = stopped.await;
        server.close().await;
    });
    let client_node = runtime.block_on(async {
        let node = node_builder("bench-client").build().await.unwrap();
        node.connect(&node_endpoint).await.unwrap();
        node
    });
    // A client joined to the router only: its requests to bench-server take one hop.
    let routed_node = runtime.block_on(async {
        let node = node_builder("bench-routed").build().await.unwrap();
        node.connect(&router_endpoint).await.unwrap();
        node
    });

    for size in SIZES {
        let payload = Bytes::from(vec![0xab; size]);
        for window in WINDOWS {
            let mut group = c.benchmark_group(format!("request/{size}B/window={window}"));
            group.throughput(Throughput::Elements(1));
            let server = client.peer();
            group.bench_function(BenchmarkId::from_parameter("protocol"), |b| {
                b.iter_custom(|iters| {
                    runtime.block_on(drive(window, iters, || async {
                        server
                            .request("echo", payload.clone(), TIMEOUT)
                            .await
                            .unwrap();
                    }))
                })
            });
            group.bench_function(BenchmarkId::from_parameter("node"), |b| {
                b.iter_custom(|iters| {
                    runtime.block_on(drive(window, iters, || async {
                        client_node
                            .call("bench-server", "echo")
                            .timeout(TIMEOUT)
                            .raw()
                            .send(payload.clone())
                            .await
                            .map(node::Reply::into_payload)
                            .unwrap();
                    }))
                })
            });
            group.finish();
        }
        if size == 100 || size == 1000 {
            for window in WINDOWS {
                let mut group = c.benchmark_group(format!("hop/{size}B/window={window}"));
                group.throughput(Throughput::Elements(1));
                for (name, node) in [("direct", &client_node), ("via-router", &routed_node)] {
                    group.bench_function(BenchmarkId::from_parameter(name), |b| {
                        b.iter_custom(|iters| {
                            runtime.block_on(drive(window, iters, || async {
                                node.call("bench-server", "echo")
                                    .timeout(TIMEOUT)
                                    .raw()
                                    .send(payload.clone())
                                    .await
                                    .map(node::Reply::into_payload)
                                    .unwrap();
                            }))
                        })
                    });
                }
                group.finish();
            }
        }
        let mut group = c.benchmark_group("tick");
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("{size}B"), |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    let target = ticks.load(Ordering::Relaxed) + iters;
                    for _ in 0..iters {
                        client_node
                            .call("bench-server", "count")
                            .raw()
                            .tick(payload.clone())
                            .await
                            .map(drop)
                            .unwrap();
                    }
                    // Counted when the receiver has handled them all.
                    while ticks.load(Ordering::Relaxed) < target {
                        tokio::time::sleep(Duration::from_micros(50)).await;
                    }
                    start.elapsed()
                })
            })
        });
        group.finish();
    }
    runtime.block_on(async {
        routed_node.close().await;
        client_node.close().await;
        client.close().await;
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = layers
}
criterion_main!(benches);
