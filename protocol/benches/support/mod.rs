//! What the protocol and node criterion benches share: a server on its own thread and
//! runtime (as a server process would have), and a driver that keeps a window of calls in
//! flight. Included by both benches with `#[path]` (bench targets cannot share a module
//! otherwise without a crate of their own).

use std::thread;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::StreamExt;

/// Runs `serve` on its own thread with its own current-thread runtime; returns the endpoint
/// it bound and a guard that stops it.
pub(crate) fn spawn_server<F, Fut>(serve: F) -> (String, ServerGuard)
where
    F: FnOnce(std::sync::mpsc::Sender<String>, tokio::sync::oneshot::Receiver<()>) -> Fut
        + Send
        + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let (endpoint_tx, endpoint_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let handle = thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(serve(endpoint_tx, stopped));
    });
    (
        endpoint_rx.recv().unwrap(),
        ServerGuard {
            stop: Some(stop),
            handle: Some(handle),
        },
    )
}

pub(crate) struct ServerGuard {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Keeps `window` calls in flight until `total` completed.
pub(crate) async fn drive<F, Fut>(window: usize, total: u64, mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    let mut in_flight = FuturesUnordered::new();
    let mut started = 0u64;
    while started < total && in_flight.len() < window {
        in_flight.push(call());
        started += 1;
    }
    while in_flight.next().await.is_some() {
        if started < total {
            in_flight.push(call());
            started += 1;
        }
    }
    start.elapsed()
}
