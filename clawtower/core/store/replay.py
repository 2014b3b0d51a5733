"""Replaying the log into projections, shared by both stores: a logged row as an event,
the empty projection tables, and the comparison of live projections with a replay
(`store verify`; the PostgreSQL store runs it on its local replica)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .schema import PROJECTION_SCHEMA, PROJECTION_TABLES

if TYPE_CHECKING:  # the payload models and projections load on first use (start-up)
    from ..events import StoredEvent


def split_script(script: str) -> list[str]:
    """Split a schema script into statements (triggers contain inner semicolons)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out


def event_of_row(r: Sequence[Any]) -> StoredEvent:
    """A row of the `events` table as the event it logs."""
    from ..events import StoredEvent, decode_logged

    seq, ts, entity, entity_id, type_, actor, role, payload, idem = r
    return StoredEvent(
        seq=seq, ts=ts, entity=entity, entity_id=entity_id, type=type_, actor=actor, role=role,
        payload=decode_logged(seq, type_, payload), idem_key=idem,
    )


_EMPTY: bytes | None = None  # the empty projection tables, serialized (`empty_projections`)


def empty_projections() -> sqlite3.Connection:
    """A fresh in-memory database holding the projection tables, empty. Creating the ~50
    tables and their indexes costs ~11 ms; the process builds them once and copies the
    image after (~0.1 ms): a verify runs after every step of the phase machine's test."""
    global _EMPTY
    fresh = sqlite3.connect(":memory:", isolation_level=None)
    if _EMPTY is not None:
        fresh.deserialize(_EMPTY)
        return fresh
    for statement in split_script(PROJECTION_SCHEMA):
        fresh.execute(statement)
    _EMPTY = fresh.serialize()  # two threads building it at once build the same image
    return fresh


def verify_connection(live: sqlite3.Connection) -> list[str]:
    """Replay `live`'s log into a fresh in-memory database and list every projection table
    that differs (the PostgreSQL store runs this on its local replica)."""
    from . import projections

    fresh = empty_projections()
    try:
        live.execute("BEGIN")  # one snapshot for the log and the projections
        fresh.execute("BEGIN")
        for row in live.execute("SELECT * FROM events ORDER BY seq"):
            projections.apply(fresh, event_of_row(row))
        fresh.execute("COMMIT")
        problems: list[str] = []
        for table, order in PROJECTION_TABLES.items():
            a = live.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
            b = fresh.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
            if a != b:
                sa, sb = set(a), set(b)
                problems.append(
                    f"{table}: {len(a)} live rows vs {len(b)} replayed; "
                    f"{len(sa - sb)} only live, {len(sb - sa)} only replayed"
                )
        live.execute("COMMIT")
        return problems
    finally:
        fresh.close()
        # a replay that failed (an event it cannot read) must not leave the snapshot open:
        # on the PostgreSQL store `live` is the replica, and every later write would fail
        # ("cannot start a transaction within a transaction") and its close hang
        if live.in_transaction:
            live.execute("ROLLBACK")


__all__ = ["empty_projections", "event_of_row", "split_script", "verify_connection"]
