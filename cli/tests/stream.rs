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

/// Every item of every match, tagged with the node it came from: items of each node in
/// order, lines from both mixed as they arrive.
fn by_node(stdout: &str) -> std::collections::BTreeMap<String, Vec<u64>> {
    let mut by_node = std::collections::BTreeMap::<String, Vec<u64>>::new();
    for line in stdout.lines() {
        let line: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        let from = line["from"].as_str().unwrap_or_else(|| panic!("{line}"));
        let item = line["item"].as_u64().unwrap_or_else(|| panic!("{line}"));
        by_node.entry(from.to_owned()).or_default().push(item);
    }
    by_node
}

/// `--all`: a stream from every match, here and through a router, each item printed with
/// the id of its node; a node that fails mid-stream (w2, killed) ends alone, and the
/// command fails naming it once the others ended. Every process on `engine`.
fn a_stream_from_every_match_prints_each_item_with_its_node(engine: &str) {
    let on = ["--engine", engine];
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
    let mut w1 = NodeProcess::start(&[
        "--id",
        "w1",
        "--connect",
        &hub.address,
        "-o",
        "role=worker",
        "--engine",
        engine,
    ]);
    w1.wait_for("w1 ready", |l| l == "node w1 ready");
    let mut w2 = NodeProcess::start(&[
        "--engine",
        engine,
        "--id",
        "w2",
        "--bind",
        "tcp://127.0.0.1:0",
        "--connect",
        &hub.address,
        "-o",
        "role=worker",
    ]);
    w2.wait_for("w2 ready", |l| l == "node w2 ready");
    hub.wait_for("w1 joining", |l| l.starts_with("peer joined w1"));
    hub.wait_for("w2 joining", |l| l.starts_with("peer joined w2"));

    // Joined to the hub (w1 behind it) and to w2 directly.
    let (hub_address, w2_address) = (hub.address.clone(), w2.address.clone());
    let stream = |extra: &[&str]| {
        let mut args = vec![
            "stream",
            "--connect",
            &hub_address,
            "--connect",
            &w2_address,
        ];
        args.extend_from_slice(&on);
        args.extend_from_slice(extra);
        zeronode(&args)
    };
    let run = stream(&["--all", "-f", "role=worker", "count", "3"]);
    let got = by_node(run.ok());
    assert_eq!(got.len(), 2, "{run:?}");
    assert_eq!(got["w1"], [1, 2, 3], "{run:?}");
    assert_eq!(got["w2"], [1, 2, 3], "{run:?}");

    // w2 killed mid-stream: its stream ends with the error naming it, w1's goes on to the
    // end, and the command fails once w1's ended. 40 items 25 ms apart: a second each.
    let mut child = Command::new(BIN)
        .args([
            "stream",
            "--connect",
            &hub_address,
            "--connect",
            &w2_address,
        ])
        .args(on)
        .args([
            "--all",
            "-f",
            "role=worker",
            "count",
            r#"{"n":40,"every_ms":25}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("zeronode starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut printed = String::new();
    let mut from_w2 = 0;
    while from_w2 < 5 {
        let line = lines.next().expect("a line").expect("text");
        from_w2 += usize::from(line.contains(r#""from":"w2""#));
        printed.push_str(&line);
        printed.push('\n');
    }
    w2.signal("KILL");
    for line in lines.map_while(Result::ok) {
        printed.push_str(&line);
        printed.push('\n');
    }
    let output = child.wait_with_output().expect("it ends");
    let run = support::Run {
        status: output.status,
        stdout: printed,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    let got = by_node(&run.stdout);
    assert_eq!(got["w1"], (1..=40).collect::<Vec<u64>>(), "{run:?}");
    assert!(got["w2"].len() < 40, "{run:?}");
    let line = run.failed();
    assert!(line.contains("the stream from w2"), "{line}");

    // Nothing matching anywhere is one error, before anything is sent.
    let to_hub = |extra: &[&str]| {
        let mut args = vec!["stream", "--connect", &hub_address];
        args.extend_from_slice(&on);
        args.extend_from_slice(extra);
        zeronode(&args)
    };
    let run = to_hub(&["--all", "-f", "role=nobody", "count", "2"]);
    assert!(run.failed().contains("role=nobody"), "{run:?}");
    // Each node's stream has the library's window and no idle bound of the command's.
    let run = to_hub(&["--all", "--window", "8", "count", "2"]);
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.failed().contains("--window"), "{run:?}");
}

#[test]
fn a_stream_from_every_match_prints_each_item_with_its_node_native() {
    a_stream_from_every_match_prints_each_item_with_its_node("native");
}

#[test]
fn a_stream_from_every_match_prints_each_item_with_its_node_libzmq() {
    a_stream_from_every_match_prints_each_item_with_its_node("libzmq");
}

/// `--window` defaults to the library's window, the figure the documents state
/// (node/tests/docs.rs holds those to the same constant).
#[test]
fn the_window_defaults_to_the_library_s() {
    let help = zeronode(&["stream", "--help"]);
    let help = help.ok();
    let window = help
        .lines()
        .find(|l| l.trim_start().starts_with("--window <N>"))
        .unwrap_or_else(|| panic!("no --window in the help: {help}"));
    let default = format!("[default: {}]", node::DEFAULT_WINDOW);
    assert!(window.ends_with(&default), "{window}");
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
