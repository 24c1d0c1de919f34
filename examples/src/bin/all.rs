//! `Target::all`: one tick to every node of one layer, and to no other.
//!
//! Two nodes form layer A (`gw-1` binds, `gw-2` connects to it) and three form layer B
//! (`svc-1..3`, each connected to `gw-1`). Every node advertises `layer=A` or `layer=B` and
//! every node has a `config:reload` tick handler. `gw-1` sends one tick to all nodes matching
//! `layer=B`: the three B nodes report it; `gw-2`, also joined to `gw-1`, does not.
//!
//! Run it with `cargo run -p examples --bin all`.

use std::time::Duration;

use examples::{address, init_tracing, unexpected, within, Result};
use node::{Filter, Node, Request, Target};
use tokio::sync::mpsc;

/// Builds a node in `layer` whose `config:reload` handler reports to `reports`.
async fn layer_node(
    id: &str,
    layer: &str,
    bind: bool,
    reports: &mpsc::UnboundedSender<String>,
) -> Result<Node> {
    let mut builder = Node::builder().id(id).option("layer", layer);
    if bind {
        builder = builder.bind("tcp://127.0.0.1:0");
    }
    let node = builder.build().await?;
    let me = format!("{id} (layer {layer})");
    let reports = reports.clone();
    node.on_tick("config:reload", move |req: Request| {
        let me = me.clone();
        let reports = reports.clone();
        async move {
            let version: u32 = req.decode().unwrap_or_default();
            println!(
                "  {me}: reloading config v{version}, as {} asked",
                req.from()
            );
            let _ = reports.send(me);
        }
    });
    Ok(node)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let (reports_tx, mut reports) = mpsc::unbounded_channel();

    let gw1 = layer_node("gw-1", "A", true, &reports_tx).await?;
    let endpoint = address(&gw1)?;
    let gw2 = layer_node("gw-2", "A", false, &reports_tx).await?;
    gw2.connect(&endpoint).await?;
    let mut layer_b = Vec::new();
    for id in ["svc-1", "svc-2", "svc-3"] {
        let node = layer_node(id, "B", false, &reports_tx).await?;
        node.connect(&endpoint).await?;
        layer_b.push(node);
    }
    let mut joined: Vec<String> = gw1
        .peers()
        .list()
        .iter()
        .map(|p| format!("{} (layer {})", p.id, p.options["layer"]))
        .collect();
    joined.sort();
    println!("gw-1 is joined to: {}", joined.join(", "));

    let layer_b_filter = Filter::new().eq("layer", "B");
    println!(
        "gw-1: tick to all {} config:reload v7",
        layer_b_filter.to_json()?
    );
    let sent = gw1
        .tick(Target::all(layer_b_filter), "config:reload", &7u32)
        .await?;
    let reached = sent.nodes;
    println!("gw-1: the tick went to {reached} nodes");

    let mut got = Vec::new();
    for _ in 0..reached {
        got.push(
            within("a layer B report", reports.recv())
                .await?
                .ok_or_else(|| unexpected("reports closed"))?,
        );
    }
    // Give a stray tick to layer A time to show up, if the filter were wrong.
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(extra) = reports.try_recv() {
        got.push(extra);
    }
    got.sort();
    println!("reports: {}", got.join(", "));
    if reached != 3 || got.len() != 3 || got.iter().any(|n| !n.contains("layer B")) {
        return Err(unexpected(format!("reached {reached}, reports {got:?}")));
    }
    println!("every layer B node reported; layer A did not");

    for node in &layer_b {
        node.close().await;
    }
    gw2.close().await;
    gw1.close().await;
    Ok(())
}
