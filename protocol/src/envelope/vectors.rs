//! The golden test vectors (`protocol/vectors/*.json`, described in PROTOCOL.md): every file
//! is decoded with the real codec and checked against its decoded form (or the error it
//! must give), and every valid one is encoded back to the same bytes.
//!
//! The envelope-level vectors are this file's [`cases`], written by the real encoder:
//! `ZERONODE_WRITE_VECTORS=1 cargo test -p protocol --lib vectors` rewrites them, and
//! without the variable the test fails when a file differs from what the encoder writes
//! now (a stale vector). The system events' vectors are written the same way by the node
//! crate (`node/src/wire_vectors.rs`), which checks their payloads with its own types; this
//! test decodes their envelopes like every other file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::*;
use crate::credit::{encode_grant, Credit, Opening};
use crate::error::{Limit, RemoteError};
use crate::meta::{Meta, MetaLimits, MetaValue};

/// Where the vectors live.
fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("vector hex"))
        .collect()
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

/// The metadata entries of a section, as the vectors list them (framework keys included).
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

/// The decoded form of a valid message, as the vectors write it. `msgpack`: the payload is
/// MessagePack and its value is listed (as JSON).
fn decoded(envelope: &Envelope, frames: &[Bytes], msgpack: bool) -> Value {
    let flags = frames[0][3];
    let mut out = Map::new();
    out.insert("kind".into(), json!(kind_name(envelope.kind())));
    out.insert("id".into(), json!(envelope.id()));
    out.insert("event".into(), json!(envelope.event()));
    out.insert("flags".into(), json!(flags));
    out.insert("system".into(), json!(envelope.is_system()));
    out.insert("inline".into(), json!(flags & FLAG_INLINE != 0));
    out.insert("reply_streamed".into(), json!(envelope.reply_streamed()));
    out.insert("body_streamed".into(), json!(envelope.body_streamed()));
    out.insert("end".into(), json!(envelope.is_end()));
    out.insert("metadata_hex".into(), json!(hex(envelope.metadata())));
    let meta = Meta::parse(envelope.metadata().clone(), &MetaLimits::default());
    match &meta {
        Ok(meta) => {
            out.insert(
                "metadata".into(),
                Value::Array(entries(envelope.metadata())),
            );
            if let Some(budget) = meta.budget() {
                out.insert("budget_us".into(), json!(budget.as_micros() as u64));
            }
        }
        Err(e) => {
            out.insert("metadata_error".into(), meta_error(e));
        }
    }
    out.insert("payload_len".into(), json!(envelope.payload().len()));
    out.insert("payload_hex".into(), json!(hex(envelope.payload())));
    if msgpack {
        let value: Value = decode_value(envelope.payload()).expect("a MessagePack payload");
        out.insert("payload_msgpack".into(), value);
    }
    match envelope.kind() {
        Kind::Error => {
            let value: Value = decode_value(envelope.payload()).expect("an error reply map");
            out.insert("error_reply".into(), value);
        }
        Kind::Credit => {
            out.insert("credit".into(), credit(envelope.payload()));
        }
        _ => {}
    }
    Value::Object(out)
}

/// A credit payload as the vectors write it: the window and grant of a first one, the grant
/// of a later one, or the violation a receiver of it as a first grant reports.
fn credit(payload: &[u8]) -> Value {
    let mut credit = Credit::new();
    match credit.receive(payload) {
        Ok(()) if payload.len() == 8 => json!({
            "window": credit.window(),
            "granted": credit.available(),
        }),
        Ok(()) => json!({ "granted": credit.available() }),
        Err(violation) => json!({ "violation": format!("{violation:?}") }),
    }
}

fn meta_error(e: &crate::meta::MetaError) -> Value {
    match e {
        crate::meta::MetaError::TooLarge {
            entries,
            bytes,
            max_entries,
            max_bytes,
        } => json!({"error": "TooLarge", "entries": entries, "bytes": bytes,
                    "max_entries": max_entries, "max_bytes": max_bytes}),
        crate::meta::MetaError::InvalidKey(key) => json!({"error": "InvalidKey", "key": key}),
        crate::meta::MetaError::Malformed(why) => json!({"error": "Malformed", "why": why}),
    }
}

