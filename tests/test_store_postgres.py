"""PostgreSQL-only behaviour of the shared store: a write whose COMMIT was cut off is never
applied twice (it landed: answered with its result; it did not: run again), the log's
schema version guards against older builds, and an unreachable server is a StoreError.
(A server restart under load: tests/test_store_workers.py.)"""

from __future__ import annotations

import contextlib
from pathlib import Path

import psycopg
import pytest
from reaper import throwaway_folder

from clawtower.core import events as ev
from clawtower.core.errors import StoreError
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.postgres import open_postgres
from clawtower.core.store.schema import LATEST_VERSION


def note(text: str) -> NewEvent:
    return NewEvent(entity_id="n-1", actor="t", role="system", payload=ev.Note(text=text))


def cut_commit(store, *, lands: bool) -> list[int]:
    """The next batch's last round trip (the pipeline holding its INSERTs, NOTIFY and COMMIT)
    is lost on the wire: the server either committed it (`lands`) or not, and the client sees
    a dead connection either way."""
    conn = store._pg
    real_cursor, real_pipeline = conn.cursor, conn.pipeline
    fired: list[int] = []

    class Cursor:
        def __init__(self, cur):
            self._cur = cur

        def __getattr__(self, name):
            return getattr(self._cur, name)

        def __enter__(self):
            self._cur.__enter__()
            return self

        def __exit__(self, *exc):
            return self._cur.__exit__(*exc)

        def execute(self, query, *args, **kwargs):
            if query == "COMMIT" and not lands and not fired:
                query = "ROLLBACK"
            return self._cur.execute(query, *args, **kwargs)

    @contextlib.contextmanager
    def pipeline():
        with real_pipeline() as p:
            yield p
        if not fired:
            fired.append(1)
            conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    conn.cursor = lambda *a, **k: Cursor(real_cursor(*a, **k))
    conn.pipeline = pipeline
    return fired


@pytest.mark.parametrize("lands", [True, False])
async def test_a_commit_cut_off_is_applied_exactly_once(pg_url, lands):
    store = await open_store(pg_url)
    try:
        await store.append([note("before")])
        runs: list[int] = []

        def command(tx):
            runs.append(1)
            return tx.emit(note("the write")).seq

        fired = cut_commit(store, lands=lands)
        seq = await store.execute(command)
        assert fired == [1]
        # landed: answered from the first run; lost: run once more, on a new connection
        assert len(runs) == (1 if lands else 2)
        assert seq == 2
        texts = [e.payload.text for e in await store.events_after(0)]
        assert texts == ["before", "the write"]
        assert store.retries == (0 if lands else 1)
        assert await store.verify_projections() == []
    finally:
        await store.close()
    again = await open_store(pg_url)  # a fresh replica from the log agrees
    assert [e.payload.text for e in await again.events_after(0)] == ["before", "the write"]
    await again.close()


async def test_a_newer_log_is_refused(pg_url):
    s = await open_store(pg_url)
    await s.append([note("x")])
    await s.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE clawtower_meta SET value=%s WHERE key='schema_version'",
                     (str(LATEST_VERSION + 1),))
    with pytest.raises(StoreError, match=rf"newer clawtower \(schema v{LATEST_VERSION + 1};"):
        await open_store(pg_url)


async def test_an_unreachable_server_is_a_one_line_store_error(pg_url, monkeypatch):
    import time

    monkeypatch.setenv("CLAWTOWER_DB_OPEN_TIMEOUT", "1.5")
    bad = pg_url.replace("host=", "host=/nonexistent")
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"cannot connect: server unreachable .*gave up"
                                         r" after \d+ attempt") as exc:
        await open_store(bad)
    assert 0.5 < time.monotonic() - t0 < 15, "opening retried with a bounded backoff"
    assert "\n" not in str(exc.value)


async def test_opening_waits_for_a_server_that_is_starting(pg_server_url):
    """A store opened while its server is down (a restart, a machine booting) opens once the
    server answers, within the open timeout, instead of failing at the first refusal."""
    import asyncio

    from clawtower.core.store import pglocal

    folder = throwaway_folder("clawtower-pgopen-") / "data"
    url = pglocal.start(folder, stop_at_exit=True)
    await asyncio.to_thread(pglocal.stop, folder)
    opening = asyncio.ensure_future(open_postgres(url, timeout_s=120))
    await asyncio.sleep(1.0)
    assert not opening.done(), "opening gave up while the server was down"
    await asyncio.to_thread(pglocal.start, folder)
    store = await asyncio.wait_for(opening, 120)
    try:
        assert await store.append([note("after boot")]) == [1]
    finally:
        await store.close()


