"""Traces (issue 38): OpenTelemetry-shaped spans derived from the event log.

Read-only: nothing here writes to the store. `derive` walks stored events and returns one
`Trace` per root unit of work (a task, a flow, a session tree, a workflow run, a meeting, a
trigger invocation); `load` reads the log through the store's `events_after`. Span and trace
ids are hashes of event ids (seqs), so deriving twice gives identical spans. Pure data: the
OpenTelemetry SDK is imported only by `otlp.py`, and only when exporting.
"""

from __future__ import annotations

from .builder import derive
from .read import find_trace, load
from .spans import Span, Trace

__all__ = ["Span", "Trace", "derive", "find_trace", "load"]
