//! Scatter-gather and balanced groups.
//!
//! Six `stock` nodes in two warehouses (`group=north`, `group=south`) answer how many of an
//! item they hold; one of them is slow. A `shop` asks all of them at once under one
//! deadline (`gather`: each one's outcome, the slow one's a timeout), then only the
//! first two answers (`min_replies`), then one node per warehouse (`groups("group")`), and
//! sends 600 restock ticks to one node of each warehouse: each warehouse gets all 600,
//! spread over its members by the shop's strategy (round robin).
//!
//! Run it with `cargo run -p examples --bin gather`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use examples::{address, init_tracing, unexpected, Result};
use node::{Filter, HandlerError, Node, Request, Strategy, Target};

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let shop = Node::builder()
        .id("shop")
        .strategy(Strategy::RoundRobin)
        .build()
        .await?;
    let mut stock = Vec::new();
    for (i, group) in ["north", "north", "north", "south", "south", "south"]
        .iter()
        .enumerate()
    {
        let id = format!("stock-{group}-{i}");
        let node = Node::builder()
            .id(id.as_str())
            .option("role", "stock")
            .option("group", *group)
            .bind("tcp://127.0.0.1:0")
            .build()
            .await?;
        let slow = i == 5;
        node.on_request("count", move |req: Request| async move {
            let _item: String = req.decode()?;
            if slow {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            Ok::<_, HandlerError>(10 * (i as u64 + 1))
        });
        let restocks = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&restocks);
        node.on_tick("restock", move |_req: Request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async {}
        });
        shop.connect(&address(&node)?).await?;
        stock.push((node, group.to_string(), restocks));
    }
    let all_stock = Target::all(Filter::new().eq("role", "stock"));

    println!("-- gather under one 300 ms deadline");
    let mut answers: Vec<(node::NodeId, node::Result<u64>)> = shop
        .call(all_stock.clone(), "count")
        .timeout(Duration::from_millis(300))
        .gather(&"widget")
        .await?;
    answers.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, outcome) in &answers {
        match outcome {
            Ok(count) => println!("{id}: {count}"),
            Err(e) => println!("{id}: {e}"),
        }
    }
    let answered = answers.iter().filter(|(_, r)| r.is_ok()).count();
    println!("{answered} of {} answered in time", answers.len());

    println!("-- the first two answers");
    let first: Vec<(node::NodeId, node::Result<u64>)> = shop
        .call(all_stock.clone(), "count")
        .min_replies(2)
        .gather(&"widget")
        .await?;
    println!(
        "got {} answers",
        first.iter().filter(|(_, r)| r.is_ok()).count()
    );

    println!("-- one node per warehouse");
    let per_group: Vec<(node::NodeId, node::Result<u64>)> = shop
        .call(all_stock.clone(), "count")
        .groups("group")
        .timeout(Duration::from_millis(300))
        .gather(&"widget")
        .await?;
    println!("asked {} nodes, one per group", per_group.len());

    println!("-- 600 restocks to one node of each warehouse");
    for _ in 0..600 {
        let sent = shop
            .call(all_stock.clone(), "restock")
            .groups("group")
            .tick(&())
            .await?;
        if sent.nodes != 2 {
            return Err(unexpected(format!(
                "a restock went to {} nodes",
                sent.nodes
            )));
        }
    }
    examples::within("every restock to arrive", async {
        while stock
            .iter()
            .map(|(_, _, n)| n.load(Ordering::SeqCst))
            .sum::<usize>()
            < 1200
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await?;
    for group in ["north", "south"] {
        let members: Vec<usize> = stock
            .iter()
            .filter(|(_, g, _)| g == group)
            .map(|(_, _, n)| n.load(Ordering::SeqCst))
            .collect();
        println!(
            "{group}: {} restocks, spread {members:?}",
            members.iter().sum::<usize>()
        );
    }
    shop.close().await;
    Ok(())
}
