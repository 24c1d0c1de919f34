//! Faults and hostile input: nothing crashes, nothing hangs, nothing is lost silently.
//! Every test counts outcomes: sent = answered + typed errors, exactly.
//!
//! This test target has its own `main` (`harness = false`): the tests run one after the other
//! (they measure this process's resident memory, which parallel tests would blur), and the
//! same binary started with `--child` is the node process that the dead-peer test kills.

mod support;

use std::collections::HashSet;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use node::{ErrorCode, HandlerError, Node, NodeEvent, Request};
use support::*;

// ---------------------------------------------------------------------------------------
// Hostile input

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A small deterministic generator, so a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// A valid header (request, id 7, event `typed`, no metadata) for garbage payloads.
fn header(kind: u8, event: &str, flags: u8) -> Vec<u8> {
    let mut h = vec![0x5A, 1, kind, flags];
    h.extend_from_slice(&7u64.to_be_bytes());
    h.extend_from_slice(&(event.len() as u16).to_be_bytes());
    h.extend_from_slice(event.as_bytes());
    h.extend_from_slice(&0u32.to_be_bytes());
    h
}

/// One malformed (or unjoined) message of kind `n % 10`.
fn hostile(n: u64, rng: &mut XorShift, max_payload: usize) -> Vec<Vec<u8>> {
    match n % 10 {
        // Truncated headers.
        0 => {
            let full = header(1, "typed", 0);
            let cut = (rng.next() as usize) % 14;
            vec![full[..cut].to_vec()]
        }
        // Wrong magic.
        1 => {
            let mut h = header(1, "typed", 0);
            h[0] = 0x47;
            vec![h]
        }
        // Wrong version.
        2 => {
            let mut h = header(1, "typed", 0);
            h[1] = 2 + (rng.next() % 200) as u8;
            vec![h]
        }
        // Absurd event length.
        3 => {
            let mut h = header(1, "typed", 0);
            h[12] = 0xff;
            h[13] = 0xff;
            vec![h]
        }
        // Absurd metadata length.
        4 => {
            let mut h = header(1, "typed", 0);
            let at = h.len() - 4;
            h[at..].copy_from_slice(&u32::MAX.to_be_bytes());
            vec![h]
        }
        // Random bytes, one to three frames.
        5 => {
            let frames = 1 + (rng.next() % 3) as usize;
            (0..frames)
                .map(|_| {
                    let len = 1 + (rng.next() % 64) as usize;
                    rng.bytes(len)
                })
                .collect()
        }
        // A valid header with a garbage payload, from a connection that never joined.
        6 => {
            let len = 1 + (rng.next() % 32) as usize;
            vec![header(1, "typed", 0), rng.bytes(len)]
        }
        // System events from a peer that never joined.
        7 => vec![header(4, "_system:heartbeat", 1)],
        8 => vec![header(4, "_system:options", 1), rng.bytes(8)],
        // Now and then a payload of the maximum size (valid, unjoined), or one byte over
        // (too large); otherwise a request with an empty event name.
        _ => match n % 5000 {
            9 => vec![header(1, "typed", 0), vec![0xAB; max_payload]],
            19 => vec![header(1, "typed", 0), vec![0xAB; max_payload + 1]],
            _ => vec![header(1, "", 0)],
        },
    }
}

