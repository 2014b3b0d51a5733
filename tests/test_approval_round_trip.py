"""The approval round trip's shape (issue 24): approve is one write with no read before it,
and the task's phase moves in it (issue 36);
the orchestrator acts on a decided approval in one command (`resume_decided`) without
reading the whole task first; its scan probes approvals in the index alone (schema v19)."""

from __future__ import annotations

from typing import Any

from protocol import good_spec

from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import SimScript
from clawtower.core.approvals import Approvals
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.scan import ACTIONABLE_SQL
from clawtower.core.tasks.spec import PlannedEffect

EFFECTS = [PlannedEffect(kind="notify", description="Post the notes", target="chat://c")]


async def awaiting(store: Any, tasks: Any) -> tuple[str, str, Orchestrator]:
    tid = await tasks.create(good_spec(side_effects=EFFECTS))
    o = Orchestrator(store, AgentSet.simulated(SimScript(speed=0)))
    assert await o.run_until_idle(30) and o.errors == []
    (a,) = await Approvals(store).pending()
    return tid, a["id"], o


def resume(store: Any, tid: str) -> Any:
    return store.execute(lambda tx: c.resume_decided(tx, tid, "orchestrator",
                                                     Role.ORCHESTRATOR))


async def test_resume_decided_moves_once_on_the_decision(store, tasks):
    tid, aid, _ = await awaiting(store, tasks)
    seq = await store.last_seq()
    assert await resume(store, tid) is False  # still pending: nothing written
    assert await store.last_seq() == seq
    await Approvals(store).approve(aid, by="alice")
    assert await resume(store, tid) is True
    t = await tasks.get(tid)
    assert t["phase"] == "ready_to_resume"
    assert t["history"][-1]["reason"] == f"approval {aid} granted by alice"
    seq = await store.last_seq()
    assert await resume(store, tid) is True  # no longer awaiting: the caller reads again
    assert await store.last_seq() == seq
    assert await store.verify_projections() == []


async def test_resume_decided_fails_the_task_on_a_rejection(store, tasks):
    tid, aid, _ = await awaiting(store, tasks)
    await Approvals(store).reject(aid, by="alice", reason="not before the release")
    assert await resume(store, tid) is True
    t = await tasks.get(tid)
    assert t["phase"] == "failed"
    assert t["phase_reason"] == f"approval {aid} rejected by alice: not before the release"


async def test_approve_is_one_write_with_no_read_before_it(store, tasks, monkeypatch):
    _, aid, _ = await awaiting(store, tasks)
    calls: list[str] = []
    for name in ("fetchall", "fetchone", "fetch_many", "execute"):
        original = getattr(store, name)

        def record(*a: Any, _name: str = name, _original: Any = original, **k: Any) -> Any:
            calls.append(_name)
            return _original(*a, **k)

        monkeypatch.setattr(store, name, record)
    out = await Approvals(store).approve(aid, by="alice")
    assert out["decision"] == "approved" and calls == ["execute"]


async def test_an_approval_moves_its_task_in_its_own_commit(store, tasks):
    """The decision and the task's phase, one commit: ready to resume with no engine."""
    tid, aid, _ = await awaiting(store, tasks)
    batches = store.batches
    await Approvals(store).approve(aid, by="alice")
    assert store.batches - batches == 1
    assert (await tasks.get(tid))["phase"] == "ready_to_resume"


async def test_the_engine_acts_on_a_decision_before_reading_the_task(store, tasks,
                                                                    monkeypatch):
    """A decision written alone (a release before issue 36): the engine moves the task in
    one command, before it reads it."""
    tid, aid, o = await awaiting(store, tasks)
    await store.execute(lambda tx: c.decide_approval(tx, aid, True, "alice", ""))
    order: list[str] = []
    get, execute = o.tasks.get, store.execute

    async def read(task_id: str) -> dict[str, Any]:
        order.append("get")
        return await get(task_id)

    async def write(command: Any) -> Any:
        order.append("execute")
        return await execute(command)

    monkeypatch.setattr(o.tasks, "get", read)
    monkeypatch.setattr(store, "execute", write)
    assert await o.run_until_idle(30) and o.errors == []
    assert order[0] == "execute"  # resume_decided, then the next step reads the task
    assert (await tasks.get(tid))["phase"] == "completed"


async def test_the_scan_probes_approvals_in_the_index_alone(store, tasks):
    await awaiting(store, tasks)
    plan = " | ".join(r["detail"] for r in await store.fetchall(
        "EXPLAIN QUERY PLAN " + ACTIONABLE_SQL))
    assert "COVERING INDEX approvals_by_subject" in plan, plan
