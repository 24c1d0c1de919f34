//! The serving node's memory after parked work, round after round: a requester process
//! joins, parks `--parked` ten-minute requests in the server's handler (50,000 by default),
//! and leaves; the server (this process) prints its resident set after each round.
//!
//! A leak grows the figure again at every round; memory the allocator keeps for reuse
//! stays flat from the first round on. The requester is this same program run again as
//! `requester ADDRESS COUNT`, so the server's resident set is its own.
//!
//! ```text
//! cargo bench -p node --bench parked_memory                        # 5 rounds of 50,000
//! cargo bench -p node --bench parked_memory -- --rounds 8 --parked 20000
//! ZERONODE_ENGINE=libzmq cargo bench -p node --bench parked_memory
//! ```

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use node::{Node, Request};

/// The resident set of this process in bytes, from `/proc/self/statm` (its second field,
/// in pages).
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

const MIB: f64 = 1024.0 * 1024.0;

/// The value after `--name`, parsed, or `default`.
fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits (polling) until `done`, for at most `limit`.
async fn until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The requester: parks `count` requests at `address`, says so on stdout, and leaves
/// (closes its node) when a line comes on stdin.
async fn requester(address: String, count: usize) {
    let node = Node::builder().id("requester").build().await.unwrap();
    node.connect(&address).await.unwrap();
    let parked: Vec<_> = (0..count)
        .map(|_| {
            let node = node.clone();
            tokio::spawn(async move {
                node.call("server", "park")
                    .timeout(Duration::from_secs(600))
                    .send::<_, ()>(&())
                    .await
            })
        })
        .collect();
    println!("sent");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    node.close().await;
    for request in parked {
        request.abort();
    }
}

/// The server: `rounds` rounds of a requester that parks `parked` requests and leaves.
async fn server(rounds: usize, parked: usize) {
    let server = Node::builder()
        .id("server")
        .max_concurrent_handlers(parked)
        .max_handlers_per_peer(parked)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    server.on_request("park", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<_, node::HandlerError>(())
    });
    let address = server.address().unwrap();
    let exe = std::env::current_exe().unwrap();
    let start = rss();
    println!(
        "{parked} parked requests a round; resident set at start {:.1} MiB",
        start as f64 / MIB
    );
    println!("round  parked  peak (MiB)  after (MiB)  above start (MiB)");
    for round in 1..=rounds {
        let mut child = Command::new(&exe)
            .args(["requester", &address, &parked.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("sent"));
        let limit = Duration::from_secs(300);
        until("every request parked", limit, || {
            server.stats().handlers_active >= parked
        })
        .await;
        let peak = rss();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin).unwrap();
        drop(stdin);
        until("the requester left", limit, || server.stats().peers == 0).await;
        until("every handler stopped", limit, || {
            let stats = server.stats();
            stats.handlers_active == 0 && stats.handlers_queued == 0
        })
        .await;
        let _ = child.wait();
        // What the runtime frees late (runner tasks ending, timers dropped) is freed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss();
        println!(
            "{round:>5}  {parked:>6}  {:>10.1}  {:>11.1}  {:>17.1}",
            peak as f64 / MIB,
            after as f64 / MIB,
            (after as f64 - start as f64) / MIB
        );
    }
    server.close().await;
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if args.first().map(String::as_str) == Some("requester") {
        let address = args[1].clone();
        let count: usize = args[2].parse().unwrap();
        runtime.block_on(requester(address, count));
        return;
    }
    let rounds = flag(&args, "--rounds", 5);
    let parked = flag(&args, "--parked", 50_000);
    runtime.block_on(server(rounds, parked));
}
