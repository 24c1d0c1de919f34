//! A stream through two hops: a worker generates tokens, a gateway relays them to its own
//! caller as they come.
//!
//! The worker streams `generate` with `on_stream`. The gateway also handles `generate` with
//! `on_stream`: it opens a stream to the worker and sends each item on to its caller. Each
//! hop has its own credit window, so a slow caller slows the gateway's reads, which slow
//! the worker: no hop holds more than its window. When the caller stops reading early and
//! drops its stream, the gateway's handler is stopped, which drops its stream to the worker,
//! whose handler is stopped in turn (between two tokens, or in its send): the cancel
//! travels back both hops. The worker says how its stream ended from a guard's `Drop`, the
//! code that runs when a handler is stopped.
//!
//! Run it with `cargo run -p examples --bin relay`.

use std::time::Duration;

use examples::{address, init_tracing, unexpected, within, Result};
use futures::StreamExt;
use node::{HandlerError, Node, Request, Sink};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What the caller asks for.
#[derive(Debug, Serialize, Deserialize)]
struct Prompt {
    text: String,
    /// How many tokens at most (0: until the caller stops reading).
    max_tokens: u32,
}

/// Tells the app how a worker's stream ended when the handler's future goes: finished, or
/// stopped (the caller dropped the stream, or a send failed).
struct Report {
    ended: mpsc::UnboundedSender<String>,
    tokens: u32,
    finished: bool,
}

impl Drop for Report {
    fn drop(&mut self) {
        let line = match self.finished {
            true => format!("worker: stream finished, {} tokens", self.tokens),
            false => format!("worker: stream cancelled after {} tokens", self.tokens),
        };
        let _ = self.ended.send(line);
    }
}

/// The worker's "model": the prompt's words, then numbered words, one token at a time.
fn token(prompt: &str, i: u32) -> String {
    match prompt.split_whitespace().nth(i as usize) {
        Some(word) => word.to_owned(),
        None => format!("word{i}"),
    }
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    // The worker: generates tokens and reports how each stream ended.
    let worker = Node::builder()
        .id("worker")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<String>();
    worker.on_stream("generate", move |req: Request, mut sink: Sink| {
        let ended = ended_tx.clone();
        async move {
            let mut report = Report {
                ended,
                tokens: 0,
                finished: false,
            };
            let prompt: Prompt = req.decode()?;
            while prompt.max_tokens == 0 || report.tokens < prompt.max_tokens {
                // A token takes a moment to "generate".
                tokio::time::sleep(Duration::from_millis(2)).await;
                sink.send(&token(&prompt.text, report.tokens)).await?;
                report.tokens += 1;
            }
            report.finished = true;
            Ok::<_, HandlerError>(())
        }
    });

    // The gateway: relays `generate` to the worker, item by item.
    let gateway = Node::builder()
        .id("gateway")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    gateway.connect(&address(&worker)?).await?;
    // A weak handle: the handler lives in the gateway's own table, which must not keep the
    // gateway alive.
    let me = gateway.downgrade();
    gateway.on_stream("generate", move |req: Request, mut sink: Sink| {
        let me = me.clone();
        async move {
            let gateway = me
                .upgrade()
                .ok_or_else(|| HandlerError::internal("the gateway is closing"))?;
            let prompt: Prompt = req.decode()?;
            let mut upstream = gateway.call("worker", "generate").stream::<String>(&prompt);
            while let Some(token) = upstream.next().await {
                // The worker's error ends our stream with it; our caller leaving ends it too
                // (and dropping `upstream` cancels the worker).
                sink.send(&token?).await?;
            }
            Ok::<_, HandlerError>(())
        }
    });

    // The caller: talks to the gateway only.
    let client = Node::builder().id("app").build().await?;
    client.connect(&address(&gateway)?).await?;

    let prompt = Prompt {
        text: "streams flow through the gateway as they come".into(),
        max_tokens: 12,
    };
    let mut tokens = client.call("gateway", "generate").stream::<String>(&prompt);
    let mut text = Vec::new();
    while let Some(token) = within("the next token", tokens.next()).await? {
        text.push(token?);
    }
    println!(
        "app: {} tokens through the gateway: {}",
        text.len(),
        text.join(" ")
    );
    println!(
        "{}",
        within("the worker's end", ended.recv())
            .await?
            .ok_or_else(|| unexpected("no end"))?
    );

    // An endless stream, read for five tokens and dropped: the cancel reaches the worker.
    let endless = Prompt {
        text: "and so on".into(),
        max_tokens: 0,
    };
    let mut tokens = client
        .call("gateway", "generate")
        .stream::<String>(&endless);
    for _ in 0..5 {
        within("a token", tokens.next())
            .await?
            .ok_or_else(|| unexpected("the endless stream ended"))??;
    }
    drop(tokens);
    println!("app: read 5 tokens of an endless stream and dropped it");
    let end = within("the worker's cancel", ended.recv())
        .await?
        .ok_or_else(|| unexpected("no end"))?;
    println!("{end}");
    if !end.starts_with("worker: stream cancelled") {
        return Err(unexpected(end));
    }

    client.close().await;
    gateway.close().await;
    worker.close().await;
    println!("done: a stream relayed through two hops, and cancelled through both");
    Ok(())
}