/// The error a malformed message gives, as the vectors write it.
fn decode_error(e: &DecodeError) -> Value {
    match e {
        DecodeError::NoFrames => json!({"error": "NoFrames"}),
        DecodeError::TooManyFrames(n) => json!({"error": "TooManyFrames", "frames": n}),
        DecodeError::Truncated { needed, got } => {
            json!({"error": "Truncated", "needed": needed, "got": got})
        }
        DecodeError::BadMagic(b) => json!({"error": "BadMagic", "byte": b}),
        DecodeError::UnsupportedVersion(v) => json!({"error": "UnsupportedVersion", "version": v}),
        DecodeError::UnknownKind(k) => json!({"error": "UnknownKind", "kind": k}),
        DecodeError::UnknownFlags(f) => json!({"error": "UnknownFlags", "flags": f}),
        DecodeError::LengthMismatch {
            declared,
            available,
        } => json!({"error": "LengthMismatch", "declared": declared, "available": available}),
        DecodeError::InvalidUtf8 => json!({"error": "InvalidUtf8"}),
        DecodeError::SystemFlagMismatch => json!({"error": "SystemFlagMismatch"}),
        DecodeError::TooLarge { size, max } => {
            json!({"error": "TooLarge", "size": size, "max": max})
        }
    }
}

/// One vector to write.
struct Case {
    name: String,
    description: String,
    frames: Vec<Bytes>,
    /// For a valid message: whether its payload is MessagePack.
    msgpack: bool,
    /// The receiver's payload limit the vector is decoded with (`None`: no limit).
    max_payload: Option<usize>,
}

/// A message laid out by the encoder the conversation sends with (`Encoded`).
fn wire(
    kind: Kind,
    id: u64,
    event: &str,
    budget: Option<Duration>,
    metadata: &[u8],
    payload: &[u8],
    stream_flags: u8,
) -> Vec<Bytes> {
    let mut encoded = Encoded::new(kind, id, event, metadata, payload).with_flags(stream_flags);
    if let Some(budget) = budget {
        encoded = encoded.with_budget(budget);
    }
    let pieces = encoded.pieces();
    pieces
        .frames()
        .as_slice()
        .iter()
        .map(|frame| Bytes::from(frame.concat()))
        .collect()
}

fn mp<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    encode_value(value).expect("encodable").to_vec()
}

fn valid(name: &str, description: &str, frames: Vec<Bytes>, msgpack: bool) -> Case {
    Case {
        name: name.into(),
        description: description.into(),
        frames,
        msgpack,
        max_payload: None,
    }
}

fn invalid(name: &str, description: &str, frames: Vec<Vec<u8>>) -> Case {
    Case {
        name: name.into(),
        description: description.into(),
        frames: frames.into_iter().map(Bytes::from).collect(),
        msgpack: false,
        max_payload: None,
    }
}

fn error_case(name: &str, description: &str, payload: Vec<u8>) -> Case {
    valid(
        name,
        description,
        wire(Kind::Error, 7, "", None, &[], &payload, 0),
        false,
    )
}

