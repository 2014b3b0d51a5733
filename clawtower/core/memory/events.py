"""Memory events. Entity "memory", id `<namespace>/<key>`: every write names who made it,
from which session and turn, and why."""

from __future__ import annotations

import base64
import binascii

from pydantic import Field, model_validator

from ..events import Payload

MAX_DIM = 8192


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


class MemoryEmbedded(Payload):
    """The embedding of a memory's content by `model` (emitted with its `memory.stored` in
    one commit, or later by `memory embed`): `sha` is the sha256 of the content embedded,
    `vector` its float32 little-endian bytes in base64. It fills the embedding cache and,
    while the memory still holds that content, links the memory to the vector."""

    TYPE = "memory.embedded"
    ENTITY = "memory"
    namespace: str
    key: str
    model: str = Field(min_length=1, max_length=200)
    sha: str = Field(pattern=r"^[0-9a-f]{64}$")
    dim: int = Field(ge=1, le=MAX_DIM)
    vector: str

    @model_validator(mode="after")
    def _vector_has_dim_floats(self) -> MemoryEmbedded:
        try:
            raw = base64.b64decode(self.vector, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("vector: not base64") from None
        if len(raw) != 4 * self.dim:
            raise ValueError(f"vector: {len(raw)} bytes, not {self.dim} float32 values")
        return self


__all__ = ["MemoryEmbedded", "MemoryForgotten", "MemoryStored"]
