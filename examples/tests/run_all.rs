//! Runs every example program as a user would and checks that it did its job: it exits
//! with success within a bounded time and prints the line that proves its point.
//!
//! Every program binds port 0 on loopback, so these tests run in parallel.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest a program may run before the test kills it and fails.
const LIMIT: Duration = Duration::from_secs(30);

/// A running program, killed if the test ends (or panics) before it exits.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // Already exited is fine: kill then fails harmlessly.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the program at `path` to completion (at most [`LIMIT`]), asserts it succeeded and
/// that its stdout contains every one of `expected`; returns the stdout.
fn run(path: &str, expected: &[&str]) -> String {
    run_with(path, &[], expected)
}

/// [`run`] with environment variables set for the program.
fn run_with(path: &str, env: &[(&str, &str)], expected: &[&str]) -> String {
    let child = Command::new(path)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {path}: {e}"));
    let mut running = Running(child);
    // Read the pipes on their own threads, so a chatty program never blocks on a full pipe.
    let stdout = drain(running.0.stdout.take());
    let stderr = drain(running.0.stderr.take());
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        match running.0.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            Ok(None) => panic!("{path} still running after {LIMIT:?}: killed"),
            Err(e) => panic!("waiting for {path}: {e}"),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    assert!(
        status.success(),
        "{path} exited with {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    for line in expected {
        assert!(
            stdout.contains(line),
            "{path}: no {line:?} in its output\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        );
    }
    stdout
}

/// Reads a pipe to its end on a thread.
fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
}

#[test]
fn request_gets_a_typed_reply() {
    run(
        env!("CARGO_BIN_EXE_request"),
        &["shop: coffee x3 costs 7.50"],
    );
}

#[test]
fn tick_handler_counts_every_tick() {
    run(env!("CARGO_BIN_EXE_tick"), &["counted 5 of 5 ticks"]);
}

#[test]
fn any_reaches_only_matching_workers() {
    run(
        env!("CARGO_BIN_EXE_any"),
        &[
            "answered by: render-1, render-2, render-4",
            "answered by: render-1, render-3",
            "error, as expected: no node matches the filter",
        ],
    );
}

#[test]
fn all_reaches_one_layer() {
    run(
        env!("CARGO_BIN_EXE_all"),
        &[
            "the tick went to 3 nodes",
            "every layer B node reported; layer A did not",
        ],
    );
}

#[test]
fn patterns_route_by_regex_and_off_request_removes() {
    run(
        env!("CARGO_BIN_EXE_patterns"),
        &[
            "user:delete  -> delete ada: done by the ^user: handler",
            "audit:logout -> tick seen by the ^audit: handler",
            "user:create  -> error, as expected: no handler",
        ],
    );
}

#[test]
fn predicate_filter_follows_computed_load() {
    run(
        env!("CARGO_BIN_EXE_predicate"),
        &[
            "taken by {\"worker-3\"}",
            "a predicate filter cannot travel",
        ],
    );
}

#[test]
fn handler_errors_reach_the_caller() {
    run(
        env!("CARGO_BIN_EXE_handler_error"),
        &[
            "Error::Handler code=INSUFFICIENT_FUNDS",
            "INVALID_ARGUMENT",
            "Error::NoHandler",
        ],
    );
}

#[test]
fn middleware_times_out_and_refuses_without_token() {
    run(
        env!("CARGO_BIN_EXE_middleware"),
        &[
            "refused: DEADLINE_EXCEEDED",
            "admin:purge token=s3cret     -> allowed",
            "admin:purge token=none       -> refused: UNAUTHORIZED",
        ],
    );
}

#[test]
fn ring_goes_all_the_way_round_both_ways() {
    run(
        env!("CARGO_BIN_EXE_ring"),
        &[
            "path ring-0 -> ring-1 -> ring-2 -> ring-3 -> ring-4 -> ring-0",
            "path ring-0 -> ring-4 -> ring-3 -> ring-2 -> ring-1 -> ring-0",
        ],
    );
}

#[test]
fn reconnect_rejoins_a_restarted_server() {
    run(
        env!("CARGO_BIN_EXE_reconnect"),
        &[
            "event PeerLeft svc",
            "joined again",
            "svc answers version 2",
        ],
    );
}

#[test]
fn mesh_runs_and_prints_its_summary() {
    let out = run(
        env!("CARGO_BIN_EXE_mesh"),
        &["== summary after", "req/s", "errors: 0"],
    );
    // Every node appears in the table, and traffic went both ways.
    for node in ["gw-1", "gw-2", "w-eu-1", "w-eu-2", "w-us-1"] {
        assert!(out.lines().any(|l| l.starts_with(node)), "{node}: {out}");
    }
    assert!(out.contains("requests answered"), "{out}");
}

#[test]
fn routers_carry_a_leaf_to_a_leaf_through_two_hops() {
    run(
        env!("CARGO_BIN_EXE_routers"),
        &[
            "east-1 -> west-2 by id: west-2 answering, from east-1 via [\"east\", \"west\"]",
            "a tick to all stores, sent to 3 stores",
        ],
    );
}

