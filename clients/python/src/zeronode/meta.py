"""Metadata sections (PROTOCOL.md, section 3): entries of key, kind, value; the budget."""

from __future__ import annotations

import struct
from collections.abc import Mapping

BUDGET = ":budget"
FORWARD = ":forward"
ROUTE = ":route"
RESERVED_PREFIX = ":"
MAX_ENTRIES = 64
MAX_BYTES = 16 * 1024

MetaValue = str | bytes


class MetaError(Exception):
    """A metadata section refused: ``name`` is ``Malformed`` or ``TooLarge``."""

    def __init__(self, name: str, why: str = "", **numbers: int) -> None:
        super().__init__(f"{name}: {why or numbers}")
        self.name = name
        self.why = why
        self.numbers = numbers


def _entry(key: str, value: MetaValue) -> bytes:
    raw_key = key.encode()
    if not 1 <= len(raw_key) <= 255:
        raise MetaError("InvalidKey", key)
    kind, raw = (0, value.encode()) if isinstance(value, str) else (1, bytes(value))
    return struct.pack(">B", len(raw_key)) + raw_key + struct.pack(">BI", kind, len(raw)) + raw


def encode(entries: Mapping[str, MetaValue], budget_us: int | None = None) -> bytes:
    """A section: the budget first (when given), then the user's entries. Reserved keys
    among the user's are refused."""
    parts = []
    if budget_us is not None:
        parts.append(_entry(BUDGET, struct.pack(">Q", max(0, min(budget_us, 2**64 - 1)))))
    for key, value in entries.items():
        if key.startswith(RESERVED_PREFIX):
            raise MetaError("InvalidKey", key)
        parts.append(_entry(key, value))
    return b"".join(parts)


def encode_framework(entries: list[tuple[str, MetaValue]]) -> bytes:
    """A section with any keys, reserved ones included (the node's own use)."""
    return b"".join(_entry(key, value) for key, value in entries)


def parse(
    raw: bytes, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES
) -> list[tuple[str, MetaValue]]:
    """Every entry in order, reserved ones included; raises :class:`MetaError` when the
    section is malformed or its user entries are over the limits."""
    out: list[tuple[str, MetaValue]] = []
    at, entries, size = 0, 0, 0
    while at < len(raw):
        start = at
        key_len = raw[at]
        if key_len == 0:
            raise MetaError("Malformed", "empty key")
        if at + 1 + key_len + 5 > len(raw):
            raise MetaError("Malformed", "truncated entry")
        try:
            key = raw[at + 1 : at + 1 + key_len].decode()
        except UnicodeDecodeError:
            raise MetaError("Malformed", "key is not UTF-8") from None
        at += 1 + key_len
        kind, value_len = struct.unpack_from(">BI", raw, at)
        at += 5
        if at + value_len > len(raw):
            raise MetaError("Malformed", "truncated value")
        value = raw[at : at + value_len]
        at += value_len
        if kind == 0:
            try:
                out.append((key, value.decode()))
            except UnicodeDecodeError:
                raise MetaError("Malformed", "text is not UTF-8") from None
        elif kind == 1:
            out.append((key, value))
        else:
            raise MetaError("Malformed", "unknown value kind")
        if not key.startswith(RESERVED_PREFIX):
            entries += 1
            size += at - start
            if entries > max_entries or size > max_bytes:
                raise MetaError(
                    "TooLarge",
                    entries=entries,
                    bytes=size,
                    max_entries=max_entries,
                    max_bytes=max_bytes,
                )
    return out


def budget_us(entries: list[tuple[str, MetaValue]]) -> int | None:
    """The request's budget in microseconds, when its first entry is ``:budget``."""
    if entries and entries[0][0] == BUDGET:
        value = entries[0][1]
        if isinstance(value, bytes) and len(value) == 8:
            budget: int = struct.unpack(">Q", value)[0]
            return budget
    return None


def user_entries(entries: list[tuple[str, MetaValue]]) -> dict[str, MetaValue]:
    """The user's entries (reserved keys hidden), the last value of a key winning."""
    return {k: v for k, v in entries if not k.startswith(RESERVED_PREFIX)}
