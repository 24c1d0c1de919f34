//! `zeronode ls`, `info` and `top` (plain lines) against real `zeronode node` children: a
//! router with a worker behind it, reached from a short-lived command joined to the router.

mod support;

use support::{zeronode, NodeProcess};

/// A router `hub`, and a worker `w1` (`role=worker`) joined to it.
fn mesh() -> (NodeProcess, NodeProcess) {
    let mut hub = NodeProcess::start(&["--id", "hub", "--router", "--bind", "tcp://127.0.0.1:0"]);
    assert_eq!(hub.next_line(), "node hub ready");
    let mut worker =
        NodeProcess::start(&["--id", "w1", "--connect", &hub.address, "-o", "role=worker"]);
    worker.wait_for("w1 ready", |l| l == "node w1 ready");
    hub.wait_for("w1 joining", |l| l.starts_with("peer joined w1"));
    (hub, worker)
}

#[test]
fn ls_lists_the_router_and_the_node_behind_it() {
    let (hub, _worker) = mesh();
    let run = zeronode(&["ls", "--connect", &hub.address]);
    let lines: Vec<&str> = run.ok().lines().collect();
    assert!(
        lines[0].starts_with("ID   KIND    ENGINE  CURVE  PEERS"),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    let hub_line: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        hub_line[..5],
        ["hub", "router", "native", "off", "1"],
        "{lines:?}"
    );
    assert_eq!(hub_line.last(), Some(&hub.address.as_str()));
    let w1: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(w1[..5], ["w1", "node", "native", "off", "1"], "{lines:?}");
    assert!(w1[6].contains("echo"), "{lines:?}");

    let run = zeronode(&["ls", "--connect", &hub.address, "--json"]);
    let nodes: Vec<serde_json::Value> = run
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1]["id"], "w1");
    assert_eq!(nodes[1]["options"]["role"], "worker");
    assert_eq!(nodes[1]["peers"][0]["id"], "hub");
}

#[test]
fn info_describes_a_node_through_the_router_with_its_events() {
    let (hub, _worker) = mesh();
    for _ in 0..3 {
        zeronode(&[
            "request",
            "--connect",
            &hub.address,
            "--to",
            "w1",
            "echo",
            "1",
        ])
        .ok();
    }
    let run = zeronode(&["info", "--connect", &hub.address, "w1"]);
    let text = run.ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("node w1 (zeronode "), "{text}");
    assert!(lines[0].ends_with("native engine, CURVE off)"), "{text}");
    assert!(lines.contains(&"options   role=worker"), "{text}");
    // The built-in handlers, by what they answer with.
    assert!(lines.contains(&"streams   count"), "{text}");
    assert!(lines.contains(&"uploads   -"), "{text}");
    let echo: Vec<&str> = lines
        .iter()
        .find(|l| l.trim_start().starts_with("echo "))
        .unwrap_or_else(|| panic!("no echo row: {text}"))
        .split_whitespace()
        .collect();
    // EVENT OK ERROR REFUSED TIMEOUT CANCELLED TICKS IN-FLIGHT P50 P90 P99 MAX
    assert_eq!(
        echo[..8],
        ["echo", "3", "0", "0", "0", "0", "0", "0"],
        "{text}"
    );

    let run = zeronode(&["info", "--connect", &hub.address, "w1", "--json"]);
    let described: serde_json::Value = serde_json::from_str(run.ok()).expect("JSON");
    assert_eq!(described["id"], "w1");
    assert_eq!(described["router"], false);
    let echo = described["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "echo")
        .expect("echo is described");
    assert_eq!(echo["requests"]["ok"], 3);
    assert_eq!(echo["latency"]["count"], 3);

    // Without an id: the node at --connect, a router that says what it forwarded.
    let run = zeronode(&["info", "--connect", &hub.address, "--json"]);
    let router: serde_json::Value = serde_json::from_str(run.ok()).expect("JSON");
    assert_eq!(router["id"], "hub");
    assert!(
        router["routing"]["forwarded"].as_u64().unwrap() >= 4,
        "{router}"
    );
    // ... and to where: all of it to w1, the one node behind it.
    let hops = router["routing"]["hops"].as_array().expect("hops");
    assert_eq!(hops.len(), 1, "{router}");
    assert_eq!(hops[0]["to"], "w1");
    assert!(hops[0]["forwarded"].as_u64().unwrap() >= 4, "{router}");
    let text = zeronode(&["info", "--connect", &hub.address])
        .ok()
        .to_owned();
    assert!(
        text.lines().any(|l| l.starts_with("  to      w1 ")),
        "{text}"
    );
}

#[test]
fn info_on_an_unknown_id_is_one_error_line() {
    let (hub, _worker) = mesh();
    let run = zeronode(&["info", "--connect", &hub.address, "nobody"]);
    assert!(run.failed().contains("nobody"), "{run:?}");
}

#[test]
fn top_prints_plain_rows_when_not_on_a_terminal() {
    let (hub, _worker) = mesh();
    let run = zeronode(&[
        "top",
        "--connect",
        &hub.address,
        "--interval",
        "200",
        "--count",
        "2",
    ]);
    let text = run.ok();
    let blocks: Vec<&str> = text.split("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{text}");
    for block in blocks {
        let lines: Vec<&str> = block.lines().collect();
        let header: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(
            header,
            ["ID", "REQ/S", "ERR/S", "IN", "FLIGHT", "P50", "P99", "PEERS"],
            "{text}"
        );
        assert!(
            lines.iter().any(|l| l.starts_with("hub (router)")),
            "{text}"
        );
        assert!(lines.iter().any(|l| l.starts_with("w1 ")), "{text}");
    }
}

#[test]
fn a_node_started_with_describe_off_answers_info_with_an_error() {
    let mut quiet = NodeProcess::start(&[
        "--id",
        "quiet",
        "--bind",
        "tcp://127.0.0.1:0",
        "--describe",
        "off",
    ]);
    assert_eq!(quiet.next_line(), "node quiet ready");
    let run = zeronode(&["info", "--connect", &quiet.address]);
    assert!(run.failed().contains("does not describe itself"), "{run:?}");
    // Still a node: its requests are answered.
    let run = zeronode(&["request", "--connect", &quiet.address, "ping"]);
    assert_eq!(run.ok().trim(), "\"pong\"");
}

#[test]
fn describe_allowed_without_keys_is_a_usage_error() {
    let run = zeronode(&["node", "--describe", "allowed"]);
    assert!(run.failed().contains("--describe allowed needs"), "{run:?}");
}
