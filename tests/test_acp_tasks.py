"""A task's implementation step run by a real ACP harness (Zed's example agent): the
attempt's heartbeat and checkpoint name the run, the permission request is answered from
the approvals list, the attempt finishes as the executor with the run as a reference; a
harness that cannot run fails the attempt with its reason and the task's retry rules apply."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp_peers import zed_harness
from protocol import good_spec

from clawtower.core.acp.config import HarnessConfig
from clawtower.core.acp.task import AcpExecutor
from clawtower.core.agents.config import load_agents
from clawtower.core.agents.registry import AgentSet
from clawtower.core.approvals import Approvals
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.store.interface import Store
from clawtower.core.tasks.service import Tasks

WAIT_S = 180.0


async def approve_acp(store: Store, stop: asyncio.Event) -> None:
    while not stop.is_set():
        seq = await store.last_seq()
        for a in await Approvals(store).pending():
            if a["kind"] == "acp_permission":
                await Approvals(store).approve(a["id"], by="ops")
        await store.wait_for_change(seq, 0.2)


async def first_attempt(store: Store, tid: str, clock: Any, o: Orchestrator) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while loop.time() < deadline:
        await o.tick()
        task = await Tasks(store).get(tid)
        done = [a for a in task["attempt_records"] if a["status"] != "running"]
        if done:
            return task
        await store.wait_for_change(await store.last_seq(), 0.5)
    raise AssertionError("the attempt did not finish within the bound")


async def test_the_implementation_step_runs_on_the_harness(store: Store, clock: Any,
                                                           tmp_path: Path) -> None:
    tid = await Tasks(store).create(good_spec())
    o = Orchestrator(store, AgentSet.simulated(), clock=clock,
                     executor=AcpExecutor(store, zed_harness(), str(tmp_path)))
    stop = asyncio.Event()
    approver = asyncio.create_task(approve_acp(store, stop))
    try:
        task = await first_attempt(store, tid, clock, o)
    finally:
        stop.set()
        await approver
        await o.cancel_inflight()
    att = task["attempt_records"][0]
    assert att["status"] == "succeeded", att
    run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (tid,))
    assert run is not None and run["status"] == "done"
    assert run["id"] in str(att["output"])
    assert run["id"] in str(att["checkpoint"])


async def test_a_harness_that_cannot_run_fails_the_attempt(store: Store, clock: Any,
                                                           tmp_path: Path) -> None:
    tid = await Tasks(store).create(good_spec())
    bad = HarnessConfig(name="gone", command=str(tmp_path / "no-such-harness"))
    o = Orchestrator(store, AgentSet.simulated(), clock=clock,
                     executor=AcpExecutor(store, bad, str(tmp_path)))
    try:
        task = await first_attempt(store, tid, clock, o)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while not task["retries"] and loop.time() < deadline:
            await o.tick()  # the orchestrator reads the failed attempt: a stored retry
            await store.wait_for_change(await store.last_seq(), 0.2)
            task = await Tasks(store).get(tid)
    finally:
        await o.cancel_inflight()
    att = task["attempt_records"][0]
    assert att["status"] == "failed" and "cannot start" in att["reason"], att
    assert task["retries"] and "cannot start" in task["retries"][0]["reason"], task["retries"]
    assert task["phase"] != "circuit_open"  # attempt 1 of the stored policy: a retry


async def test_clawtower_yaml_alone_puts_the_step_on_the_harness(
        store: Store, clock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21 item 3: no Python wiring; the executor agent of clawtower.yaml names the
    harness of its `acp_agents`, the orchestrator runs the step there."""
    h = zed_harness()
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(json.dumps({
        "acp_agents": {"zed": {"command": h.command, "args": h.args, "cwd": str(tmp_path)}},
        "speed": 0, "agents": {"builder": {"role": "executor", "executor": "acp:zed"},
                               "checker": {"role": "spec_reviewer"},
                               "critic": {"role": "quality_reviewer"}}}))
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cfg))
    tid = await Tasks(store).create(good_spec())
    o = Orchestrator(store, load_agents(cfg), clock=clock)
    stop = asyncio.Event()
    approver = asyncio.create_task(approve_acp(store, stop))
    try:
        task = await first_attempt(store, tid, clock, o)
    finally:
        stop.set()
        await approver
        await o.cancel_inflight()
    att = task["attempt_records"][0]
    assert att["status"] == "succeeded", att
    run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (tid,))
    assert run is not None and run["status"] == "done" and run["id"] in str(att["output"])
