"""Reading traces from a store: its event log (rows of `events`, or `events_after`), nothing
else."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import NotFound
from ..events import StoredEvent
from ..store.interface import Store
from .builder import Redact, derive
from .rows import SELECT, LogEvent, row_event
from .spans import Trace

PAGE = 5000


async def store_salt(store: Store) -> str:
    """The store's identity in span ids: its first event's commit time (kept by a copy)."""
    first = await store.events_after(0, 1)
    return repr(first[0].ts) if first else ""


async def read_events(store: Store, after: int = 0) -> list[StoredEvent]:
    events: list[StoredEvent] = []
    seq = after
    while True:
        batch = await store.events_after(seq, PAGE)
        events.extend(batch)
        if len(batch) < PAGE:
            return events
        seq = batch[-1].seq


async def read_log(store: Store, after: int = 0) -> list[LogEvent]:
    """The log after `after` as rows, each payload decoded only as far as it is read
    (rows.py): what `load` derives from, several times faster than `read_events`."""
    events: list[LogEvent] = []
    seq = after
    while True:
        rows = await store.fetchall(SELECT, (seq, PAGE))
        events.extend(map(row_event, rows))
        if len(rows) < PAGE:
            return events
        seq = rows[-1]["seq"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a whole log is derived: its 100k rows would be
    traversed again and again for nothing (a third of the derivation's time); what the
    derivation leaves is collected after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def load(store: Store, *, capture_content: bool = False,
               redact: Redact | None = None, in_thread: bool = False) -> list[Trace]:
    """Every trace in the store's log (derived from the whole log: a span's parents may be
    anywhere before it). `in_thread`: derive in a worker thread (the console: the event
    loop keeps drawing while a large log is derived)."""
    events, salt = await read_log(store), await store_salt(store)

    def run() -> list[Trace]:
        with gc_paused():
            return derive(events, salt=salt, capture_content=capture_content, redact=redact)

    return await asyncio.to_thread(run) if in_thread else run()


def matcher(ident: str) -> Callable[[Trace], bool]:
    """A trace is named by its root id, an id inside it (a child session, a linked run) or
    its trace id (hex, or a prefix of 8 or more digits)."""
    low = ident.lower()

    def match(t: Trace) -> bool:
        return (ident == t.root or ident in t.aliases
                or (len(low) >= 8 and t.trace_id.startswith(low)))
    return match


async def find_trace(store: Store, ident: str, *, capture_content: bool = False,
                     redact: Redact | None = None, in_thread: bool = False) -> Trace:
    """The trace `ident` names (NotFound naming it when none does)."""
    match = matcher(ident)
    for t in await load(store, capture_content=capture_content, redact=redact,
                        in_thread=in_thread):
        if match(t):
            return t
    raise NotFound(f"trace {ident!r}: no such trace (give a session, flow, workflow run,"
                   " meeting, task or trigger invocation id, or a trace id)")
