"""The span records traces are made of: plain frozen data, no OpenTelemetry import.

Attribute names follow the OpenTelemetry GenAI semantic conventions (pinned: SEMCONV) plus
OpenInference's `openinference.span.kind` and our own `clawtower.*` ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# the GenAI semantic conventions version the names follow (status Development upstream)
SEMCONV = "1.37.0"

# OpenInference span kinds
AGENT = "AGENT"
LLM = "LLM"
TOOL = "TOOL"
CHAIN = "CHAIN"


@dataclass(frozen=True)
class Span:
    """One span. `end` None: its end is not in the log yet (an open span, never exported).
    Times are the store's commit times (Unix seconds)."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str  # OpenInference span kind: AGENT | LLM | TOOL | CHAIN
    start: float
    end: float | None
    attributes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # the error's description when the span failed
    first_seq: int = 0  # the event that opened it
    last_seq: int = 0  # the last event that changed it

    @property
    def open(self) -> bool:
        return self.end is None

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)

    def as_json(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "span_id": self.span_id,
                "parent_id": self.parent_id, "name": self.name, "kind": self.kind,
                "start": self.start, "end": self.end, "duration_s": self.duration,
                "open": self.open, "error": self.error, "attributes": dict(self.attributes),
                "first_seq": self.first_seq, "last_seq": self.last_seq}


@dataclass(frozen=True)
class Trace:
    """The spans of one root unit of work, in start order (parents before children)."""

    trace_id: str
    root: str  # the id of what it traces: S-1, F-2, W-3, a meeting, task or invocation id
    kind: str  # session | flow | workflow | meeting | task | trigger | turn
    spans: tuple[Span, ...]
    aliases: tuple[str, ...] = ()  # other ids found in it (child sessions, linked runs)

    @property
    def closed(self) -> list[Span]:
        return [s for s in self.spans if not s.open]

    def as_json(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "root": self.root, "kind": self.kind,
                "aliases": list(self.aliases), "spans": [s.as_json() for s in self.spans]}
