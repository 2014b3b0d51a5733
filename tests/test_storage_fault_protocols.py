"""Fail closed on a storage fault, per protocol (issue 40): a `StorageFault` met during the
work is never recorded as the work's failure (a failed task, step, run, attempt, dead
letter or turn job). The protocol re-raises it, or backs off and runs the same work again;
once the storage takes writes again the work completes.

The fault: a `StoreView` whose write fails with `StorageFault(path, "disk full")` when a
command would record one of the given event types (the command's savepoint rolls back:
nothing of it lands), `times` times. No hold: the foreground's view of a fault.
(The same faults under a running engine, on both backends: tests/test_storage_faults.py.)
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from pathlib import Path
from typing import TypeVar

import pytest
import test_protocol_contract as contract
from session_helpers import wait_for
from test_protocol_contract import WAIT_S, run_engine, types

from clawtower.core.agents.config import load_agents, load_config
from clawtower.core.errors import StorageFault
from clawtower.core.store import open_store
from clawtower.core.store.faults import DISK_FULL
from clawtower.core.store.interface import Command, Store, WriteTx
from clawtower.core.store.view import StoreView
from clawtower.core.workers import build_engine

T = TypeVar("T")


class FaultyStore(StoreView):
    """Writes recording any of `types` fail with a storage fault, `times` times."""

    def __init__(self, store: Store, *types: str, times: int = 1) -> None:
        super().__init__(store)
        self.types, self.times, self.faults = set(types), times, 0

    def wrap(self, command: Command[T]) -> Command[T]:
        def faulty(tx: WriteTx) -> T:
            before = len(tx.emitted)  # type: ignore[attr-defined]
            value = command(tx)
            made = {e.type for e in tx.emitted[before:]}  # type: ignore[attr-defined]
            if self.faults < self.times and made & self.types:
                self.faults += 1
                raise StorageFault(self.path, DISK_FULL, "the test's full disk")
            return value

        return faulty


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CLAWTOWER_CONFIG", raising=False)
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLAWTOWER_OPERATOR", "tester")
    return tmp_path


async def faulted_once(store: Store, folder: Path, kind: str, event_type: str
                       ) -> tuple[contract.Protocol, str]:
    """`kind`'s work, created and run by an engine that does not hold writes, whose first
    write recording `event_type` meets a storage fault (once): the protocol and its id."""
    p = contract.KINDS[kind](folder)
    wid = await p.create(store)
    view = FaultyStore(store, event_type)
    await run_engine(view, folder, kind, hold=False)
    assert view.faults == 1
    return p, wid


async def full_disk_after(store: Store, child: subprocess.Popen[str], flag: Path,
                          event_type: str) -> None:
    """Once `child` (a foreground command) has logged `event_type`, the disk fills; the
    command must end with exit 1 and one line saying so. Then the disk has room again."""
    try:
        async def logged() -> bool:
            return await store.fetchone("SELECT 1 FROM events WHERE type=?",
                                        (event_type,)) is not None

        await wait_for(logged, WAIT_S)
        flag.touch()
        _out, err = await asyncio.to_thread(child.communicate, timeout=WAIT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == 1, err
    assert "disk full" in err and len(err.strip().splitlines()) == 1, err
    flag.unlink()


async def test_flows_a_fault_on_a_decomposition_never_fails_the_task(
        folder: Path, db_path: Path) -> None:
    store = await open_store(str(db_path))
    try:
        p, wid = await faulted_once(store, folder, "flows", "flow.decomposed")
        await p.check(store, wid, killed=False)  # no task failed; each replied once
    finally:
        await store.close()


async def test_sessions_a_fault_on_a_tool_result_never_fails_the_job(
        folder: Path, db_path: Path) -> None:
    store = await open_store(str(db_path))
    try:
        _, sid = await faulted_once(store, folder, "sessions", "turn.tool_result")
        jobs = await store.fetchall("SELECT status, attempt FROM turn_jobs WHERE"
                                    " session_id=?", (sid,))
        assert [j["status"] for j in jobs] == ["done"], jobs  # taken over, never failed
        t = await types(store)
        assert t["turnjob.finished"] == 1, t
    finally:
        await store.close()


LLM_WORKFLOW = """name: llm
steps:
  - id: ask
    pipeline: llm.invoke --prompt "say hi"
    x-idempotent: true
