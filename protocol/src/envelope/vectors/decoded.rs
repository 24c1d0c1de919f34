//! A message's decoded form as JSON, as the vector files write it.

use super::*;

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
pub(super) fn decoded(envelope: &Envelope, frames: &[Bytes], msgpack: bool) -> Value {
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
pub(super) fn decode_error(e: &DecodeError) -> Value {
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
