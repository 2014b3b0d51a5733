"""Traces (issue 38): OpenTelemetry-shaped spans derived from the event log.

Read-only: nothing here writes to the store but the live exporter's position (live.py).
`derive` (builder.py) walks stored events and returns one `Trace` per root unit of work (a
task, a flow, a session tree, a workflow run, a meeting, a trigger invocation); `load` and
`find_trace` (read.py) read the log as rows (rows.py). Span and trace ids
are hashes of event ids (seqs), so deriving twice gives identical spans. Pure data: the
OpenTelemetry SDK is imported only by `otlp.py`, and only when exporting.

The names below load on first use: the config loader imports `traces.config` on every
command, and pays for nothing else here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builder import derive
    from .read import find_trace, load
    from .spans import Span, Trace

_WHERE = {"derive": "builder", "find_trace": "read", "load": "read", "Span": "spans",
          "Trace": "spans"}

__all__ = ["Span", "Trace", "derive", "find_trace", "load"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(name)