fn meta(entries: &[(&str, MetaValue<'_>)]) -> Vec<u8> {
    let mut meta = Meta::new();
    for (key, value) in entries {
        meta.set(key, *value);
    }
    meta.as_bytes().to_vec()
}

/// Every envelope-level vector.
fn cases() -> Vec<Case> {
    let budget = Some(Duration::from_millis(5000));
    let hello = mp("hello");
    let mut cases =
        vec![
        valid(
            "request_inline",
            "A request for `echo` with a 5 s budget and the MessagePack string \"hello\" inline.",
            wire(Kind::Request, 1, "echo", budget, &[], &hello, 0),
            true,
        ),
        valid(
            "request_empty_payload",
            "A request with no payload: one frame, the inline flag clear.",
            wire(Kind::Request, 2, "ping", budget, &[], &[], 0),
            false,
        ),
        valid(
            "request_no_budget",
            "A request without a budget entry (the receiver applies no deadline of the caller's).",
            wire(Kind::Request, 3, "echo", None, &[], &hello, 0),
            true,
        ),
        valid(
            "request_metadata",
            "A request whose metadata holds the budget first, then a text and a bytes entry.",
            wire(
                Kind::Request,
                4,
                "echo",
                budget,
                &meta(&[
                    ("tenant", MetaValue::Text("acme")),
                    ("blob", MetaValue::Bytes(&[1, 2, 3])),
                ]),
                &hello,
                0,
            ),
            true,
        ),
        valid(
            "request_inline_max",
            "A payload of exactly 4096 bytes (INLINE_MAX) still rides inline.",
            wire(Kind::Request, 5, "blob", budget, &[], &pattern(INLINE_MAX), 0),
            false,
        ),
        valid(
            "request_two_frames",
            "A payload of 4097 bytes travels as a second frame; the inline flag is clear.",
            wire(Kind::Request, 6, "blob", budget, &[], &pattern(INLINE_MAX + 1), 0),
            false,
        ),
        valid(
            "request_long_id",
            "The id is a u64, big-endian: the largest one.",
            wire(Kind::Request, u64::MAX, "echo", budget, &[], &hello, 0),
            true,
        ),
        valid(
            "request_utf8_event",
            "Event names are UTF-8 (length in bytes).",
            wire(Kind::Request, 8, "größe/✓", budget, &[], &hello, 0),
            true,
        ),
        valid(
            "reply_inline",
            "A reply to request 1: no event name, the payload inline.",
            wire(Kind::Reply, 1, "", None, &[], &hello, 0),
            true,
        ),
        valid(
            "reply_empty",
            "A reply with no payload (the answer to `_system:draining`, for one).",
            wire(Kind::Reply, 2, "", None, &[], &[], 0),
            false,
        ),
        valid(
            "reply_metadata",
            "A reply carrying metadata back to its caller.",
            wire(
                Kind::Reply,
                4,
                "",
                None,
                &meta(&[("tenant", MetaValue::Text("acme"))]),
                &hello,
                0,
            ),
            true,
        ),
        valid(
            "reply_two_frames",
            "A large reply: the payload in its own frame.",
            wire(Kind::Reply, 6, "", None, &[], &pattern(10_000), 0),
            false,
        ),
        valid(
            "tick_inline",
            "A tick (one-way): no budget, no answer.",
            wire(Kind::Tick, 9, "log", None, &[], &mp("a line"), 0),
            true,
        ),
        valid(
            "tick_empty",
            "A tick with no payload.",
            wire(Kind::Tick, 10, "poke", None, &[], &[], 0),
            false,
        ),
        valid(
            "tick_metadata",
            "A tick with user metadata.",
            wire(
                Kind::Tick,
                11,
                "log",
                None,
                &meta(&[("level", MetaValue::Text("info"))]),
                &mp("a line"),
                0,
            ),
            true,
        ),
        valid(
            "request_reply_streamed",
            "A request whose caller wants its reply as a stream of items (flag bit 2).",
            wire(
                Kind::Request,
                12,
                "count",
                budget,
                &[],
                &mp(&json!({"n": 3})),
                FLAG_REPLY_STREAMED,
            ),
            true,
        ),
        valid(
            "request_body_streamed",
            "A request whose body follows as stream items (flag bit 3): an upload.",
            wire(
                Kind::Request,
                13,
                "upload",
                budget,
                &[],
                &mp("file.bin"),
                FLAG_BODY_STREAMED,
            ),
            true,
        ),
        valid(
            "request_both_streamed",
            "A request streamed both ways (bits 2 and 3).",
            wire(
                Kind::Request,
                14,
                "chat",
                budget,
                &[],
                &[],
                FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED,
            ),
            false,
        ),
        valid(
            "stream_item_reply",
            "One item of request 12's streamed reply (callee to caller; bit 3 clear).",
            wire(Kind::StreamItem, 12, "", None, &[], &mp(&1), 0),
            true,
        ),
        valid(
            "stream_item_reply_large",
            "A large item of a streamed reply, in its own frame.",
            wire(Kind::StreamItem, 12, "", None, &[], &pattern(65_536), 0),
            false,
        ),
        valid(
            "stream_item_body",
            "One item of request 13's body (caller to callee; bit 3 set).",
            wire(
                Kind::StreamItem,
                13,
                "",
                None,
                &[],
                &pattern(16),
                FLAG_BODY_STREAMED,
            ),
            false,
        ),
        valid(
            "stream_item_body_empty",
            "An empty item of a body (not the end: bit 4 clear): takes one credit.",
            wire(Kind::StreamItem, 13, "", None, &[], &[], FLAG_BODY_STREAMED),
            false,
        ),
        valid(
            "stream_end_body",
            "The end of request 13's body (bits 3 and 4): no payload, takes no credit.",
            wire(
                Kind::StreamItem,
                13,
                "",
                None,
                &[],
                &[],
                FLAG_BODY_STREAMED | FLAG_END,
            ),
            false,
        ),
        valid(
            "credit_open_reply",
            "The caller's first credit for request 12's reply: window 1024, 32 items granted.",
            wire(
                Kind::Credit,
                12,
                "",
                None,
                &[],
                &Opening {
                    window: 1024,
                    granted: 32,
                }
                .payload(),
                0,
            ),
            false,
        ),
        valid(
            "credit_grant_reply",
            "A later grant of 16 items for request 12's reply.",
            wire(Kind::Credit, 12, "", None, &[], &encode_grant(16), 0),
            false,
        ),
        valid(
            "credit_open_body",
            "The callee's first credit for request 13's body (bit 3): window 1024, 32 granted.",
            wire(
                Kind::Credit,
                13,
                "",
                None,
                &[],
                &Opening {
                    window: 1024,
                    granted: 32,
                }
                .payload(),
                FLAG_BODY_STREAMED,
            ),
            false,
        ),
        valid(
            "credit_grant_body",
            "A later grant of 32 items for request 13's body (bit 3).",
            wire(
                Kind::Credit,
                13,
                "",
                None,
                &[],
                &encode_grant(32),
                FLAG_BODY_STREAMED,
            ),
            false,
        ),
        valid(
            "credit_bad_length",
            "A credit of 3 bytes decodes as an envelope; its stream ends with a violation.",
            wire(Kind::Credit, 12, "", None, &[], &[0, 0, 1], 0),
            false,
        ),
        valid(
            "credit_zero_window",
            "A first credit stating a window of 0: a violation (BadWindow).",
            wire(
                Kind::Credit,
                12,
                "",
                None,
                &[],
                &Opening {
                    window: 0,
                    granted: 0,
                }
                .payload(),
                0,
            ),
            false,
        ),
        valid(
            "cancel",
            "The caller gave up on request 12: its handler sees the stream cancelled.",
            wire(Kind::Cancel, 12, "", None, &[], &[], 0),
            false,
        ),
        valid(
            "metadata_malformed_kind",
            "The envelope is valid; its metadata entry has value kind 2: the receiver refuses \
             the metadata (a request: BAD_METADATA).",
            wire(
                Kind::Request,
                15,
                "echo",
                None,
                &[3, b'a', b'b', b'c', 2, 0, 0, 0, 0],
                &hello,
                0,
            ),
            true,
        ),
        valid(
            "metadata_truncated_value",
            "A metadata entry declaring 9 value bytes with 2 there.",
            wire(
                Kind::Request,
                16,
                "echo",
                None,
                &[1, b'k', 0, 0, 0, 0, 9, b'h', b'i'],
                &hello,
                0,
            ),
            true,
        ),
        valid(
            "metadata_empty_key",
            "A metadata entry with a key of length 0.",
            wire(
                Kind::Request,
                17,
                "echo",
                None,
                &[0, 0, 0, 0, 0, 0],
                &hello,
                0,
            ),
            true,
        ),
        valid(
            "metadata_too_many_entries",
            "65 user entries: over the default limit of 64 (BAD_METADATA with limit Metadata).",
            wire(
                Kind::Request,
                18,
                "echo",
                budget,
                &many_entries(65),
                &hello,
                0,
            ),
            true,
        ),
    ];

    // Error replies: one per code of the registry, with the fields it carries.
    let ms = Duration::from_millis;
    let errors: Vec<(&str, &str, RemoteError)> = vec![
        (
            "handler_error",
            "A handler's own error: not system.",
            err("HANDLER_ERROR", "boom", false),
        ),
        (
            "handler_code_not_found",
            "A handler's well-known code.",
            err("NOT_FOUND", "no such key", false),
        ),
        (
            "handler_custom_code",
            "A handler's own code string.",
            err("E_QUOTA", "over quota", false),
        ),
        (
            "no_handler",
            "Nothing handles the event.",
            err("NO_HANDLER", "no handler for \"nope\"", true),
        ),
        (
            "no_handler_at_hop",
            "A router's destination has no handler: the router names it.",
            err("NO_HANDLER", "no handler for \"nope\"", true)
                .with_peer("worker-1")
                .with_hop("router-a"),
        ),
        (
            "handler_panicked",
            "The handler panicked (the framework caught it).",
            err("HANDLER_PANICKED", "handler panicked", true),
        ),
        (
            "shutting_down",
            "The receiver is closing.",
            err(
                "SHUTTING_DOWN",
                "the node is closing and takes no new requests",
                true,
            ),
        ),
        (
            "payload_too_large",
            "A payload over the receiver's limit, its numbers as data.",
            err(
                "PAYLOAD_TOO_LARGE",
                "payload of 2000000 bytes exceeds 1048576",
                true,
            )
            .with_limit(Limit::Payload {
                size: 2_000_000,
                max: 1_048_576,
            }),
        ),
        (
            "too_many_streams",
            "A streamed request over the receiver's open streams.",
            err("TOO_MANY_STREAMS", "1024 streams open", true)
                .with_limit(Limit::Streams { max: 1024 }),
        ),
        (
            "not_streamed",
            "A streaming handler called without a stream, or the reverse.",
            err("NOT_STREAMED", "\"count\" streams its reply", true),
        ),
        (
            "busy",
            "The receiver's handlers are at their bound (this caller's share).",
            err("BUSY", "handlers at their limit", true).with_limit(Limit::Handlers {
                max: 64,
                per_peer: true,
            }),
        ),
        (
            "cancelled",
            "A handler stopped because the node's close grace ran out.",
            err("CANCELLED", "the node closed", true),
        ),
        (
            "deadline_exceeded",
            "The request's budget ran out at the receiver.",
            err("DEADLINE_EXCEEDED", "deadline passed", true).with_timeout(ms(250)),
        ),
        (
            "bad_metadata",
            "Metadata over the receiver's limits, the numbers as data.",
            err("BAD_METADATA", "metadata too large", true).with_limit(Limit::Metadata {
                entries: 65,
                bytes: 650,
                max_entries: 64,
                max_bytes: 16384,
            }),
        ),
        (
            "duplicate_id",
            "A handshake claiming an id held by another node.",
            err("DUPLICATE_ID", "worker-1", true),
        ),
        (
            "version_mismatch",
            "A handshake of another node protocol version (message: ours).",
            err("VERSION_MISMATCH", "1", true),
        ),
        (
            "not_joined",
            "A message from a connection that has not joined.",
            err("NOT_JOINED", "handshake first", true),
        ),
        (
            "not_authorized",
            "A CURVE key not allowed for the id.",
            err(
                "NOT_AUTHORIZED",
                "key rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7",
                true,
            ),
        ),
        (
            "bad_handshake",
            "A handshake payload that does not decode.",
            err("BAD_HANDSHAKE", "missing field `id`", true),
        ),
        (
            "already_joined",
            "A connection that joined one id claims another.",
            err("ALREADY_JOINED", "worker-2", true),
        ),
        (
            "bad_forward",
            "A forward whose header is missing or does not decode.",
            err("BAD_FORWARD", "no forward header", true),
        ),
        (
            "peer_left",
            "The node a router delivered to left before answering.",
            err("PEER_LEFT", "the node left before answering", true)
                .with_peer("worker-1")
                .with_hop("router-a"),
        ),
        (
            "hop_failed",
            "A router could not complete a hop.",
            err("HOP_FAILED", "connection refused", true)
                .with_peer("router-b")
                .with_hop("router-a"),
        ),
        (
            "no_match",
            "Nothing matched the filter anywhere the message could reach.",
            err("NO_MATCH", "no node matches", true).with_hop("router-a"),
        ),
        (
            "not_found",
            "No router could reach the id.",
            err("NOT_FOUND", "ghost", true)
                .with_peer("ghost")
                .with_hop("router-a"),
        ),
        (
            "timeout",
            "The deadline ran out at a hop.",
            err("TIMEOUT", "no answer in time", true)
                .with_peer("worker-1")
                .with_hop("router-a")
                .with_timeout(ms(1000)),
        ),
        (
            "route_loop",
            "The message came back to a router it had visited, or ran out of hops.",
            err("ROUTE_LOOP", "visited router-b", true).with_hop("router-b"),
        ),
        (
            "not_a_router",
            "The peer asked to forward is not a router.",
            err("NOT_A_ROUTER", "worker-1", true),
        ),
    ];
    for (name, description, reply) in errors {
        cases.push(error_case(
            &format!("error_{name}"),
            &format!("An error reply: {description}"),
            mp(&reply),
        ));
    }
    cases.push(error_case(
        "error_unknown_limit",
        "An error reply with a limit tag this reader does not know: read with no limit.",
        mp(&json!({"code": "BUSY", "message": "x", "system": true,
                   "limit": {"Gpu": {"max": 2}}})),
    ));
    cases.push(error_case(
        "error_unknown_field",
        "An error reply with a key this reader does not know: ignored.",
        mp(&json!({"code": "NOT_FOUND", "message": "x", "retry_after_ms": 50})),
    ));
    // The real RemoteError's own encoding of a system error with a limit.
    cases.push(error_case(
        "error_remote_error_encoding",
        "RemoteError::system_error(PAYLOAD_TOO_LARGE) with a Payload limit, as encoded.",
        mp(
            &RemoteError::system_error(RemoteError::PAYLOAD_TOO_LARGE, "too large")
                .with_limit(Limit::Payload { size: 10, max: 5 }),
        ),
    ));

    let mut too_large = valid(
        "payload_over_limit",
        "A request whose payload frame (32 bytes) is over the receiver's limit (16).",
        wire(
            Kind::Request,
            19,
            "blob",
            budget,
            &[],
            &pattern(INLINE_MAX + 1),
            0,
        ),
        false,
    );
    too_large.frames = vec![too_large.frames[0].clone(), Bytes::from(pattern(32))];
    too_large.max_payload = Some(16);
    cases.push(too_large);

    cases.extend(malformed());
    cases
}

fn err(code: &str, message: &str, system: bool) -> RemoteError {
    if system {
        RemoteError::system_error(code, message)
    } else {
        RemoteError::new(code, message)
    }
}

/// `n` bytes 0, 1, 2, ... (wrapping).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| i as u8).collect()
}

fn many_entries(n: usize) -> Vec<u8> {
    let mut meta = Meta::new();
    for i in 0..n {
        meta.set(&format!("k{i}"), MetaValue::Text("v"));
    }
    meta.as_bytes().to_vec()
}

/// A valid header frame to break.
fn base() -> Vec<u8> {
    wire(Kind::Request, 1, "echo", None, &[], &mp("hi"), 0)[0].to_vec()
}

fn with(mut bytes: Vec<u8>, at: usize, value: u8) -> Vec<u8> {
    bytes[at] = value;
    bytes
}

fn malformed() -> Vec<Case> {
    let empty_reply = wire(Kind::Reply, 1, "", None, &[], &[], 0)[0].to_vec();
    let mut long_meta = wire(Kind::Tick, 1, "t", None, &[], &[], 0)[0].to_vec();
    // Declares 5 metadata bytes where none follow (no inline payload).
    let n = long_meta.len();
    long_meta[n - 1] = 5;
    let mut short_meta = wire(
        Kind::Tick,
        1,
        "t",
        None,
        &meta(&[("k", MetaValue::Text("v"))]),
        &[],
        0,
    )[0]
    .to_vec();
    // Declares fewer metadata bytes than follow, without the inline flag.
    short_meta[14 + 1 + 3] -= 1;
    let mut bad_utf8 = base();
    bad_utf8[14] = 0xff;
    let mut long_event = base();
    long_event[13] = 200;
    let system_no_prefix = with(base(), 3, 0x03);
    let prefix_no_flag = with(
        wire(Kind::Tick, 1, "_system:heartbeat", None, &[], &[], 0)[0].to_vec(),
        3,
        0x00,
    );
    vec![
        invalid("malformed_no_frames", "A message of no frames.", vec![]),
        invalid(
            "malformed_three_frames",
            "More than header and payload.",
            vec![empty_reply.clone(), vec![1], vec![2]],
        ),
        invalid(
            "malformed_short_header",
            "A header of 5 bytes (the fixed part is 14).",
            vec![base()[..5].to_vec()],
        ),
        invalid(
            "malformed_bad_magic",
            "The first byte is not 0x5A: not a zeronode peer.",
            vec![with(base(), 0, 0x00)],
        ),
        invalid(
            "malformed_bad_magic_short",
            "A short frame with the wrong first byte reports the magic, not the length.",
            vec![vec![0x47, 0x45, 0x54]],
        ),
        invalid(
            "malformed_version_2",
            "Envelope version 2.",
            vec![with(base(), 1, 2)],
        ),
        invalid("malformed_kind_0", "Kind 0.", vec![with(base(), 2, 0)]),
        invalid("malformed_kind_8", "Kind 8.", vec![with(base(), 2, 8)]),
        invalid(
            "malformed_unknown_flag_bit5",
            "Flag bit 5 on a request.",
            vec![with(base(), 3, 0x22)],
        ),
        invalid(
            "malformed_end_flag_on_request",
            "Bit 4 (end) is only known on a stream item.",
            vec![with(base(), 3, 0x12)],
        ),
        invalid(
            "malformed_stream_flag_on_reply",
            "Bit 2 (reply streamed) is only known on a request.",
            vec![with(empty_reply.clone(), 3, 0x04)],
        ),
        invalid(
            "malformed_body_flag_on_cancel",
            "Bit 3 is not known on a cancel.",
            vec![with(
                wire(Kind::Cancel, 1, "", None, &[], &[], 0)[0].to_vec(),
                3,
                0x08,
            )],
        ),
        invalid(
            "malformed_inline_and_payload_frame",
            "The inline flag set and a payload frame too.",
            vec![base(), vec![1, 2, 3]],
        ),
        invalid(
            "malformed_event_not_utf8",
            "The event name is not UTF-8.",
            vec![bad_utf8],
        ),
        invalid(
            "malformed_event_past_end",
            "The event length runs past the frame.",
            vec![long_event],
        ),
        invalid(
            "malformed_system_flag_without_prefix",
            "The system flag on an event outside `_system:`.",
            vec![system_no_prefix],
        ),
        invalid(
            "malformed_prefix_without_system_flag",
            "An event in `_system:` without the system flag.",
            vec![prefix_no_flag],
        ),
        invalid(
            "malformed_metadata_past_end",
            "The metadata length runs past the frame.",
            vec![long_meta],
        ),
        invalid(
            "malformed_metadata_short",
            "Without the inline flag, the metadata must end the frame exactly.",
            vec![short_meta],
        ),
    ]
}

/// The JSON file of a case: its frames, and its decoded form or its error.
fn render(case: &Case) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(case.name));
    out.insert("description".into(), json!(case.description));
    out.insert(
        "frames".into(),
        Value::Array(case.frames.iter().map(|f| json!(hex(f))).collect()),
    );
    let max = case.max_payload.unwrap_or(usize::MAX);
    if let Some(max) = case.max_payload {
        out.insert("max_payload".into(), json!(max));
    }
    match Envelope::decode(&case.frames, max) {
        Ok(envelope) => {
            out.insert("valid".into(), json!(true));
            out.insert(
                "decoded".into(),
                decoded(&envelope, &case.frames, case.msgpack),
            );
        }
        Err(e) => {
            out.insert("valid".into(), json!(false));
            out.insert("error".into(), decode_error(&e));
        }
    }
    Value::Object(out)
}

