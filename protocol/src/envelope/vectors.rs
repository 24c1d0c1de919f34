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

mod decoded;
mod errors;
mod malformed;

use decoded::{decode_error, decoded};
use malformed::malformed;

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

    cases.extend(errors::cases());

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
