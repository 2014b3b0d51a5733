"""Requirement 4: the store refuses files that are not its own, migrates idempotently, keeps
the log append-only, group-commits, replays to the live projections, and never commits part
of a command (even when 1,000 callers are cancelled mid-call)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from procs import child_env
from protocol import Driver

from clawtower.core import events as ev
from clawtower.core.errors import StoreClosed, StoreError, ValidationError
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.store.schema import APPLICATION_ID, LATEST_VERSION, PROJECTION_TABLES
from clawtower.core.tasks.phases import Phase


def note(i: int, text: str = "x", entity: str = "n-1", idem: str | None = None) -> NewEvent:
    return NewEvent(entity_id=entity, actor=f"a{i}", role="system",
                    payload=ev.Note(text=text), idem_key=idem)


def snapshot(folder: Path) -> dict[str, str]:
    """Names and contents (hashed) of every file in `folder`."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# ------------------------------------------------------------------- refusing files


async def refuse(path: Path, *fragments: str) -> str:
    before = snapshot(path.parent)
    with pytest.raises(StoreError) as err:
        await open_store(path)
    msg = str(err.value)
    assert str(path) in msg, msg
    for f in fragments:
        assert f in msg, msg
    assert snapshot(path.parent) == before, "refusing the file wrote to its folder"
    return msg


async def test_refuses_a_file_that_is_not_sqlite(tmp_path):
    p = tmp_path / "notes.db"
    p.write_bytes(b"these are my notes, not a database\n" * 200)
    await refuse(p, "not a clawtower store")


async def test_refuses_a_foreign_sqlite_database(tmp_path):
    p = tmp_path / "app.db"
    con = raw(p)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'acme')")
    con.close()
    await refuse(p, "not a clawtower store", "foreign")
    # and one that is empty but claims another application
    q = tmp_path / "other.db"
    con = raw(q)
    con.execute("PRAGMA application_id=1234")
    con.close()
    await refuse(q, "foreign")


async def test_refuses_a_newer_schema(tmp_path):
    p = tmp_path / "newer.db"
    s = await open_store(p)
    await s.append([note(1)])
    await s.close()
    con = raw(p)
    con.execute(f"PRAGMA user_version={LATEST_VERSION + 1}")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    await refuse(p, f"schema v{LATEST_VERSION + 1}", "newer")


async def test_refuses_a_directory_and_an_unusable_folder(tmp_path):
    d = tmp_path / "adir.db"
    d.mkdir()
    await refuse(d, "is a directory")
    blocker = tmp_path / "plainfile"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create the store's folder"):
        await open_store(blocker / "sub" / "store.db")


def _as_nobody(code: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a child that drops to an unprivileged user (root ignores file modes)
    once its imports are done (the interpreter itself may live under /root)."""
    prelude = textwrap.dedent("""
        import asyncio, os
        from clawtower.core.store import open_store
        from clawtower.core.errors import StoreError
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, env=child_env(), cwd=tmp, timeout=60)