"""


async def test_workflows_a_fault_in_a_step_leaves_the_run_resumable(
        folder: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`workflow run` in the foreground: the fault propagates (the CLI's one line, exit 1),
    the run is not recorded failed, and an engine adopts it and finishes it."""
    from clawtower.core.workflows.llm import config_llm
    from clawtower.core.workflows.service import Workflows

    cfg = folder / "clawtower.yaml"
    cfg.write_text("agents:\n  writer:\n    provider: simulator\n")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cfg))  # the adopting engine's too
    (folder / "llm.lobster").write_text(LLM_WORKFLOW)
    store = await open_store(str(db_path))
    try:
        view = FaultyStore(store, "agent.usage")
        wf = Workflows(view, cwd=str(folder), stderr=lambda _t: None,
                       llm=config_llm(None, str(cfg), store=view), lease_ttl_s=0.5)
        with pytest.raises(StorageFault):
            await wf.run(str(folder / "llm.lobster"))
        run = await store.fetchone("SELECT id, status FROM workflow_runs")
        assert run is not None and run["status"] == "running", run  # resumable
        t = await types(store, run["id"])
        assert (t["workflow.step_failed"], t["workflow.failed"]) == (0, 0), t
        async def adoptable() -> bool:  # its driver's lease lapsed (the CLI exited)
            return run["id"] in await Workflows(store).adoptable()

        await wait_for(adoptable, WAIT_S)
        await run_engine(store, folder, "workflows")  # an engine adopts it and ends it
        done = await store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                    (run["id"],))
        assert done is not None and done["status"] == "ok", done
    finally:
        await store.close()


async def test_workflows_a_fault_on_a_renewal_keeps_the_lease(
        folder: Path, db_path: Path) -> None:
    """The run's lease renewer outlives a storage fault: the run is never adoptable (for
    another engine to drive twice) while its process drives it."""
    from clawtower.core.workflows.service import Workflows

    (folder / "slow.lobster").write_text(
        "name: slow\nsteps:\n  - id: wait\n    run: sleep 1.5\n")
    store = await open_store(str(db_path))
    try:
        view = FaultyStore(store, "lease.renewed")
        wf = Workflows(view, cwd=str(folder), stderr=lambda _t: None, lease_ttl_s=0.3)
        task = asyncio.create_task(wf.run(str(folder / "slow.lobster")))
        await wait_for(lambda: _faulted(view), WAIT_S)
        await asyncio.sleep(0.6)  # two lease lengths: a renewal after the fault landed
        assert await Workflows(store).adoptable() == []
        assert (await task)["ok"]
    finally:
        await store.close()


async def test_meetings_a_fault_on_a_renewal_keeps_the_lease(
        folder: Path, db_path: Path) -> None:
    """The meeting's lease renewer outlives a storage fault: the meeting is never left
    orphaned (for another engine to run twice) while its process runs it."""
    from clawtower.core.meetings.config import MeetingConfig
    from clawtower.core.meetings.coordinator import Coordinator
    from clawtower.core.meetings.service import Meetings

    slow = folder / "meeting.yaml"
    slow.write_text("seed: 3\nspeed: 1\ndelay_ms: [1500, 1500]\n" + contract.MEETING_AGENTS
                    + "scripts:\n  a: {meeting: [{stance: AGREE}]}\n"
                    "  b: {meeting: [{stance: AGREE}]}\n  c: {meeting: [{stance: AGREE}]}\n")
    store = await open_store(str(db_path))
    try:
        view = FaultyStore(store, "lease.renewed")
        coord = Coordinator(view, load_agents(slow), lease_ttl_s=0.3)
        config = MeetingConfig(topic="Ship it?", participants=["a", "b", "c"], max_rounds=2)
        mid = await coord.open(config)
        task = asyncio.create_task(coord.proceed(mid, config))
        await wait_for(lambda: _faulted(view), WAIT_S)
        await asyncio.sleep(0.6)  # two lease lengths: a renewal after the fault landed
        assert not (await Meetings(store).get(mid))["orphaned"]
        out = await task
        assert (out.result.value, out.reason) == ("FULL", "consensus")
    finally:
        await store.close()


async def _faulted(view: FaultyStore) -> bool:
    return view.faults > 0


async def test_triggers_a_fault_in_the_process_is_no_failed_attempt(
        folder: Path, db_path: Path) -> None:
    from hook_expert import install_hook_expert

    install_hook_expert(folder)
    store = await open_store(str(db_path))
    try:
        _, wid = await faulted_once(store, folder, "triggers", "agent.usage")
        t = await types(store, wid)
        assert (t["trigger.failed"], t["trigger.finished"]) == (0, 1), t
        runs = Counter(r["status"] for r in await store.fetchall(
            "SELECT status FROM workflow_runs"))
        assert runs == {"ok": 1}, runs  # its run followed to its end, none failed
    finally:
        await store.close()


