"""Issue 35: one engine (core/workers.py) composes every protocol's worker, and `until_idle`
returns only when nothing any of them owns can still move: a queued, ready item of each
protocol is run first (tasks, workflow runs, session turn jobs here; flows and trigger
invocations through `serve --until-idle` in tests/cli/test_cli_flow.py and
tests/triggers/test_until_idle.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from protocol import good_spec, workflow_file

from clawtower.core.agents.registry import AgentSet
from clawtower.core.store import open_store
from clawtower.core.tasks.service import Tasks
from clawtower.core.workers import ALL, ComposedEngine, SessionsWorker, build_engine
from clawtower.core.workflows.service import Workflows


async def test_until_idle_runs_queued_tasks_and_workflow_runs(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "s.db"))
    try:
        tasks = Tasks(store)
        tid = await tasks.create(good_spec(title="one"))
        wf = Workflows(store, cwd=str(tmp_path), stderr=lambda _t: None)
        run_id = await wf.enqueue(str(workflow_file(tmp_path, 3)))
        engine = build_engine(store, AgentSet.simulated(), workers=["tasks"])
        runner = asyncio.create_task(engine.run())
        assert await engine.until_idle(timeout_s=120)
        engine.stop()
        await asyncio.wait_for(runner, 30)
        task = await tasks.get(tid)
        assert task["phase"] == "completed"
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id=?", (run_id,))
        assert run is not None and run["status"] == "ok"
    finally:
        await store.close()


async def test_until_idle_runs_a_queued_session_turn(tmp_path: Path) -> None:
    from clawtower.core.sessions.service import Sessions

    store = await open_store(str(tmp_path / "s.db"))
    try:
        s = Sessions(store)
        sid = await s.create()
        await s.send(sid, "#work 1 via the engine")
        queued = await store.fetchone("SELECT count(*) AS n FROM turn_jobs WHERE"
                                      " status='queued'")
        assert queued is not None and queued["n"] == 1
        engine = build_engine(store, AgentSet.simulated(), workers=["sessions"])
        runner = asyncio.create_task(engine.run())
        assert await engine.until_idle(timeout_s=120)
        worker = engine.get("sessions")
        assert isinstance(worker, SessionsWorker) and await worker.runner.quiet()
        engine.stop()
        await asyncio.wait_for(runner, 30)
        row = await store.fetchone("SELECT count(*) AS n FROM turn_jobs WHERE status IN"
                                   " ('queued', 'running')")
        assert row is not None and row["n"] == 0
        assert [m["role"] for m in (await s.get(sid))["messages"]] == ["user", "assistant"]
    finally:
        await store.close()


async def test_build_engine_composes_every_worker_by_default(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "s.db"))
    try:
        engine = build_engine(store, AgentSet.simulated())
        # the trace exporter only with telemetry.otlp_endpoint (tests/test_traces_live.py)
        assert [w.name for w in engine.workers] == [n for n in ALL if n != "traces"]
        runner = asyncio.create_task(engine.run())
        assert await engine.until_idle(timeout_s=60)  # an empty store: idle at once
        engine.stop()
        await asyncio.wait_for(runner, 30)
        with pytest.raises(ValueError, match="unknown workers"):
            build_engine(store, AgentSet.simulated(), workers=["nope"])
    finally:
        await store.close()


class _Broken:
    name = "broken"

    async def run(self, stop: asyncio.Event) -> None:
        raise RuntimeError("the disk is gone")

    async def idle(self) -> bool:
        return False  # never idle: a failed worker is not waited for

    def stop(self) -> None:
        pass


async def test_a_failing_worker_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "s.db"))
    try:
        seen: list[str] = []
        tasks = build_engine(store, AgentSet.simulated(), workers=["tasks"]).workers
        engine = ComposedEngine(store, [_Broken(), *tasks],
                                on_error=lambda name, exc: seen.append(f"{name}: {exc}"))
        runner = asyncio.create_task(engine.run())
        tid = await Tasks(store).create(good_spec(title="after the failure"))
        assert await engine.until_idle(timeout_s=120)
        assert seen == ["broken: the disk is gone"]
        assert engine.errors == ["broken worker stopped: the disk is gone"]
        assert (await Tasks(store).get(tid))["phase"] == "completed"
        engine.stop()
        await asyncio.wait_for(runner, 30)
    finally:
        await store.close()
