//! The `zeronode` binary end to end, over loopback: a `zeronode node` child serves, one-shot
//! `request` / `tick` / `peers` commands talk to it, and every error a user can make gives
//! one `error:` line and a non-zero exit.

mod support;

use support::{zeronode, NodeProcess, BIN};

/// A node `srv` advertising `role=api`, as the tests below talk to it.
fn server(extra: &[&str]) -> NodeProcess {
    let mut args = vec![
        "--id",
        "srv",
        "--bind",
        "tcp://127.0.0.1:0",
        "-o",
        "role=api",
    ];
    args.extend_from_slice(extra);
    let mut srv = NodeProcess::start(&args);
    assert_eq!(srv.next_line(), "node srv ready");
    srv
}

#[test]
fn request_round_trips_json_through_echo() {
    let srv = server(&[]);
    let data = r#"{"a":[1,2,"x"]}"#;
    let run = zeronode(&["request", "--connect", &srv.address, "echo", data]);
    let sent: serde_json::Value = serde_json::from_str(data).expect("test JSON");
    let got: serde_json::Value = serde_json::from_str(run.ok()).expect("the reply is JSON");
    assert_eq!(got, sent);
    assert_eq!(run.ok().lines().count(), 1);
}

#[test]
fn a_node_bound_on_ipc_answers_over_it() {
    // The default engine (native) over a Unix socket at a fresh path.
    let mut srv = NodeProcess::start(&["--id", "srv", "--bind", "ipc://*"]);
    assert_eq!(srv.next_line(), "node srv ready");
    assert!(srv.address.starts_with("ipc://"), "{}", srv.address);
    let run = zeronode(&["request", "--connect", &srv.address, "echo", "[1,2]"]);
    assert_eq!(run.ok(), "[1,2]");
}

#[test]
fn request_without_data_sends_null() {
    let srv = server(&[]);
    let run = zeronode(&["request", "--connect", &srv.address, "echo"]);
    assert_eq!(run.ok(), "null");
}

#[test]
fn ping_answers_pong_by_id_and_by_filter() {
    let srv = server(&[]);
    let run = zeronode(&["request", "--connect", &srv.address, "ping"]);
    assert_eq!(run.ok(), r#""pong""#);
    let run = zeronode(&["request", "--connect", &srv.address, "--to", "srv", "ping"]);
    assert_eq!(run.ok(), r#""pong""#);
    let run = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "--any",
        "-f",
        "role=api",
        "ping",
    ]);
    assert_eq!(run.ok(), r#""pong""#);
}

#[test]
fn a_filter_matching_nobody_says_so() {
    let srv = server(&[]);
    let run = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "--any",
        "-f",
        "role=nothing",
        "ping",
    ]);
    let line = run.failed();
    assert!(line.contains("no connected node matches"), "{line}");
    assert!(line.contains("role=nothing"), "{line}");
}

#[test]
fn an_unknown_id_says_so() {
    let srv = server(&[]);
    let run = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "--to",
        "ghost",
        "ping",
    ]);
    let line = run.failed();
    assert!(
        line.contains(r#"no connected node has the id "ghost""#),
        "{line}"
    );
}

