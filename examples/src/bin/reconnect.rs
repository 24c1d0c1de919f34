//! Reconnection: a server restarts and its client comes back by itself.
//!
//! A `watcher` node connects to `svc`. Then `svc` closes, and a new node with the same id
//! binds the same address, as a restarted process would. The watcher does nothing: its
//! events stream (`node.events()`) shows the peer leave, then join again once the watcher
//! has reconnected and redone the handshake, and the next request reaches the new server.
//!
//! Run it with `cargo run -p examples --bin reconnect`.

use std::time::{Duration, Instant};

use examples::{address, init_tracing, unexpected, wait_for, Result};
use node::{Error, HandlerError, Node, NodeEvent, Request};

/// Starts `svc`, bound to `endpoint`, answering `version` with `version`.
async fn start_svc(endpoint: &str, version: u32) -> Result<Node> {
    let svc = Node::builder().id("svc").bind(endpoint).build().await?;
    svc.on_request("version", move |_req: Request| async move {
        Ok::<_, HandlerError>(version)
    });
    Ok(svc)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let first = start_svc("tcp://127.0.0.1:0", 1).await?;
    let endpoint = address(&first)?;
    println!("svc v1: bound {endpoint}");

    let watcher = Node::builder()
        .id("watcher")
        .heartbeat_interval(Duration::from_millis(250))
        .handshake_timeout(Duration::from_secs(1))
        .build()
        .await?;
    let mut events = watcher.events();
    watcher.connect(&endpoint).await?;
    let version: u32 = watcher.request("svc", "version", &()).await?;
    println!("watcher: svc answers version {version}");

    println!("svc v1: closing");
    first.close().await;
    let reason = wait_for(&mut events, "svc to leave", |e| match e {
        NodeEvent::PeerLeft { id, reason, .. } if id.as_str() == "svc" => Some(*reason),
        _ => None,
    })
    .await?;
    println!("watcher: event PeerLeft svc, reason {reason:?}");
    match watcher.request::<_, u32>("svc", "version", &()).await {
        Err(e @ Error::NodeNotFound { .. }) => println!("watcher: while svc is away: {e}"),
        other => return Err(unexpected(format!("{other:?} while svc is away"))),
    }

    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = start_svc(&endpoint, 2).await?;
    println!("svc v2: bound the same address {endpoint}");
    let restarted = Instant::now();
    let direction = wait_for(&mut events, "svc to join again", |e| match e {
        NodeEvent::PeerJoined { id, direction, .. } if id.as_str() == "svc" => Some(*direction),
        _ => None,
    })
    .await?;
    println!(
        "watcher: event PeerJoined svc ({direction:?}): svc joined again after {:.0?}, with no call from the watcher",
        restarted.elapsed()
    );
    let version: u32 = watcher.request("svc", "version", &()).await?;
    println!("watcher: svc answers version {version}");
    if version != 2 {
        return Err(unexpected(format!("version {version} from the new svc")));
    }

    watcher.close().await;
    second.close().await;
    Ok(())
}
