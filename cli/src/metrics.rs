//! `zeronode node --metrics ADDR`: the node's metrics in Prometheus text format over HTTP
//! (`GET /metrics`), rendered by `metrics-exporter-prometheus`. The listener is a few lines
//! of our own rather than the exporter's (which would bring an HTTP stack for one route).

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::error::Error;

/// Histogram buckets, in seconds: 50 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];
/// The most a request's head may take, and how long it may take to come.
const MAX_HEAD: usize = 8 * 1024;
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder (before the node is built: see `node::NodeBuilder::metrics`)
/// and serves it on `address`; returns the address it listens on.
pub(crate) async fn serve(address: &str) -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| Error::Usage(format!("--metrics {address}: {e}")))?;
    let local = listener.local_addr().map_err(Error::Start)?;
    let recorder = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .map_err(|e| Error::Usage(format!("metrics buckets: {e}")))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|e| Error::Usage(format!("a metrics recorder is already installed: {e}")))?;
    tokio::spawn(upkeep(handle.clone()));
    tokio::spawn(accept(listener, handle));
    Ok(local)
}

/// How often the recorder's histogram samples are folded into their buckets when nobody
/// scrapes (the exporter's own default).
const UPKEEP: Duration = Duration::from_secs(5);

/// Folds the histograms' pending samples into their buckets every [`UPKEEP`]: a recorder
/// only does so when rendered, so a node nobody scrapes would keep every sample it
/// recorded (8 bytes a request and handler, without bound).
async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(UPKEEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

async fn accept(listener: TcpListener, handle: PrometheusHandle) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let handle = handle.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(READ_TIMEOUT, answer(stream, &handle)).await;
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads one request head and answers it: the metrics for `GET /metrics`, 404 otherwise.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 || head.len() + n > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, body) = match route(line) {
        Route::Metrics => ("200 OK", handle.render()),
        Route::NotFound => ("404 Not Found", "not found: try GET /metrics\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
}

/// What a request line asks for.
fn route(line: &[u8]) -> Route {
    let mut parts = line.split(|&b| b == b' ');
    match (parts.next(), parts.next()) {
        (Some(b"GET"), Some(path)) if path == b"/metrics" || path.starts_with(b"/metrics?") => {
            Route::Metrics
        }
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(route(b"GET /metrics HTTP/1.1"), Route::Metrics);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Route::Metrics);
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b""), Route::NotFound);
    }
}
