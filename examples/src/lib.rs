//! Helpers shared by the example programs in `src/bin/`.
//!
//! Each program under `src/bin/` shows one use case of the `node` crate and runs by itself
//! in one process over loopback:
//!
//! ```text
//! cargo run -p examples --bin request         # one typed request and its reply
//! cargo run -p examples --bin tick            # ticks counted by a tick handler
//! cargo run -p examples --bin any             # one worker among several, picked by a filter
//! cargo run -p examples --bin all             # a tick to every node of one layer
//! cargo run -p examples --bin patterns        # regex event patterns, off_request
//! cargo run -p examples --bin predicate       # a filter computed in Rust
//! cargo run -p examples --bin handler_error   # handler errors and missing handlers
//! cargo run -p examples --bin middleware      # a tower timeout, an auth check with from_fn
//! cargo run -p examples --bin ring            # a message forwarded round a ring of nodes
//! cargo run -p examples --bin reconnect       # a client rejoins a restarted server
//! cargo run -p examples --bin secure          # CURVE, an allow-list, authorization by key
//! cargo run -p examples --bin caller          # outgoing calls under retry, timeout, limits, a breaker
//! cargo run -p examples --bin gather          # scatter-gather, the first N, balanced groups
//! cargo run -p examples --bin kv              # a sharded key-value service behind a gateway
//! cargo run -p examples --bin relay           # tokens streamed through a gateway, cancelled back
//! cargo run -p examples --bin service         # a service as a container runs it: probes, SIGTERM
//! cargo run --release -p examples --bin upload  # 1 GiB uploaded in 64 KiB chunks, hash checked
//! cargo run --release -p examples --bin mesh  # a small service mesh at work
//! ```
//!
//! What lives here is only what would otherwise be repeated in every program: logging
//! setup, the bound address of a node, and waits that give up instead of hanging. Nothing
//! here is needed to use `node`.

use std::future::Future;
use std::time::Duration;

use node::{Node, NodeEvent};

/// What the programs' `main` returns: any error ends the program with a non-zero status.
pub type Result<T = (), E = node::BoxError> = std::result::Result<T, E>;

/// How long a program waits for something that should happen at once (a peer joining, a
/// tick arriving) before it gives up and fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Sends the library's logs to stderr, at `warn` unless `RUST_LOG` says otherwise (try
/// `RUST_LOG=node=debug` to watch handshakes and heartbeats).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // A second call (or a subscriber set elsewhere) is harmless: keep the first one.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The address `node` is bound to, with the port the system picked for `:0`.
pub fn address(node: &Node) -> Result<String> {
    node.address()
        .ok_or_else(|| format!("node {} is not bound", node.id()).into())
}

/// Runs `fut`, failing with "timed out: `what`" after [`PATIENCE`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> Result<T> {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .map_err(|_| format!("timed out: {what}").into())
}

/// Waits (at most [`PATIENCE`]) for the first event that `pick` accepts, and returns what
/// `pick` made of it.
pub async fn wait_for<T>(
    events: &mut node::EventStream,
    what: &str,
    mut pick: impl FnMut(&NodeEvent) -> Option<T>,
) -> Result<T> {
    // Missed events (`Lagged`) are not the one we wait for, or it will come again.
    let mut found = None;
    events
        .wait_for(
            |event| {
                found = pick(event);
                found.is_some()
            },
            PATIENCE,
        )
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    found.ok_or_else(|| format!("{what}: picked nothing").into())
}

/// Builds the error a program returns when something did not go as the example expects.
pub fn unexpected(what: impl std::fmt::Display) -> node::BoxError {
    format!("unexpected: {what}").into()
}
