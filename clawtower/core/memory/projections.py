"""Projections of the memory events (tables created by schema migration 14): the
`memories` rows and their FTS5 index `memory_fts`, kept by the same handlers live and in a
replay, so `store verify` / `store rebuild` cover the index too.

A memory's id (the FTS rowid) is the seq of the event that first stored its key: a replay
gives every row the same id. `memory.embedded` (migration 16) fills `embedding_cache` and
links the memory to its vector in `memory_vectors` while the memory holds the content that
was embedded; a new content unlinks it, a forget drops the link (the cache stays)."""

from __future__ import annotations

import base64
import hashlib
import sqlite3

from ..events import RepairedValue, StoredEvent
from ..store.projections import finds_repairs, projects, repairs
from .events import MemoryEmbedded, MemoryForgotten, MemoryStored

# Expiries a calendar can show: 0001-01-01 to 9999-12-31 UTC. A release before issue 34
# imported any number (1e308, Infinity); `store repair` replaces one outside by None.
USABLE_TIMES = (-62135596800.0, 253402300799.0)


def content_sha(content: str) -> str:
    """The embedding cache's key for a text (with the model's name)."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


@projects(MemoryStored)
def _stored(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, MemoryStored)
    row = db.execute("SELECT id, forgotten FROM memories WHERE namespace=? AND key=?",
                     (p.namespace, p.key)).fetchone()
    if row is None:
        mid = e.seq
        db.execute(
            "INSERT INTO memories (id, namespace, key, content, category, source_session,"
            " source_turn, reason, created_by, updated_by, created_at, updated_at, expires_at,"
            " forgotten, forgotten_reason, last_seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', ?)",
            (mid, p.namespace, p.key, p.content, p.category, p.source_session, p.source_turn,
             p.reason, e.actor, e.actor, e.ts, e.ts, p.expires_at, e.seq))
    else:
        mid = int(row[0])
        db.execute(
            "UPDATE memories SET content=?, category=?, source_session=?, source_turn=?,"
            " reason=?, updated_by=?, updated_at=?, expires_at=?, forgotten=0,"
            " forgotten_reason='', last_seq=? WHERE id=?",
            (p.content, p.category, p.source_session, p.source_turn, p.reason, e.actor, e.ts,
             p.expires_at, e.seq, mid))
        db.execute("DELETE FROM memory_fts WHERE rowid=?", (mid,))
        db.execute("DELETE FROM memory_vectors WHERE id=? AND sha<>?",
                   (mid, content_sha(p.content)))
    db.execute("INSERT INTO memory_fts (rowid, content, key, mid) VALUES (?, ?, ?, ?)",
               (mid, p.content, p.key, mid))


@projects(MemoryForgotten)
def _forgotten(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, MemoryForgotten)
    row = db.execute("SELECT id FROM memories WHERE namespace=? AND key=?",
                     (p.namespace, p.key)).fetchone()
    if row is None:
        return
    db.execute("UPDATE memories SET forgotten=1, forgotten_reason=?, updated_by=?,"
               " updated_at=?, last_seq=? WHERE id=?",
               (p.reason, e.actor, e.ts, e.seq, row[0]))
    db.execute("DELETE FROM memory_fts WHERE rowid=?", (row[0],))
    db.execute("DELETE FROM memory_vectors WHERE id=?", (row[0],))


@projects(MemoryEmbedded)
def _embedded(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, MemoryEmbedded)
    db.execute("INSERT OR IGNORE INTO embedding_cache (sha, model, dim, vec) VALUES"
               " (?, ?, ?, ?)", (p.sha, p.model, p.dim, base64.b64decode(p.vector)))
    row = db.execute("SELECT id, content, forgotten FROM memories WHERE namespace=? AND"
                     " key=?", (p.namespace, p.key)).fetchone()
    if row is None or row[2] or content_sha(row[1]) != p.sha:
        return  # the memory changed (or went) since: only the cache keeps the vector
    db.execute("INSERT OR REPLACE INTO memory_vectors (id, model, sha, seq) VALUES"
               " (?, ?, ?, ?)", (row[0], p.model, p.sha, e.seq))
    db.execute("UPDATE memories SET last_seq=? WHERE id=?", (e.seq, row[0]))


@finds_repairs
def _unusable_expiries(db: sqlite3.Connection) -> list[RepairedValue]:
    """Memories whose expiry has no calendar date (±Infinity projected live while the log
    said null, or 1e308 logged): each named by the `memory.stored` event that set it."""
    low, high = USABLE_TIMES
    out = []
    for ns, key, was in db.execute(
            "SELECT namespace, key, expires_at FROM memories WHERE expires_at IS NOT NULL"
            " AND NOT (expires_at BETWEEN ? AND ?) ORDER BY id", (low, high)).fetchall():
        entity_id = f"{ns}/{key}"
        seq = db.execute("SELECT max(seq) FROM events WHERE entity='memory' AND entity_id=?"
                         " AND type=?", (entity_id, MemoryStored.TYPE)).fetchone()[0]
        out.append(RepairedValue(seq=int(seq or 0), type=MemoryStored.TYPE,
                                 entity_id=entity_id, field="expires_at",
                                 was=_as_written(float(was)), now=None))
    return out


def _as_written(x: float) -> str:
    return "Infinity" if x == float("inf") else "-Infinity" if x == float("-inf") else repr(x)


@repairs(MemoryStored)
def _repair_expiry(db: sqlite3.Connection, e: StoredEvent, v: RepairedValue) -> None:
    """The memory's expiry becomes `v.now` if it is still one a calendar cannot show (a
    later write may have replaced it: then it stays). The row's `last_seq` becomes the
    repair's either way: a live row may hold Infinity where a replay holds NULL already."""
    if v.field != "expires_at":
        return
    ns, key = v.entity_id.split("/", 1)
    low, high = USABLE_TIMES
    db.execute("UPDATE memories SET expires_at=CASE WHEN expires_at IS NOT NULL AND NOT"
               " (expires_at BETWEEN ? AND ?) THEN ? ELSE expires_at END, last_seq=?"
               " WHERE namespace=? AND key=?", (low, high, v.now, e.seq, ns, key))
