//! Ticks: one-way messages, fire and forget.
//!
//! A `counter` node counts `page:view` ticks in its tick handler; a `browser` node sends a
//! few. A tick has no reply, so the sender learns nothing of its fate: the counter reports
//! what it received through a channel, and the program waits for all of them.
//!
//! Run it with `cargo run -p examples --bin tick`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use examples::{address, init_tracing, unexpected, within, Result};
use node::{Node, Request};

/// How many ticks the browser sends.
const VIEWS: usize = 5;

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let counter = Node::builder()
        .id("counter")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let views = Arc::new(AtomicUsize::new(0));
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let count = Arc::clone(&views);
    counter.on_tick("page:view", move |req: Request| {
        let count = Arc::clone(&count);
        let seen = seen_tx.clone();
        async move {
            // A tick handler returns nothing: a payload it cannot read is only logged.
            let page: String = match req.decode() {
                Ok(page) => page,
                Err(e) => {
                    eprintln!("counter: bad page:view from {}: {e}", req.from());
                    return;
                }
            };
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            println!("counter: view #{n} of {page} (from {})", req.from());
            let _ = seen.send(n);
        }
    });

    let browser = Node::builder().id("browser").build().await?;
    browser.connect(&address(&counter)?).await?;
    for page in ["/", "/docs", "/docs/node", "/pricing", "/"] {
        // Returns once the tick is handed to the socket; no reply comes back.
        browser.tick("counter", "page:view", page).await?;
    }
    println!("browser: sent {VIEWS} ticks");

    for _ in 0..VIEWS {
        within("a page:view tick", seen_rx.recv())
            .await?
            .ok_or_else(|| unexpected("the tick handler went away"))?;
    }
    println!(
        "counter: counted {} of {VIEWS} ticks",
        views.load(Ordering::SeqCst)
    );

    browser.close().await;
    counter.close().await;
    Ok(())
}
