//! One typed request and its reply.
//!
//! A server node binds a loopback port and answers `price` requests; a client node connects
//! (the handshake is done when `connect` returns) and sends one request. The payloads are
//! plain serde structs, carried as MessagePack.
//!
//! Run it with `cargo run -p examples --bin request`.

use examples::{address, init_tracing, Result};
use node::{HandlerError, Node, Request};
use serde::{Deserialize, Serialize};

/// What the client asks.
#[derive(Debug, Serialize, Deserialize)]
struct Quote {
    item: String,
    quantity: u32,
}

/// What the server answers.
#[derive(Debug, Serialize, Deserialize)]
struct Price {
    item: String,
    total_cents: u64,
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    // The server: binds port 0 (the system picks one) and registers a handler.
    let server = Node::builder()
        .id("pricing")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    server.on_request("price", |req: Request| async move {
        let quote: Quote = req.decode()?;
        println!("pricing: {} asks the price of {quote:?}", req.from());
        Ok::<_, HandlerError>(Price {
            total_cents: 250 * u64::from(quote.quantity),
            item: quote.item,
        })
    });
    let endpoint = address(&server)?;
    println!("pricing: bound {endpoint}");

    // The client: no address of its own; it connects to the server.
    let client = Node::builder().id("shop").build().await?;
    let peer = client.connect(&endpoint).await?;
    println!("shop: joined {} (options {:?})", peer.id, peer.options);

    let quote = Quote {
        item: "coffee".into(),
        quantity: 3,
    };
    let price: Price = client.request("pricing", "price", &quote).await?;
    println!(
        "shop: {} x{} costs {}.{:02}",
        price.item,
        quote.quantity,
        price.total_cents / 100,
        price.total_cents % 100
    );

    client.close().await;
    server.close().await;
    println!("done: one request, one reply");
    Ok(())
}
