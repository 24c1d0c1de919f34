"""The envelope: one zeronode message as one or two ZeroMQ frames (PROTOCOL.md, section 2).

Pure functions over bytes: :func:`encode` lays a message out, :func:`decode` checks a
received one in the order PROTOCOL.md 2.3 gives and raises :class:`DecodeError` with the
first check that fails.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

MAGIC = 0x5A
VERSION = 1
FIXED_HEADER = 14
INLINE_MAX = 4096
SYSTEM_PREFIX = "_system:"
MAX_EVENT_LEN = 1024

FLAG_SYSTEM = 0x01
FLAG_INLINE = 0x02
FLAG_REPLY_STREAMED = 0x04
FLAG_BODY_STREAMED = 0x08
FLAG_END = 0x10
STREAM_FLAGS = FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED | FLAG_END


class Kind(IntEnum):
    """What a message is (PROTOCOL.md 2.1)."""

    REQUEST = 1
    REPLY = 2
    ERROR = 3
    TICK = 4
    STREAM_ITEM = 5
    CREDIT = 6
    CANCEL = 7


KIND_NAMES = {
    Kind.REQUEST: "request",
    Kind.REPLY: "reply",
    Kind.ERROR: "error",
    Kind.TICK: "tick",
    Kind.STREAM_ITEM: "stream_item",
    Kind.CREDIT: "credit",
    Kind.CANCEL: "cancel",
}

# The stream bits each kind may carry (PROTOCOL.md 2.2).
_ALLOWED = {
    Kind.REQUEST: FLAG_REPLY_STREAMED | FLAG_BODY_STREAMED,
    Kind.STREAM_ITEM: FLAG_END | FLAG_BODY_STREAMED,
    Kind.CREDIT: FLAG_BODY_STREAMED,
}


class DecodeError(Exception):
    """A malformed message, named as the test vectors name it (``UnknownKind``, ...)."""

    def __init__(self, name: str, **fields: Any) -> None:
        super().__init__(f"{name} {fields}" if fields else name)
        self.name = name
        self.fields = fields

    def as_dict(self) -> dict[str, Any]:
        """The error as the vectors write it: ``{"error": name, **fields}``."""
        return {"error": self.name, **self.fields}


@dataclass(frozen=True)
class Envelope:
    """A decoded message. ``stream`` holds the stream flag bits (2 to 4)."""

    kind: Kind
    id: int
    event: str = ""
    metadata: bytes = b""
    payload: bytes = b""
    stream: int = 0
    system: bool = field(default=False)

    @property
    def reply_streamed(self) -> bool:
        """A request whose caller wants its answer as items."""
        return bool(self.stream & FLAG_REPLY_STREAMED)

    @property
    def body_streamed(self) -> bool:
        """A request whose body follows as items; on an item or credit: the body's."""
        return bool(self.stream & FLAG_BODY_STREAMED)

    @property
    def end(self) -> bool:
        """The end item of a body."""
        return bool(self.stream & FLAG_END)


def encode(
    kind: Kind,
    id: int,
    event: str = "",
    metadata: bytes = b"",
    payload: bytes = b"",
    stream: int = 0,
) -> list[bytes]:
    """The frames of a message: a payload of 1 to 4096 bytes inline, a larger one as a
    second frame, an empty one not at all."""
    name = event.encode()
    flags = stream & STREAM_FLAGS
    if event.startswith(SYSTEM_PREFIX):
        flags |= FLAG_SYSTEM
    inline = 0 < len(payload) <= INLINE_MAX
    if inline:
        flags |= FLAG_INLINE
    header = b"".join(
        (
            struct.pack(">BBBBQH", MAGIC, VERSION, int(kind), flags, id, len(name)),
            name,
            struct.pack(">I", len(metadata)),
            metadata,
            payload if inline else b"",
        )
    )
    if inline or not payload:
        return [header]
    return [header, payload]


def decode(frames: list[bytes], max_payload: int | None = None) -> Envelope:
    """Checks and decodes one message's frames; raises :class:`DecodeError`."""
    if not frames:
        raise DecodeError("NoFrames")
    if len(frames) > 2:
        raise DecodeError("TooManyFrames", frames=len(frames))
    header = bytes(frames[0])
    payload_frame = bytes(frames[1]) if len(frames) == 2 else None
    if len(header) < FIXED_HEADER:
        if header and header[0] != MAGIC:
            raise DecodeError("BadMagic", byte=header[0])
        raise DecodeError("Truncated", needed=FIXED_HEADER, got=len(header))
    if header[0] != MAGIC:
        raise DecodeError("BadMagic", byte=header[0])
    if header[1] != VERSION:
        raise DecodeError("UnsupportedVersion", version=header[1])
    try:
        kind = Kind(header[2])
    except ValueError:
        raise DecodeError("UnknownKind", kind=header[2]) from None
    flags = header[3]
    if flags & ~(FLAG_SYSTEM | FLAG_INLINE | _ALLOWED.get(kind, 0)):
        raise DecodeError("UnknownFlags", flags=flags)
    inline = bool(flags & FLAG_INLINE)
    if inline and payload_frame is not None:
        raise DecodeError("TooManyFrames", frames=2)
    (id_,) = struct.unpack_from(">Q", header, 4)
    (event_len,) = struct.unpack_from(">H", header, 12)
    event_end = FIXED_HEADER + event_len
    meta_start = event_end + 4
    if len(header) < meta_start:
        raise DecodeError("Truncated", needed=meta_start, got=len(header))
    try:
        event = header[FIXED_HEADER:event_end].decode()
    except UnicodeDecodeError:
        raise DecodeError("InvalidUtf8") from None
    system = bool(flags & FLAG_SYSTEM)
    if system != event.startswith(SYSTEM_PREFIX):
        raise DecodeError("SystemFlagMismatch")
    (meta_len,) = struct.unpack_from(">I", header, event_end)
    available = len(header) - meta_start
    fits = meta_len <= available if inline else meta_len == available
    if not fits:
        raise DecodeError("LengthMismatch", declared=meta_len, available=available)
    meta_end = meta_start + meta_len
    if payload_frame is not None:
        payload = payload_frame
    elif inline:
        payload = header[meta_end:]
    else:
        payload = b""
    if max_payload is not None and len(payload) > max_payload:
        raise DecodeError("TooLarge", size=len(payload), max=max_payload)
    return Envelope(
        kind=kind,
        id=id_,
        event=event,
        metadata=header[meta_start:meta_end],
        payload=payload,
        stream=flags & STREAM_FLAGS,
        system=system,
    )
