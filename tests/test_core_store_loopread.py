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
        reader.budget_s = 60.0  # a loaded machine must not move these to the thread
        moved = reader.moved  # the store's own reads while it opened had the usual budget
        for i in range(20):  # read-your-writes: each commit is seen by the next read
            await store.append([note(f"n{i}")])
            row = await store.fetchone("SELECT count(*) AS c FROM events WHERE type='note.added'")
            assert row is not None and row["c"] == i + 1
        many = await store.fetch_many([("SELECT count(*) AS c FROM events", ()),
                                       ("SELECT max(seq) AS s FROM events", ())])
        assert many[0][0]["c"] == many[1][0]["s"] == 20
        assert reader.moved == moved  # every one of them answered on the loop's thread
    finally:
        await store.close()


async def test_a_read_past_its_budget_moves_to_the_reader_thread(db_path: Path) -> None:
    store = await open_store(db_path)
    try:
        reader = store._loop_reader
        assert reader is not None
        reader.budget_s = 0.0  # any statement of more than a few VM steps is past it
        moved = reader.moved
        row = await store.fetchone(LONG)
        assert row == {"c": 200000}  # the same rows, from the reader thread
        assert reader.moved == moved + 1
        many = await store.fetch_many([("SELECT 1 AS one", ()), (LONG, ())])
        assert many == [[{"one": 1}], [{"c": 200000}]]
        assert reader.moved == moved + 2
        conn = reader._conn
        assert conn is not None and not conn.in_transaction  # nothing pins the WAL
    finally:
        await store.close()


async def test_errors_are_the_reader_threads_own(db_path: Path) -> None:
    store = await open_store(db_path)
    try:
        assert store._loop_reader is not None
        store._loop_reader.budget_s = 60.0
        moved = store._loop_reader.moved
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            await store.fetchall("SELECT * FROM nosuch")
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
            await store.fetchall("DELETE FROM events")  # readers never write
        assert (await store.fetchone("SELECT count(*) AS c FROM events")) == {"c": 0}
        assert store._loop_reader is not None and store._loop_reader.moved == moved + 2
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


async def test_a_read_still_lets_the_loops_other_tasks_run(db_path: Path) -> None:
    """A loop that only reads never starves the others (as a read on a thread never did)."""
    import asyncio

    store = await open_store(db_path)
    try:
        ran = asyncio.Event()
        other = asyncio.create_task(asyncio.sleep(0))
        other.add_done_callback(lambda _t: ran.set())
        reads = 0
        while not ran.is_set():
            await store.fetchone("SELECT 1 AS one")
            reads += 1
            assert reads < 1000
    finally:
        await store.close()


async def test_until_idle_waits_for_workers_that_have_not_started() -> None:
    """`until_idle` right after `run()` was scheduled: a worker not started yet is not idle
    (it counted as idle, and a queued flow was left undone, whenever the first read did not
    happen to yield long enough for `run()` to start the workers)."""
    import asyncio

    from clawtower.core.workers import ComposedEngine

    class Slow:
        name = "slow"
        began = False

        async def run(self, stop: asyncio.Event) -> None:
            self.began = True
            await stop.wait()

        def stop(self) -> None:
            pass

        async def idle(self) -> bool:
            return self.began

    class Store:  # reads that answer without yielding to the loop
        fault = None

        async def last_seq(self) -> int:
            return 0

        async def wait_for_change(self, after: int, timeout: float) -> int:
            await asyncio.sleep(0.001)
            return 0

        def set_hold(self, hold: bool) -> None:
            pass

    w = Slow()
    engine = ComposedEngine(Store(), [w])  # type: ignore[arg-type,list-item]
    runner = asyncio.create_task(engine.run())
    assert await engine.until_idle(timeout_s=30)
    assert w.began
    engine.stop()
    await asyncio.wait_for(runner, 30)
