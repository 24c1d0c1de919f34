//! The system events' golden vectors (`protocol/vectors/system_*.json`, described in
//! PROTOCOL.md), written with the node's own types (the hello, the forward header, the
//! route, the options) and the real envelope encoder:
//! `ZERONODE_WRITE_VECTORS=1 cargo test -p node --lib wire_vectors` rewrites them; without
//! the variable the test fails when a file differs from what the node writes now, and
//! checks that every system vector's payload reads back as the node's type. The protocol
//! crate's vector test decodes their envelopes like every other vector.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use protocol::{decode_value, encode_value, Envelope, Kind, Meta, MetaValue};
use serde_json::{json, Map, Value};

use crate::mesh::handshake::{Hello, BYE, DRAINING, HANDSHAKE, HEARTBEAT, OPTIONS, REJOIN};
use crate::mesh::peer::{NodeId, Scope, Ticket};
use crate::observation::describe::DESCRIBE;
use crate::options::{options, Options, Value as OptionValue};
use crate::routing::forward::{Action, Destination, Forward, FORWARD};
use crate::routing::relay::FORWARD_KEY;
use crate::serving::handler::{Route, ROUTE};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/vectors")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Metadata entries as the vectors list them (the protocol crate's vector test checks the
/// same form).
fn entries(raw: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some((&k, after)) = rest.split_first() {
        let k = usize::from(k);
        let key = String::from_utf8_lossy(&after[..k]).into_owned();
        let kind = after[k];
        let len = u32::from_be_bytes(after[k + 1..k + 5].try_into().expect("4 bytes")) as usize;
        let value = &after[k + 5..k + 5 + len];
        out.push(if kind == 0 {
            json!({"key": key, "kind": "text", "text": std::str::from_utf8(value).expect("text")})
        } else {
            json!({"key": key, "kind": "bytes", "hex": hex(value)})
        });
        rest = &after[k + 5 + len..];
    }
    out
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Request => "request",
        Kind::Reply => "reply",
        Kind::Error => "error",
        Kind::Tick => "tick",
        Kind::StreamItem => "stream_item",
        Kind::Credit => "credit",
        Kind::Cancel => "cancel",
    }
}

/// One system vector: the message, and its payload (and framework metadata) as JSON.
fn render(name: &str, description: &str, envelope: &Envelope, msgpack: bool) -> Value {
    let frames = envelope.encode();
    let flags = frames[0][3];
    let mut decoded = Map::new();
    decoded.insert("kind".into(), json!(kind_name(envelope.kind())));
    decoded.insert("id".into(), json!(envelope.id()));
    decoded.insert("event".into(), json!(envelope.event()));
    decoded.insert("flags".into(), json!(flags));
    decoded.insert("system".into(), json!(envelope.is_system()));
    decoded.insert("inline".into(), json!(flags & 0b10 != 0));
    decoded.insert("reply_streamed".into(), json!(false));
    decoded.insert("body_streamed".into(), json!(false));
    decoded.insert("end".into(), json!(false));
    decoded.insert("metadata_hex".into(), json!(hex(envelope.metadata())));
    decoded.insert(
        "metadata".into(),
        Value::Array(entries(envelope.metadata())),
    );
    let meta = Meta::parse(
        envelope.metadata().clone(),
        &protocol::MetaLimits::default(),
    )
    .expect("valid metadata");
    if let Some(budget) = meta.budget() {
        decoded.insert("budget_us".into(), json!(budget.as_micros() as u64));
    }
    decoded.insert("payload_len".into(), json!(envelope.payload().len()));
    decoded.insert("payload_hex".into(), json!(hex(envelope.payload())));
    if msgpack {
        let value: Value = decode_value(envelope.payload()).expect("MessagePack");
        decoded.insert("payload_msgpack".into(), value);
    }
    if envelope.kind() == Kind::Error {
        let value: Value = decode_value(envelope.payload()).expect("MessagePack");
        decoded.insert("error_reply".into(), value);
    }
    // The framework's metadata values that are MessagePack, read out for the reader.
    let mut framework = Map::new();
    for key in [FORWARD_KEY, ROUTE] {
        if let Some(value) = meta.get(key) {
            let value: Value = decode_value(value.as_bytes()).expect("MessagePack");
            framework.insert(key.into(), value);
        }
    }
    json!({
        "name": name,
        "description": description,
        "frames": frames.iter().map(|f| hex(f)).collect::<Vec<_>>(),
        "valid": true,
        "decoded": Value::Object(decoded),
        "metadata_msgpack": Value::Object(framework),
    })
}