def test_a_postgres_url_is_never_taken_for_a_path(tmp_path, monkeypatch):
    from clawtower.core.config import effects_journal

    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path))
    url = "postgresql://u:secret@db.example:5432/prod"
    journal = effects_journal(url)
    assert journal.parent == tmp_path and journal.name.startswith("prod-")
    assert journal.name.endswith(".effects.jsonl")
    assert effects_journal(tmp_path / "s.db") == tmp_path / "s.effects.jsonl"


async def test_reads_answer_from_the_replica_while_the_server_is_down(pg_server_url, tmp_path):
    import asyncio
    import time

    from clawtower.core.store import pglocal

    folder = throwaway_folder("clawtower-pgdown-") / "data"
    url = pglocal.start(folder, stop_at_exit=True)
    store = await open_store(url)
    try:
        await store.append([note("kept")])
        await asyncio.to_thread(pglocal.stop, folder)
        t0 = time.monotonic()
        rows = await store.fetchall("SELECT count(*) AS n FROM events")
        assert rows == [{"n": 1}]  # what this process last saw, without waiting on the server
        assert time.monotonic() - t0 < 15
        write = asyncio.ensure_future(store.append([note("after")]))
        await asyncio.sleep(0.5)
        assert not write.done(), "a write must wait for the server, not fail or land"
        await asyncio.to_thread(pglocal.start, folder)
        assert await asyncio.wait_for(write, 60) == [2]
        assert [e.payload.text for e in await store.events_after(0)] == ["kept", "after"]
    finally:
        await store.close()


# ------------------------------------------------------------------ kept replicas


async def test_reopening_catches_up_only_what_was_logged_since(pg_url):
    """The replica is kept in a file between opens: a process reopening the store replays
    only the events logged since it closed (by itself or others), not the whole log."""
    a = await open_store(pg_url)
    await a.append([note(f"a{i}") for i in range(200)])
    await a.close()
    b = await open_store(pg_url)  # its slot is a's old one: nothing to replay
    assert (b.kept_seq, b.replayed) == (200, 0)
    other = await open_store(pg_url)  # open at the same time: another slot, a full replay
    assert (other.kept_seq, other.replayed) == (0, 200)
    await other.append([note(f"o{i}") for i in range(7)])
    await other.close()
    await b.close()
    c = await open_store(pg_url)
    assert c.kept_seq == 200 and c.replayed == 7
    assert len(await c.events_after(0, limit=1000)) == 207
    assert await c.verify_projections() == []
    await c.close()


async def test_a_kept_replica_that_does_not_match_the_log_is_rebuilt(pg_url, pg_server_url):
    """A database dropped and created again under the same URL (a new store id), or a
    replica file written by another schema version, is never reused."""
    import sqlite3
    import urllib.parse

    s = await open_store(pg_url)
    await s.append([note(f"old{i}") for i in range(5)])
    replica = s._slot.path
    await s.close()
    name = urllib.parse.urlsplit(pg_url).path.lstrip("/")
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    s = await open_store(pg_url)
    assert s.kept_seq == 0 and await s.events_after(0) == []
    await s.append([note("new")])
    again = s._slot.path
    await s.close()
    assert again != replica  # another store: another folder
    con = sqlite3.connect(again)
    con.execute(f"PRAGMA user_version={LATEST_VERSION - 1}")
    con.close()
    s = await open_store(pg_url)
    try:
        assert (s.kept_seq, s.replayed) == (0, 1)
        assert [e.payload.text for e in await s.events_after(0)] == ["new"]
        assert await s.verify_projections() == []
    finally:
        await s.close()


async def test_a_snapshot_is_saved_every_so_many_events_and_at_close(pg_url, monkeypatch):
    """The replica lives in memory while open and is saved every SNAPSHOT_EVERY events (so a
    killed process's successor replays at most that many) and when the store closes; a
    snapshot is written whole and renamed into place."""
    import sqlite3

    from clawtower.core.store import replica

    monkeypatch.setattr(replica, "SNAPSHOT_EVERY", 5)

    def saved(path: Path) -> int:
        con = sqlite3.connect(path)
        try:
            return int(con.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0])
        finally:
            con.close()

    s = await open_store(pg_url)
    path = s._slot.path
    for i in range(12):
        await s.append([note(f"e{i}")])
    assert saved(path) == 10  # saved at 5 and 10, not yet at 12
    assert not path.with_name(path.name + ".tmp").exists()
    await s.close()
    assert saved(path) == 12
    s = await open_store(pg_url)
    try:
        assert (s.kept_seq, s.replayed) == (12, 0)
        assert await s.verify_projections() == []
    finally:
        await s.close()


async def test_a_replica_in_memory_when_asked(pg_url, monkeypatch):
    monkeypatch.setenv("CLAWTOWER_REPLICA_DIR", ":memory:")
    s = await open_store(pg_url)
    await s.append([note("x")])
    await s.close()
    s = await open_store(pg_url)
    try:
        assert s._slot is None and (s.kept_seq, s.replayed) == (0, 1)
    finally:
        await s.close()
