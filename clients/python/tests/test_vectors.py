"""The shared golden vectors (protocol/vectors, PROTOCOL.md 10), read by this package's
codec: every file decodes to its decoded form (or fails with its error), and every valid
one encodes back to the same frames."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from zeronode import envelope, errors, meta
from zeronode.credit import Credit, Violation

VECTORS = Path(
    os.environ.get("ZERONODE_VECTORS", Path(__file__).resolve().parents[3] / "protocol" / "vectors")
)
FILES = sorted(VECTORS.glob("*.json"))


def test_the_vectors_are_there() -> None:
    # Every kind and the malformed inputs: a missing directory must fail, not pass empty.
    assert len(FILES) >= 90
    kinds = {json.loads(f.read_text()).get("decoded", {}).get("kind") for f in FILES}
    assert {"request", "reply", "error", "tick", "stream_item", "credit", "cancel"} <= kinds


def _entries(section: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, value in meta.parse(section, max_entries=64, max_bytes=16 * 1024):
        if isinstance(value, str):
            out.append({"key": key, "kind": "text", "text": value})
        else:
            out.append({"key": key, "kind": "bytes", "hex": value.hex()})
    return out


def _credit(payload: bytes) -> dict[str, Any]:
    credit = Credit()
    try:
        credit.receive(payload)
    except Violation as v:
        number = next(iter(v.fields.values()))
        return {"violation": f"{v.name}({number})"}
    if len(payload) == 8:
        return {"window": credit.window, "granted": credit.available}
    return {"granted": credit.available}


def _decoded(env: envelope.Envelope, frames: list[bytes], msgpack_payload: bool) -> dict[str, Any]:
    flags = frames[0][3]
    out: dict[str, Any] = {
        "kind": envelope.KIND_NAMES[env.kind],
        "id": env.id,
        "event": env.event,
        "flags": flags,
        "system": env.system,
        "inline": bool(flags & envelope.FLAG_INLINE),
        "reply_streamed": env.reply_streamed,
        "body_streamed": env.body_streamed,
        "end": env.end,
        "metadata_hex": env.metadata.hex(),
    }
    try:
        out["metadata"] = _entries(env.metadata)
        budget = meta.budget_us(meta.parse(env.metadata))
        if budget is not None:
            out["budget_us"] = budget
    except meta.MetaError as e:
        if e.name == "TooLarge":
            out["metadata_error"] = {"error": "TooLarge", **e.numbers}
        else:
            out["metadata_error"] = {"error": e.name, "why": e.why}
        out.pop("metadata", None)
    out["payload_len"] = len(env.payload)
    out["payload_hex"] = env.payload.hex()
    if msgpack_payload:
        out["payload_msgpack"] = msgpack.unpackb(env.payload, raw=False)
    if env.kind == envelope.Kind.ERROR:
        out["error_reply"] = msgpack.unpackb(env.payload, raw=False)
    if env.kind == envelope.Kind.CREDIT:
        out["credit"] = _credit(env.payload)
    return out


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_vector(path: Path) -> None:
    vector = json.loads(path.read_text())
    frames = [bytes.fromhex(f) for f in vector["frames"]]
    max_payload = vector.get("max_payload")
    if not vector["valid"]:
        with pytest.raises(envelope.DecodeError) as refused:
            envelope.decode(frames, max_payload)
        assert refused.value.as_dict() == vector["error"]
        return
    env = envelope.decode(frames, max_payload)
    expected = vector["decoded"]
    assert _decoded(env, frames, "payload_msgpack" in expected) == expected
    # Encoded back to the same bytes.
    assert (
        envelope.encode(env.kind, env.id, env.event, env.metadata, env.payload, env.stream)
        == frames
    )
    if env.kind == envelope.Kind.ERROR:
        remote = errors.from_payload(env.payload)
        reply = expected["error_reply"]
        assert remote.code == reply["code"]
        assert remote.message == reply["message"]
        assert remote.system == (reply.get("system") is True)
        assert remote.peer == reply.get("peer")
        assert remote.hop == reply.get("hop")
        assert remote.timeout_ms == reply.get("timeout_ms")
        if remote.system:
            # A system error is its code's class.
            assert isinstance(remote, errors.SYSTEM_CODES.get(remote.code, errors.RemoteError))
        known = isinstance(reply.get("limit"), dict) and next(iter(reply["limit"])) in (
            "Payload",
            "Metadata",
            "Handlers",
            "Streams",
        )
        if known:
            assert remote.limit is not None
            assert {remote.limit.kind: remote.limit.numbers} == reply["limit"]
        else:
            assert remote.limit is None


def test_the_error_map_round_trips() -> None:
    err = errors.system_error("PEER_LEFT", "gone", peer="w1", hop="r1")
    back = errors.from_payload(err.encode())
    assert isinstance(back, errors.PeerLeft)
    assert (back.peer, back.hop, back.code) == ("w1", "r1", "PEER_LEFT")