fn hello(id: &str, router: bool, token: &str) -> Hello {
    Hello {
        id: NodeId::from(id),
        instance: "5f0c2a9e1b7d4c3a".into(),
        version: crate::mesh::handshake::PROTOCOL_VERSION,
        options: options([
            ("role", OptionValue::from("worker")),
            ("load", OptionValue::from(3)),
        ]),
        router,
        heartbeat_ms: 1000,
        max_payload: 16 * 1024 * 1024,
        token: Ticket(token.into()),
    }
}

fn budget_meta(ms: u64, extra: &[(&str, MetaValue<'_>)]) -> Bytes {
    let mut meta = Meta::new();
    let mut budget = [0u8; 8];
    budget.copy_from_slice(&(ms * 1000).to_be_bytes());
    meta.set(protocol::BUDGET, MetaValue::Bytes(&budget));
    for (key, value) in extra {
        meta.set(key, *value);
    }
    meta.as_bytes().clone()
}

fn forward(action: Action, to: Destination, visited: &[&str], hops_left: u8) -> Forward {
    Forward {
        id: 0x1122_3344_5566_7788,
        action,
        to,
        event: "echo".into(),
        remaining_ms: 4800,
        hops_left,
        origin: NodeId::from("caller"),
        visited: visited.iter().map(|v| NodeId::from(*v)).collect(),
        groups: None,
        skip: vec![],
        served: vec![],
    }
}

fn forward_envelope(id: u64, header: &Forward, payload: Bytes) -> Envelope {
    let header = encode_value(header).expect("encodable");
    let meta = budget_meta(5000, &[(FORWARD_KEY, MetaValue::Bytes(&header))]);
    Envelope::new(Kind::Request, id, FORWARD, meta, payload)
}

/// Every system vector.
fn cases() -> Vec<Value> {
    let hello_payload = |h: &Hello| encode_value(h).expect("encodable");
    let filter: crate::filter::FilterSpec =
        serde_json::from_value(json!({"role": "worker", "load": {"$lt": 5}})).expect("spec");
    let route = Route {
        origin: NodeId::from("caller"),
        via: vec![NodeId::from("router-a")],
    };
    let route_bytes = encode_value(&route).expect("encodable");
    let hi = encode_value("hello").expect("encodable");
    vec![
        render(
            "system_handshake_request",
            "A connecting node's hello (the first message on a connection): a system request.",
            &Envelope::new(
                Kind::Request,
                1,
                HANDSHAKE,
                budget_meta(3000, &[]),
                hello_payload(&hello("py-worker", false, "")),
            ),
            true,
        ),
        render(
            "system_handshake_reply",
            "The bound node's answer: its own hello, with the ticket it issues to this join.",
            &Envelope::new(
                Kind::Reply,
                1,
                "",
                Bytes::new(),
                hello_payload(&hello("rust-node", true, "9f86d081884c7d65")),
            ),
            true,
        ),
        render(
            "system_handshake_rejoin_request",
            "A reconnecting node's hello carries the ticket it was given before.",
            &Envelope::new(
                Kind::Request,
                2,
                HANDSHAKE,
                budget_meta(3000, &[]),
                hello_payload(&hello("py-worker", false, "9f86d081884c7d65")),
            ),
            true,
        ),
        render(
            "system_heartbeat",
            "A heartbeat: a system tick with no payload, sent both ways.",
            &Envelope::new(Kind::Tick, 3, HEARTBEAT, Bytes::new(), Bytes::new()),
            false,
        ),
        render(
            "system_options",
            "New options, to every joined peer: a system tick, the payload the options map.",
            &Envelope::new(
                Kind::Tick,
                4,
                OPTIONS,
                Bytes::new(),
                encode_value(&options([("role", "worker"), ("zone", "eu-1")])).expect("encodable"),
            ),
            true,
        ),
        render(
            "system_bye",
            "Goodbye: the sender is leaving now (a system tick, no payload).",
            &Envelope::new(Kind::Tick, 5, BYE, Bytes::new(), Bytes::new()),
            false,
        ),
        render(
            "system_draining_request",
            "The sender is closing: stop picking it by filter (a system request, no payload).",
            &Envelope::new(
                Kind::Request,
                6,
                DRAINING,
                budget_meta(2000, &[]),
                Bytes::new(),
            ),
            false,
        ),
        render(
            "system_rejoin",
            "A bound node that does not know the connection asks it to handshake again.",
            &Envelope::new(Kind::Tick, 7, REJOIN, Bytes::new(), Bytes::new()),
            false,
        ),
        render(
            "system_describe_request",
            "Ask a node to describe itself (a system request, no payload).",
            &Envelope::new(
                Kind::Request,
                8,
                DESCRIBE,
                budget_meta(5000, &[]),
                Bytes::new(),
            ),
            false,
        ),
        render(
            "system_forward_request_by_id",
            "A request for `echo` to node `worker-1`, sent to a router: the header in `:forward`.",
            &forward_envelope(
                9,
                &forward(
                    Action::Request,
                    Destination::Id(NodeId::from("worker-1")),
                    &[],
                    8,
                ),
                hi.clone(),
            ),
            true,
        ),
        render(
            "system_forward_request_by_filter",
            "A request to any node matching a filter, through a router.",
            &forward_envelope(
                10,
                &forward(
                    Action::Request,
                    Destination::Filter(filter.clone(), Scope::Both),
                    &[],
                    8,
                ),
                hi.clone(),
            ),
            true,
        ),
        render(
            "system_forward_tick_all_second_hop",
            "A tick to every match, passed on by router-a to the next router.",
            &forward_envelope(
                11,
                &forward(
                    Action::TickAll,
                    Destination::Filter(filter, Scope::Down),
                    &["router-a"],
                    7,
                ),
                hi.clone(),
            ),
            true,
        ),
        render(
            "system_forward_tick_by_id",
            "A tick to one node by id, through a router (answered with a count).",
            &forward_envelope(
                12,
                &forward(
                    Action::Tick,
                    Destination::Id(NodeId::from("worker-1")),
                    &[],
                    8,
                ),
                hi.clone(),
            ),
            true,
        ),
        render(
            "system_forward_count_reply",
            "A router's answer to a forwarded tick: how many nodes it reached.",
            &Envelope::new(
                Kind::Reply,
                12,
                "",
                Bytes::new(),
                encode_value(&2u64).expect("encodable"),
            ),
            true,
        ),
        render(
            "system_routed_request",
            "What the destination receives from the last router: the user's event, the route \
             in `:route`.",
            &Envelope::new(
                Kind::Request,
                40,
                "echo",
                budget_meta(4750, &[(ROUTE, MetaValue::Bytes(&route_bytes))]),
                hi,
            ),
            true,
        ),
    ]
}

#[test]
fn system_vectors_are_what_the_node_writes_and_read_as_its_types() {
    let writing = std::env::var_os("ZERONODE_WRITE_VECTORS").is_some();
    for case in cases() {
        let name = case["name"].as_str().expect("name").to_owned();
        let mut text = serde_json::to_string_pretty(&case).expect("JSON");
        text.push('\n');
        let path = dir().join(format!("{name}.json"));
        if writing {
            std::fs::write(&path, &text).expect("write");
        } else {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (ZERONODE_WRITE_VECTORS=1 writes it)",
                    path.display()
                )
            });
            assert_eq!(on_disk, text, "{name} is stale");
        }
        // Each payload reads back as the node's own type.
        let payload = hex_bytes(case["decoded"]["payload_hex"].as_str().expect("hex"));
        let event = case["decoded"]["event"].as_str().expect("event");
        if name.starts_with("system_handshake") {
            let hello: Hello = decode_value(&payload).expect("a hello");
            assert_eq!(hello.version, crate::mesh::handshake::PROTOCOL_VERSION);
        } else if event == OPTIONS {
            let _: Options = decode_value(&payload).expect("options");
        } else if event == FORWARD {
            let meta = hex_bytes(case["decoded"]["metadata_hex"].as_str().expect("hex"));
            let meta =
                Meta::parse(Bytes::from(meta), &protocol::MetaLimits::default()).expect("metadata");
            let header: Forward =
                decode_value(meta.get(FORWARD_KEY).expect(":forward").as_bytes()).expect("header");
            assert_eq!(header.event, "echo");
        } else if name == "system_routed_request" {
            let meta = hex_bytes(case["decoded"]["metadata_hex"].as_str().expect("hex"));
            let meta =
                Meta::parse(Bytes::from(meta), &protocol::MetaLimits::default()).expect("metadata");
            let route: Route =
                decode_value(meta.get(ROUTE).expect(":route").as_bytes()).expect("route");
            assert_eq!(route.via, vec![NodeId::from("router-a")]);
        }
    }
}

fn hex_bytes(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}