async fn a_flood_of_hostile_messages_is_counted_and_the_node_keeps_serving() {
    const MESSAGES: u64 = 100_000;
    const MAX_PAYLOAD: usize = 64 * 1024;
    let target = support::builder("target")
        .max_payload(MAX_PAYLOAD)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    target.on_request("typed", |req: Request| async move {
        let n: u64 = req.decode()?;
        Ok::<_, HandlerError>(n + 1)
    });
    let address = address(&target);

    // A well-behaved peer keeps asking throughout.
    let good = client("good").await;
    good.connect(&address).await.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let asker = {
        let (good, stop, answered) = (good.clone(), Arc::clone(&stop), Arc::clone(&answered));
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let reply: u64 = good.request("target", "typed", &n).await.unwrap();
                assert_eq!(reply, n + 1);
                answered.fetch_add(1, Ordering::Relaxed);
                n += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    let before = rss();
    // The attacker: a raw libzmq DEALER, no handshake, never reads what comes back.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let attacker = tokio::task::spawn_blocking(move || {
        let ctx = zmq::Context::new();
        let raw = ctx.socket(zmq::DEALER).unwrap();
        raw.set_sndhwm(100_000).unwrap();
        raw.set_linger(0).unwrap();
        raw.connect(&address).unwrap();
        let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
        for n in 0..MESSAGES {
            let frames = hostile(n, &mut rng, MAX_PAYLOAD);
            raw.send_multipart(frames, 0).unwrap();
        }
        // Keep the connection (and its queue) until the node has taken everything.
        let _ = released.recv_timeout(Duration::from_secs(90));
    });
    let sent = MESSAGES;

    // Every hostile message is accounted for: invalid envelope, or refused as unjoined, or
    // (if random bytes happened to form a reply) an unmatched reply.
    let accounted = || {
        let s = target.stats();
        s.invalid_envelopes + s.unjoined_messages + s.unmatched_replies
    };
    for _ in 0..3000 {
        if accounted() >= sent {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = release.send(());
    attacker.await.unwrap();
    assert_eq!(accounted(), sent, "{:?}", target.stats());
    let stats = target.stats();
    assert!(stats.invalid_envelopes > sent / 2, "{stats:?}");
    assert!(stats.unjoined_messages > sent / 10, "{stats:?}");

    stop.store(true, Ordering::Relaxed);
    within("asker", asker).await.unwrap();
    assert!(
        answered.load(Ordering::Relaxed) > 10,
        "the good peer was served throughout"
    );
    // Still serving after the flood.
    let reply: u64 = good.request("target", "typed", &41u64).await.unwrap();
    assert_eq!(reply, 42);
    let growth = rss().saturating_sub(before);
    assert!(
        growth < 128 * 1024 * 1024,
        "resident memory grew by {growth} bytes"
    );
}

// ---------------------------------------------------------------------------------------
// Dead peers: a server process killed with SIGKILL under load

/// A child process, killed when dropped (even if the test fails).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this binary as a node process (`--child`) and waits until it is ready.
fn spawn_node(args: &[&str]) -> (ChildGuard, std::io::BufReader<ChildStdout>) {
    use std::io::BufRead;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the node process exited early"
        );
        if line.starts_with("ready") {
            break;
        }
    }
    (ChildGuard(child), out)
}

