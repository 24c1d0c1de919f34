//! Shared helpers for the node tests: nodes on loopback with port 0, fast heartbeats, and
//! bounded waits.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use node::{EventStream, Node, NodeBuilder, NodeEvent};

/// Every wait in these tests is bounded, so a bug fails the test instead of hanging CI.
pub const LIMIT: Duration = Duration::from_secs(15);

/// Heartbeats fast enough that liveness tests take well under a second per interval.
pub const HEARTBEAT: Duration = Duration::from_millis(200);

pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A builder with fast heartbeats and short timeouts.
pub fn builder(id: &str) -> NodeBuilder {
    Node::builder()
        .id(id)
        .heartbeat_interval(HEARTBEAT)
        .handshake_timeout(Duration::from_secs(3))
        .request_timeout(Duration::from_secs(5))
        .close_grace(Duration::from_secs(5))
}

/// A node bound to a free loopback port.
pub async fn server(id: &str) -> Node {
    builder(id).bind("tcp://127.0.0.1:0").build().await.unwrap()
}

/// A router node bound to a free loopback port.
pub async fn router(id: &str) -> Node {
    builder(id)
        .router(true)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap()
}

/// A node with no address.
pub async fn client(id: &str) -> Node {
    builder(id).build().await.unwrap()
}

/// The address a node is bound to.
pub fn address(node: &Node) -> String {
    node.address().expect("bound")
}

/// Waits for the first event that `pick` accepts.
pub async fn wait_for<T>(
    events: &mut EventStream,
    what: &str,
    mut pick: impl FnMut(&NodeEvent) -> Option<T>,
) -> T {
    let mut found = None;
    if let Err(e) = events
        .wait_for(
            |event| {
                found = pick(event);
                found.is_some()
            },
            LIMIT,
        )
        .await
    {
        panic!("{what}: {e}");
    }
    found.unwrap_or_else(|| panic!("{what}: picked nothing"))
}

/// A TCP proxy on loopback that can cut the path silently: while cut, bytes are read and
/// dropped in both directions and connections stay open, as in a network partition (no RST,
/// no FIN). Needs no root, so it runs in every CI. It keeps a copy of every byte it
/// forwards, in both directions, for tests that look at what crosses the wire.
pub struct Proxy {
    pub address: String,
    cut: Arc<std::sync::atomic::AtomicBool>,
    recorded: Arc<std::sync::Mutex<Vec<u8>>>,
    task: tokio::task::JoinHandle<()>,
}

use std::sync::Arc;

impl Proxy {
    /// Listens on a free port and forwards every connection to `target` (`tcp://host:port`).
    pub async fn start(target: &str) -> Proxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = target.trim_start_matches("tcp://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("tcp://{}", listener.local_addr().unwrap());
        let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&cut);
        let recorded = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&recorded);
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (in_read, in_write) = inbound.into_split();
                let (out_read, out_write) = outbound.into_split();
                for (mut from, mut to, flag, record) in [
                    (
                        Box::new(in_read) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                        Box::new(out_write) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                        Arc::clone(&flag),
                        Arc::clone(&record),
                    ),
                    (
                        Box::new(out_read),
                        Box::new(in_write),
                        Arc::clone(&flag),
                        Arc::clone(&record),
                    ),
                ] {
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = match from.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            if flag.load(Ordering::SeqCst) {
                                continue; // blackholed
                            }
                            record.lock().unwrap().extend_from_slice(&buf[..n]);
                            if to.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                    });
                }
            }
        });
        Proxy {
            address,
            cut,
            recorded,
            task,
        }
    }

    /// Every byte forwarded so far, both directions interleaved.
    pub fn recorded(&self) -> Vec<u8> {
        self.recorded.lock().unwrap().clone()
    }

    /// Cuts (true) or heals (false) the path.
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
