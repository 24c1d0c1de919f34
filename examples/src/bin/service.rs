//! A service as it runs in production: one shard of a search service, configured from its
//! environment (what a container gets), with probes for its orchestrator and the shutdown
//! it expects: the program deploy/Dockerfile.service packages.
//!
//! - `ZERONODE_ID` (default: a generated id), `ZERONODE_BIND` (default
//!   `tcp://0.0.0.0:5555`), `ZERONODE_HEALTH` (default `0.0.0.0:8080`), `SHARD` (default
//!   0), `ZERONODE_GRACE_MS` (default 5000): in Kubernetes the id and the shard come from
//!   the pod's name and ordinal through the downward API (see deploy/README.md).
//! - It answers `search` with the shard's results, advertises `{role: search, shard: N}`
//!   for the gateway's filters, serves `/livez`, `/readyz` and `/startupz`
//!   (`node::health::http`), and runs until SIGTERM or Ctrl-C (`Node::run_until_signal`):
//!   readiness turns 503 at the signal, requests in flight finish within the grace, a
//!   second signal stops waiting, and the exit code says how the drain went.
//!
//! Run it with `cargo run -p examples --bin service`, then Ctrl-C.

use std::process::ExitCode;
use std::time::Duration;

use examples::{address, init_tracing};
use node::{HandlerError, Node, Request};

/// A variable of the environment, or `default`.
fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    match serve().await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve() -> examples::Result<ExitCode> {
    let shard: i64 = env("SHARD", "0").parse()?;
    let grace = Duration::from_millis(env("ZERONODE_GRACE_MS", "5000").parse()?);
    let mut builder = Node::builder()
        .option("role", "search")
        .option("shard", shard)
        .close_grace(grace);
    if let Ok(id) = std::env::var("ZERONODE_ID") {
        builder = builder.id(id);
    }
    let node = builder
        .bind(env("ZERONODE_BIND", "tcp://0.0.0.0:5555"))
        .build()
        .await?;
    node.on_request("search", move |req: Request| async move {
        let query: String = req.decode()?;
        Ok::<_, HandlerError>(format!("shard {shard}: results for {query:?}"))
    });
    let health = node::health::http::serve(env("ZERONODE_HEALTH", "0.0.0.0:8080"), &node).await?;
    println!("node {} (shard {shard}) on {}", node.id(), address(&node)?);
    println!("health on http://{}/readyz", health.local_addr());
    // Ready from here: the handler is in place. Returns after the drain.
    let shutdown = node.run_until_signal().await?;
    println!("{shutdown}");
    Ok(shutdown.exit_code())
}
