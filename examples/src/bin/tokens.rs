//! A streamed reply through two hops: a worker generates tokens, a gateway relays them to
//! its own caller as they come.
//!
//! The gateway's stream handler opens a stream to the worker and sends each token on as it
//! arrives, so flow control holds end to end: the gateway keeps at most a window of tokens
//! from the worker, and it reads from the worker only as fast as its own caller reads from
//! it. The caller drops its stream early on a second prompt: the gateway's send fails, its
//! handler returns, its stream to the worker is dropped, and the worker stops.
//!
//! Run it with `cargo run -p examples --bin tokens`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use examples::{address, init_tracing, Result};
use futures::StreamExt;
use node::{HandlerError, Node, Request, Sink};

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    // The worker: one token per word of the prompt, then "<end>".
    let worker = Node::builder()
        .id("worker")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let generated = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&generated);
    worker.on_stream("generate", move |req: Request, mut sink: Sink| {
        let counted = Arc::clone(&counted);
        async move {
            let prompt: String = req.decode()?;
            for word in prompt.split_whitespace().chain(["<end>"]) {
                // A model takes a while per token.
                tokio::time::sleep(Duration::from_millis(5)).await;
                sink.send(&word.to_uppercase()).await?;
                counted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    });

    // The gateway: joined to the worker, relays each token as it comes.
    let gateway = Node::builder()
        .id("gateway")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    gateway.connect(&address(&worker)?).await?;
    let relay = gateway.downgrade();
    gateway.on_stream("generate", move |req: Request, mut sink: Sink| {
        let relay = relay.clone();
        async move {
            let gateway = relay
                .upgrade()
                .ok_or_else(|| HandlerError::unavailable("the gateway is closing"))?;
            let prompt: String = req.decode()?;
            let mut tokens = gateway
                .call("worker", "generate")
                .parent(&req)
                .stream::<String>(&prompt)
                .window(4);
            while let Some(token) = tokens.next().await {
                sink.send(&token?).await?;
            }
            Ok(())
        }
    });

    // The caller: sees the gateway only.
    let caller = Node::builder().id("app").build().await?;
    caller.connect(&address(&gateway)?).await?;
    let mut tokens = caller
        .call("gateway", "generate")
        .stream::<String>(&"the quick brown fox jumps over the lazy dog");
    let mut text = Vec::new();
    while let Some(token) = tokens.next().await {
        text.push(token?);
    }
    println!("app: {}", text.join(" "));

    // A long prompt, dropped after three tokens: the worker stops soon after.
    let long = "word ".repeat(10_000);
    let before = generated.load(Ordering::Relaxed);
    let mut tokens = caller
        .call("gateway", "generate")
        .stream::<String>(&long)
        .window(2);
    for _ in 0..3 {
        tokens.next().await;
    }
    drop(tokens);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let made = generated.load(Ordering::Relaxed) - before;
    // Three read, a window at the gateway and one at the caller, a few in flight.
    println!(
        "app: stopped after 3 tokens; the worker made {} of 10001",
        if made < 20 {
            "fewer than 20".to_owned()
        } else {
            made.to_string()
        }
    );

    caller.close().await;
    gateway.close().await;
    worker.close().await;
    Ok(())
}
