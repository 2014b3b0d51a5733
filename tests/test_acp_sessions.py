"""An ACP harness drives a session like any provider: the turn is a `session/prompt` of
Zed's real example agent, its reply lands in the transcript, its permission request waits
in the one approvals list; stopping the session cancels it; a kill -9 of the worker
mid-turn leaves no harness behind and the turn runs again on restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from acp_peers import TSX, ZED_AGENT, need
from procs import HELPERS, child_env

from clawtower.core import liveness
from clawtower.core.acp.bridge import recover
from clawtower.core.approvals import Approvals
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store

WAIT_S = 120.0


@pytest.fixture
async def acp_store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(str(tmp_path / "acp.db"))
    yield s
    await s.close()


async def zed_session(store: Store, workspace: Path) -> str:
    need(TSX, ZED_AGENT)
    sessions = Sessions(store)
    cfg = AgentSpecConfig.model_validate({"defaults": {"acp": {
        "name": "zed-example", "command": str(TSX), "args": [str(ZED_AGENT)],
        "cwd": str(workspace)}}})
    await sessions.set_spec("coder", cfg)
    sid = await sessions.create(agent="coder", title="acp")
    await sessions.send(sid, "Improve the config")
    return sid


async def wait_row(store: Store, sql: str, args: tuple[Any, ...]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while loop.time() < deadline:
        row = await store.fetchone(sql, args)
        if row is not None:
            return row
        await store.wait_for_change(await store.last_seq(), 0.2)
    raise AssertionError(f"nothing for {sql} within the bound")


async def test_a_session_turn_runs_as_an_acp_prompt(acp_store: Store, tmp_path: Path) -> None:
    sid = await zed_session(acp_store, tmp_path)
    streamed: list[str] = []
    runner = SessionRunner(acp_store, skills=SkillSet(), tools=False,
                           on_text=lambda s, t, text: streamed.append(text))
    idle = asyncio.create_task(runner.run_until_idle(WAIT_S, {sid}))
    perm = await wait_row(acp_store, "SELECT p.* FROM acp_permissions p JOIN acp_runs r ON"
                          " r.id = p.run_id WHERE r.subject=? AND p.status='pending'", (sid,))
    await Approvals(acp_store).approve(perm["approval_id"], by="ops")
    assert await idle
    transcript = await Sessions(acp_store).transcript(sid)
    reply = transcript[-1]
    assert reply["role"] == "assistant" and "successfully updated" in reply["text"]
    assert "".join(streamed) == reply["text"]
    job = await acp_store.fetchone("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
    assert job is not None
    assert (job["status"], job["provider"], job["model"]) == ("done", "acp", "zed-example")
    turn = await acp_store.fetchone("SELECT * FROM turns WHERE id=?", (job["turn_id"],))
    assert turn is not None and turn["stop_reason"] == "completed"
    run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (sid,))
    assert run is not None and run["workspace"] == str(tmp_path.resolve())


async def test_stopping_the_session_cancels_the_harness(acp_store: Store,
                                                        tmp_path: Path) -> None:
    sid = await zed_session(acp_store, tmp_path)
    runner = SessionRunner(acp_store, skills=SkillSet(), tools=False)
    idle = asyncio.create_task(runner.run_until_idle(WAIT_S, {sid}))
    perm = await wait_row(acp_store, "SELECT p.* FROM acp_permissions p JOIN acp_runs r ON"
                          " r.id = p.run_id WHERE r.subject=? AND p.status='pending'", (sid,))
    await Sessions(acp_store).stop(sid, reason="enough")
    assert await idle
    job = await acp_store.fetchone("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
    assert job is not None and job["status"] == "cancelled"
    row = await acp_store.fetchone("SELECT * FROM acp_permissions WHERE approval_id=?",
                                   (perm["approval_id"],))
    assert row is not None and row["outcome"] == "cancelled"
    run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (sid,))
    assert run is not None and run["status"] == "cancelled"


async def test_kill_9_mid_turn(acp_store: Store, tmp_path: Path) -> None:
    sid = await zed_session(acp_store, tmp_path)
    worker = subprocess.Popen(
        [sys.executable, str(HELPERS / "acp_session_worker.py"), str(acp_store.path), "2"],
        stdout=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "READY"
        perm = await wait_row(acp_store, "SELECT p.*, r.grp FROM acp_permissions p JOIN"
                              " acp_runs r ON r.id = p.run_id WHERE r.subject=? AND"
                              " p.status='pending' AND r.grp <> ''", (sid,))
        pgid = int(perm["grp"].split(":")[1])
        assert liveness._group_members(pgid)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, signal.SIGKILL)
    # restart: recovery kills what is left of the harness group and settles the run
    settled = await recover(acp_store)
    assert [s["run"] for s in settled] == [perm["run_id"]] and settled[0]["group_gone"]
    assert not liveness._group_members(pgid)
    run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE id=?", (perm["run_id"],))
    assert run is not None and (run["status"], run["stop_reason"]) == ("failed", "interrupted")
    assert (await Approvals(acp_store).get(perm["approval_id"]))["status"] == "cancelled"
    # the turn job is claimed again once the dead worker's lease expired, and completes
    runner = SessionRunner(acp_store, skills=SkillSet(), tools=False)
    idle = asyncio.create_task(runner.run_until_idle(WAIT_S, {sid}))
    again = await wait_row(acp_store, "SELECT p.* FROM acp_permissions p JOIN acp_runs r ON"
                           " r.id = p.run_id WHERE r.subject=? AND p.status='pending'", (sid,))
    assert again["run_id"] != perm["run_id"]
    await Approvals(acp_store).approve(again["approval_id"], by="ops")
    assert await idle
    job = await acp_store.fetchone("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
    assert job is not None and (job["status"], job["attempt"]) == ("done", 2)
