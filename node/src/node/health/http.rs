//! A node's health over HTTP for Kubernetes' probes (or any orchestrator's): `GET /livez`,
//! `/readyz` and `/startupz` answer 200 or 503 with the state in a short body, served by
//! hyper (HTTP/1, one task per connection, no keep-alive). [`respond`] is the same answer
//! for a program that has an HTTP server of its own.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::task::JoinHandle;

use crate::node::health::Health;
use crate::node::WeakNode;

/// How long a connection may take to send its request's head: a client that connects and
/// says nothing does not hold a task for ever.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The answer to a probe at `path` for a node in `health`: the status (200 when the probe
/// passes, 503 when not) and a one-line body; `None` for a path that is no probe.
///
/// - `/livez`: passes unless the node closed or failed ([`Health::is_live`]);
/// - `/readyz`: passes only when ready ([`Health::is_ready`]), so a draining node fails it
///   from the first moment of its drain;
/// - `/startupz`: passes once started ([`Health::is_started`]).
///
/// ```
/// use node::health::http::respond;
/// use node::Health;
///
/// let (status, body) = respond(&Health::Draining, "/readyz").unwrap();
/// assert_eq!(status.as_u16(), 503);
/// assert_eq!(body, "draining\n");
/// assert_eq!(respond(&Health::Draining, "/livez").unwrap().0.as_u16(), 200);
/// ```
pub fn respond(health: &Health, path: &str) -> Option<(StatusCode, String)> {
    let passes = match path {
        "/livez" => health.is_live(),
        "/readyz" => health.is_ready(),
        "/startupz" => health.is_started(),
        _ => return None,
    };
    let status = if passes {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Some((status, format!("{health}\n")))
}

/// A running health listener ([`serve`]); dropping it stops it.
#[derive(Debug)]
pub struct HealthServer {
    address: SocketAddr,
    task: JoinHandle<()>,
}

impl HealthServer {
    /// The address it listens on (the port resolved when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for HealthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `node`'s health on `address` (see [`respond`] for the paths; any other path is
/// 404). Holds the node weakly: it does not keep it open, and answers `closed` once it is
/// gone.
///
/// ```no_run
/// # async fn demo(node: node::Node) -> std::io::Result<()> {
/// let health = node::health::http::serve("0.0.0.0:8080", &node).await?;
/// println!("probes on http://{}/readyz", health.local_addr());
/// # Ok(()) }
/// ```
pub async fn serve(
    address: impl ToSocketAddrs,
    node: &crate::Node,
) -> std::io::Result<HealthServer> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(accept(listener, node.downgrade()));
    Ok(HealthServer {
        address: local,
        task,
    })
}

async fn accept(listener: TcpListener, node: WeakNode) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let node = node.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let health = node.upgrade().map_or(Health::Closed, |node| node.health());
                        std::future::ready(Ok::<_, Infallible>(answer(&request, &health)))
                    });
                    let served = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(READ_TIMEOUT)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "health listener: connection ended");
                    }
                });
            }
            Err(e) => {
                // Out of file descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "health listener: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn answer<B>(request: &hyper::Request<B>, health: &Health) -> hyper::Response<Full<Bytes>> {
    let get = request.method() == Method::GET || request.method() == Method::HEAD;
    let (status, body) = match respond(health, request.uri().path()) {
        Some(answer) if get => answer,
        _ => (
            StatusCode::NOT_FOUND,
            "not found: try GET /livez, /readyz or /startupz\n".to_owned(),
        ),
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::health::Waiting;

    #[test]
    fn each_probe_passes_in_its_states() {
        let starting = Health::Starting {
            waiting_for: vec![Waiting::Connect {
                address: "tcp://a:1".into(),
            }],
        };
        let code = |h: &Health, p: &str| respond(h, p).map(|(s, _)| s.as_u16());
        assert_eq!(code(&starting, "/livez"), Some(200));
        assert_eq!(code(&starting, "/readyz"), Some(503));
        assert_eq!(code(&starting, "/startupz"), Some(503));
        assert_eq!(code(&Health::Ready, "/readyz"), Some(200));
        assert_eq!(code(&Health::Ready, "/startupz"), Some(200));
        assert_eq!(code(&Health::Draining, "/readyz"), Some(503));
        assert_eq!(code(&Health::Draining, "/livez"), Some(200));
        assert_eq!(code(&Health::Closed, "/livez"), Some(503));
        assert_eq!(code(&Health::Ready, "/metrics"), None);
        assert_eq!(
            respond(&starting, "/readyz").map(|(_, b)| b),
            Some("starting: waiting for a connect to tcp://a:1\n".into())
        );
    }

    /// The whole listener over loopback, on a real node: starting, then ready, then closed.
    #[tokio::test]
    async fn serves_the_nodes_health_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let node = crate::Node::builder().build().await.expect("a node");
        let server = serve("127.0.0.1:0", &node).await.expect("a port");
        let address = server.local_addr();
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
        let ask = |path| tokio::time::timeout(within, get(path));
        let starting = ask("/readyz").await.expect("answered");
        assert!(starting.starts_with("HTTP/1.1 503"), "{starting}");
        assert!(starting.ends_with("starting: waiting for the program to finish setting up\n"));
        node.mark_started();
        let ready = ask("/readyz").await.expect("answered");
        assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
        assert!(ready.ends_with("\r\n\r\nready\n"), "{ready}");
        let other = ask("/").await.expect("answered");
        assert!(other.starts_with("HTTP/1.1 404"), "{other}");
        node.close().await;
        let live = ask("/livez").await.expect("answered");
        assert!(live.starts_with("HTTP/1.1 503"), "{live}");
        assert!(live.ends_with("closed\n"), "{live}");
    }
}
