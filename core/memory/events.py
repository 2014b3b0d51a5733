"""Memory events. Entity "memory", id `<namespace>/<key>`: every write names who made it,
from which session and turn, and why."""

from __future__ import annotations

from ..events import Payload


class MemoryStored(Payload):
    """A memory created or replaced whole (one event per write)."""

    TYPE = "memory.stored"
    ENTITY = "memory"
    namespace: str
    key: str
    content: str
    category: str = ""
    source_session: str = ""
    source_turn: str = ""
    reason: str = ""
    expires_at: float | None = None


class MemoryForgotten(Payload):
    """A memory forgotten: gone from recall and listings; its history stays in the log."""

    TYPE = "memory.forgotten"
    ENTITY = "memory"
    namespace: str
    key: str
    reason: str
    source_session: str = ""
    source_turn: str = ""


__all__ = ["MemoryForgotten", "MemoryStored"]