@pytest.fixture
def public_tmp():
    """A temp folder an unprivileged user can reach (pytest's tmp_path is root-only)."""
    d = Path(tempfile.mkdtemp(prefix="clawtower-ro-"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        for p in d.rglob("*"):
            os.chmod(p, 0o755)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_refuses_an_unwritable_folder_and_file(public_tmp):
    tmp_path = public_tmp
    base = tmp_path / "ro"
    base.mkdir()
    os.chmod(base, 0o555)  # nobody may create files here
    ro_file = tmp_path / "ro_file.db"
    ro_file.write_bytes(b"")
    os.chmod(ro_file, 0o444)
    code = f"""
        import asyncio
        from clawtower.core.store import open_store
        from clawtower.core.errors import StoreError
        async def main():
            for p in [{str(base / 'store.db')!r}, {str(ro_file)!r}]:
                try:
                    await open_store(p)
                    print("OPENED", p)
                except StoreError as exc:
                    print("REFUSED", exc)
        asyncio.run(main())
    """
    before = snapshot(base), snapshot(tmp_path)
    out = _as_nobody(code, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and all(x.startswith("REFUSED") for x in lines), out.stdout
    # a storage fault with its cause (exit 1: the store is intact, the storage refuses)
    assert str(base / "store.db") in lines[0] and "cannot open: read-only" in lines[0]
    assert "folder is not writable" in lines[0]
    assert str(ro_file) in lines[1] and "cannot open: read-only" in lines[1]
    assert (snapshot(base), snapshot(tmp_path)) == before


@pytest.mark.parametrize("folder", ["a#b", "a?b", "a%20b", "with space", "ünï"])
async def test_paths_with_uri_characters(tmp_path, folder):
    p = tmp_path / folder / "store.db"
    s = await open_store(p)
    await s.append([note(1)])
    assert await s.last_seq() == 1
    assert await s.verify_projections() == []
    await s.close()
    assert sorted(x.name for x in tmp_path.iterdir()) == [folder]


# ------------------------------------------------------------------------ migrations


def schema_of(path: Path) -> tuple[int, int, list[tuple[str, str]]]:
    con = raw(path)
    try:
        return (con.execute("PRAGMA application_id").fetchone()[0],
                con.execute("PRAGMA user_version").fetchone()[0],
                con.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall())
    finally:
        con.close()


async def test_migrations_are_idempotent_across_reopen(tmp_path):
    p = tmp_path / "s.db"
    s = await open_store(p)
    await s.append([note(1), note(2)])
    await s.close()
    first = schema_of(p)
    assert first[0] == APPLICATION_ID and first[1] == LATEST_VERSION
    assert {name for name, _ in first[2]} >= {"events", *PROJECTION_TABLES}
    for i in range(3):
        s = await open_store(p)
        assert await s.last_seq() == 2 + i
        await s.append([note(3 + i)])
        assert await s.verify_projections() == []
        await s.close()
        assert schema_of(p) == first


async def test_an_empty_file_becomes_a_store(tmp_path):
    p = tmp_path / "empty.db"
    p.write_bytes(b"")
    s = await open_store(p)
    await s.append([note(1)])
    await s.close()
    assert schema_of(p)[:2] == (APPLICATION_ID, LATEST_VERSION)


# --------------------------------------------------------------------- append-only


@pytest.mark.both_backends
async def test_the_event_log_is_append_only(store, store_target, store_backend):
    await store.append([note(1), note(2)])
    for sql in ["UPDATE events SET actor='mallory' WHERE seq=1", "DELETE FROM events",
                "DELETE FROM events WHERE seq=2", "TRUNCATE events"]:
        if store_backend == "postgres":
            import psycopg

            with psycopg.connect(store_target, autocommit=True) as con, \
                    pytest.raises(psycopg.Error, match="append-only"):
                con.execute(sql.replace("events", "clawtower_events"))
        elif not sql.startswith("TRUNCATE"):  # SQLite has no TRUNCATE
            con = raw(Path(store_target))
            try:
                with pytest.raises(sqlite3.DatabaseError, match="append-only"):
                    con.execute(sql)
            finally:
                con.close()
    # ...and from inside a command: the command fails, nothing of it lands
    def tamper(tx):
        tx.emit(note(3))
        tx.one("DELETE FROM events WHERE seq=1")

    with pytest.raises(StoreError, match="append-only"):
        await store.execute(tamper)
    assert [e.actor for e in await store.events_after(0)] == ["a1", "a2"]
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_duplicate_idempotency_key_is_refused_whole(store):
    await store.append([note(1, idem="k1")])
    with pytest.raises(StoreError, match="duplicate idempotency key"):
        await store.append([note(2), note(3, idem="k1")])
    assert await store.last_seq() == 1


async def test_unknown_event_types_do_not_decode():
    with pytest.raises(ValidationError, match=r"unknown event type 'nope\.nope'"):
        ev.decode("nope.nope", "{}")


@pytest.mark.both_backends
async def test_store_closed_refuses_writes(store_target):
    s = await open_store(store_target)
    await s.close()
    await s.close()  # idempotent
    with pytest.raises(StoreClosed):
        await s.append([note(1)])


# ---------------------------------------------------------------------- group commit


@pytest.mark.both_backends
async def test_group_commit_batches_concurrent_appends_with_contiguous_seqs(store):
    n = 2000
    batches0 = store.batches
    results = await asyncio.gather(*(store.append([note(i), note(i)]) for i in range(n)))
    batches = store.batches - batches0
    assert batches <= n // 20, f"{n} concurrent appends took {batches} commits"
    for seqs in results:
        assert len(seqs) == 2 and seqs[1] == seqs[0] + 1  # one call's events are adjacent
    allseqs = sorted(s for seqs in results for s in seqs)
    assert allseqs == list(range(1, 2 * n + 1))
    rows = await store.fetchall("SELECT seq FROM events ORDER BY seq")
    assert [r["seq"] for r in rows] == allseqs


@pytest.mark.both_backends
async def test_a_failing_command_does_not_poison_its_batch(store):
    def bad(tx):
        tx.emit(note(0, "bad-1"))
        tx.emit(note(0, "bad-2"))
        raise ValueError("the command changed its mind")

    jobs = [store.append([note(i, f"good-{i}")]) for i in range(50)]
    jobs.insert(25, store.execute(bad))
    out = await asyncio.gather(*jobs, return_exceptions=True)
    assert isinstance(out[25], ValueError)
    texts = [e.payload.text for e in await store.events_after(0)]
    assert sorted(texts) == sorted(f"good-{i}" for i in range(50))
    assert [e.seq for e in await store.events_after(0)] == list(range(1, 51))


@pytest.mark.both_backends
async def test_wait_for_change_wakes_on_own_write(store):
    seq0 = await store.last_seq()
    waiter = asyncio.create_task(store.wait_for_change(seq0, 5.0))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await store.append([note(1)])
    assert await asyncio.wait_for(waiter, 2.0) == seq0 + 1
    assert loop.time() - t0 < 1.0


# ---------------------------------------------------------------------------- replay


async def _workload(store, clock) -> None:
    """A bit of everything: tasks through the protocol, refusals, approvals, leases, usage."""
    from clawtower.core import leases
    from clawtower.core.tasks import commands as c
    from clawtower.core.tasks.permissions import Role

    d = Driver(store, clock)
    a = await d.new()
    await d.to(a, Phase.READY_TO_RESUME, effects=True)
    await d.perform_effects(a)
    await d.move(a, Phase.COMPLETED)
    b = await d.new()
    await d.to(b, Phase.RETRYING)
    clock.advance(10)
    await d.move(b, Phase.EXECUTING)
    await d.finish(b, ok=False)
    await d.move(b, Phase.CIRCUIT_OPEN)
    await d.move(b, Phase.EXECUTION_READY, "unblock")
    with pytest.raises(Exception, match="may not"):
        await d.tasks.transition(b, Phase.FAILED, "x", actor="eve", role=Role.EXECUTOR)
    await leases.acquire(store, "orchestrator", "me", 10)
    await leases.release(store, "orchestrator", "me")
    await store.execute(lambda tx: c.record_usage(tx, a, "builder", "m", "execute", 10, 5))


async def projection_rows(store) -> dict[str, list[dict]]:
    return {t: await store.fetchall(f"SELECT * FROM {t} ORDER BY {o}")
            for t, o in PROJECTION_TABLES.items()}


@pytest.mark.both_backends
async def test_rebuild_then_verify_is_clean_and_identical(store, clock):
    await _workload(store, clock)
    assert await store.verify_projections() == []
    live = await projection_rows(store)
    assert all(live[t] for t in ("tasks", "reviews", "attempts", "side_effects", "approvals",
                                 "refusals", "leases", "usage", "retries", "phase_history"))
    n = await store.rebuild_projections()
    assert n == await store.last_seq()
    assert await store.verify_projections() == []
    assert await projection_rows(store) == live


@pytest.mark.both_backends
async def test_verify_notices_a_drifted_projection_and_rebuild_repairs_it(store, clock):
    await _workload(store, clock)

    def drift(tx):  # projections changed behind the log's back (no event)
        tx.one("UPDATE tasks SET phase='completed' WHERE id='T-2'")
        tx.one("DELETE FROM refusals")

    await store.execute(drift)
    problems = await store.verify_projections()
    assert any(p.startswith("tasks:") for p in problems), problems
    assert any(p.startswith("refusals:") for p in problems), problems
    await store.rebuild_projections()
    assert await store.verify_projections() == []


async def test_each_verify_replays_into_its_own_empty_copy(store, clock):
    """The replay database is a copy of one empty image built once per process: a verify
    leaves no row in the image for the next one (a second store's verify would otherwise
    compare against the first store's rows), and its tables are those of the schema."""
    from clawtower.core.store.replay import empty_projections

    await _workload(store, clock)
    assert await store.verify_projections() == []
    assert await store.verify_projections() == []
    fresh = empty_projections()
    try:
        for table in PROJECTION_TABLES:
            assert fresh.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    finally:
        fresh.close()


# ---------------------------------------------------------------------- cancellation


@pytest.mark.both_backends
async def test_cancelling_1000_callers_commits_no_partial_command(store):
    """Each command appends 5 events; callers are cancelled at random moments (before
    submitting, while queued, while their batch runs). Every command lands whole or not
    at all, and what was acknowledged is there."""
    rng = random.Random(1234)
    n, per = 1000, 5

    def command(i: int):
        def run(tx):
            for k in range(per):
                tx.emit(note(i, f"{i}:{k}", entity=f"cmd-{i}"))
            if i % 10 == 7:  # some commands fail after emitting: rolled back whole
                raise ValueError("late failure")
            return i
        return run

    acknowledged: set[int] = set()
    submitted: set[int] = set()
    in_call: list[int] = []  # callers cancelled while their store call was under way

    async def caller(i: int) -> None:
        if i % 2:
            await asyncio.sleep(rng.random() * 0.004)
        submitted.add(i)
        try:
            await store.execute(command(i))
        except asyncio.CancelledError:
            in_call.append(i)
            raise
        acknowledged.add(i)

    loop = asyncio.get_running_loop()
    callers = [asyncio.create_task(caller(i)) for i in range(n)]
    for t in callers:  # cancel each at a random moment in the next few milliseconds
        loop.call_later(rng.random() * 0.006, t.cancel)
    await asyncio.gather(*callers, return_exceptions=True)
    await store.append([note(-1, "barrier")])  # everything queued before it has committed
    assert len(in_call) >= n // 2, f"only {len(in_call)} callers were cancelled mid-call"

    rows = await store.fetchall(
        "SELECT entity_id, count(*) AS c FROM events WHERE entity_id LIKE 'cmd-%'"
        " GROUP BY entity_id")
    counts = {int(r["entity_id"][4:]): r["c"] for r in rows}
    partial = {i: c for i, c in counts.items() if c != per}
    assert partial == {}, f"partial writes: {partial}"
    assert not any(i % 10 == 7 for i in counts), "a failed command left events"
    assert acknowledged <= set(counts), "an acknowledged command is missing"
    seqs = [r["seq"] for r in await store.fetchall("SELECT seq FROM events ORDER BY seq")]
    assert seqs == list(range(1, len(seqs) + 1))
    for i in counts:  # each command's events are adjacent in the log
        ss = [r["seq"] for r in await store.fetchall(
            "SELECT seq FROM events WHERE entity_id=? ORDER BY seq", (f"cmd-{i}",))]
        assert ss == list(range(ss[0], ss[0] + per))
    assert await store.verify_projections() == []


@pytest.mark.both_backends
async def test_close_finishes_queued_writes(store_target):
    s = await open_store(store_target)
    pending = [asyncio.create_task(s.append([note(i)])) for i in range(200)]
    await asyncio.sleep(0)
    await s.close()
    results = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(r, list) for r in results), results[:3]
    s2 = await open_store(store_target)
    assert await s2.last_seq() == 200
    await s2.close()