#[test]
fn secure_serves_the_listed_key_and_refuses_the_rest() {
    run(
        env!("CARGO_BIN_EXE_secure"),
        &[
            "teller: balance 1250",
            "stranger: refused",
            "plain: refused",
            "teller: after revocation",
            "done: one served, two refused, one revoked",
        ],
    );
}

#[test]
fn caller_retries_limits_and_opens_its_breaker() {
    run(
        env!("CARGO_BIN_EXE_caller"),
        &[
            "price 21 -> 42",
            "20 of 20 answered; at most 4 ran at once",
            "broken -> OUT_OF_STOCK, sent once",
            "refused at once: circuit open",
        ],
    );
}

#[test]
fn gather_asks_all_the_first_two_and_one_per_group() {
    run(
        env!("CARGO_BIN_EXE_gather"),
        &[
            "stock-south-5: request \"count\" timed out",
            "5 of 6 answered in time",
            "got 2 answers",
            "asked 2 nodes, one per group",
            "north: 600 restocks, spread [200, 200, 200]",
            "south: 600 restocks, spread [200, 200, 200]",
        ],
    );
}

#[test]
fn kv_routes_by_key_checks_tenants_and_survives_a_closed_shard() {
    run(
        env!("CARGO_BIN_EXE_kv"),
        &[
            "stored 12 keys: {\"shard-0\": 4, \"shard-1\": 4, \"shard-2\": 4}",
            "get user:1 as acme   -> grace",
            "get user:1 as globex -> none",
            "get user:1 without a tenant -> refused: UNAUTHENTICATED",
            "count = 12 {\"shard-0\": 4, \"shard-1\": 4, \"shard-2\": 4}",
            "scan -> timed out after 500ms",
            "3 shards stopped their scan at the deadline",
            "compact sent to 3 shards; every shard compacted once",
            "the gateway saw shard-1 leave",
            "get user:0 -> refused: UNAVAILABLE",
            "count = 8 from 2 shards {\"shard-0\": 4, \"shard-2\": 4}",
        ],
    );
}

#[test]
fn relay_streams_tokens_through_a_gateway_and_cancels_back() {
    run(
        env!("CARGO_BIN_EXE_relay"),
        &[
            "app: 12 tokens through the gateway: streams flow through the gateway as they come word8",
            "worker: stream finished, 12 tokens",
            "app: read 5 tokens of an endless stream and dropped it",
            "worker: stream cancelled after",
        ],
    );
}

#[test]
fn upload_sends_a_file_in_chunks_and_the_hashes_match() {
    // 32 MiB rather than the default 1 GiB: a debug build makes and hashes about 6 MiB/s.
    let out = run_with(
        env!("CARGO_BIN_EXE_upload"),
        &[("UPLOAD_MIB", "32")],
        &[
            "app: uploading 32 MiB in 512 chunks of 64 KiB",
            "store: received 32 MiB of generated.bin with sha256 ",
            "app: hashes match",
        ],
    );
    // The hash the store saw is the one the app sent, printed on both lines.
    let hash_after = |prefix: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
    };
    let stored = hash_after("store: received 32 MiB of generated.bin with sha256 ");
    let sent = hash_after("app: sent sha256 ");
    assert!(stored.as_ref().is_some_and(|h| h.len() == 64), "{out}");
    assert_eq!(stored, sent, "{out}");
}

/// The service as a container runs it: ready on its probe, then SIGTERM: it drains, says
/// so, and exits 0.
#[test]
fn service_is_ready_on_its_probe_and_stops_cleanly_at_sigterm() {
    use std::io::{BufRead, BufReader, Write};
    let child = Command::new(env!("CARGO_BIN_EXE_service"))
        .envs([
            ("ZERONODE_ID", "search-1"),
            ("SHARD", "1"),
            ("ZERONODE_BIND", "tcp://127.0.0.1:0"),
            ("ZERONODE_HEALTH", "127.0.0.1:0"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let mut running = Running(child);
    let stderr = drain(running.0.stderr.take());
    let mut lines = BufReader::new(running.0.stdout.take().expect("piped")).lines();
    let mut next = || lines.next().and_then(|l| l.ok()).unwrap_or_default();
    let first = next();
    assert!(
        first.starts_with("node search-1 (shard 1) on tcp://127.0.0.1:"),
        "{first}"
    );
    let health = next();
    let health = health
        .strip_prefix("health on http://")
        .and_then(|h| h.strip_suffix("/readyz"))
        .unwrap_or_else(|| panic!("not the health line: {health}"))
        .to_owned();
    let get = |path: &str| {
        let mut stream = std::net::TcpStream::connect(&health).expect("connects");
        stream.set_read_timeout(Some(LIMIT)).expect("a timeout");
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("sent");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        response
    };
    // `run_until_signal` marks it started as it begins: poll briefly.
    let deadline = Instant::now() + LIMIT;
    while !get("/readyz").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "never ready");
        thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &running.0.id().to_string()])
        .status()
        .expect("kill(1) runs");
    assert!(killed.success());
    assert_eq!(next(), "stopped at SIGTERM: every request answered");
    let status = running.0.wait().expect("exits");
    assert!(
        status.success(),
        "{status}: {}",
        stderr.join().unwrap_or_default()
    );
}
