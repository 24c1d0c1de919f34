//! `zeronode node --metrics ADDR`: the node's metrics in Prometheus text format over HTTP
//! (`GET /metrics`), rendered by `metrics-exporter-prometheus` and served by hyper. Not the
//! exporter's own listener: it binds the address itself and does not say which port it
//! got, and `--metrics 127.0.0.1:0` prints the port it listens on.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

use crate::error::Error;

/// Histogram buckets, in seconds: 50 µs to 10 s.
const BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];
/// How long a connection may take to send a request's head (hyper's header read timeout):
/// a client that connects and says nothing does not hold a task for ever.
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
                    let service = hyper::service::service_fn(move |request| {
                        std::future::ready(Ok::<_, Infallible>(answer(&request, &handle)))
                    });
                    let served = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(READ_TIMEOUT)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "metrics listener: connection ended");
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The metrics for `GET /metrics` (any query), 404 otherwise.
fn answer(request: &Request<Incoming>, handle: &PrometheusHandle) -> Response<Full<Bytes>> {
    let (status, body) = if route(request.method(), request.uri().path()) {
        (StatusCode::OK, handle.render())
    } else {
        (
            StatusCode::NOT_FOUND,
            "not found: try GET /metrics\n".to_owned(),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

/// Whether a request asks for the metrics.
fn route(method: &Method, path: &str) -> bool {
    method == Method::GET && path == "/metrics"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert!(route(&Method::GET, "/metrics"));
        assert!(!route(&Method::POST, "/metrics"));
        assert!(!route(&Method::GET, "/"));
        assert!(!route(&Method::GET, "/metrics/x"));
    }

    /// The whole listener over loopback: the metrics for `GET /metrics?x=1`, 404 elsewhere.
    #[tokio::test]
    async fn serves_metrics_over_http_and_refuses_other_paths() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("its address");
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || metrics::counter!("ab_total").increment(2));
        tokio::spawn(accept(listener, handle));
        let get = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(address)
                .await
                .expect("connects");
            let head = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n");
            stream.write_all(head.as_bytes()).await.expect("sent");
            let mut response = String::new();
            stream.read_to_string(&mut response).await.expect("read");
            response
        };
        // Generous: a loaded machine may be slow, a hang must still fail the test.
        let within = Duration::from_secs(20);
        let metrics = tokio::time::timeout(within, get("/metrics?x=1"))
            .await
            .expect("answered");
        assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
        assert!(metrics.contains("ab_total 2"), "{metrics}");
        let other = tokio::time::timeout(within, get("/"))
            .await
            .expect("answered");
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    }
}
