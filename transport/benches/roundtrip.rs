//! Dealer <-> Router round trips through the async transport, beside raw libzmq sockets
//! driven by plain threads (the limit), at the same payload sizes and windows.
//!
//! Each side has its own thread, as two processes would: the raw echo is a plain thread, the
//! transport echo a thread with its own current-thread tokio runtime, and both clients run on
//! criterion's thread. (Both async ends on one runtime thread serialise the two halves of
//! every round trip on one thread; that costs about 1.6x at window 1 on 2 cores.)
//!
//! `cargo bench -p transport` (add `-- roundtrip/100B` to filter). Groups are named
//! `roundtrip/{size}B/window={w}`, with the functions `raw-zmq` and `transport`; criterion's
//! elements/s is round trips per second. The groups `roundtrip/100B/window=1` and
//! `roundtrip/100B/window=1000` also have `curve`: the transport with CurveZMQ on (a CURVE
//! Router echo with no allow-list, a CURVE Dealer), to set the cost of encryption beside
//! `transport` (NULL mechanism, plaintext).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use transport::{Curve, Dealer, KeyPair, Options, Router};

const SIZES: [usize; 4] = [100, 500, 1000, 2000];
const WINDOWS: [u64; 4] = [1, 10, 100, 1000];
/// Where CURVE is measured beside NULL: one size, the two ends of the window range.
const CURVE_SIZE: usize = 100;
const CURVE_WINDOWS: [u64; 2] = [1, 1000];

/// Keeps up to `window` requests in flight until `total` round trips completed.
/// `send` and `recv` are the client's two halves.
fn drive_blocking(window: u64, total: u64, mut send: impl FnMut(), mut recv: impl FnMut()) {
    let mut sent = 0;
    while sent < window.min(total) {
        send();
        sent += 1;
    }
    for _ in 0..total {
        recv();
        if sent < total {
            send();
            sent += 1;
        }
    }
}

/// Raw libzmq: a ROUTER echo thread and a DEALER in the calling thread, blocking calls.
struct RawPair {
    dealer: zmq::Socket,
    _server: thread::JoinHandle<()>,
}

impl RawPair {
    fn new(ctx: &zmq::Context) -> RawPair {
        let router = ctx.socket(zmq::ROUTER).unwrap();
        router.set_sndhwm(100_000).unwrap();
        router.set_rcvhwm(100_000).unwrap();
        router.bind("tcp://127.0.0.1:0").unwrap();
        let endpoint = router.get_last_endpoint().unwrap().unwrap();
        let server = thread::spawn(move || loop {
            let Ok(frames) = router.recv_multipart(0) else {
                return;
            };
            if frames.len() == 2 && frames[1] == b"stop" {
                return;
            }
            router.send_multipart(frames, 0).unwrap();
        });
        let dealer = ctx.socket(zmq::DEALER).unwrap();
        dealer.set_sndhwm(100_000).unwrap();
        dealer.set_rcvhwm(100_000).unwrap();
        dealer.connect(&endpoint).unwrap();
        RawPair {
            dealer,
            _server: server,
        }
    }

    fn run(&self, payload: &[u8], window: u64, total: u64) -> Duration {
        let start = Instant::now();
        let dealer = &self.dealer;
        drive_blocking(
            window,
            total,
            || dealer.send(payload, 0).unwrap(),
            || {
                dealer.recv_bytes(0).unwrap();
            },
        );
        start.elapsed()
    }
}

impl Drop for RawPair {
    fn drop(&mut self) {
        let _ = self.dealer.send("stop", 0);
    }
}

/// The async transport: a Router echo on its own thread and tokio runtime (as the raw echo
/// has its own thread, and as a server process would), and a Dealer on the bench thread's
/// runtime.
struct AsyncPair {
    dealer: Dealer,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<thread::JoinHandle<()>>,
}

impl AsyncPair {
    /// Plaintext (ZMTP's NULL mechanism).
    fn new(runtime: &tokio::runtime::Runtime) -> AsyncPair {
        let options = Options::default().hwm(100_000);
        AsyncPair::with_options(runtime, options.clone(), options)
    }

    /// CurveZMQ: a CURVE server echo (no allow-list) and a CURVE client.
    fn curve(runtime: &tokio::runtime::Runtime) -> AsyncPair {
        let server_keys = KeyPair::generate().unwrap();
        let client_keys = KeyPair::generate().unwrap();
        let options = Options::default().hwm(100_000);
        AsyncPair::with_options(
            runtime,
            options.clone().curve(Curve::server(&server_keys)),
            options.curve(Curve::client(&client_keys, server_keys.public)),
        )
    }

    fn with_options(
        runtime: &tokio::runtime::Runtime,
        server_options: Options,
        options: Options,
    ) -> AsyncPair {
        let (endpoint_tx, endpoint_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let router = Router::with_options(server_options).unwrap();
                endpoint_tx
                    .send(router.bind("tcp://127.0.0.1:0").unwrap())
                    .unwrap();
                let echo = async {
                    while let Ok((peer, frames)) = router.recv().await {
                        if router.send(&peer, frames).await.is_err() {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = echo => {}
                    _ = stopped => {}
                }
                router.close().await;
            });
        });
        let endpoint = endpoint_rx.recv().unwrap();
        let dealer = runtime.block_on(async {
            let dealer = Dealer::with_options(options).unwrap();
            dealer.connect(&endpoint).unwrap();
            // One round trip so the connection is up before timing starts.
            dealer
                .send(vec![Bytes::from_static(b"warm")])
                .await
                .unwrap();
            dealer.recv().await.unwrap();
            dealer
        });
        AsyncPair {
            dealer,
            stop: Some(stop),
            server: Some(server),
        }
    }

    async fn run(&self, payload: &Bytes, window: u64, total: u64) -> Duration {
        let start = Instant::now();
        let mut sent = 0;
        while sent < window.min(total) {
            self.dealer.send(vec![payload.clone()]).await.unwrap();
            sent += 1;
        }
        for _ in 0..total {
            self.dealer.recv().await.unwrap();
            if sent < total {
                self.dealer.send(vec![payload.clone()]).await.unwrap();
                sent += 1;
            }
        }
        start.elapsed()
    }
}

impl Drop for AsyncPair {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

fn roundtrip(c: &mut Criterion) {
    let ctx = zmq::Context::new();
    let raw = RawPair::new(&ctx);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pair = AsyncPair::new(&runtime);
    let curve = AsyncPair::curve(&runtime);

    for size in SIZES {
        let payload = Bytes::from(vec![0xab; size]);
        for window in WINDOWS {
            let mut group = c.benchmark_group(format!("roundtrip/{size}B/window={window}"));
            group.throughput(Throughput::Elements(1));
            group.bench_function(BenchmarkId::from_parameter("raw-zmq"), |b| {
                b.iter_custom(|iters| raw.run(&payload, window, iters))
            });
            group.bench_function(BenchmarkId::from_parameter("transport"), |b| {
                b.iter_custom(|iters| runtime.block_on(pair.run(&payload, window, iters)))
            });
            if size == CURVE_SIZE && CURVE_WINDOWS.contains(&window) {
                group.bench_function(BenchmarkId::from_parameter("curve"), |b| {
                    b.iter_custom(|iters| runtime.block_on(curve.run(&payload, window, iters)))
                });
            }
            group.finish();
        }
    }
    drop(pair);
    drop(curve);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = roundtrip
}
criterion_main!(benches);