#[test]
fn ticks_reach_the_node() {
    let mut srv = server(&["--verbose"]);
    let run = zeronode(&["tick", "--connect", &srv.address, "news", r#"{"n":1}"#]);
    assert_eq!(run.ok(), "sent");
    srv.wait_for("the tick", |l| {
        l.starts_with("tick news from ") && l.ends_with(r#"{"n":1}"#)
    });

    let run = zeronode(&[
        "tick",
        "--connect",
        &srv.address,
        "--all",
        "-f",
        "role=api",
        "news",
        "2",
    ]);
    assert_eq!(run.ok(), "sent to 1 node");
    srv.wait_for("the second tick", |l| {
        l.starts_with("tick news from ") && l.ends_with(": 2")
    });

    let run = zeronode(&[
        "tick",
        "--connect",
        &srv.address,
        "--all",
        "-f",
        "role=db",
        "x",
    ]);
    assert!(run.failed().contains("no connected node matches"));
}

#[test]
fn peers_lists_a_long_lived_node_with_its_options() {
    let mut srv = server(&[]);
    let mut worker = NodeProcess::start(&[
        "--id",
        "w1",
        "--connect",
        &srv.address,
        "-o",
        "role=worker",
        "-o",
        "tags=a,b",
    ]);
    // Its own "peer joined srv" line may come before or after "ready".
    worker.wait_for("w1 ready", |l| l == "node w1 ready");
    srv.wait_for("w1 joining", |l| {
        l == "peer joined w1 (downstream) role=worker tags=a,b"
    });

    let run = zeronode(&["peers", "--connect", &srv.address]);
    let table: Vec<&str> = run.ok().lines().collect();
    assert_eq!(table[0], "ID  DIRECTION   OPTIONS");
    assert!(
        table.contains(&"w1  downstream  role=worker tags=a,b"),
        "{table:?}"
    );
    // The asking node itself is left out.
    assert!(table.iter().all(|l| !l.starts_with("node-")), "{table:?}");

    let run = zeronode(&["peers", "--connect", &srv.address, "--json"]);
    let rows: Vec<serde_json::Value> = run
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(
        rows.contains(&serde_json::json!({
            "id": "w1",
            "direction": "downstream",
            "options": {"role": "worker", "tags": ["a", "b"]},
        })),
        "{rows:?}"
    );

    // The worker leaves gracefully; the server logs why.
    worker.signal("INT");
    assert_eq!(worker.wait_exit().code(), Some(0));
    srv.wait_for("w1 leaving", |l| l == "peer left w1 (downstream, stopped)");
}

#[test]
fn a_request_shows_up_as_a_join_and_a_leave() {
    let mut srv = server(&[]);
    zeronode(&["request", "--connect", &srv.address, "ping"]).ok();
    let joined = srv.wait_for("a join", |l| l.starts_with("peer joined node-"));
    let id = joined
        .split_whitespace()
        .nth(2)
        .expect("peer joined ID ...")
        .to_owned();
    srv.wait_for("its leave", |l| {
        l == format!("peer left {id} (downstream, stopped)")
    });
}

#[test]
fn sigint_and_sigterm_stop_a_node_cleanly() {
    for signal in ["INT", "TERM"] {
        let mut srv = server(&[]);
        srv.signal(signal);
        assert_eq!(srv.wait_exit().code(), Some(0), "{srv}");
        let lines = srv.rest();
        assert!(
            lines.contains(&format!("node srv stopping (SIG{signal})")),
            "{lines:?}"
        );
        assert_eq!(lines.last().map(String::as_str), Some("node srv stopped"));
        assert!(!srv.stderr().contains("panicked"));
    }
}

#[test]
fn stats_are_printed_periodically() {
    let mut srv = server(&["--stats", "0.2"]);
    zeronode(&["request", "--connect", &srv.address, "ping"]).ok();
    srv.wait_for("a stats line", |l| {
        l.starts_with("stats: ") && l.contains("requests/s")
    });
}

// ---- errors -------------------------------------------------------------------------

#[test]
fn an_unknown_flag_is_a_usage_error() {
    let run = zeronode(&["request", "--bogus"]);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(
        run.failed(),
        "error: unexpected argument '--bogus' found (see zeronode request --help)"
    );
    // A near miss names the flag meant.
    let run = zeronode(&["request", "--tmeout", "5"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        run.failed().contains("did you mean '--timeout'?"),
        "{run:?}"
    );
}

#[test]
fn the_bench_harness_s_usage_errors_are_one_line_too() {
    let run = zeronode(&["bench", "--bogus"]);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(
        run.failed(),
        "error: unexpected argument '--bogus' found (see zeronode bench --help)"
    );
    let run = zeronode(&["bench", "scale", "--peers"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        run.failed().ends_with("(see zeronode bench scale --help)"),
        "{run:?}"
    );
}

#[test]
fn an_unknown_subcommand_is_a_usage_error() {
    let run = zeronode(&["bogus"]);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(
        run.failed(),
        "error: unrecognized subcommand 'bogus' (see zeronode --help)"
    );
    let run = zeronode(&["requst"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("did you mean 'request'?"), "{run:?}");
}

#[test]
fn a_missing_argument_is_a_usage_error() {
    let run = zeronode(&["request"]);
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(
        run.failed(),
        "error: the following required arguments were not provided: --connect <ADDR>, \
         <EVENT> (see zeronode request --help)"
    );
    let run = zeronode(&["request", "--connect"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("'--connect <ADDR>'"), "{run:?}");
}

#[test]
fn help_and_version_print_clap_s_text_and_succeed() {
    let run = zeronode(&["--help"]);
    assert!(run.ok().contains("Usage: zeronode <COMMAND>"), "{run:?}");
    let run = zeronode(&["request", "--help"]);
    assert!(run.ok().contains("--connect <ADDR>"), "{run:?}");
    let run = zeronode(&["--version"]);
    assert!(run.ok().starts_with("zeronode "), "{run:?}");
}

#[test]
fn a_bad_address_is_refused_before_connecting() {
    let run = zeronode(&["request", "--connect", "nonsense", "ping"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("nonsense"));
    let run = zeronode(&["node", "--bind", "nonsense"]);
    assert!(run.failed().contains("nonsense"));
}

#[test]
fn a_malformed_option_is_refused() {
    let run = zeronode(&["node", "-o", "novalue"]);
    assert!(run.failed().contains("KEY=VALUE"));
}

#[test]
fn an_unreachable_node_times_out_the_connect() {
    // A port nothing listens on: bind one, learn it, stop the node.
    let mut gone = server(&[]);
    let address = gone.address.clone();
    gone.signal("TERM");
    gone.wait_exit();
    let run = zeronode(&[
        "request",
        "--connect",
        &address,
        "--connect-timeout",
        "300",
        "ping",
    ]);
    let line = run.failed();
    assert!(
        line.contains("cannot reach") && line.contains("300 ms"),
        "{line}"
    );

    let run = zeronode(&["node", "--connect", &address, "--connect-timeout", "300"]);
    assert!(run.failed().contains("cannot reach"));
}

#[test]
fn invalid_json_is_refused_before_connecting() {
    // No node is needed: the data is checked first.
    let run = zeronode(&["request", "--connect", "tcp://127.0.0.1:9", "echo", "{a:"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().starts_with("error: invalid JSON data"));
}

#[test]
fn a_slow_reply_times_out() {
    let srv = server(&[]);
    let run = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "delay",
        "2000",
        "--timeout",
        "200",
    ]);
    let line = run.failed();
    assert!(
        line.contains("timed out") && line.contains("200 ms"),
        "{line}"
    );
    // Within its timeout the same request answers with its data.
    let run = zeronode(&["request", "--connect", &srv.address, "delay", "50"]);
    assert_eq!(run.ok(), "50");
}

#[test]
fn remote_errors_show_their_code_and_message() {
    let srv = server(&[]);
    let run = zeronode(&["request", "--connect", &srv.address, "no-such-event"]);
    let line = run.failed();
    assert!(
        line.contains("no handler") && line.contains("NO_HANDLER"),
        "{line}"
    );

    let run = zeronode(&["request", "--connect", &srv.address, "delay", r#""soon""#]);
    let line = run.failed();
    assert!(
        line.contains("INVALID_ARGUMENT") && line.contains("milliseconds"),
        "{line}"
    );
}

#[test]
fn filters_need_any_or_all() {
    let run = zeronode(&[
        "request",
        "--connect",
        "tcp://127.0.0.1:9",
        "-f",
        "role=api",
        "ping",
    ]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("--any"));
}

#[test]
fn a_router_node_forwards_to_nodes_the_caller_is_not_joined_to() {
    let mut router = server(&["--router"]);
    let mut worker = NodeProcess::start(&[
        "--id",
        "w1",
        "--connect",
        &router.address,
        "-o",
        "role=worker",
    ]);
    worker.wait_for("w1 ready", |l| l == "node w1 ready");
    router.wait_for("w1 joining", |l| l.starts_with("peer joined w1"));

    // The short-lived request node is joined to the router (srv) only.
    let run = zeronode(&[
        "request",
        "--connect",
        &router.address,
        "--to",
        "w1",
        "ping",
    ]);
    assert_eq!(run.ok().trim(), "\"pong\"");
    let run = zeronode(&[
        "request",
        "--connect",
        &router.address,
        "--any",
        "-f",
        "role=worker",
        "echo",
        "[1,2]",
    ]);
    assert_eq!(run.ok().trim(), "[1,2]");
}

/// A router is there to forward: it answers none of the built-in handlers itself (the
/// nodes behind it do), unless `--demo` asks for them; `zeronode peers` still works on it.
#[test]
fn a_router_node_serves_the_built_in_handlers_only_with_demo() {
    let router = server(&["--router"]);
    let run = zeronode(&["request", "--connect", &router.address, "ping"]);
    let line = run.failed();
    assert!(line.contains("ping"), "{line}");
    let run = zeronode(&["stream", "--connect", &router.address, "count", "2"]);
    assert!(run.failed().contains("count"), "{run:?}");
    let run = zeronode(&["peers", "--connect", &router.address]);
    assert!(run.ok().starts_with("ID"), "{run:?}");
    drop(router);

    let mut demo = NodeProcess::start(&[
        "--id",
        "demo",
        "--router",
        "--demo",
        "--bind",
        "tcp://127.0.0.1:0",
    ]);
    assert_eq!(demo.next_line(), "node demo ready");
    let run = zeronode(&["request", "--connect", &demo.address, "ping"]);
    assert_eq!(run.ok(), "\"pong\"");
    let run = zeronode(&["stream", "--connect", &demo.address, "count", "2"]);
    assert_eq!(run.ok(), "1\n2");

    // --demo is a router's option; the help says so.
    let run = zeronode(&["node", "--demo"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(run.failed().contains("--router"), "{run:?}");
    let help = zeronode(&["node", "--help"]);
    let help = help.ok();
    assert!(help.contains("--demo"), "{help}");
    assert!(
        help.contains("serves none of the built-in handlers"),
        "{help}"
    );
}

/// SIGTERM with 20 requests in flight on a slow handler: the node waits for them (within
/// `--grace`), and every caller gets its reply, none "left before answering".
#[test]
fn sigterm_answers_every_request_in_flight_before_the_node_stops() {
    let mut srv = NodeProcess::start(&[
        "--id",
        "slow",
        "--bind",
        "tcp://127.0.0.1:0",
        "--grace",
        "20",
        "--verbose",
    ]);
    let address = srv.address.clone();
    let callers: Vec<std::process::Child> = (0..20)
        .map(|_| {
            std::process::Command::new(BIN)
                .args([
                    "request",
                    "--connect",
                    &address,
                    "--timeout",
                    "30000",
                    "delay",
                    "2000",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("a caller")
        })
        .collect();
    // Every request reached the handler (the node prints each with --verbose) ...
    for i in 0..20 {
        srv.wait_for(&format!("request {i}"), |l| {
            l.starts_with("request delay from")
        });
    }
    // ... and none is answered yet: each waits 2 s in the handler.
    srv.signal("TERM");
    for caller in callers {
        let out = caller.wait_with_output().expect("the caller ends");
        assert!(
            out.status.success(),
            "a caller failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2000");
    }
    assert_eq!(srv.wait_exit().code(), Some(0), "{srv}");
}

#[test]
fn request_metadata_goes_out_and_echo_sends_it_back() {
    let srv = server(&[]);
    let run = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "-m",
        "auth=t0k3n",
        "--meta",
        "tenant=acme corp",
        "echo",
        r#""x""#,
    ]);
    assert_eq!(run.ok(), r#""x""#);
    assert!(run.stderr.contains("meta auth=t0k3n"), "{}", run.stderr);
    assert!(
        run.stderr.contains("meta tenant=acme corp"),
        "{}",
        run.stderr
    );
    let bad = zeronode(&[
        "request",
        "--connect",
        &srv.address,
        "-m",
        ":budget=1",
        "echo",
    ]);
    assert!(bad.failed().contains("metadata key"), "{}", bad.stderr);
}

/// `GET /metrics` from a `zeronode node --metrics`.
fn scrape(url: &str) -> String {
    use std::io::{Read, Write};
    let address = url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .expect("an http://HOST:PORT/metrics url");
    let mut stream = std::net::TcpStream::connect(address).expect("the metrics port");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    response
}

#[test]
fn node_serves_prometheus_metrics_after_traffic() {
    let mut srv = NodeProcess::start(&[
        "--id",
        "srv",
        "--bind",
        "tcp://127.0.0.1:0",
        "--metrics",
        "127.0.0.1:0",
    ]);
    let line = srv.next_line();
    let url = line
        .strip_prefix("metrics on ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    assert_eq!(srv.next_line(), "node srv ready");
    for _ in 0..3 {
        zeronode(&["request", "--connect", &srv.address, "echo", "1"]).ok();
    }
    zeronode(&["request", "--connect", &srv.address, "nothing-handles-this"]).failed();
    let handled =
        regex::Regex::new(r#"(?m)^zeronode_requests_handled_total\{[^}]*event="echo"[^}]*\} 3$"#)
            .unwrap();
    // The last answer and the counter race by a few microseconds: scrape until it shows
    // (bounded: 100 tries, 5 s).
    let mut text = String::new();
    for _ in 0..100 {
        text = scrape(&url);
        if handled.is_match(&text) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(handled.is_match(&text), "{text}");
    assert!(text.contains(r#"node="srv""#), "{text}");
    assert!(text.contains("zeronode_handler_seconds_bucket"), "{text}");
    // The three `zeronode request` commands joined and left.
    assert!(
        regex::Regex::new(r#"(?m)^zeronode_peers_joined_total\{node="srv"\} [4-9]$"#)
            .unwrap()
            .is_match(&text),
        "{text}"
    );
}

#[test]
fn a_node_following_a_name_joins_the_node_it_names() {
    // `localhost` through the system's resolver configuration (hosts file included): the
    // default path of `--discover`, with no name server of our own.
    let srv = server(&[]);
    let port = srv.address.rsplit(':').next().expect("a port").to_owned();
    let name = format!("localhost:{port}");
    let mut gateway = NodeProcess::start(&["--id", "gw", "--discover", &name]);
    assert_eq!(gateway.next_line(), format!("following {name}"));
    gateway.wait_for("the change", |l| {
        l.starts_with(&format!("discovered {name}: "))
            && l.contains(&format!("tcp://127.0.0.1:{port}"))
    });
    gateway.wait_for("the join", |l| l.starts_with("peer joined srv (upstream)"));
}

#[test]
fn dns_server_needs_discover() {
    let run = zeronode(&["node", "--dns-server", "127.0.0.1:53"]);
    assert!(run.failed().contains("--discover"), "{}", run.failed());
}
