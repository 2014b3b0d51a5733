"""Issue 36: the SQLite store reads on the event loop's thread (no thread hand-off), and a
read that would hold the loop past its budget, meets a lock or fails moves to the reader
thread with the same rows and the same errors."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from clawtower.core import events as ev
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.loopread import LoopReader

# a statement of millions of VM steps; the tests set the budget to zero, so even a fast
# machine must move it
LONG = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)"
        " SELECT count(*) AS c FROM n")


def note(text: str) -> NewEvent:
    return NewEvent(entity_id="n-1", actor="a", role="system", payload=ev.Note(text=text))


async def test_reads_run_on_the_loop_and_see_every_commit(db_path: Path) -> None:
    store = await open_store(db_path)
    try:
        reader = store._loop_reader
        assert reader is not None
        for i in range(20):  # read-your-writes: each commit is seen by the next read
            await store.append([note(f"n{i}")])
            row = await store.fetchone("SELECT count(*) AS c FROM events WHERE type='note.added'")
            assert row is not None and row["c"] == i + 1
        many = await store.fetch_many([("SELECT count(*) AS c FROM events", ()),
                                       ("SELECT max(seq) AS s FROM events", ())])
        assert many[0][0]["c"] == many[1][0]["s"] == 20
        assert reader.moved == 0  # every one of them answered on the loop's thread
    finally:
        await store.close()


async def test_a_read_past_its_budget_moves_to_the_reader_thread(db_path: Path) -> None:
    store = await open_store(db_path)
    try:
        reader = store._loop_reader
        assert reader is not None
        reader.budget_s = 0.0  # any statement of more than a few VM steps is past it
        row = await store.fetchone(LONG)
        assert row == {"c": 200000}  # the same rows, from the reader thread
        assert reader.moved == 1
        many = await store.fetch_many([("SELECT 1 AS one", ()), (LONG, ())])
        assert many == [[{"one": 1}], [{"c": 200000}]]
        assert reader.moved == 2
        conn = reader._conn
        assert conn is not None and not conn.in_transaction  # nothing pins the WAL
    finally:
        await store.close()


async def test_errors_are_the_reader_threads_own(db_path: Path) -> None:
    store = await open_store(db_path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await store.fetchall("SELECT * FROM nosuch")
        with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
            await store.fetchall("DELETE FROM events")  # readers never write
        assert (await store.fetchone("SELECT count(*) AS c FROM events")) == {"c": 0}
        assert store._loop_reader is not None and store._loop_reader.moved == 2
    finally:
        await store.close()


def test_another_thread_never_uses_the_loop_connection(db_path: Path) -> None:
    sqlite3.connect(db_path).close()
    reader = LoopReader(f"file:{db_path}?mode=ro")
    try:
        assert reader.fetchall("SELECT 1 AS one") == [{"one": 1}]
        out: list[object] = []
        th = threading.Thread(target=lambda: out.append(reader.fetchall("SELECT 1 AS one")))
        th.start()
        th.join()
        assert out == [None]  # not ours to use there: the caller reads its own way
    finally:
        reader.close()
    assert reader.fetchall("SELECT 1") is None  # closed: the reader thread answers
