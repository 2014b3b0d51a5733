"""Issue 36: a small write batch commits on the event loop's thread (no thread hand-off);
a batch that is large, would wait for another process's write lock, or follows slow
batches commits on the writer's thread as before, with the same result."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from clawtower.core import events as ev
from clawtower.core.errors import StoreError
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.loopwrite import LoopWrites, begin_now
from clawtower.core.store.sqlite import SQLiteStore


def note(text: str) -> NewEvent:
    return NewEvent(entity_id="n-1", actor="a", role="system", payload=ev.Note(text=text))


def noting(text: str, threads: list[int]) -> Any:
    """A command that appends a note and records the thread it ran on."""
    def command(tx: Any) -> int:
        threads.append(threading.get_ident())
        return int(tx.emit(note(text)).seq)
    return command


@pytest.fixture
async def sqlite_store(db_path: Path) -> AsyncIterator[Any]:
    """The store on `db_path` (SQLite: only it commits on the loop's thread), closed after."""
    store = await open_store(db_path)
    try:
        yield store
    finally:
        await store.close()


def loop_writes(store: Any) -> LoopWrites:
    here = store.writes_here
    assert here is not None
    return here


async def count_notes(store: SQLiteStore) -> int:
    row = await store.fetchone("SELECT count(*) AS c FROM events WHERE type='note.added'")
    assert row is not None
    return int(row["c"])


async def test_a_small_batch_commits_on_the_loop_thread_and_is_durable(db_path: Path) -> None:
    store = await open_store(db_path, synchronous="FULL")
    here = loop_writes(store)
    here.budget_s = here.heavy_s = 60.0  # a loaded machine must not move these
    loop_thread = threading.get_ident()
    threads: list[int] = []
    try:
        seqs = [await store.execute(noting(f"n{i}", threads)) for i in range(5)]
        assert threads == [loop_thread] * 5 and here.inline >= 5 and here.moved == 0
        assert seqs == sorted(seqs) and await count_notes(store) == 5
    finally:
        await store.close()
    # committed, not only visible: another connection reads them after the close
    with sqlite3.connect(db_path) as raw:
        assert raw.execute("SELECT count(*) FROM events WHERE type='note.added'"
                           ).fetchone()[0] == 5


async def test_a_batch_of_more_than_max_jobs_commits_on_the_writer_thread(
        sqlite_store: Any) -> None:
    store = sqlite_store
    threads: list[int] = []
    n = loop_writes(store).max_jobs + 1
    # queued before the writer runs: it takes them into one batch
    futures = [store.submit(noting(f"n{i}", threads)) for i in range(n)]
    seqs = await asyncio.gather(*futures)
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
    assert seqs == list(range(seqs[0], seqs[0] + n))  # one batch, in order
    # the next small one is on the loop's thread again
    await store.execute(noting("after", threads))
    assert threads[-1] == threading.get_ident()


async def test_a_write_lock_held_elsewhere_waits_on_the_writer_thread_not_the_loop(
        sqlite_store: Any, db_path: Path) -> None:
    store = sqlite_store
    threads: list[int] = []
    here = loop_writes(store)
    other = sqlite3.connect(db_path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's write in progress
        task = asyncio.create_task(store.execute(noting("blocked", threads)))
        # the loop is free meanwhile: this test's own awaits run while the write waits
        while here.moved == 0:
            await asyncio.sleep(0.005)
        assert not task.done() and threads == []
        other.execute("COMMIT")
        await task
        assert len(threads) == 1
        assert threads[0] != threading.get_ident()  # it waited, and ran, on the thread
        assert await count_notes(store) == 1
        # the lock is gone, but the store keeps to the thread for its back-off
        await store.execute(noting("next", threads))
        assert threads[-1] != threading.get_ident()
    finally:
        other.close()


async def test_a_heavy_batch_sends_the_next_ones_to_the_thread(sqlite_store: Any) -> None:
    store = sqlite_store
    threads: list[int] = []
    store.writes_here = LoopWrites(heavy_s=0.01, backoff_s=60.0, budget_s=60.0)

    def heavy(tx: Any) -> None:
        threads.append(threading.get_ident())
        time.sleep(0.03)
        tx.emit(note("heavy"))

    await store.execute(heavy)
    await store.execute(noting("next", threads))
    assert threads[0] == threading.get_ident() and threads[1] != threading.get_ident()
    assert store.writes_here.moved == 1 and await count_notes(store) == 2


async def test_a_failing_command_rolls_back_alone_on_either_thread(sqlite_store: Any) -> None:
    store = sqlite_store
    here = loop_writes(store)

    def failing(tx: Any) -> None:
        tx.emit(note("lost"))
        raise StoreError("refused")

    for on_loop in (True, False):
        if not on_loop:
            here.back_off()
        good: list[int] = []
        ok = store.submit(noting("kept", good))
        bad = store.submit(failing)
        await ok
        with pytest.raises(StoreError, match="refused"):
            await bad
        assert (good[0] == threading.get_ident()) is on_loop
    rows = await store.fetchall("SELECT payload FROM events WHERE type='note.added'")
    assert [json.loads(r["payload"])["text"] for r in rows] == ["kept", "kept"]


def test_the_policy_moves_on_an_average_over_budget_or_one_heavy_batch() -> None:
    w = LoopWrites(budget_s=0.005, heavy_s=0.05, backoff_s=60.0, max_jobs=8)
    assert w.fits(8) and not w.fits(9)
    w.took(0.012)  # one slow commit (a scheduler's delay): the average is 3 ms
    assert w.fits(1) and w.moved == 0
    w.took(0.012)  # two in a row: 5.25 ms on average, over the budget
    assert not w.fits(1) and w.moved == 1 and w.average == 0.0
    w = LoopWrites(budget_s=0.005, heavy_s=0.05, backoff_s=0.0)
    w.took(0.06)
    assert w.moved == 1 and w.fits(1)  # a back-off of 0 s is over at once


def test_begin_now_refuses_to_wait_and_restores_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "lock.db"
    a = sqlite3.connect(path, isolation_level=None)
    b = sqlite3.connect(path, isolation_level=None)
    try:
        a.execute("PRAGMA journal_mode=WAL")
        a.execute("CREATE TABLE t (x)")
        b.execute("PRAGMA busy_timeout=30000")
        a.execute("BEGIN IMMEDIATE")
        t0 = time.perf_counter()
        assert begin_now(b, 30000) is False and not b.in_transaction
        assert time.perf_counter() - t0 < 5  # refused, not waited for 30 s
        assert b.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        a.execute("COMMIT")
        assert begin_now(b, 30000) is True and b.in_transaction
        assert b.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        b.execute("COMMIT")
    finally:
        a.close()
        b.close()
