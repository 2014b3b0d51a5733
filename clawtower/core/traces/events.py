"""The live trace exporter's one event: how far in the log it has sent (core/traces/live.py).

Entity "telemetry", entity id `otlp:<endpoint>`: one position per collector. No projection:
the exporter reads its latest position back from the log."""

from __future__ import annotations

from ..events import Payload


class TracesExported(Payload):
    """Every span whose end is logged at or before `seq` has been sent to `endpoint`
    (`spans` of them, of `traces` traces, in this step)."""

    TYPE = "traces.exported"
    ENTITY = "telemetry"
    endpoint: str
    seq: int
    spans: int
    traces: int = 0


__all__ = ["TracesExported"]
