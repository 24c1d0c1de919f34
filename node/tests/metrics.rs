//! Per-request hooks and metrics over loopback: the counts a Prometheus recorder renders
//! after some traffic, the hooks' view of the same traffic, and event labels bounded
//! against a peer that makes up names.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use node::{HandlerError, Outcome, Request, Sink, MAX_EVENT_LABELS};
use regex::Regex;
use support::*;

/// One rendered sample: its name and labels, and its value.
type Samples = Vec<(String, BTreeMap<String, String>, f64)>;

fn parse(text: &str) -> Samples {
    let line = Regex::new(r#"^([a-z_]+)(?:\{(.*)\})? ([0-9.e+-]+|NaN)$"#).unwrap();
    let label = Regex::new(r#"([a-z_]+)="((?:[^"\\]|\\.)*)""#).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let caps = line.captures(l)?;
            let labels = caps.get(2).map_or_else(BTreeMap::new, |m| {
                label
                    .captures_iter(m.as_str())
                    .map(|c| (c[1].to_string(), c[2].to_string()))
                    .collect()
            });
            Some((
                caps[1].to_string(),
                labels,
                caps[3].parse().unwrap_or(f64::NAN),
            ))
        })
        .collect()
}

/// The value of `name` with (at least) these labels, if rendered.
fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

