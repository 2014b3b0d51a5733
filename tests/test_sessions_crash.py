"""kill -9 of a session worker mid-turn: nothing lost, nothing answered twice, no duplicate
announce. A real worker process runs a parent fanning out to subagents and three long tool
loops that are steered; it is SIGKILLed while turns run; more messages arrive while no
worker runs; a second worker (after the first one's leases expire) finishes everything.

Counted from the log: lost messages (an inbound message that reached no transcript, neither
directly nor through a drained [Backlog]), duplicate user messages, duplicate announces
(per run_id), turns answered twice (two replies for one TurnJob).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from procs import HELPERS, child_env

from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store

WORKER = str(HELPERS / "session_worker.py")


def start_worker(db: Path, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, WORKER, str(db), "60", "1.5", *extra],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    return proc


async def wait_until(check: Any, timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await check():
        assert loop.time() < end, "condition not reached in time"
        await asyncio.sleep(0.05)


async def crash_figures(store: Any) -> dict[str, int]:
    # every message sent: a `session.inbound`, or a child's task folded into its
    # `session.created` (issue 24.2)
    inbound = await store.fetchall(
        "SELECT coalesce(json_extract(payload, '$.msg_id'), json_extract(payload,"
        " '$.inbound.msg_id')) AS msg_id FROM events WHERE type IN ('session.inbound',"
        " 'session.created') AND msg_id IS NOT NULL")
    msgs = await store.fetchall("SELECT * FROM session_messages")
    backlog = await store.fetchall("SELECT * FROM session_backlog")
    taken = Counter(json.loads(m["meta"]).get("inbound") for m in msgs if m["role"] == "user")
    drained_msgs = {json.loads(b["data"]).get("msg_id") for b in backlog
                    if b["kind"] == "message" and b["status"] == "drained"}
    ids = [e["msg_id"] for e in inbound]
    lost = [i for i in ids if taken[i] == 0 and i not in drained_msgs]
    dup_msgs = [i for i in ids if taken[i] > 1]
    announced = await store.fetchall("SELECT * FROM events WHERE type='session.announced'")
    runs = Counter(json.loads(e["payload"])["meta"]["source"]["run_id"] for e in announced)
    replies = Counter(json.loads(m["meta"]).get("job") for m in msgs if m["role"] == "assistant")
    open_jobs = await store.fetchall("SELECT * FROM turn_jobs WHERE status IN"
                                     " ('queued','running')")
    return {"messages": len(ids), "lost": len(lost), "duplicate_messages": len(dup_msgs),
            "announces": sum(runs.values()),
            "duplicate_announces": sum(n - 1 for n in runs.values()),
            "turns_answered_twice": sum(1 for n in replies.values() if n > 1),
            "open_jobs": len(open_jobs)}


async def test_kill_9_mid_turn_loses_nothing_and_answers_once(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    store = await open_store(db)
    try:
        s = Sessions(store)
        await s.set_spec("lead", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["spawn_subagent"], "subagents": ["worker"]}}))
        await s.set_spec("worker", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["text.count"]}}))
        parent = await s.create(agent="lead")
        loops = [await s.create(agent="worker") for _ in range(3)]
        await s.send(parent, "#spawn 6 worker #work 6 shard")
        for i, sid in enumerate(loops):
            await s.send(sid, f"#work 7 long job {i}")
        first = start_worker(db)
        try:
            async def steered_and_busy() -> bool:
                rows = await store.fetchall("SELECT count(*) AS n FROM turn_jobs WHERE"
                                            " steers > 0")
                return rows[0]["n"] >= 1
            # steer each long loop once while the worker runs it
            async def all_running() -> bool:
                rows = await store.fetchall(
                    "SELECT count(*) AS n FROM sessions WHERE status='running' AND id IN"
                    " (?, ?, ?)", tuple(loops))
                return rows[0]["n"] >= 2
            await wait_until(all_running)
            for sid in loops:
                await s.send(sid, f"status of {sid}?")
            await wait_until(steered_and_busy)
            running = await store.fetchall("SELECT id FROM turn_jobs WHERE status='running'")
            assert running, "the kill must land mid-turn"
            os.kill(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
        # while no worker runs: more messages (they wait; nothing is dropped)
        for sid in loops:
            await s.send(sid, f"and after the crash, {sid}?")
        second = start_worker(db, "--until-idle")
        _out, err = second.communicate(timeout=240)
        assert second.returncode == 0, err
        figures = await crash_figures(store)
        print("kill -9 figures:", figures)
        assert figures["lost"] == 0 and figures["duplicate_messages"] == 0
        assert figures["duplicate_announces"] == 0 and figures["announces"] == 6
        assert figures["turns_answered_twice"] == 0 and figures["open_jobs"] == 0
        reclaimed = await store.fetchall("SELECT * FROM turn_jobs WHERE attempt > 1")
        assert reclaimed, "the second worker took over the killed worker's turns"
        # every long task finished (resumed from its backlog), the parent synthesised
        for sid in loops:
            final = (await s.get(sid))["messages"]
            assert any(m["text"].startswith(("Resumed and finished", "Done:"))
                       for m in final if m["role"] == "assistant"), [
                (m["role"], m["text"][:80]) for m in final]
        p = await s.get(parent)
        assert len(p["children"]) == 6 and len(p["announces"]) == 6
        # every announce reached exactly one parent turn (as ephemeral context): after the
        # crash some may come with the re-run turn, the rest with the turn the join wakes
        import re

        synth = [int(m.group(1)) for x in p["messages"] if x["role"] == "assistant"
                 for m in [re.match(r"Synthesis of (\d+) subagent", x["text"])] if m]
        assert sum(synth) == 6 and all(a["consumed_by"] for a in p["announces"])
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_killed_workers_job_is_taken_over_before_its_lease_lapses(tmp_path: Path
                                                                         ) -> None:
    """A worker killed mid-turn still holds a lease of 120 s; a worker on the same host sees
    that its process is gone and takes its running job over at once, not after the TTL
    (issue 36: a job claimed in the commit that queued it is running from that commit)."""
    from clawtower.core.agents.config import config_from_data
    from clawtower.core.sessions.runner import SessionRunner
    from clawtower.core.sessions.skills import SkillSet

    db = tmp_path / "gone.db"
    store = await open_store(db)
    try:
        s = Sessions(store)
        await s.set_spec("worker", AgentSpecConfig.model_validate({"policy": {"tools": []}}))
        sid = await s.create(agent="worker")
        await s.send(sid, "a long answer")
        # every model call of this worker takes 60 s: killed inside its turn
        proc = subprocess.Popen([sys.executable, WORKER, str(db), "60000", "120"],
                                env=child_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"

            async def running() -> bool:
                row = await store.fetchone("SELECT status FROM turn_jobs WHERE session_id=?",
                                           (sid,))
                return row is not None and row["status"] == "running"
            await wait_until(running)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        dead = await store.fetchone("SELECT owner, expires_at FROM leases WHERE name LIKE"
                                    " 'worker:%' AND released=0")
        assert dead is not None and dead["expires_at"] > store.clock.now() + 60
        runner = SessionRunner(store, config_from_data({"speed": 0}, "t"), lease_ttl_s=120,
                               skills=SkillSet())
        assert await runner.run_until_idle(30)  # far less than the dead lease's 120 s
        job = await store.fetchone("SELECT status, attempt, owner FROM turn_jobs WHERE"
                                   " session_id=?", (sid,))
        assert job is not None
        assert (job["status"], job["attempt"], job["owner"]) == ("done", 2, runner.owner)
        assert [m["role"] for m in (await s.get(sid))["messages"]] == ["user", "assistant"]
        assert await store.verify_projections() == []
    finally:
        await store.close()
