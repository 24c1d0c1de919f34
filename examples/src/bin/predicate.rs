//! A filter computed in Rust: a predicate over a peer's options.
//!
//! Three `worker-*` nodes advertise `cores` and `load` (the load average). Which of them has
//! headroom is not a plain comparison of one option but a computation over two: load per
//! core below 0.5. A `Filter::predicate` closure says exactly that, and a request to it only
//! reaches the workers it accepts. When a worker's load changes (`set_options`), the same
//! filter follows. A predicate runs where it was built: it cannot be sent to another node.
//!
//! Run it with `cargo run -p examples --bin predicate`.

use std::collections::BTreeSet;

use examples::{address, init_tracing, unexpected, wait_for, Result};
use node::options::{options, Options, Value};
use node::{Error, Filter, HandlerError, Node, NodeEvent, Request, Scope, Target};

/// The share of its cores a worker may already use and still take work.
const MAX_LOAD_PER_CORE: f64 = 0.5;

/// Load per core, from the options a worker advertises (`None` if it does not say).
fn load_per_core(options: &Options) -> Option<f64> {
    let cores = options.get("cores")?.as_f64()?;
    let load = options.get("load")?.as_f64()?;
    (cores > 0.0).then(|| load / cores)
}

/// Asks `scheduler` for ten jobs and returns the set of workers that took them.
async fn who_takes_jobs(scheduler: &Node, filter: &Filter) -> Result<BTreeSet<String>> {
    let mut takers = BTreeSet::new();
    for job in 0..10u32 {
        let taker: String = scheduler
            .request(Target::any(filter.clone()).scope(Scope::Down), "job", &job)
            .await?;
        takers.insert(taker);
    }
    Ok(takers)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let scheduler = Node::builder()
        .id("scheduler")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let endpoint = address(&scheduler)?;
    let mut workers = Vec::new();
    for (id, cores, load) in [
        ("worker-1", 8, 2.0),
        ("worker-2", 2, 1.8),
        ("worker-3", 4, 1.0),
    ] {
        let worker = Node::builder()
            .id(id)
            .option("cores", cores)
            .option("load", load)
            .build()
            .await?;
        let me = id.to_owned();
        worker.on_request("job", move |_req: Request| {
            let me = me.clone();
            async move { Ok::<_, HandlerError>(me) }
        });
        worker.connect(&endpoint).await?;
        workers.push(worker);
    }

    let has_headroom = Filter::predicate(|opts| {
        load_per_core(opts).is_some_and(|per_core| per_core < MAX_LOAD_PER_CORE)
    });
    let mut peers = scheduler.peers().list();
    peers.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
    for peer in &peers {
        println!(
            "{}: cores={} load={} -> {:.2} per core, headroom: {}",
            peer.id,
            peer.options["cores"],
            peer.options["load"],
            load_per_core(&peer.options).unwrap_or(f64::NAN),
            has_headroom.matches(&peer.options)
        );
    }
    let takers = who_takes_jobs(&scheduler, &has_headroom).await?;
    println!("10 jobs, load per core < {MAX_LOAD_PER_CORE}: taken by {takers:?}");
    if takers.contains("worker-2") {
        return Err(unexpected("worker-2 is overloaded but took a job"));
    }

    // worker-1 gets busy: it tells its peers, and the same filter now leaves it out.
    let mut events = scheduler.events();
    workers[0]
        .set_options(options([
            ("cores", Value::from(8)),
            ("load", Value::from(6.4)),
        ]))
        .await?;
    wait_for(&mut events, "worker-1's new options", |e| match e {
        NodeEvent::PeerOptionsChanged { id, .. } if id.as_str() == "worker-1" => Some(()),
        _ => None,
    })
    .await?;
    println!("worker-1: load is now 6.4 (0.80 per core)");
    let takers = who_takes_jobs(&scheduler, &has_headroom).await?;
    println!("10 jobs, load per core < {MAX_LOAD_PER_CORE}: taken by {takers:?}");
    if takers.len() != 1 || !takers.contains("worker-3") {
        return Err(unexpected(format!(
            "expected only worker-3, got {takers:?}"
        )));
    }

    // A closure cannot travel: asking for the wire form is a typed error.
    match has_headroom.to_spec() {
        Err(e @ Error::PredicateNotSerializable) => println!("to_spec(): {e}"),
        other => return Err(unexpected(format!("{other:?} for a predicate's wire form"))),
    }

    for worker in &workers {
        worker.close().await;
    }
    scheduler.close().await;
    Ok(())
}
