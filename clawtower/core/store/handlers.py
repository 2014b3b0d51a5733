"""Which handler projects which event type, and applying them: the projections' registry.

A module registers its handlers with `projects` (and a repair with `repairs`) when it is
imported; `apply` loads, on the first event of a type, the modules that project it (core's
own, `clawtower.core.store.projections`, and those its type's first word names), so a
command that writes workflow events never imports the sessions' or flows' projections.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from .. import events as ev
from ..events import StoredEvent
from ..lazy import LazyModules

Handler = Callable[[sqlite3.Connection, StoredEvent], None]
_HANDLERS: dict[str, list[Handler]] = {}

# The other modules that register projections, in the order their handlers of one event
# type run, after core's own (`workflows` first: the order its handlers had when they lived
# in core/store/projections.py). A module loads with the first event applied (live or in a
# replay) of a type it projects, not with the store: a command that only reads tables
# builds no payload model, and one that writes workflow events loads no sessions, flows or
# ACP projection (start-up: BENCHMARKS.md).
PROJECTION_MODULES = tuple(f"clawtower.core.{m}.projections" for m in (
    "workflows", "acp", "flows", "meetings", "memory", "sessions", "triggers", "signin"))
_projection_modules = LazyModules(*PROJECTION_MODULES)

# Which of them project an event type, by the type's first word (beside core's own
# handlers, always loaded): a word not listed (`store.repaired`, whose repairs any module
# registers) loads them all. tests/test_core_imports.py checks it against every handler.
PROJECTORS_OF: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("agent", "approval", "artifact", "attempt", "circuit", "expert", "lease",
                     "note", "permission", "retry", "review", "side_effect", "task", "tool",
                     "toolcall", "traces", "turn"), ()),
    "acp": ("acp",), "agentspec": ("sessions",), "console": ("signin",), "flow": ("flows",),
    "meeting": ("meetings",), "memory": ("memory",), "session": ("flows", "sessions"),
    "trigger": ("triggers",), "turnjob": ("sessions",), "workflow": ("workflows",)}
CORE = "clawtower.core.store.projections"
_RANK = {m: i for i, m in enumerate((CORE, *PROJECTION_MODULES))}
_READY: dict[str, tuple[Handler, ...]] = {}  # type -> its handlers, their modules loaded


def load_all() -> None:
    """Register every projection handler (idempotent; cheap after the first call)."""
    importlib.import_module(CORE)
    _projection_modules.load()


def projects(*types: type[ev.Payload]) -> Callable[[Handler], Handler]:
    """Register a handler for payload types. Later features register their own tables."""

    def wrap(fn: Handler) -> Handler:
        for t in types:
            _HANDLERS.setdefault(t.TYPE, []).append(fn)
            _READY.pop(t.TYPE, None)  # a module loaded since: its handler joins the type's
        return fn

    return wrap


# ------------------------------------------------------------------ repairs (issue 34)
# A value a release before the writer's check logged or projected that no reader can use is
# replaced by a `store.repaired` event (`clawtower store repair`, core/store/repair.py): a
# module registers how to find such values in its tables (`finds_repairs`) and how the event
# replaces one (`repairs`, a projection handler like any other: live and in replays alike).

Repairer = Callable[[sqlite3.Connection, StoredEvent, ev.RepairedValue], None]
Finder = Callable[[sqlite3.Connection], list[ev.RepairedValue]]
_REPAIRERS: dict[str, list[Repairer]] = {}
_FINDERS: list[Finder] = []


def repairs(*types: type[ev.Payload]) -> Callable[[Repairer], Repairer]:
    """Register how a `store.repaired` event replaces a value once carried by `types`."""

    def wrap(fn: Repairer) -> Repairer:
        for t in types:
            _REPAIRERS.setdefault(t.TYPE, []).append(fn)
        return fn

    return wrap


def finds_repairs(fn: Finder) -> Finder:
    """Register a search of the projections (and the log beside them) for unusable values."""
    _FINDERS.append(fn)
    return fn


def find_repairs(conn: sqlite3.Connection) -> list[ev.RepairedValue]:
    """Every value a repair should replace, by every registered finder, in log order."""
    load_all()
    found = [v for fn in _FINDERS for v in fn(conn)]
    return sorted(found, key=lambda v: (v.seq, v.field))


def apply(conn: sqlite3.Connection, event: StoredEvent) -> None:
    handlers = _READY.get(event.type)
    if handlers is None:
        handlers = _handlers_of(event.type)
    for handler in handlers:
        handler(conn, event)


def _handlers_of(type_name: str) -> tuple[Handler, ...]:
    """The handlers of `type_name` once every module that projects it is loaded, in the
    order of `PROJECTION_MODULES` whatever order the modules were loaded in."""
    importlib.import_module(CORE)  # core's own handlers (tasks, approvals, leases, turns)
    modules = PROJECTORS_OF.get(type_name.split(".", 1)[0])
    if modules is None:
        load_all()
    else:
        for m in modules:
            importlib.import_module(f"clawtower.core.{m}.projections")
    # a stable sort: one module's handlers of a type keep their order of registration
    ready = tuple(sorted(_HANDLERS.get(type_name, ()),
                         key=lambda h: _RANK.get(h.__module__, len(_RANK))))
    _READY[type_name] = ready
    return ready


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The projections' one JSON form (sorted keys, no spaces): the same text live and in a
    replay, so `store verify` compares rows as equal. One encoder for every call, the same
    output as `json.dumps` with these options, which builds one per call (2.1 -> 1.5 µs)."""
    return _CANONICAL.encode(value)