async fn until(handle: &PrometheusHandle, what: &str, ok: impl Fn(&Samples) -> bool) -> Samples {
    within(what, async {
        loop {
            let samples = parse(&handle.render());
            if ok(&samples) {
                return samples;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_shows_in_the_metrics_and_the_hooks() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    // Global: the nodes record from the runtime's worker threads.
    metrics::set_global_recorder(recorder).unwrap();

    let server = builder("server")
        .metrics(true)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    server.on_request("echo", |req: Request| async move { req.decode::<u32>() });
    server.on_request("fail", |_req: Request| async move {
        Err::<(), _>(HandlerError::new("NOPE", "on purpose"))
    });
    server.on_request(
        Regex::new("^made-up-").unwrap(),
        |_req: Request| async move { Ok::<_, HandlerError>(()) },
    );
    server.on_tick("note", |_req: Request| async move {});
    server.on_stream("count", |req: Request, mut sink: Sink| async move {
        for i in 0..req.decode::<u32>()? {
            sink.send_raw(Bytes::from(vec![0u8; i as usize + 1]))
                .await?;
        }
        Ok::<_, HandlerError>(())
    });
    // Two items, then a wait its caller does not sit out: it drops the stream.
    server.on_stream("endless", |_req: Request, mut sink: Sink| async move {
        sink.send_raw(Bytes::from_static(b"ab")).await?;
        sink.send_raw(Bytes::from_static(b"cd")).await?;
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<_, HandlerError>(())
    });
    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&handled);
    server.hooks().on_handled(move |h| {
        seen.lock()
            .unwrap()
            .push((h.event.to_owned(), h.from.to_string(), h.tick, h.outcome))
    });
    let client = builder("client").metrics(true).build().await.unwrap();
    let called = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&called);
    client
        .hooks()
        .on_called(move |c| seen.lock().unwrap().push((c.event.to_owned(), c.outcome)));
    client.connect(&address(&server)).await.unwrap();

    for i in 0..5u32 {
        let back: u32 = client.request("server", "echo", &i).await.unwrap();
        assert_eq!(back, i);
    }
    for _ in 0..2 {
        assert!(client
            .request::<_, ()>("server", "fail", &())
            .await
            .is_err());
    }
    for _ in 0..3 {
        client.tick("server", "note", &()).await.unwrap();
    }
    // One stream of 4 items, 1 + 2 + 3 + 4 bytes.
    let items: Vec<_> = client
        .call("server", "count")
        .raw()
        .stream(protocol::encode_value(&4u32).unwrap())
        .collect()
        .await;
    assert_eq!(items.len(), 4);

    let samples = until(&handle, "the counts", |s| {
        value(
            s,
            "zeronode_ticks_handled_total",
            &[("node", "server"), ("event", "note")],
        ) == Some(3.0)
            && value(s, "zeronode_peers", &[("node", "server")]) == Some(1.0)
    })
    .await;
    let server_count = |name: &str, event: &str, outcome: &str| {
        value(
            &samples,
            name,
            &[("node", "server"), ("event", event), ("outcome", outcome)],
        )
    };
    assert_eq!(
        server_count("zeronode_requests_handled_total", "echo", "ok"),
        Some(5.0)
    );
    assert_eq!(
        server_count("zeronode_requests_handled_total", "fail", "error"),
        Some(2.0)
    );
    assert_eq!(
        server_count("zeronode_ticks_handled_total", "note", "ok"),
        Some(3.0)
    );
    let client_count = |name: &str, event: &str, outcome: &str| {
        value(
            &samples,
            name,
            &[("node", "client"), ("event", event), ("outcome", outcome)],
        )
    };
    assert_eq!(
        client_count("zeronode_requests_sent_total", "echo", "ok"),
        Some(5.0)
    );
    assert_eq!(
        client_count("zeronode_requests_sent_total", "fail", "error"),
        Some(2.0)
    );
    assert_eq!(
        client_count("zeronode_ticks_sent_total", "note", "ok"),
        Some(3.0)
    );
    assert_eq!(
        value(
            &samples,
            "zeronode_handler_seconds_count",
            &[("node", "server"), ("event", "echo")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &samples,
            "zeronode_request_seconds_count",
            &[("node", "client"), ("event", "fail")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &samples,
            "zeronode_peers_joined_total",
            &[("node", "server")]
        ),
        Some(1.0)
    );

    // The stream, once on each side: its items, bytes and duration.
    let samples = until(&handle, "the stream's end on both sides", |s| {
        ["server", "client"].iter().all(|node| {
            value(
                s,
                "zeronode_stream_seconds_count",
                &[("node", node), ("event", "count")],
            ) == Some(1.0)
        })
    })
    .await;
    for (node, side) in [("server", "served"), ("client", "read")] {
        let labels = [("node", node), ("event", "count"), ("side", side)];
        assert_eq!(
            value(&samples, "zeronode_stream_items_sum", &labels),
            Some(4.0),
            "{side}"
        );
        assert_eq!(
            value(&samples, "zeronode_stream_bytes_sum", &labels),
            Some(10.0),
            "{side}"
        );
    }

    // A stream its caller dropped (which stops the handler mid-wait) is recorded too, on
    // both sides.
    let mut endless = client.call("server", "endless").raw().stream(Bytes::new());
    for _ in 0..2 {
        endless.next().await.unwrap().unwrap();
    }
    drop(endless);
    let served = [("node", "server"), ("event", "endless"), ("side", "served")];
    let read = [("node", "client"), ("event", "endless"), ("side", "read")];
    let samples = until(&handle, "the dropped stream's end", |s| {
        value(s, "zeronode_stream_seconds_count", &served) == Some(1.0)
    })
    .await;
    for labels in [served, read] {
        assert_eq!(
            value(&samples, "zeronode_stream_bytes_sum", &labels),
            Some(4.0),
            "{labels:?}"
        );
    }

    // The hooks saw the same traffic.
    let handled = handled.lock().unwrap().clone();
    let count = |event: &str, tick: bool, outcome: Outcome| {
        handled
            .iter()
            .filter(|(e, from, t, o)| e == event && from == "client" && *t == tick && *o == outcome)
            .count()
    };
    assert_eq!(count("echo", false, Outcome::Ok), 5);
    assert_eq!(count("fail", false, Outcome::Error), 2);
    assert_eq!(count("note", true, Outcome::Ok), 3);
    let called = called.lock().unwrap().clone();
    assert_eq!(
        called
            .iter()
            .filter(|(e, o)| e == "echo" && *o == Outcome::Ok)
            .count(),
        5
    );

    // A refused connection: a plaintext node at a CURVE node.
    let vault = builder("vault")
        .metrics(true)
        .curve(node::KeyPair::generate().unwrap())
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let plain = builder("plain").build().await.unwrap();
    assert!(plain.connect(&address(&vault)).await.is_err());
    until(&handle, "the refusal", |s| {
        value(
            s,
            "zeronode_connections_refused_total",
            &[("node", "vault")],
        )
        .is_some_and(|v| v >= 1.0)
    })
    .await;

    // A peer that makes up event names cannot grow the series: past the bound they are
    // counted as `_other`.
    let extra = 40;
    for i in 0..MAX_EVENT_LABELS + extra {
        client
            .request::<_, ()>("server", &format!("made-up-{i}"), &())
            .await
            .unwrap();
    }
    let samples = until(&handle, "the made-up events", |s| {
        value(
            s,
            "zeronode_requests_handled_total",
            &[("node", "server"), ("event", "_other"), ("outcome", "ok")],
        )
        .is_some()
    })
    .await;
    let labels: std::collections::BTreeSet<&str> = samples
        .iter()
        .filter(|(n, l, _)| {
            n == "zeronode_requests_handled_total"
                && l.get("node").map(String::as_str) == Some("server")
        })
        .filter_map(|(_, l, _)| l.get("event").map(String::as_str))
        .collect();
    assert!(labels.len() <= MAX_EVENT_LABELS + 1, "{}", labels.len());
    // echo, fail, note, count and endless took five of the labels first (note is a
    // tick's).
    let other = value(
        &samples,
        "zeronode_requests_handled_total",
        &[("node", "server"), ("event", "_other"), ("outcome", "ok")],
    )
    .unwrap();
    assert_eq!(other as usize, extra + 5);
}
