//! A ring of nodes: each connects to the next, and a message goes all the way round.
//!
//! Five nodes `ring-0..4` each bind a port and connect to the next one (`ring-4` to
//! `ring-0`), so every node has one upstream peer (the next) and one downstream peer (the
//! previous). A `ring:pass` request starts at `ring-0`; every node adds its id to the path
//! and passes the request on to "any peer in scope" (`Scope::Up`: the next node), waiting
//! for the answer inside its own handler. When the message is back at `ring-0`, the path
//! travels back as the reply of every hop. A second lap uses `Scope::Down` and goes the other
//! way round over the same connections.
//!
//! Run it with `cargo run -p examples --bin ring`.

use std::time::Instant;

use examples::{address, init_tracing, unexpected, Result};
use node::{Filter, HandlerError, Node, Request, Scope, Target};
use serde::{Deserialize, Serialize};

/// How many nodes form the ring.
const SIZE: usize = 5;

/// The message going round.
#[derive(Debug, Serialize, Deserialize)]
struct Hop {
    /// Who has had it, the starting node first.
    path: Vec<String>,
    /// Which way it goes: `Up` to the node each one connected to, `Down` to the other.
    scope: Scope,
}

/// Registers the `ring:pass` handler on `node`.
fn pass_on(node: &Node) {
    // The handler keeps a clone of its own node to send with (a reference cycle that lasts
    // as long as the program, which is what a ring node does anyway).
    let this = node.clone();
    node.on_request("ring:pass", move |req: Request| {
        let this = this.clone();
        async move {
            let mut hop: Hop = req.decode()?;
            let me = this.id().to_string();
            let home = hop.path.first() == Some(&me);
            hop.path.push(me.clone());
            if home {
                println!("  {me}: back home from {}", req.from());
                return Ok(hop.path);
            }
            println!("  {me}: from {}, passing it on", req.from());
            this.request(
                Target::any(Filter::any()).scope(hop.scope),
                "ring:pass",
                &hop,
            )
            .await
            .map_err(|e| HandlerError::new("FORWARD_FAILED", format!("{me}: {e}")))
        }
    });
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let mut ring = Vec::new();
    for i in 0..SIZE {
        let node = Node::builder()
            .id(format!("ring-{i}"))
            .bind("tcp://127.0.0.1:0")
            .build()
            .await?;
        pass_on(&node);
        ring.push(node);
    }
    for (i, node) in ring.iter().enumerate() {
        let next = &ring[(i + 1) % SIZE];
        node.connect(&address(next)?).await?;
        println!("{} connected to {}", node.id(), next.id());
    }

    let start = &ring[0];
    for (lap, scope) in [("up", Scope::Up), ("down", Scope::Down)] {
        println!("lap {lap}: {} sends ring:pass", start.id());
        let began = Instant::now();
        let hop = Hop {
            path: vec![start.id().to_string()],
            scope,
        };
        let path: Vec<String> = start
            .request(Target::any(Filter::any()).scope(scope), "ring:pass", &hop)
            .await?;
        println!(
            "lap {lap}: path {} ({} hops in {:.1?})",
            path.join(" -> "),
            path.len() - 1,
            began.elapsed()
        );
        if path.len() != SIZE + 1 || path.first() != path.last() {
            return Err(unexpected(format!("path {path:?}")));
        }
    }

    for node in &ring {
        node.close().await;
    }
    Ok(())
}