/// The node process (`faults --child --id ID [--bind ADDR] [--connect ADDR] [--heartbeat-ms N]
/// [--proxy PORT TARGET --delay-ms D]`): answers `echo` with its payload, prints `ready`,
/// one line per peer event (`joined ID`, `left ID REASON`), and takes commands on its
/// standard input (`load N ID`: N requests to ID, then a `result` line). It runs until
/// killed or until its standard input closes. `--proxy` first starts a delaying TCP proxy
/// listening on 127.0.0.1:PORT towards TARGET (for added latency).
async fn child(args: Vec<String>) {
    use tokio::io::AsyncBufReadExt;
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if let (Some(port), Some(target)) = (
        value("--proxy"),
        args.iter()
            .position(|a| a == "--proxy")
            .and_then(|i| args.get(i + 2))
            .cloned(),
    ) {
        let delay = value("--delay-ms")
            .and_then(|d| d.parse().ok())
            .unwrap_or(25);
        tokio::spawn(delaying_proxy(port, target, Duration::from_millis(delay)));
    }
    let mut builder = support::builder(&value("--id").unwrap_or_else(|| "child".into()));
    if let Some(ms) = value("--heartbeat-ms").and_then(|v| v.parse().ok()) {
        builder = builder.heartbeat_interval(Duration::from_millis(ms));
    }
    if let Some(address) = value("--bind") {
        builder = builder.bind(address);
    }
    let node = builder.build().await.unwrap();
    node.on_request_service(
        "echo",
        tower::service_fn(|req: Request| async move {
            Ok::<_, node::BoxError>(node::Response::raw(req.payload().clone()))
        }),
    );
    let mut events = node.events();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                NodeEvent::PeerJoined { id, .. } => println!("joined {id}"),
                NodeEvent::PeerLeft { id, reason, .. } => println!("left {id} {reason:?}"),
                _ => {}
            }
        }
    });
    if let Some(address) = value("--connect") {
        // The far side may not be up yet: keep trying (bounded).
        for _ in 0..50 {
            if node.connect(&address).await.is_ok() {
                break;
            }
        }
    }
    println!("ready {}", node.address().unwrap_or_default());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["load", count, to] = words[..] {
            let count: u64 = count.parse().unwrap_or(0);
            let (mut ok, mut timeout, mut left, mut other) = (0u64, 0u64, 0u64, 0u64);
            for i in 0..count {
                let body = Bytes::from(format!("{i}"));
                match node
                    .call(to, "echo")
                    .timeout(Duration::from_secs(2))
                    .raw()
                    .send(body.clone())
                    .await
                    .map(node::Reply::into_payload)
                {
                    Ok(reply) if reply == body => ok += 1,
                    Ok(_) => other += 1,
                    Err(e) if e.code() == ErrorCode::RequestTimeout => timeout += 1,
                    Err(e) if matches!(e.code(), ErrorCode::PeerLeft | ErrorCode::NodeNotFound) => {
                        left += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(_) => other += 1,
                }
            }
            println!("result sent={count} ok={ok} timeout={timeout} left={left} other={other}");
        } else if let ["settle", to] = words[..] {
            // Waits until `to` is joined and five echoes in a row come back: the link is
            // healthy again after loss (bounded: 30 s).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut streak = 0;
            while streak < 5 && tokio::time::Instant::now() < deadline {
                let healthy = node.peers().get(to).is_some()
                    && node
                        .call(to, "echo")
                        .timeout(Duration::from_secs(1))
                        .raw()
                        .send(Bytes::from_static(b"s"))
                        .await
                        .map(node::Reply::into_payload)
                        .is_ok();
                if healthy {
                    streak += 1;
                } else {
                    streak = 0;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            println!("{}", if streak >= 5 { "settled" } else { "unsettled" });
        }
    }
    node.close().await;
}

/// Forwards TCP connections from 127.0.0.1:`port` to `target`, delaying every chunk by
/// `delay` in each direction.
async fn delaying_proxy(port: String, target: String, delay: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(listener) = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await else {
        return;
    };
    while let Ok((inbound, _)) = listener.accept().await {
        let target = target.clone();
        // Connect in the connection's own task: a partitioned target must not block accept.
        tokio::spawn(async move {
            let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                return;
            };
            let (a_read, a_write) = inbound.into_split();
            let (b_read, b_write) = outbound.into_split();
            for (mut from, mut to) in [
                (
                    Box::new(a_read) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                    Box::new(b_write) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                ),
                (Box::new(b_read), Box::new(a_write)),
            ] {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = from.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        tokio::time::sleep(delay).await;
                        if to.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
    }
}

/// A free loopback port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn a_killed_server_fails_pending_requests_and_clients_rejoin_after_restart() {
    let address = format!("tcp://127.0.0.1:{}", free_port());
    let (server, _out) = spawn_node(&["--id", "victim", "--bind", &address]);
    let client: Node = support::builder("client")
        .request_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let mut events = client.events();
    client.connect(&address).await.unwrap();

    // Load: 8 workers, each request carrying a unique nonce that the echo must return.
    let sent = Arc::new(AtomicU64::new(0));
    let replied = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..8u64 {
        let (client, sent, replied, failed, stop) = (
            client.clone(),
            Arc::clone(&sent),
            Arc::clone(&replied),
            Arc::clone(&failed),
            Arc::clone(&stop),
        );
        workers.push(tokio::spawn(async move {
            let mut codes = HashSet::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let nonce = Bytes::from(format!("{w}:{i}"));
                i += 1;
                sent.fetch_add(1, Ordering::Relaxed);
                match client
                    .call("victim", "echo")
                    .timeout(Duration::from_secs(3))
                    .raw()
                    .send(nonce.clone())
                    .await
                    .map(node::Reply::into_payload)
                {
                    Ok(reply) => {
                        assert_eq!(reply, nonce, "a reply answered another request");
                        replied.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        codes.insert(e.code());
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            codes
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before_kill = replied.load(Ordering::Relaxed);
    assert!(before_kill > 0);

    drop(server); // SIGKILL: no goodbye, no FIN from the node layer.
    wait_for(&mut events, "victim left", |e| match e {
        NodeEvent::PeerLeft { id, .. } if id.as_str() == "victim" => Some(()),
        _ => None,
    })
    .await;

    let (_restarted, _out2) = spawn_node(&["--id", "victim", "--bind", &address]);
    wait_for(&mut events, "victim joined again", |e| match e {
        NodeEvent::PeerJoined { id, .. } if id.as_str() == "victim" => Some(()),
        _ => None,
    })
    .await;
    let after_rejoin = replied.load(Ordering::Relaxed);
    within("traffic resumes", async {
        while replied.load(Ordering::Relaxed) < after_rejoin + 100 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    stop.store(true, Ordering::Relaxed);
    let mut codes = HashSet::new();
    for worker in workers {
        codes.extend(within("worker", worker).await.unwrap());
    }
    let (sent, replied, failed) = (
        sent.load(Ordering::Relaxed),
        replied.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    assert_eq!(sent, replied + failed, "every request ended exactly once");
    assert!(failed > 0, "requests pending at the kill must fail");
    for code in &codes {
        assert!(
            matches!(
                code,
                ErrorCode::PeerLeft | ErrorCode::RequestTimeout | ErrorCode::NodeNotFound
            ),
            "unexpected error {code:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Overload

async fn a_slow_handler_under_load_applies_backpressure_and_does_not_stall_other_peers() {
    let server = support::builder("server")
        .hwm(50)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    server.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok::<_, HandlerError>(())
    });
    server.on_request(
        "fast",
        |_req: Request| async move { Ok::<_, HandlerError>(()) },
    );
    let flooder = support::builder("flooder").hwm(50).build().await.unwrap();
    let polite = client("polite").await;
    flooder.connect(&address(&server)).await.unwrap();
    polite.connect(&address(&server)).await.unwrap();

    let before = rss();
    // The flooder keeps 2,000 slow requests in flight, far more than the server answers.
    let sent = Arc::new(AtomicU64::new(0));
    let ended = Arc::new(AtomicU64::new(0));
    let mut flood = Vec::new();
    for _ in 0..2000 {
        let (flooder, sent, ended) = (flooder.clone(), Arc::clone(&sent), Arc::clone(&ended));
        flood.push(tokio::spawn(async move {
            sent.fetch_add(1, Ordering::Relaxed);
            let result = flooder
                .call("server", "slow")
                .timeout(Duration::from_secs(1))
                .send::<_, ()>(&())
                .await;
            ended.fetch_add(1, Ordering::Relaxed);
            result.err().map(|e| e.code())
        }));
    }
    // Meanwhile the polite peer's quick requests are answered.
    for _ in 0..20 {
        within(
            "polite request",
            polite
                .call("server", "fast")
                .timeout(Duration::from_secs(5))
                .send::<_, ()>(&()),
        )
        .await
        .unwrap();
    }
    // Each flood call ends in time, answered, timed out, or refused at once with the typed
    // busy error once the flooder holds its share of the server's handlers (running and
    // queued per peer: 256 + 1,024 by default).
    let (mut timeouts, mut refused) = (0, 0);
    for call in flood {
        match within("flood call", call).await.unwrap() {
            None => {}
            Some(ErrorCode::RequestTimeout) => timeouts += 1,
            Some(ErrorCode::Busy) => refused += 1,
            Some(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(sent.load(Ordering::Relaxed), ended.load(Ordering::Relaxed));
    assert!(
        timeouts + refused > 0,
        "the server cannot answer 2,000 slow requests in a second"
    );
    let growth = rss().saturating_sub(before);
    assert!(
        growth < 128 * 1024 * 1024,
        "resident memory grew by {growth} bytes"
    );
}

// ---------------------------------------------------------------------------------------
// Network cuts between two hosts (network namespaces made by the test; needs root)

/// Runs a command quietly; whether it succeeded.
fn run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Two network namespaces joined by a veth pair, removed on drop.
struct Hosts {
    a: String,
    b: String,
    subnet: String,
}

impl Hosts {
    fn create() -> Hosts {
        let tag = std::process::id() % 100_000;
        let hosts = Hosts {
            a: format!("zn-a-{tag}"),
            b: format!("zn-b-{tag}"),
            subnet: format!("10.231.{}", tag % 250),
        };
        let (va, vb) = (format!("zna{tag}"), format!("znb{tag}"));
        let ok = run(&["ip", "netns", "add", &hosts.a])
            && run(&["ip", "netns", "add", &hosts.b])
            && run(&[
                "ip", "link", "add", &va, "type", "veth", "peer", "name", &vb,
            ])
            && run(&["ip", "link", "set", &va, "netns", &hosts.a])
            && run(&["ip", "link", "set", &vb, "netns", &hosts.b])
            && run(&[
                "ip",
                "-n",
                &hosts.a,
                "addr",
                "add",
                &format!("{}.1/24", hosts.subnet),
                "dev",
                &va,
            ])
            && run(&[
                "ip",
                "-n",
                &hosts.b,
                "addr",
                "add",
                &format!("{}.2/24", hosts.subnet),
                "dev",
                &vb,
            ])
            && run(&["ip", "-n", &hosts.a, "link", "set", &va, "up"])
            && run(&["ip", "-n", &hosts.b, "link", "set", &vb, "up"])
            && run(&["ip", "-n", &hosts.a, "link", "set", "lo", "up"])
            && run(&["ip", "-n", &hosts.b, "link", "set", "lo", "up"]);
        assert!(ok, "could not set up the network namespaces");
        hosts
    }

    /// Runs nft commands inside host b (one `nft -f` script).
    fn nft_b(&self, script: &str) {
        use std::io::Write;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.b, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success(), "nft failed: {script}");
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        run(&["ip", "netns", "del", &self.a]);
        run(&["ip", "netns", "del", &self.b]);
    }
}

/// A node process inside a namespace, its output lines gathered by a thread.
struct HostNode {
    child: ChildGuard,
    lines: std::sync::mpsc::Receiver<String>,
}

impl HostNode {
    fn start(namespace: &str, args: &[&str]) -> HostNode {
        use std::io::BufRead;
        let mut child = Command::new("ip")
            .args(["netns", "exec", namespace])
            .arg(std::env::current_exe().unwrap())
            .arg("--child")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        HostNode {
            child: ChildGuard(child),
            lines,
        }
    }

    /// The first line (from now) that `pick` accepts, within `limit`.
    fn wait_for(&self, what: &str, limit: Duration, pick: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + limit;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if pick(&line) => return line,
                Ok(line) => skipped.push(line),
                Err(_) => panic!("timed out waiting for {what}; it printed {skipped:?}"),
            }
        }
    }

    /// Forgets the lines printed so far (so a later wait sees only new events).
    fn drain(&self) {
        while self.lines.try_recv().is_ok() {}
    }

    /// Runs `settle TO`: returns once the node has `to` joined and answering.
    fn settle(&mut self, to: &str) {
        self.command(&format!("settle {to}"));
        let line = self.wait_for("settle", Duration::from_secs(40), |l| {
            l.ends_with("settled")
        });
        assert_eq!(
            line, "settled",
            "the link to {to} did not recover after loss"
        );
    }

    fn command(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.0.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Runs `load N net-a` and returns (sent, ok, timeout, left, other).
    fn load(&mut self, count: u64) -> [u64; 5] {
        self.command(&format!("load {count} net-a"));
        let line = self.wait_for("load result", Duration::from_secs(120), |l| {
            l.starts_with("result")
        });
        let numbers: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|kv| kv.split_once('=').and_then(|(_, v)| v.parse().ok()))
            .collect();
        numbers.try_into().unwrap()
    }
}

async fn network_cuts_between_two_hosts_are_detected_and_healed() -> Option<String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || !run(&["ip", "-V"]) || !run(&["nft", "--version"]) {
        return Some("needs root, ip (iproute2) and nft (nftables); .ci/run installs them".into());
    }
    let hosts = Hosts::create();
    let heartbeat = 200u64;
    let server = format!("tcp://{}.1:7000", hosts.subnet);
    let mut a = HostNode::start(
        &hosts.a,
        &["--id", "net-a", "--bind", &server, "--heartbeat-ms", "200"],
    );
    a.wait_for("a ready", Duration::from_secs(20), |l| {
        l.starts_with("ready")
    });
    // b reaches a through a proxy in its own namespace that adds 25 ms each way.
    let target = format!("{}.1:7000", hosts.subnet);
    let mut b = HostNode::start(
        &hosts.b,
        &[
            "--id",
            "net-b",
            "--proxy",
            "7001",
            &target,
            "--delay-ms",
            "25",
            "--connect",
            "tcp://127.0.0.1:7001",
            "--heartbeat-ms",
            "200",
        ],
    );
    b.wait_for("b joins a", Duration::from_secs(20), |l| {
        l == "joined net-a"
    });
    a.wait_for("a sees b", Duration::from_secs(20), |l| l == "joined net-b");

    // 50 ms added latency: every request is answered.
    let [sent, ok, ..] = b.load(50);
    assert_eq!((sent, ok), (50, 50));

    // 5% loss each way on top: requests are answered or end with a typed error; the counts
    // add up exactly.
    hosts.nft_b(
        "table inet zn_loss {\n\
           chain input { type filter hook input priority 0; numgen random mod 100 < 5 drop; }\n\
           chain output { type filter hook output priority 0; numgen random mod 100 < 5 drop; }\n\
         }\n",
    );
    let [sent, ok, timeout, left, other] = b.load(200);
    assert_eq!(sent, ok + timeout + left + other);
    assert_eq!(other, 0, "only timeouts and peer-left errors are expected");
    assert!(ok > 0);
    hosts.nft_b("delete table inet zn_loss\n");
    // Loss may have timed the peers out (TCP retransmits can outlast three heartbeats) and
    // they rejoin by themselves: wait until both sides are joined and answering again, and
    // forget the events of the lossy phase, so the cut below is judged on its own.
    b.settle("net-a");
    a.settle("net-b");
    a.drain();
    b.drain();

    // A silent partition: both sides report the peer left, within three heartbeat
    // intervals by design (five allowed here for a loaded machine).
    let cut = std::time::Instant::now();
    hosts.nft_b(
        "table inet zn_cut {\n\
           chain input { type filter hook input priority 0; drop; }\n\
           chain output { type filter hook output priority 0; drop; }\n\
         }\n",
    );
    let limit = Duration::from_millis(heartbeat * 5);
    a.wait_for("a sees b time out", Duration::from_secs(10), |l| {
        l == "left net-b TimedOut"
    });
    let a_took = cut.elapsed();
    b.wait_for("b sees a time out", Duration::from_secs(10), |l| {
        l == "left net-a TimedOut"
    });
    let b_took = cut.elapsed();
    assert!(
        a_took < limit && b_took < limit,
        "a {a_took:?}, b {b_took:?}"
    );

    // Healed: they rejoin by themselves, and requests work again.
    hosts.nft_b("delete table inet zn_cut\n");
    b.wait_for("b rejoins a", Duration::from_secs(60), |l| {
        l == "joined net-a"
    });
    a.wait_for("a sees b rejoin", Duration::from_secs(60), |l| {
        l == "joined net-b"
    });
    let [sent, ok, ..] = b.load(20);
    assert_eq!((sent, ok), (20, 20));
    None
}

// ---------------------------------------------------------------------------------------
// The harness

/// A test: `Some(reason)` when it had to skip.
type Test = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>>>>;

/// Wraps a test that never skips.
async fn always<F: std::future::Future<Output = ()>>(test: F) -> Option<String> {
    test.await;
    None
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if args.first().map(String::as_str) == Some("--child") {
        runtime.block_on(child(args));
        return;
    }
    let tests: [(&str, Test); 4] = [
        (
            "a_flood_of_hostile_messages_is_counted_and_the_node_keeps_serving",
            || {
                Box::pin(always(
                    a_flood_of_hostile_messages_is_counted_and_the_node_keeps_serving(),
                ))
            },
        ),
        (
            "a_killed_server_fails_pending_requests_and_clients_rejoin_after_restart",
            || {
                Box::pin(always(
                    a_killed_server_fails_pending_requests_and_clients_rejoin_after_restart(),
                ))
            },
        ),
        (
            "a_slow_handler_under_load_applies_backpressure_and_does_not_stall_other_peers",
            || {
                Box::pin(always(
                    a_slow_handler_under_load_applies_backpressure_and_does_not_stall_other_peers(),
                ))
            },
        ),
        (
            "network_cuts_between_two_hosts_are_detected_and_healed",
            || Box::pin(network_cuts_between_two_hosts_are_detected_and_healed()),
        ),
    ];
    // `cargo test -- NAME` filters as libtest does (substring); `--list` lists.
    let filter = args.iter().find(|a| !a.starts_with('-')).cloned();
    if args.iter().any(|a| a == "--list") {
        for (name, _) in &tests {
            println!("{name}: test");
        }
        return;
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, test) in tests {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(async { tokio::time::timeout(Duration::from_secs(120), test()).await })
        }));
        match outcome {
            Ok(Ok(None)) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Ok(Ok(Some(reason))) => {
                println!("test {name} ... skipped: {reason}");
                skipped += 1;
            }
            Ok(Err(_)) => {
                println!("test {name} ... FAILED (over 120 s)");
                failed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        std::process::exit(1);
    }
}
