"""Stream credit, counted in items (PROTOCOL.md, section 7): pure state, no I/O."""

from __future__ import annotations

import struct

DEFAULT_WINDOW = 1024
MAX_WINDOW = 1 << 20
FIRST_GRANT = 32
BYTE_TARGET = 2 << 20


class Violation(Exception):
    """A peer broke the stream rules; the stream ends with this."""

    def __init__(self, name: str, **fields: int) -> None:
        super().__init__(f"{name} {fields}" if fields else name)
        self.name = name
        self.fields = fields


class Credit:
    """The sending side: how many items it may send now."""

    def __init__(self) -> None:
        self.window: int | None = None
        self.available = 0

    def take(self) -> bool:
        """Takes one credit to send an item; False when there is none."""
        if self.available == 0:
            return False
        self.available -= 1
        return True

    def receive(self, payload: bytes) -> None:
        """A credit message arrived: 8 bytes (window, granted) first, else 4 (granted)."""
        if self.window is None and len(payload) == 8:
            window, granted = struct.unpack(">II", payload)
            self._open(window, granted)
        elif len(payload) == 4:
            (granted,) = struct.unpack(">I", payload)
            if self.window is None:
                self._open(granted, granted)
            elif self.available + granted > self.window:
                raise Violation("CreditBeyondWindow", granted=granted, window=self.window)
            else:
                self.available += granted
        else:
            raise Violation("BadCredit", length=len(payload))

    def _open(self, window: int, granted: int) -> None:
        if window == 0 or window > MAX_WINDOW or granted > window:
            raise Violation("BadWindow", window=window)
        self.window = window
        self.available = granted


class Window:
    """The receiving side: grants credit as items are consumed, aiming at about
    :data:`BYTE_TARGET` bytes on the way or held, within the window."""

    def __init__(self, size: int = DEFAULT_WINDOW) -> None:
        self.size = max(1, min(size, MAX_WINDOW))
        self.outstanding = 0
        self.held = 0
        self._mean_x8: int | None = None

    def open(self) -> bytes:
        """The first credit's payload: the window and the first grant."""
        granted = min(self.size, FIRST_GRANT)
        self.outstanding = granted
        return struct.pack(">II", self.size, granted)

    def arrive(self, length: int) -> None:
        """An item arrived; a Violation when it had no credit."""
        if self.outstanding == 0:
            raise Violation("ItemWithoutCredit")
        self.outstanding -= 1
        self.held += 1
        x8 = length * 8
        self._mean_x8 = (
            x8 if self._mean_x8 is None else self._mean_x8 - self._mean_x8 // 8 + x8 // 8
        )

    def _aim(self) -> int:
        if self._mean_x8 is None:
            return min(self.size, FIRST_GRANT)
        items = BYTE_TARGET * 8 // max(self._mean_x8, 1)
        return max(1, min(items, self.size))

    def consume(self) -> bytes | None:
        """An item was consumed: a grant's payload to send, or None."""
        self.held = max(0, self.held - 1)
        aim = self._aim()
        room = aim - (self.outstanding + self.held)
        if room > 0 and room >= max(aim // 2, 1):
            self.outstanding += room
            return struct.pack(">I", room)
        return None