async def test_tasks_a_fault_is_never_counted_as_a_driving_failure() -> None:
    """The tasks worker (core/orchestrator.py): a storage fault while driving a task is no
    failure towards `stuck`, and leaves its claim alone."""
    from clawtower.core.orchestrator import Orchestrator

    orch = Orchestrator.__new__(Orchestrator)
    orch.errors, orch.lost = [], []
    orch._failures, orch._retry_at, orch._inflight = {}, {}, {}
    released: list[str] = []

    async def drive(task_id: str, phase: str | None = None) -> None:
        raise StorageFault("store.db", DISK_FULL)

    async def release(task_id: str) -> None:
        released.append(task_id)

    orch.drive = drive  # type: ignore[method-assign]
    orch._release = release  # type: ignore[method-assign]
    await orch._drive_guarded("t-1")
    assert orch._failures == {} and released == []
    assert "t-1" in orch._retry_at  # driven again after a pause


async def test_meeting_run_on_a_full_disk_exits_1_and_an_engine_ends_the_meeting(
        folder: Path, db_path: Path) -> None:
    """`clawtower meeting run` (the foreground runner, no engine) meets a full disk mid-round
    (the disk-full drill): it prints the one-line fault and exits 1, instead of waiting for
    ever for the meeting's end; the meeting is not recorded ended, and once the disk has room
    an engine adopts it and ends it."""
    import subprocess

    from procs import child_env, die_with_parent

    from clawtower.core.meetings.service import Meetings
    from clawtower.core.store.faults import DRILL_ENV

    long = "Ship it. " * 500  # each reply needs new pages: the drill bites them
    cast = folder / "meeting.yaml"
    cast.write_text("seed: 3\nspeed: 1\ndelay_ms: [1500, 1500]\n" + contract.MEETING_AGENTS
                    + "scripts:\n" + "".join(
                        f'  {x}: {{meeting: [{{text: "{long}\\n\\n[STANCE: AGREE]"}}]}}\n'
                        for x in "abc"))
    flag = folder / "disk-full.flag"
    store = await open_store(str(db_path))
    try:
        child = subprocess.Popen(
            [str(contract.CLAWTOWER), "meeting", "run", "--topic", "Ship it?", "--agents",
             "a,b,c", "--config", str(cast), "--db", str(db_path)],
            env=child_env(CLAWTOWER_CONFIG=str(cast), **{DRILL_ENV: str(flag)}),
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=die_with_parent)
        # the disk is full before the replies are recorded
        await full_disk_after(store, child, flag, "meeting.round_started")
        [m] = await Meetings(store).list()
        assert m["status"] == "running", m  # not ended: resumable
        await wait_for(lambda: _orphaned(store, m["id"]), WAIT_S)
        cfg = folder / "engine.yaml"
        cfg.write_text("seed: 3\nspeed: 0\n" + contract.MEETING_AGENTS)
        engine = build_engine(store, load_agents(cfg), config=load_config(cfg))
        assert await engine.run_until_idle(timeout_s=WAIT_S), engine.errors
        got = await Meetings(store).get(m["id"])
        assert got["status"] == "ended", got
        assert (await types(store, m["id"]))["meeting.ended"] == 1
    finally:
        await store.close()


async def _orphaned(store: Store, mid: str) -> bool:
    from clawtower.core.meetings.service import Meetings

    return bool((await Meetings(store).get(mid))["orphaned"])


async def test_workflow_run_on_a_full_disk_exits_1_and_an_engine_finishes_the_run(
        folder: Path, db_path: Path) -> None:
    """`clawtower workflow run` (foreground) meets a full disk between steps (the drill): the
    one-line fault, exit 1; the run is not recorded failed, and an engine adopts it and
    finishes it, each step once."""
    import subprocess

    from procs import child_env, die_with_parent

    from clawtower.core.store.faults import DRILL_ENV

    log = folder / "ran.log"
    (folder / "big.lobster").write_text("name: big\nsteps:\n" + "".join(
        f"  - id: s{i}\n    run: echo s{i} >> {log}; printf %04000d 0; sleep 0.3\n"
        "    x-idempotent: true\n" for i in range(4)))
    flag = folder / "disk-full.flag"
    store = await open_store(str(db_path))
    try:
        child = subprocess.Popen(
            [str(contract.CLAWTOWER), "workflow", "run", "big.lobster", "--db", str(db_path)],
            env=child_env(**{DRILL_ENV: str(flag)}), cwd=folder, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        await full_disk_after(store, child, flag, "workflow.step_started")
        run = await store.fetchone("SELECT id, status FROM workflow_runs")
        assert run is not None and run["status"] == "running", run
        t = await types(store, run["id"])
        assert (t["workflow.step_failed"], t["workflow.failed"]) == (0, 0), t
        await run_engine(store, folder, "workflows")  # its driver is gone: adopted at once
        done = await store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                    (run["id"],))
        assert done is not None and done["status"] == "ok", done
        ran = Counter(log.read_text().split())
        assert set(ran) == {f"s{i}" for i in range(4)}, ran
    finally:
        await store.close()
