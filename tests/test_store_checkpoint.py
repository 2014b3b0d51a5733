"""WAL checkpoints off the writer's path (core/store/checkpoint.py): past CHECKPOINT_FRAMES
waiting frames a background PASSIVE pass copies the WAL into the database on its own
connection, the WAL restarts instead of growing, the writer keeps SQLite's auto-checkpoint
only as the bound, and nothing written is lost. Off by default where SQLite has the WAL-reset
race (before 3.51.3): the first test forces it on a throwaway store."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import struct
from pathlib import Path

from clawtower.core import events as ev
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.checkpoint import CHECKPOINT_FRAMES, WAL_BOUND_FRAMES, WalIndex
from clawtower.core.store.sqlite import SQLiteStore

BIG = "x" * 3000  # about one WAL frame (page) per event


def notes(i: int, n: int) -> list[NewEvent]:
    return [NewEvent(entity_id=f"n-{i}-{j}", actor="t", role="system",
                     payload=ev.Note(text=f"{i}-{j} {BIG}")) for j in range(n)]


async def autocheckpoint(store: SQLiteStore) -> int:
    """The writer connection's wal_autocheckpoint, read on its own thread."""
    conn = store._writer
    assert conn is not None
    return int(await conn._execute(  # type: ignore[no-untyped-call]
        lambda: conn._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]))


async def write_past_threshold(store: SQLiteStore) -> int:
    """Append batches until a background pass has run, waiting for it before the next
    batch (so it copies every frame and the next commit can restart the WAL)."""
    written = 0
    for i in range(3 * CHECKPOINT_FRAMES // 50):
        await store.append(notes(i, 50))
        written += 50
        if store._checkpoint_task is not None:
            await store._checkpoint_task
        if store.checkpoints:
            break
    return written


async def test_a_background_pass_keeps_the_wal_short_and_loses_nothing(tmp_path: Path,
                                                                       monkeypatch):
    # forced on: by default it runs only on an SQLite with the WAL-reset fix (RACE_FREE)
    monkeypatch.setattr(SQLiteStore, "background_checkpoints", True)
    path = tmp_path / "s.db"
    store = await open_store(path, synchronous="FULL")
    wal = WalIndex(str(path))
    try:
        assert await autocheckpoint(store) == WAL_BOUND_FRAMES
        written = await write_past_threshold(store)
        assert store.checkpoints >= 1, "no background checkpoint ran"
        pending = wal.pending()
        assert pending == 0
        # the frames the pass copied are reused: the next commits restart the WAL
        size = os.path.getsize(f"{path}-wal")
        for i in range(5):
            await store.append(notes(1000 + i, 50))
            written += 50
        assert os.path.getsize(f"{path}-wal") == size
        assert await store.last_seq() == written
    finally:
        await store.close()
        wal.close()
    reopened = await open_store(path)
    try:
        assert await reopened.last_seq() == written
    finally:
        await reopened.close()


async def test_without_it_sqlite_checkpoints_in_the_commit_as_before(tmp_path: Path,
                                                                     monkeypatch):
    monkeypatch.setattr(SQLiteStore, "background_checkpoints", False)
    path = tmp_path / "s.db"
    store = await open_store(path)
    try:
        assert await autocheckpoint(store) == 1000
        await store.append(notes(0, 3 * CHECKPOINT_FRAMES // 2))
        await asyncio.sleep(0)
        assert store.checkpoints == 0 and store._checkpoint_task is None
    finally:
        await store.close()


def test_it_is_off_where_sqlite_has_the_wal_reset_race():
    assert SQLiteStore.background_checkpoints is (sqlite3.sqlite_version_info >= (3, 51, 3))


def test_an_unknown_wal_index_leaves_checkpoints_to_sqlite(tmp_path: Path):
    db = tmp_path / "s.db"
    header = bytearray(136)
    struct.pack_into("=I", header, 0, 1234)  # not the WAL-index version SQLite writes
    Path(f"{db}-shm").write_bytes(bytes(header))
    wal = WalIndex(str(db))
    assert wal.pending() is None and not wal.usable
    wal.close()
    assert WalIndex(str(tmp_path / "missing.db")).pending() is None


def test_the_header_read_matches_what_sqlite_reports(tmp_path: Path):
    db = str(tmp_path / "s.db")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x TEXT)")
    for i in range(40):
        conn.execute("INSERT INTO t VALUES (?)", (BIG + str(i),))
    wal = WalIndex(db)
    try:
        before = wal.pending()
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and before == log > 40
        assert wal.pending() == log - done == 0
    finally:
        wal.close()
        conn.close()
