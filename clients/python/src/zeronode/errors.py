"""Typed errors: the error reply's codes and fields as exception classes and attributes
(PROTOCOL.md, section 8), and the local outcomes of a call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack


class ZeronodeError(Exception):
    """Every error this package raises."""


@dataclass(frozen=True)
class Limit:
    """The numbers of a limit a message went over: ``kind`` is ``Payload``, ``Metadata``,
    ``Handlers`` or ``Streams``, ``numbers`` its fields (``size``, ``max``, ...)."""

    kind: str
    numbers: dict[str, Any]


class RemoteError(ZeronodeError):
    """An error reply. ``system`` says the framework made it (then the subclass names the
    code); otherwise it is a handler's, whatever its code."""

    code_name: str | None = None

    def __init__(
        self,
        code: str,
        message: str,
        system: bool = False,
        limit: Limit | None = None,
        peer: str | None = None,
        hop: str | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.system = system
        self.limit = limit
        self.peer = peer
        self.hop = hop
        self.timeout_ms = timeout_ms

    def to_map(self) -> dict[str, Any]:
        """The error reply's map, as it travels."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.system:
            out["system"] = True
        if self.limit is not None:
            out["limit"] = {self.limit.kind: self.limit.numbers}
        if self.peer is not None:
            out["peer"] = self.peer
        if self.hop is not None:
            out["hop"] = self.hop
        if self.timeout_ms is not None:
            out["timeout_ms"] = self.timeout_ms
        return out

    def encode(self) -> bytes:
        """The error reply's payload."""
        packed: bytes = msgpack.packb(self.to_map(), use_bin_type=True)
        return packed

    @property
    def retryable(self) -> bool:
        """A handler's code that says trying again later may work."""
        return not self.system and self.code in ("UNAVAILABLE", "RESOURCE_EXHAUSTED", "ABORTED")


class HandlerError(RemoteError):
    """Raise it in a handler to answer with a code of your own (not a system error)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(code, message or code)


def _system(name: str, doc: str) -> type[RemoteError]:
    cls = type(name, (RemoteError,), {"__doc__": doc, "code_name": None})
    return cls


# One class per system code of the registry (PROTOCOL.md 8).
NoHandler = _system("NoHandler", "NO_HANDLER: nothing handles the event.")
HandlerPanicked = _system("HandlerPanicked", "HANDLER_PANICKED: the handler crashed.")
ShuttingDown = _system("ShuttingDown", "SHUTTING_DOWN: the node is closing.")
PayloadTooLarge = _system("PayloadTooLarge", "PAYLOAD_TOO_LARGE: limit.numbers has size, max.")
TooManyStreams = _system("TooManyStreams", "TOO_MANY_STREAMS: streams at their bound.")
NotStreamed = _system("NotStreamed", "NOT_STREAMED: stream flag and handler disagree.")
Busy = _system("Busy", "BUSY: handlers at their bound.")
Cancelled = _system("Cancelled", "CANCELLED: stopped when the node's close grace ran out.")
DeadlineExceeded = _system("DeadlineExceeded", "DEADLINE_EXCEEDED: the budget ran out.")
BadMetadata = _system("BadMetadata", "BAD_METADATA: metadata refused.")
DuplicateId = _system("DuplicateId", "DUPLICATE_ID: the id is taken.")
VersionMismatch = _system("VersionMismatch", "VERSION_MISMATCH: another protocol version.")
NotJoined = _system("NotJoined", "NOT_JOINED: the connection has not joined.")
NotAuthorized = _system("NotAuthorized", "NOT_AUTHORIZED: key not allowed.")
BadHandshake = _system("BadHandshake", "BAD_HANDSHAKE: the hello does not decode.")
AlreadyJoined = _system("AlreadyJoined", "ALREADY_JOINED: the connection joined another id.")
BadForward = _system("BadForward", "BAD_FORWARD: bad forward header.")
NotARouter = _system("NotARouter", "NOT_A_ROUTER: the peer does not forward.")
NoMatch = _system("NoMatch", "NO_MATCH: nothing matched the filter anywhere reachable.")
NotFound = _system("NotFound", "NOT_FOUND: no router could reach the id (``peer``).")
RouteLoop = _system("RouteLoop", "ROUTE_LOOP: visited router or no hops left.")
HopTimeout = _system("HopTimeout", "TIMEOUT: the deadline ran out at a hop.")
PeerLeft = _system("PeerLeft", "PEER_LEFT: the destination left before answering (``peer``).")
HopFailed = _system("HopFailed", "HOP_FAILED: a router's hop failed (``peer``, ``hop``).")

SYSTEM_CODES: dict[str, type[RemoteError]] = {
    "NO_HANDLER": NoHandler,
    "HANDLER_PANICKED": HandlerPanicked,
    "SHUTTING_DOWN": ShuttingDown,
    "PAYLOAD_TOO_LARGE": PayloadTooLarge,
    "TOO_MANY_STREAMS": TooManyStreams,
    "NOT_STREAMED": NotStreamed,
    "BUSY": Busy,
    "CANCELLED": Cancelled,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "BAD_METADATA": BadMetadata,
    "DUPLICATE_ID": DuplicateId,
    "VERSION_MISMATCH": VersionMismatch,
    "NOT_JOINED": NotJoined,
    "NOT_AUTHORIZED": NotAuthorized,
    "BAD_HANDSHAKE": BadHandshake,
    "ALREADY_JOINED": AlreadyJoined,
    "BAD_FORWARD": BadForward,
    "NOT_A_ROUTER": NotARouter,
    "NO_MATCH": NoMatch,
    "NOT_FOUND": NotFound,
    "ROUTE_LOOP": RouteLoop,
    "TIMEOUT": HopTimeout,
    "PEER_LEFT": PeerLeft,
    "HOP_FAILED": HopFailed,
}
for _code, _cls in SYSTEM_CODES.items():
    _cls.code_name = _code


def system_error(code: str, message: str, **fields: Any) -> RemoteError:
    """A framework error with ``code``, of its class."""
    cls = SYSTEM_CODES.get(code, RemoteError)
    return cls(code, message, system=True, **fields)


def from_payload(payload: bytes) -> RemoteError:
    """Reads an error reply's payload; unknown keys and unknown limit tags are ignored. A
    system error is an instance of its code's class; a handler's is a plain RemoteError."""
    try:
        value = msgpack.unpackb(payload, raw=False)
    except Exception as e:  # any malformed payload is a typed error, not a crash
        return RemoteError("BAD_ERROR_REPLY", f"undecodable error reply: {e}", system=True)
    if not isinstance(value, dict):
        return RemoteError("BAD_ERROR_REPLY", "error reply is not a map", system=True)
    code = str(value.get("code", ""))
    message = str(value.get("message", ""))
    system = value.get("system") is True
    limit = None
    raw_limit = value.get("limit")
    if isinstance(raw_limit, dict) and len(raw_limit) == 1:
        kind, numbers = next(iter(raw_limit.items()))
        if kind in ("Payload", "Metadata", "Handlers", "Streams") and isinstance(numbers, dict):
            limit = Limit(str(kind), dict(numbers))
    peer = value.get("peer")
    hop = value.get("hop")
    timeout_ms = value.get("timeout_ms")
    fields: dict[str, Any] = {
        "limit": limit,
        "peer": peer if isinstance(peer, str) else None,
        "hop": hop if isinstance(hop, str) else None,
        "timeout_ms": timeout_ms if isinstance(timeout_ms, int) else None,
    }
    if system:
        return system_error(code, message, **fields)
    return RemoteError(code, message, **fields)


# Local outcomes of a call (nothing came back over the wire).


class Timeout(ZeronodeError):
    """No answer before the call's timeout."""

    def __init__(self, event: str, timeout_s: float) -> None:
        super().__init__(f"{event!r} timed out after {timeout_s:.3f}s")
        self.event = event
        self.timeout_s = timeout_s


class PeerGone(ZeronodeError):
    """The peer a call went to left (bye, dead, connection lost) before answering."""

    def __init__(self, peer: str) -> None:
        super().__init__(f"peer {peer} left before answering")
        self.peer = peer


class NodeNotFound(ZeronodeError):
    """No joined peer (and no router) for the id."""

    def __init__(self, id: str) -> None:
        super().__init__(f"no node {id!r}")
        self.id = id


class NoNodesMatch(ZeronodeError):
    """No joined peer (and no router) matches the filter."""


class StreamViolation(ZeronodeError):
    """The peer broke the stream rules (credit, sizes)."""


class ConnectFailed(ZeronodeError):
    """A connect's handshake did not complete."""


class Closed(ZeronodeError):
    """The node is closed."""