fn to_text(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("JSON");
    text.push('\n');
    text
}

/// Checks one vector file against the real codec.
fn check(path: &Path, file: &Value) {
    let name = path.display();
    let frames: Vec<Bytes> = file["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: frames"))
        .iter()
        .map(|f| Bytes::from(unhex(f.as_str().expect("hex string"))))
        .collect();
    let max = file
        .get("max_payload")
        .and_then(Value::as_u64)
        .map_or(usize::MAX, |m| m as usize);
    let result = Envelope::decode(&frames, max);
    if file["valid"] == json!(true) {
        let envelope = result.unwrap_or_else(|e| panic!("{name}: refused: {e}"));
        let expected = &file["decoded"];
        let msgpack = expected.get("payload_msgpack").is_some();
        assert_eq!(
            &decoded(&envelope, &frames, msgpack),
            expected,
            "{name}: decoded form"
        );
        if envelope.kind() == Kind::Error {
            // Every error reply is read by the real type, unknown keys and limits ignored.
            let remote: RemoteError = envelope
                .decode_payload()
                .unwrap_or_else(|e| panic!("{name}: error reply: {e}"));
            let reply = &expected["error_reply"];
            assert_eq!(remote.code, reply["code"].as_str().unwrap_or_default());
            assert_eq!(
                remote.message,
                reply["message"].as_str().unwrap_or_default()
            );
            assert_eq!(remote.system, reply.get("system") == Some(&json!(true)));
            assert_eq!(remote.peer(), reply.get("peer").and_then(Value::as_str));
            assert_eq!(remote.hop(), reply.get("hop").and_then(Value::as_str));
            assert_eq!(
                remote.timeout().map(|t| t.as_millis() as u64),
                reply.get("timeout_ms").and_then(Value::as_u64)
            );
        }
        // Encoded back, by both encoders, to the same bytes (unless the limit refused it,
        // which only the payload-limit vector, an invalid one, does).
        let mut again = Envelope::new(
            envelope.kind(),
            envelope.id(),
            envelope.event(),
            envelope.metadata().clone(),
            envelope.payload().clone(),
        );
        again.stream = envelope.stream;
        assert_eq!(again.encode(), frames, "{name}: Envelope::encode");
        let flags = envelope.stream;
        assert_eq!(
            wire(
                envelope.kind(),
                envelope.id(),
                envelope.event(),
                None,
                envelope.metadata(),
                envelope.payload(),
                flags,
            ),
            frames,
            "{name}: Encoded"
        );
    } else {
        let e = result.err().unwrap_or_else(|| panic!("{name}: accepted"));
        assert_eq!(decode_error(&e), file["error"], "{name}: error");
    }
}

