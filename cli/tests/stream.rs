//! `zeronode stream` against a `zeronode node` child over loopback: items as JSON lines as
//! they arrive, the stream's end, and each way it can fail as one `error:` line.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use support::{zeronode, NodeProcess, BIN};

/// A node `srv` advertising `role=api`.
fn server() -> NodeProcess {
    let mut srv = NodeProcess::start(&[
        "--id",
        "srv",
        "--bind",
        "tcp://127.0.0.1:0",
        "-o",
        "role=api",
    ]);
    assert_eq!(srv.next_line(), "node srv ready");
    srv
}

#[test]
fn count_streams_one_json_line_per_item_by_each_target_form() {
    let srv = server();
    let by_connect = zeronode(&["stream", "--connect", &srv.address, "count", "5"]);
    assert_eq!(by_connect.ok(), "1\n2\n3\n4\n5");
    let by_id = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--to",
        "srv",
        "count",
        "3",
    ]);
    assert_eq!(by_id.ok(), "1\n2\n3");
    let by_filter = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--any",
        "-f",
        "role=api",
        "count",
        "2",
    ]);
    assert_eq!(by_filter.ok(), "1\n2");
    // An empty stream ends cleanly and prints nothing.
    let empty = zeronode(&["stream", "--connect", &srv.address, "count", "0"]);
    assert_eq!(empty.ok(), "");
}

#[test]
fn a_long_stream_through_a_small_window_arrives_whole_and_in_order() {
    let srv = server();
    let run = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--window",
        "2",
        "count",
        "2000",
    ]);
    let got: Vec<u64> = run
        .ok()
        .lines()
        .map(|l| l.parse().expect("a number per line"))
        .collect();
    assert_eq!(got, (1..=2000).collect::<Vec<u64>>());
}

#[test]
fn items_are_printed_as_they_arrive() {
    let srv = server();
    // Three items a second apart: the first line must be readable while the command runs.
    let mut child = Command::new(BIN)
        .args([
            "stream",
            "--connect",
            &srv.address,
            "count",
            r#"{"n":3,"every_ms":1000}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("zeronode starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let first = lines.next().and_then(|l| l.ok());
    let running = child.try_wait().expect("wait works").is_none();
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    let status = child.wait().expect("wait works");
    assert_eq!(first.as_deref(), Some("1"));
    // The next two items are two seconds away when the first is read.
    assert!(
        running,
        "the command had exited when its first item was read"
    );
    assert_eq!(rest, ["2", "3"]);
    assert!(status.success());
}

#[test]
fn a_stalled_stream_fails_after_its_items_with_the_idle_bound() {
    let srv = server();
    let run = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--idle",
        "300",
        "count",
        r#"{"n":3,"every_ms":5000}"#,
    ]);
    let line = run.failed();
    assert_eq!(run.stdout.trim_end(), "1");
    assert!(
        line.contains(r#"stream "count" stalled: no item within 300 ms after 1 item(s)"#),
        "{line}"
    );
    // The node serves on: the stalled handler was cancelled, not the node.
    let run = zeronode(&["request", "--connect", &srv.address, "ping"]);
    assert_eq!(run.ok(), r#""pong""#);
}

#[test]
fn a_stream_over_its_timeout_says_so() {
    let srv = server();
    let run = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--timeout",
        "400",
        "count",
        r#"{"n":100,"every_ms":100}"#,
    ]);
    let line = run.failed();
    assert!(
        line.contains(r#"stream "count" timed out: not finished within 400 ms"#),
        "{line}"
    );
    assert!(run.stdout.starts_with("1\n"), "{:?}", run.stdout);
}

#[test]
fn the_handlers_error_ends_the_stream() {
    let srv = server();
    let run = zeronode(&["stream", "--connect", &srv.address, "count", r#""many""#]);
    let line = run.failed();
    assert!(line.contains("INVALID_ARGUMENT"), "{line}");
    assert!(line.contains("count expects N"), "{line}");
}

#[test]
fn a_handler_that_answers_once_streams_its_reply_as_the_one_item() {
    let srv = server();
    let run = zeronode(&["stream", "--connect", &srv.address, "echo", r#"{"a":1}"#]);
    assert_eq!(run.ok(), r#"{"a":1}"#);
}

#[test]
fn calling_the_wrong_way_names_the_right_command() {
    let srv = server();
    let run = zeronode(&["request", "--connect", &srv.address, "count", "3"]);
    let line = run.failed();
    assert!(line.contains("zeronode stream"), "{line}");
    let run = zeronode(&[
        "stream",
        "--connect",
        &srv.address,
        "--to",
        "ghost",
        "count",
    ]);
    let line = run.failed();
    assert!(
        line.contains(r#"no connected node has the id "ghost""#),
        "{line}"
    );
}

#[test]
fn a_bad_window_is_refused_before_connecting() {
    let run = zeronode(&[
        "stream",
        "--connect",
        "tcp://127.0.0.1:9",
        "--window",
        "0",
        "count",
    ]);
    let line = run.failed();
    assert!(line.contains("--window"), "{line}");
    assert_eq!(run.status.code(), Some(2));
}

/// `--window` defaults to the library's window, the figure the documents state
/// (node/tests/docs.rs holds those to the same constant).
#[test]
fn the_window_defaults_to_the_library_s() {
    let help = zeronode(&["stream", "--help"]);
    let help = help.ok();
    let window = help
        .split("--window <N>")
        .nth(1)
        .unwrap_or_else(|| panic!("no --window in the help: {help}"));
    let default = format!("[default: {}]", node::DEFAULT_WINDOW);
    let described = window.split("--").next().unwrap_or("");
    assert!(described.contains(&default), "{described}");
}

/// Three processes on each engine: a router, a worker joined to it, and the command joined
/// to the router only. The stream is relayed item by item through the router.
#[test]
fn a_stream_through_a_router_process_on_each_engine() {
    for engine in ["native", "libzmq"] {
        let mut hub = NodeProcess::start(&[
            "--id",
            "hub",
            "--router",
            "--bind",
            "tcp://127.0.0.1:0",
            "--engine",
            engine,
        ]);
        assert_eq!(hub.next_line(), "node hub ready");
        let mut worker =
            NodeProcess::start(&["--id", "w1", "--connect", &hub.address, "--engine", engine]);
        worker.wait_for("w1 ready", |l| l == "node w1 ready");
        hub.wait_for("w1 joining", |l| l.starts_with("peer joined w1"));
        let run = zeronode(&[
            "stream",
            "--connect",
            &hub.address,
            "--engine",
            engine,
            "--to",
            "w1",
            "count",
            "300",
        ]);
        let expected: Vec<String> = (1..=300).map(|i| i.to_string()).collect();
        assert_eq!(run.ok(), expected.join("\n"), "on {engine}");
    }
}
