"""Projections of the trigger events (tables created by schema migration 8).

Pure functions of the event and of rows earlier events wrote, never the clock: the queue
rebuilt from the log is the queue that was live.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ..events import StoredEvent
from ..store.projections import canonical_json as _j
from ..store.projections import projects
from . import events as tev
from .ratelimit import count_failure, hook_scope


def _set(db: sqlite3.Connection, e: StoredEvent, sets: str, params: tuple[Any, ...]) -> None:
    db.execute(f"UPDATE trigger_items SET {sets}, last_seq=? WHERE id=?",
               (*params, e.seq, e.entity_id))


@projects(tev.TriggerReceived)
def _received(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerReceived)
    db.execute(
        "INSERT INTO trigger_items (id, seq, expert, trigger, process, source, lane, mode,"
        " status, dedupe, payload, inputs, warning, received_at, last_seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
        (e.entity_id, e.seq, p.expert, p.trigger, p.process, p.source, p.lane, p.mode,
         p.dedupe, _j(p.payload), _j(p.inputs), p.warning, e.ts, e.seq))
    if p.dedupe is not None and p.dedupe_until is not None:
        db.execute(
            "INSERT INTO trigger_dedupe (expert, trigger, key, item_id, until) VALUES"
            " (?, ?, ?, ?, ?) ON CONFLICT(expert, trigger, key) DO UPDATE SET"
            " item_id=excluded.item_id, until=excluded.until",
            (p.expert, p.trigger, p.dedupe, e.entity_id, p.dedupe_until))
    if p.fire_at is not None:
        db.execute(
            "INSERT INTO trigger_cron (expert, trigger, last_fire, item_id) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(expert, trigger) DO UPDATE SET last_fire=excluded.last_fire,"
            " item_id=excluded.item_id", (p.expert, p.trigger, p.fire_at, e.entity_id))


@projects(tev.TriggerSkipped)
def _skipped(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerSkipped)
    db.execute(
        "INSERT INTO trigger_items (id, seq, expert, trigger, process, source, lane, mode,"
        " status, dedupe, payload, inputs, error, received_at, ended_at, last_seq)"
        " VALUES (?, ?, ?, ?, '', ?, '', '', 'skipped', ?, ?, '{}', ?, ?, ?, ?)",
        (e.entity_id, e.seq, p.expert, p.trigger, p.source, p.dedupe, _j(p.payload),
         f"duplicate of {p.duplicate_of}", e.ts, e.ts, e.seq))


@projects(tev.TriggerClaimed)
def _claimed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerClaimed)
    _set(db, e, "status='running', owner=?, attempt=?, started_at=?",
         (p.owner, p.attempt, e.ts))


@projects(tev.TriggerLinked)
def _linked(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerLinked)
    _set(db, e, "run_id=?", (p.run_id,))


@projects(tev.TriggerPaused)
def _paused(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerPaused)
    _set(db, e, "status='paused', run_id=?", (p.run_id,))


@projects(tev.TriggerFinished)
def _finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerFinished)
    _set(db, e, "status='done', result=?, error=NULL, ended_at=?",
         (_j({"output": p.output, "delivery": p.delivery}), e.ts))


@projects(tev.TriggerFailed)
def _failed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerFailed)
    if p.retry_at is not None:
        _set(db, e, "status='retry', not_before=?, error=?, owner=NULL",
             (p.retry_at, p.error))
    else:
        status = {"dead_letter": "dead_letter", "abandon": "abandoned"}.get(p.action,
                                                                             "escalated")
        _set(db, e, "status=?, action=?, error=?, ended_at=?, owner=NULL",
             (status, p.action, p.error, e.ts))


@projects(tev.TriggerSlaBreached)
def _sla(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.TriggerSlaBreached)
    _set(db, e, "warning=?", (f"sla {p.sla} breached ({p.elapsed_s:.1f}s): {p.action}",))


@projects(tev.DeadLetterRetried)
def _dl_retried(db: sqlite3.Connection, e: StoredEvent) -> None:
    _set(db, e, "status='queued', attempt=0, not_before=0, action=NULL, ended_at=NULL", ())


@projects(tev.DeadLetterDropped)
def _dl_dropped(db: sqlite3.Connection, e: StoredEvent) -> None:
    _set(db, e, "status='dropped'", ())


@projects(tev.EscalationResolved)
def _resolved(db: sqlite3.Connection, e: StoredEvent) -> None:
    _set(db, e, "status='failed'", ())


@projects(tev.ChannelScanned)
def _scanned(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.ChannelScanned)
    db.execute("INSERT INTO trigger_cursor (name, seq) VALUES (?, ?) ON CONFLICT(name) DO"
               " UPDATE SET seq=max(seq, excluded.seq)", (e.entity_id, p.seq))


@projects(tev.HookAuthFailed)
def _auth_failed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.HookAuthFailed)
    db.execute("INSERT INTO trigger_auth_failures (seq, expert, trigger, address, kind, reason,"
               " error_id, at) VALUES (?, ?, ?, ?, 'failed', ?, ?, ?)",
               (e.seq, p.expert, p.trigger, p.address, p.reason, p.error_id, e.ts))
    if p.counted:
        count_failure(db, e, hook_scope(p.expert, p.trigger), p.address, p.window_s)



@projects(tev.HookAuthThrottled)
def _auth_throttled(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, tev.HookAuthThrottled)
    db.execute("INSERT INTO trigger_auth_failures (seq, expert, trigger, address, kind, reason,"
               " error_id, at) VALUES (?, ?, ?, ?, 'throttled', ?, ?, ?)",
               (e.seq, p.expert, p.trigger, p.address,
                f"{p.failures} failures in {p.window_s:g}s", p.error_id, e.ts))