#[test]
fn every_vector_decodes_as_written_and_encodes_back() {
    let writing = std::env::var_os("ZERONODE_WRITE_VECTORS").is_some();
    if writing {
        std::fs::create_dir_all(dir()).expect("vectors dir");
    }
    let mut names = std::collections::BTreeSet::new();
    for case in cases() {
        assert!(
            names.insert(case.name.clone()),
            "two cases named {}",
            case.name
        );
        let text = to_text(&render(&case));
        let path = dir().join(format!("{}.json", case.name));
        if writing {
            std::fs::write(&path, &text).expect("write vector");
        } else {
            let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (ZERONODE_WRITE_VECTORS=1 writes it)",
                    path.display()
                )
            });
            assert_eq!(
                on_disk,
                text,
                "{} is stale: ZERONODE_WRITE_VECTORS=1 rewrites it",
                path.display()
            );
        }
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(dir()).expect("vectors dir") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let file: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
        check(&path, &file);
        checked += 1;
    }
    // Every case written above, and the node's system vectors beside them.
    assert!(
        checked >= names.len(),
        "{checked} files for {} cases",
        names.len()
    );
}

#[test]
fn a_message_that_differs_by_one_byte_fails_its_vector() {
    // The check is not vacuous: a wrong id in a vector's frames is caught.
    let case = &cases()[0];
    let mut file = render(case);
    let mut frame = unhex(file["frames"][0].as_str().unwrap_or_default());
    frame[11] ^= 1;
    file["frames"][0] = json!(hex(&frame));
    let caught = std::panic::catch_unwind(|| check(Path::new("mutated"), &file));
    assert!(caught.is_err());
}
