//! Hostile peers: connections that speak no ZMTP at all must cost a node nothing lasting.

#[path = "../../transport/tests/support/descriptors.rs"]
mod descriptors;
mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use node::Request;
use support::*;

/// Garbage connections per round, as the tester's report had them.
const PER_ROUND: usize = 2000;

/// How many garbage connections are open at once. The memory libzmq spent on a stray
/// ZMTP 1.0 "peer" lived as long as its connection, so the harm grows with how many are
/// open together: measured here in a debug build before the fix, 500 at a time grew RSS
/// 4 MB from round 1 to round 5 (under the bound below, so the test would not see it),
/// 1,000 grew it 18 MB, 2,000 grew it 55 MB. 1,000 keeps the test at about 5 s on 2 cores.
const AT_ONCE: usize = 1000;

/// Descriptors the test needs: both ends of `AT_ONCE` connections, and some.
const DESCRIPTORS: u64 = 2 * AT_ONCE as u64 + 256;

/// The process's resident set, in bytes (Linux).
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

/// A small xorshift generator: random-looking bytes without a dependency, the same every run.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self) -> Vec<u8> {
        let len = 1 + (self.next() % 256) as usize;
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// One round: `PER_ROUND` connections that each send random bytes and close, `AT_ONCE` at
/// a time, each batch held open long enough for the node to read what it sent.
fn garbage_round(port: u16, noise: &mut Noise) {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut sent = 0;
    while sent < PER_ROUND {
        let mut batch = Vec::with_capacity(AT_ONCE);
        for chunk in 0..AT_ONCE.min(PER_ROUND - sent) {
            // Bursts of 50, then a breath: libzmq's listen backlog is 100, and a SYN that
            // finds it full is retried only a second later.
            if chunk % 50 == 49 {
                std::thread::sleep(Duration::from_millis(3));
            }
            let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(100))
            else {
                continue;
            };
            // The node may have hung up already: that is its right.
            let _ = stream.write_all(&noise.bytes());
            batch.push(stream);
        }
        assert!(!batch.is_empty(), "no garbage connection could be made");
        sent += batch.len();
        std::thread::sleep(Duration::from_millis(150));
    }
    // Let the node see the last batch close.
    std::thread::sleep(Duration::from_millis(300));
}

/// 5 rounds of 2,000 connections sending random bytes: the node's memory does not grow
/// round after round, and a real node still joins and gets its answer afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_connections_do_not_grow_memory() {
    descriptors::enough_descriptors(DESCRIPTORS);
    let started = Instant::now();
    let srv = server("srv").await;
    srv.on_request("ping", |_req: Request| async move {
        Ok::<_, node::HandlerError>("pong".to_owned())
    });
    let port: u16 = address(&srv)
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a tcp port");
    let mut after = Vec::new();
    let mut noise = Noise(0x9E37_79B9_7F4A_7C15);
    for _ in 0..5 {
        noise = tokio::task::spawn_blocking(move || {
            garbage_round(port, &mut noise);
            noise
        })
        .await
        .unwrap();
        after.push(rss());
    }
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "RSS after each round (MB): {:?}, {:.1} s",
        after.iter().map(|&b| mb(b)).collect::<Vec<_>>(),
        started.elapsed().as_secs_f64()
    );
    // The first round may leave the allocator with a working set (buffers, thread caches,
    // the event ring); what must not happen is growth round after round. Before the fix,
    // each round of 2,000 stray ZMTP 1.0 "peers" added megabytes (about 14 KB per
    // connection in the report). 8 MB is far above the noise measured with the fix (under
    // 1 MB) and far below what four more rounds cost without it.
    let growth = after[4].saturating_sub(after[0]);
    assert!(
        growth < 8_000_000,
        "RSS grew {:.1} MB from round 1 to round 5: {:?}",
        mb(growth),
        after
    );

    let client = client("client").await;
    within(
        "a real node joins after the garbage",
        client.connect(&address(&srv)),
    )
    .await
    .unwrap();
    let reply: String = within(
        "its request is answered",
        client.request("srv", "ping", &()),
    )
    .await
    .unwrap();
    assert_eq!(reply, "pong");
}
