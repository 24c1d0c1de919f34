//! A request to any match: one request to one of several workers, chosen by the options they
//! advertise.
//!
//! Four `render-*` workers connect to a `dispatcher`, each advertising a region, whether it
//! has a GPU, and a load. The dispatcher sends requests to "any worker matching this
//! filter"; each worker answers with its own id, so the program shows who answered. The
//! dispatcher picks round-robin among the matches (the default is random), so the spread is
//! easy to read. A filter nobody matches is a typed error, not a hang.
//!
//! Run it with `cargo run -p examples --bin any`.

use examples::{address, init_tracing, unexpected, Result};
use node::{Error, Filter, HandlerError, Node, Request, Scope, Strategy, Target};

/// Requests sent per filter.
const CALLS: usize = 6;

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let dispatcher = Node::builder()
        .id("dispatcher")
        .strategy(Strategy::RoundRobin)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let endpoint = address(&dispatcher)?;

    let mut workers = Vec::new();
    for (id, region, gpu, load) in [
        ("render-1", "eu-west", true, 0.2),
        ("render-2", "eu-north", false, 0.7),
        ("render-3", "us-east", true, 0.4),
        ("render-4", "eu-west", true, 0.9),
    ] {
        let worker = Node::builder()
            .id(id)
            .option("role", "render")
            .option("region", region)
            .option("gpu", gpu)
            .option("load", load)
            .build()
            .await?;
        let me = worker.id().clone();
        worker.on_request("render", move |req: Request| {
            let me = me.clone();
            async move {
                let frame: u32 = req.decode()?;
                Ok::<_, HandlerError>(format!("{me} rendered frame {frame}"))
            }
        });
        worker.connect(&endpoint).await?;
        println!("{id}: region={region} gpu={gpu} load={load}, joined the dispatcher");
        workers.push(worker);
    }

    let filters = [
        ("any render worker", Filter::new().eq("role", "render")),
        ("in Europe", Filter::new().regex("region", "^eu-")?),
        (
            "with a GPU and load < 0.5",
            Filter::new().eq("gpu", true).lt("load", 0.5),
        ),
    ];
    let mut frame = 0u32;
    for (what, filter) in &filters {
        // A filter without a Rust predicate has the JavaScript zeronode's wire form.
        println!("\nfilter {what}: {}", filter.to_json()?);
        let mut answered_by = Vec::new();
        for _ in 0..CALLS {
            frame += 1;
            let reply: String = dispatcher
                .request(
                    Target::any(filter.clone()).scope(Scope::Down),
                    "render",
                    &frame,
                )
                .await?;
            println!("  {reply}");
            answered_by.push(reply.split(' ').next().unwrap_or_default().to_owned());
        }
        answered_by.sort();
        answered_by.dedup();
        println!("  answered by: {}", answered_by.join(", "));
    }

    // Nobody is in Asia: the error says so at once.
    let asia = Filter::new().eq("region", "ap-south");
    println!("\nfilter in Asia: {}", asia.to_json()?);
    match dispatcher
        .request::<_, String>(
            Target::any(asia.clone()).scope(Scope::Down),
            "render",
            &0u32,
        )
        .await
    {
        Err(e @ Error::NoNodesMatchFilter) => {
            println!("  error, as expected: {e} ({:?})", e.code())
        }
        other => return Err(unexpected(format!("{other:?} for a filter nobody matches"))),
    }

    for worker in &workers {
        worker.close().await;
    }
    dispatcher.close().await;
    Ok(())
}
