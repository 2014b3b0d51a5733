"""The one rule for storage faults (issue 40), at the store: a write that fails for a reason
of the storage rolls back whole and is either held until the storage takes it (an engine
runs on the store) or refused with a StorageFault naming the store and the cause; never a
secondary error ("cannot rollback - no transaction is active"), never half-written.

The full disk is SQLite's own SQLITE_FULL, at a moment the test chooses: the drill
($CLAWTOWER_DRILL_DISK_FULL) caps the database at its current size while its flag exists."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from pathlib import Path

import pytest

from clawtower.core import events as ev
from clawtower.core.errors import StorageFault, StoreError, ValidationError
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.faults import (
    DISK_FULL,
    DRILL_ENV,
    IO_ERROR,
    LOCKED,
    READ_ONLY,
    Backoff,
    cause_of,
)

BIG = "x" * 3000  # a note that needs a new page of its own


def note(text: str = BIG) -> NewEvent:
    return NewEvent(entity_id="n-1", actor="t", role="system", payload=ev.Note(text=text))


@pytest.fixture
def drill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    flag = tmp_path / "disk-full"
    monkeypatch.setenv(DRILL_ENV, str(flag))
    return flag


async def notes(store) -> int:
    row = await store.fetchone("SELECT count(*) AS n FROM events WHERE type='note.added'")
    return int(row["n"])


async def test_a_full_disk_is_said_as_such_and_nothing_is_half_written(tmp_path, drill):
    store = await open_store(tmp_path / "c.db")
    try:
        await store.append([note()])
        drill.touch()
        with pytest.raises(StorageFault) as err:
            for _ in range(50):  # the free room of the last page runs out within a few
                await store.append([note(), note()])
        assert err.value.cause == DISK_FULL and err.value.exit_code == 1
        text = str(err.value)
        assert "disk full" in text and str(tmp_path / "c.db") in text
        assert "cannot rollback" not in text and "no transaction" not in text
        assert store.fault is not None and store.fault.cause == DISK_FULL
        landed = await notes(store)
        assert landed % 2 == 1  # the first, then whole pairs: no pair half-written
        drill.unlink()
        await store.append([note()])
        assert store.fault is None  # a batch landed: the fault is over
        assert await notes(store) == landed + 1
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_held_writes_wait_for_the_disk_and_land_in_order_once(tmp_path, drill):
    store = await open_store(tmp_path / "c.db")
    told: list[str | None] = []
    store.fault_listeners.append(lambda f: told.append(None if f is None else f.cause))
    try:
        await store.append([note("first")])
        store.set_hold(True)
        drill.touch()
        writes = [asyncio.ensure_future(store.append([note(f"w{i}"), note()]))
                  for i in range(30)]
        await asyncio.wait_for(_until(lambda: store.fault is not None), 30)
        await asyncio.sleep(0.3)  # a few retries: every write still waits, none failed
        assert not any(w.done() and w.exception() for w in writes)
        waiting = sum(not w.done() for w in writes)
        assert waiting > 0
        drill.unlink()
        seqs = await asyncio.wait_for(asyncio.gather(*writes), 30)
        assert [s[0] for s in seqs] == sorted(s[0] for s in seqs)  # in order
        assert told == [DISK_FULL, None]
        rows = await store.fetchall("SELECT payload FROM events WHERE type='note.added'")
        texts = [r["payload"] for r in rows]
        assert len(texts) == 61 and len(set(t for t in texts if BIG not in t)) == 31  # once
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_write_that_must_answer_is_refused_while_the_others_wait(tmp_path, drill):
    """`hold=False` (a webhook's intake): refused with the fault within one retry, even
    queued behind a held batch, while the held writes go on waiting."""
    store = await open_store(tmp_path / "c.db")
    try:
        await store.append([note()])
        store.set_hold(True)
        drill.touch()
        held = [asyncio.ensure_future(store.append([note(), note()])) for _ in range(20)]
        await asyncio.wait_for(_until(lambda: store.fault is not None), 30)
        with pytest.raises(StorageFault, match="disk full"):
            await asyncio.wait_for(
                store.execute(lambda tx: tx.emit(note()).seq, hold=False), 30)
        assert not all(h.done() for h in held)
        drill.unlink()
        await asyncio.wait_for(asyncio.gather(*held), 30)
    finally:
        await store.close()


async def test_closing_during_a_held_fault_fails_the_waiting_writes_and_never_hangs(
        tmp_path, drill):
    store = await open_store(tmp_path / "c.db")
    await store.append([note()])
    store.set_hold(True)
    drill.touch()
    waiting = [asyncio.ensure_future(store.append([note(), note()])) for _ in range(20)]
    await asyncio.wait_for(_until(lambda: store.fault is not None), 30)
    await asyncio.wait_for(store.close(), 30)
    failed = [w.exception() for w in waiting if w.exception() is not None]
    assert failed and all(isinstance(e, StorageFault) for e in failed)
    drill.unlink()
    again = await open_store(tmp_path / "c.db")
    try:
        assert await again.verify_projections() == []
    finally:
        await again.close()


async def test_a_refused_command_is_not_a_storage_fault(tmp_path, drill):
    """The command's own refusal (a ValidationError) fails that command alone, held or not."""
    store = await open_store(tmp_path / "c.db")
    try:
        store.set_hold(True)

        def refuse(tx):
            raise ValidationError("no such thing")

        with pytest.raises(ValidationError):
            await asyncio.wait_for(store.execute(refuse), 30)
        assert store.fault is None
    finally:
        await store.close()


def _sqlite_error(name: str, text: str) -> sqlite3.Error:
    exc = sqlite3.OperationalError(text)
    exc.sqlite_errorname = name  # type: ignore[attr-defined]
    return exc


@pytest.mark.parametrize(("exc", "cause"), [
    (_sqlite_error("SQLITE_FULL", "database or disk is full"), DISK_FULL),
    (_sqlite_error("SQLITE_READONLY_DBMOVED", "attempt to write a readonly database"),
     READ_ONLY),
    (_sqlite_error("SQLITE_IOERR_WRITE", "disk I/O error"), IO_ERROR),
    (_sqlite_error("SQLITE_BUSY", "database is locked"), LOCKED),
    (sqlite3.OperationalError("database or disk is full"), DISK_FULL),  # no error name
    (OSError(errno.ENOSPC, "No space left on device"), DISK_FULL),
    (OSError(errno.EROFS, "Read-only file system"), READ_ONLY),
    (OSError(errno.EIO, "Input/output error"), IO_ERROR),
    (StorageFault("p", READ_ONLY), READ_ONLY),
])
def test_storage_causes_are_told_from_the_work_s_own_errors(exc, cause):
    assert cause_of(exc) == cause
    wrapped = StoreError("write failed")
    wrapped.__cause__ = exc
    assert cause_of(wrapped) == cause  # found through what it was raised from


@pytest.mark.parametrize("exc", [
    sqlite3.IntegrityError("UNIQUE constraint failed: events.idem_key"),
    _sqlite_error("SQLITE_CORRUPT", "database disk image is malformed"),  # not transient
    ValidationError("bad input"), ValueError("a bug"),
    OSError(errno.ENOENT, "No such file"),
])
def test_the_work_s_own_errors_are_not_storage_faults(exc):
    assert cause_of(exc) is None


def test_backoff_is_bounded_and_jittered():
    b = Backoff(first=0.1, cap=1.0, rng=lambda: 1.0)
    assert [round(b.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    low = Backoff(first=0.1, cap=1.0, rng=lambda: 0.0)
    assert [round(low.next(), 3) for _ in range(2)] == [0.05, 0.1]  # the lower half


async def _until(cond) -> None:
    while not cond():
        await asyncio.sleep(0.01)
