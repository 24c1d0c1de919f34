//! A leaf reaches a leaf through two router nodes, with no direct connection.
//!
//! Two routers (`east` and `west`) are joined to each other; each has leaves of its own.
//! A leaf on the east side asks for a leaf on the west side by id and by filter, and sends a
//! tick to `Target::all` that reaches every matching leaf on both sides exactly once. The handler sees
//! the route the message took (`Request::route`).
//!
//! Run it with `cargo run -p examples --bin routers`.

use examples::{address, init_tracing, Result};
use node::{Filter, HandlerError, Node, Request, Target};

/// A leaf connected to `router`, answering `where` with its id and the route the request took.
async fn leaf(id: &str, side: &str, router: &Node) -> Result<Node> {
    let node = Node::builder()
        .id(id)
        .option("side", side)
        .option("role", "store")
        .build()
        .await?;
    let me = id.to_owned();
    node.on_request("where", move |req: Request| {
        let me = me.clone();
        async move {
            let route = req
                .route()
                .map(|r| {
                    format!(
                        "from {} via {:?}",
                        r.origin,
                        r.via.iter().map(ToString::to_string).collect::<Vec<_>>()
                    )
                })
                .unwrap_or_else(|| "direct".into());
            Ok::<_, HandlerError>(format!("{me} answering, {route}"))
        }
    });
    let me = id.to_owned();
    node.on_tick("restock", move |req: Request| {
        let me = me.clone();
        async move {
            let item: String = req.decode().unwrap_or_default();
            println!("{me}: restock {item}");
        }
    });
    node.connect(&address(router)?).await?;
    Ok(node)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let east = Node::builder()
        .id("east")
        .router(true)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let west = Node::builder()
        .id("west")
        .router(true)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    west.connect(&address(&east)?).await?;
    println!("routers east and west joined");

    let e1 = leaf("east-1", "east", &east).await?;
    let e2 = leaf("east-2", "east", &east).await?;
    let w1 = leaf("west-1", "west", &west).await?;
    let w2 = leaf("west-2", "west", &west).await?;
    println!(
        "east-1 is joined to: {:?}",
        e1.peers()
            .list()
            .iter()
            .map(|p| p.id.to_string())
            .collect::<Vec<_>>()
    );

    let by_id: String = e1.request("west-2", "where", &()).await?;
    println!("east-1 -> west-2 by id: {by_id}");
    let west_side = Filter::new().eq("side", "west");
    let by_filter: String = e1.request(&west_side, "where", &()).await?;
    println!("east-1 -> any side=west: {by_filter}");

    let stores = Filter::new().eq("role", "store");
    let sent = e1.tick(Target::all(stores), "restock", "coffee").await?;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    println!("a tick to all stores, sent to {} stores", sent.nodes);

    let nobody = Filter::new().eq("role", "bank");
    match e1.request::<_, String>(&nobody, "where", &()).await {
        Err(e) => println!("no bank anywhere: {e} ({:?})", e.code()),
        Ok(answer) => return Err(examples::unexpected(answer)),
    }
    println!(
        "east forwarded {}, west forwarded {}",
        east.stats().router.forwarded,
        west.stats().router.forwarded
    );
    for node in [e1, e2, w1, w2, west, east] {
        node.close().await;
    }
    Ok(())
}
