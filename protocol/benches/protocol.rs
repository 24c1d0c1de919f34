//! The protocol layer's cost: envelope encode/decode, and Client <-> Server request/reply
//! beside the bare transport round trip measured in the same run.
//!
//! `cargo bench -p protocol`. Groups: `envelope/{encode,decode-header,decode-payload}/{size}B`
//! and `request/{size}B/window={1,100}` with the functions `transport` and `protocol`.
//! As in the transport bench, each server has its own thread and runtime, as a server
//! process would; the client runs on criterion's thread.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use protocol::{encode_value, request_fn, Client, Envelope, Kind, Server};
use support::{drive, spawn_server};
use transport::{Dealer, Options, Router};

const SIZES: [usize; 4] = [100, 500, 1000, 2000];
const WINDOWS: [usize; 2] = [1, 100];
const TIMEOUT: Duration = Duration::from_secs(30);

fn envelope(c: &mut Criterion) {
    for size in SIZES {
        // A typical payload: a MessagePack map with a blob, `size` bytes in all.
        let payload = encode_value(&("data", vec![7u8; size.saturating_sub(16)])).unwrap();
        let message = Envelope::new(Kind::Request, 42, "service:method", Bytes::new(), payload);
        let frames = message.encode();
        let mut group = c.benchmark_group("envelope");
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("encode/{size}B"), |b| b.iter(|| message.encode()));
        group.bench_function(format!("decode-header/{size}B"), |b| {
            b.iter(|| Envelope::decode(&frames, usize::MAX).unwrap())
        });
        group.bench_function(format!("decode-payload/{size}B"), |b| {
            b.iter(|| {
                let envelope = Envelope::decode(&frames, usize::MAX).unwrap();
                envelope
                    .decode_payload::<(String, serde_bytes_like::Blob)>()
                    .unwrap()
            })
        });
        group.finish();
    }
}

/// MessagePack's bin type as a plain Vec<u8> wrapper, so decoding reads a blob, not a list of
/// integers.
mod serde_bytes_like {
    use serde::{Deserialize, Deserializer};

    pub(crate) struct Blob(#[allow(dead_code)] pub(crate) Vec<u8>);

    impl<'de> Deserialize<'de> for Blob {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Blob, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Blob;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Blob, E> {
                    Ok(Blob(v.to_vec()))
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(
                    self,
                    mut a: A,
                ) -> Result<Blob, A::Error> {
                    let mut out = Vec::new();
                    while let Some(b) = a.next_element::<u8>()? {
                        out.push(b);
                    }
                    Ok(Blob(out))
                }
            }
            d.deserialize_any(V)
        }
    }
}

fn request(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = Options::default().hwm(100_000);

    // The bare transport: a Router echo; the client correlates nothing (in order).
    let echo_options = options.clone();
    let (echo_endpoint, _echo) = spawn_server(move |endpoint, stopped| async move {
        let router = Router::with_options(echo_options).unwrap();
        endpoint
            .send(router.bind("tcp://127.0.0.1:0").unwrap())
            .unwrap();
        let serve = async {
            while let Ok((peer, frames)) = router.recv().await {
                if router.send(&peer, frames).await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            () = serve => {}
            _ = stopped => {}
        }
    });
    let dealer = runtime.block_on(async {
        let dealer = Dealer::with_options(options.clone()).unwrap();
        dealer.connect(&echo_endpoint).unwrap();
        dealer
            .send(vec![Bytes::from_static(b"warm")])
            .await
            .unwrap();
        dealer.recv().await.unwrap();
        dealer
    });

    // The protocol: a Server with an echo handler, a Client.
    let server_options = options.clone();
    let (server_endpoint, _server) = spawn_server(move |endpoint, stopped| async move {
        let (server, _events) = Server::bind_with("tcp://127.0.0.1:0", server_options, usize::MAX)
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
        Client::connect_with(&server_endpoint, options.clone(), usize::MAX, TIMEOUT)
            .await
            .unwrap()
    });

    for size in SIZES {
        let payload = Bytes::from(vec![0xab; size]);
        for window in WINDOWS {
            let mut group = c.benchmark_group(format!("request/{size}B/window={window}"));
            group.throughput(Throughput::Elements(1));
            group.bench_function(BenchmarkId::from_parameter("transport"), |b| {
                b.iter_custom(|iters| {
                    runtime.block_on(async {
                        // In-order echo: send `window`, then one more per reply.
                        let start = Instant::now();
                        let mut sent = 0u64;
                        while sent < (window as u64).min(iters) {
                            dealer.send(vec![payload.clone()]).await.unwrap();
                            sent += 1;
                        }
                        for _ in 0..iters {
                            dealer.recv().await.unwrap();
                            if sent < iters {
                                dealer.send(vec![payload.clone()]).await.unwrap();
                                sent += 1;
                            }
                        }
                        start.elapsed()
                    })
                })
            });
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
            group.finish();
        }
    }
    runtime.block_on(client.close());
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = envelope, request
}
criterion_main!(benches);
