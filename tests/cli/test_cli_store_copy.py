"""`clawtower store copy` between SQLite and PostgreSQL, and `store pg-start/pg-stop`: the log
arrives verbatim, the projections rebuilt from it equal the source's, `store verify` agrees
on both ends, and a copy never merges into a store that has events."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from cli_helpers import Run
from protocol import Driver
from reaper import throwaway_folder

from clawtower.core import leases
from clawtower.core.clock import FakeClock
from clawtower.core.store import open_store
from clawtower.core.store.schema import PROJECTION_TABLES
from clawtower.core.tasks.phases import Phase


def seed(path: Path) -> int:
    async def go() -> int:
        clock = FakeClock()
        s = await open_store(path, clock=clock)
        d = Driver(s, clock)
        a = await d.new()
        await d.to(a, Phase.READY_TO_RESUME, effects=True)
        await d.perform_effects(a)
        await d.move(a, Phase.COMPLETED)
        b = await d.new()
        await d.to(b, Phase.RETRYING)
        await leases.acquire(s, "orchestrator", "me", 10)
        n = await s.last_seq()
        await s.close()
        return n

    return asyncio.run(go())


def dump(path: Path) -> dict[str, list[tuple]]:
    con = sqlite3.connect(path)
    try:
        out = {"events": con.execute("SELECT * FROM events ORDER BY seq").fetchall()}
        for t, order in PROJECTION_TABLES.items():
            out[t] = con.execute(f"SELECT * FROM {t} ORDER BY {order}").fetchall()
        return out
    finally:
        con.close()


def test_copy_sqlite_to_postgres_and_back_is_verbatim(run: Run, tmp_path: Path, pg_url: str):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    n = seed(a)
    there = run("store", "copy", "--from", a, "--to", pg_url)
    assert there.code == 0, there.err
    assert f"copied {n} events" in there.out and "both ends agree" in there.out
    assert run("store", "verify", "--db", pg_url).code == 0
    info = run("store", "info", "--db", pg_url)
    assert f"events: {n}" in info.out, info.out
    back = run("store", "copy", "--from", pg_url, "--to", b)
    assert back.code == 0, back.err
    assert run("store", "verify", "--db", b).code == 0
    assert dump(b) == dump(a)  # seqs, times, payload text and every projection row


def test_copy_refuses_a_target_with_events(run: Run, tmp_path: Path, pg_url: str):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    seed(a)
    seed(b)
    before = dump(b)
    r = run("store", "copy", "--from", a, "--to", b)
    assert r.code == 2 and str(b) in r.err and "not empty" in r.err, r
    assert dump(b) == before
    assert run("store", "copy", "--from", a, "--to", pg_url).code == 0
    r = run("store", "copy", "--from", b, "--to", pg_url)
    assert r.code == 2 and "not empty" in r.err, r
    missing = run("store", "copy", "--from", tmp_path / "nope.db", "--to", tmp_path / "c.db")
    assert missing.code == 2 and "nope.db" in missing.err  # NotFound: a usage error
    assert not (tmp_path / "c.db").exists()


def test_pg_start_serves_a_store_and_pg_stop_stops_it(run: Run, pg_server_url: str,
                                                     monkeypatch: Any):
    monkeypatch.setenv("CLAWTOWER_DB_OPEN_TIMEOUT", "1")  # the stopped server: give up soon
    # pg_server_url: the PostgreSQL half needs the server wheel; this starts a second one
    folder = throwaway_folder("clawtower-pgstart-") / "data"
    started = run("store", "pg-start", folder)
    assert started.code == 0, started.err
    url = started.out.strip()
    assert url.startswith("postgresql://") and "pg-stop" in started.err
    try:
        assert run("task", "list", "--db", url, "--json").code == 0
        assert run("store", "verify", "--db", url).code == 0
    finally:
        stopped = run("store", "pg-stop", folder)
    assert stopped.code == 0, stopped.err
    down = run("store", "info", "--db", url)
    # a storage fault, said with its cause: exit 1 (nothing lost, run it again later)
    assert down.code == 1 and "cannot connect: server unreachable" in down.err, down
    assert "gave up after" in down.err and len(down.err.strip().splitlines()) == 1
    assert "***" not in down.err  # no password in this URL: nothing to hide
    assert not os.path.exists(folder / "postmaster.pid")
    shutil.rmtree(folder.parent, ignore_errors=True)
