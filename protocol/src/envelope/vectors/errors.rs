//! The error-reply vectors: one per code of the registry, with the fields it carries, and
//! the real `RemoteError`'s own encoding.

use super::*;

/// Every error-reply case.
pub(super) fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
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
    cases
}

fn err(code: &str, message: &str, system: bool) -> RemoteError {
    if system {
        RemoteError::system_error(code, message)
    } else {
        RemoteError::new(code, message)
    }
}
