"""The storage-fault contract (issue 40), for every protocol on both backends: a storage
fault that lands while the composed engine is mid-work is waited out, never recorded as the
work's failure, and never ends a worker; once it clears, the work ends correctly, exactly
once (the protocols' own checks: tests/test_protocol_contract.py).

The faults are real ones, without a product hook:
  SQLite      the disk-full drill ($CLAWTOWER_DRILL_DISK_FULL: while its flag file exists,
              SQLite itself answers SQLITE_FULL to a write needing a new page);
  PostgreSQL  a fail-over to a standby, as the store sees it: the database turns read-only
              (`default_transaction_read_only`) and every session is cut, so the store
              reconnects and its writes are refused with SQLSTATE 25006.

Waits are on store conditions with generous limits; no timed assertion.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import test_protocol_contract as contract
from session_helpers import wait_for
from test_protocol_contract import (
    KINDS,
    MEETING_AGENTS,
    PROTOCOLS,
    SESSION_TTL_S,
    WAIT_S,
    WORKFLOW,
    Protocol,
    WorkflowsProtocol,
    one,
    types,
)

from clawtower.core.agents.config import load_agents, load_config
from clawtower.core.store import open_store
from clawtower.core.store.faults import DISK_FULL, DRILL_ENV, READ_ONLY, Fault
from clawtower.core.workers import build_engine

pytestmark = pytest.mark.both_backends

protocol = contract.protocol  # the fixture, parametrised over PROTOCOLS as there
pytest_generate_tests = contract.pytest_generate_tests

HOLD_S = 1.0
LONG = "Ship it. " * 500  # how long the fault lasts once a write has met it

# the engine's casts: slow enough that the fault lands mid-work, fast enough for the suite
CASTS = {
    "flows": (Path(__file__).parents[1] / "examples" / "flows" / "agents.yaml").read_text()
    .replace("speed: 0.2", "speed: 1").replace("delay_ms: [200, 700]", "delay_ms: [300, 300]"),
    # each reply ~4 KB (the drill bites a write needing a new page: replies need them)
    "meetings": "seed: 3\nspeed: 1\ndelay_ms: [1500, 1500]\n" + MEETING_AGENTS + "scripts:\n"
                + "".join(f'  {x}: {{meeting: [{{text: "{LONG}\\n\\n[STANCE: AGREE]"}}]}}\n'
                          for x in "abc"),
    "sessions": "speed: 1\ndelay_ms: [600, 600]\n",
    "triggers": "speed: 1\ndelay_ms: [2000, 2000]\n",
    "workflows": "speed: 0\n",
}
assert set(CASTS) == set(PROTOCOLS) == set(KINDS)


class BigWorkflows(WorkflowsProtocol):
    """The contract's workflow, each step printing ~4 KB (its result needs new pages)."""

    steps = 6

    async def create(self, store: Any) -> str:
        from clawtower.core.workflows.service import Workflows

        path = self.folder / "contract.lobster"
        log = self.folder / "ran.log"
        path.write_text(WORKFLOW.format(steps="".join(
            f"  - id: s{i}\n    run: echo s{i} >> {log}; printf %04000d 0;"
            " sleep 0.3\n    x-idempotent: true\n" for i in range(self.steps))))
        return await Workflows(store, cwd=str(self.folder), stderr=lambda _t: None).enqueue(
            str(path))


async def under_way(p: Protocol, store: Any, wid: str) -> bool:
    """Work recorded and not finished (the meeting's first round asked, not answered)."""
    if p.name == "meetings":
        return (await types(store, wid))["meeting.round_started"] >= 1
    return await p.under_way(store, wid)


class DiskFull:
    """SQLite: the disk-full drill's flag file."""

    cause = DISK_FULL

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.flag = folder / "disk-full.flag"
        monkeypatch.setenv(DRILL_ENV, str(self.flag))  # read when the store opens

    async def on(self) -> None:
        self.flag.touch()

    async def off(self) -> None:
        self.flag.unlink(missing_ok=True)


class ReadOnlyServer:
    """PostgreSQL: the database turns read-only and every session of it is cut (a fail-over
    to a standby, as a client sees it); `off` turns it back and cuts them again."""

    cause = READ_ONLY

    def __init__(self, url: str) -> None:
        from pg import with_database

        self.db = urllib.parse.urlsplit(url).path.lstrip("/")
        self.admin = with_database(url, "postgres")

    def _run(self, *sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin, autocommit=True) as conn:
            for s in sql:
                conn.execute(s)

    async def _set(self, read_only: bool) -> None:
        change = (f"ALTER DATABASE {self.db} SET default_transaction_read_only = on"
                  if read_only else f"ALTER DATABASE {self.db} RESET default_transaction_read_only")
        await asyncio.to_thread(
            self._run, change,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE"
            f" datname='{self.db}' AND pid <> pg_backend_pid()")

    async def on(self) -> None:
        await self._set(True)

    async def off(self) -> None:
        await self._set(False)


@pytest.fixture
def fault(store_backend: str, store_target: str, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> DiskFull | ReadOnlyServer:
    if store_backend == "postgres":
        return ReadOnlyServer(store_target)
    return DiskFull(tmp_path, monkeypatch)


async def test_a_storage_fault_mid_work_is_waited_out_and_the_work_ends_once(
        protocol: Protocol, store_target: str, fault: DiskFull | ReadOnlyServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    if protocol.name == "workflows":
        protocol = BigWorkflows(protocol.folder)
    cast = protocol.folder / f"{protocol.name}-fault.yaml"
    cast.write_text(CASTS[protocol.name])
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cast))  # the trigger's process reads it
    store = await open_store(store_target)
    seen: list[Fault | None] = []
    store.fault_listeners.append(seen.append)
    try:
        wid = await protocol.create(store)
        engine = build_engine(store, load_agents(cast), config=load_config(cast),
                              session_kw={"lease_ttl_s": SESSION_TTL_S})
        runner = asyncio.create_task(engine.run())

        def all_running() -> None:
            assert [w.name for w in engine.workers if not engine.running(w.name)] == [], \
                engine.errors
            assert engine.errors == []

        async def met() -> bool:
            return any(f is not None and f.cause == fault.cause for f in seen)

        try:
            await wait_for(lambda: under_way(protocol, store, wid), WAIT_S)
            await fault.on()
            try:
                await wait_for(met, WAIT_S)  # a write met the fault: the store holds it
                assert await one(store, protocol.status, (wid,)) == "running"  # mid-work
                all_running()
                await asyncio.sleep(HOLD_S)  # the fault lasts (not an assertion)
                all_running()
                assert await store.fetchone("SELECT 1 AS one") == {"one": 1}  # reads go on
            finally:
                await fault.off()
            assert await engine.until_idle(timeout_s=WAIT_S), engine.errors
            assert engine.errors == []
            assert store.fault is None and seen[-1] is None, seen  # the fault cleared
        finally:
            engine.stop()
            await asyncio.wait_for(runner, 60)
        await protocol.check(store, wid, killed=False)
        assert await store.verify_projections() == []
    finally:
        await store.close()
