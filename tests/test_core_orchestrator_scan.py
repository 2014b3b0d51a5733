"""The orchestrator's scan at a wake-up by a change (issue 36): only the tasks the log
touched since the last wake-up are scanned (`CHANGED_SQL`), and what no event announces is
still found: the whole scan runs when a driver ends and at least every `poll_s`, however
busy the log is."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from protocol import good_spec

from clawtower.core import leases
from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import AgentDef, SimScript
from clawtower.core.approvals import Approvals
from clawtower.core.effects import MemorySink
from clawtower.core.events import NewEvent, Note
from clawtower.core.orchestrator import Orchestrator, task_lease
from clawtower.core.tasks.scan import ACTIONABLE_SQL, CHANGED_SQL
from clawtower.core.tasks.spec import PlannedEffect

AGENTS = {"builder": AgentDef(role="executor"), "checker": AgentDef(role="spec_reviewer"),
          "critic": AgentDef(role="quality_reviewer")}
EFFECT = [PlannedEffect(kind="notify", description="Post the notes", target="chat://c")]


def orchestrator(store: Any, concurrency: int = 8) -> Orchestrator:
    sim = SimScript(speed=0, agents=dict(AGENTS))
    return Orchestrator(store, AgentSet.simulated(sim), effects=MemorySink(),
                        concurrency=concurrency)


async def awaiting(store: Any, tasks: Any, n: int) -> list[dict[str, Any]]:
    """`n` tasks waiting on the approval of their side effect, and those approvals."""
    for _ in range(n):
        await tasks.create(good_spec(side_effects=EFFECT))
    assert await orchestrator(store).run_until_idle(30)
    pending = await Approvals(store).pending()
    assert len(pending) == n
    return pending


@pytest.mark.both_backends
async def test_the_changed_scan_is_the_whole_scan_among_the_touched_tasks(store, tasks):
    pending = await awaiting(store, tasks, 3)
    seq = await store.last_seq()
    assert await store.fetchall(CHANGED_SQL, (seq,)) == []  # nothing touched since
    await Approvals(store).approve(pending[1]["id"], by="alice")
    changed = await store.fetchall(CHANGED_SQL, (seq,))
    assert [r["id"] for r in changed] == [pending[1]["subject"]]
    assert changed == [r for r in await store.fetchall(ACTIONABLE_SQL)
                       if r["id"] == pending[1]["subject"]]
    # a task touched (its lease taken and let go) with nothing to do (its approval still
    # pending) is not returned; one whose lease another engine let go, and that has
    # something to do, is
    seq = await store.last_seq()
    for t in (pending[0]["subject"], pending[1]["subject"]):
        name = task_lease(t)
        assert await store.execute(lambda tx, name=name: leases._acquire(tx, name, "e2", 30))
        await store.execute(lambda tx, name=name: leases._release(tx, name, "e2"))
    assert [r["id"] for r in await store.fetchall(CHANGED_SQL, (seq,))] == [
        pending[1]["subject"]]


@pytest.fixture
def noisy(store: Any):
    """Unrelated events every 5 ms: the orchestrator's wait for a change never times out."""
    async def write() -> None:
        while True:
            await store.append([NewEvent(entity_id="elsewhere", actor="bot", role="agent",
                                         payload=Note(text="tick"))])
            await asyncio.sleep(0.005)

    task = asyncio.ensure_future(write())
    yield
    task.cancel()


async def test_a_task_left_for_want_of_room_starts_when_a_driver_ends(store, tasks, noisy):
    """Two approvals in one wake-up, room for one: the other task is touched by nothing
    afterwards, and the driver's end (a whole scan) starts it, under a busy log."""
    pending = await awaiting(store, tasks, 2)
    o = orchestrator(store, concurrency=1)
    reads: list[str] = []
    fetchall = store.fetchall

    async def counted(sql: str, params: Any = ()) -> Any:
        reads.append("changed" if sql == CHANGED_SQL else "whole" if sql == ACTIONABLE_SQL
                     else "other")
        return await fetchall(sql, params)

    store.fetchall = counted
    stop = asyncio.Event()
    run = asyncio.create_task(o.run(stop, poll_s=30.0))  # no timed whole scan in this test
    try:
        await asyncio.sleep(0.05)
        approvals = Approvals(store)
        await asyncio.gather(*(approvals.approve(a["id"], by="alice") for a in pending))
        async with asyncio.timeout(20):
            while {(await tasks.get(a["subject"]))["phase"] for a in pending} != {"completed"}:
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert "changed" in reads  # the wake-ups by a change read the changed tasks only
    assert o.errors == []


async def test_a_retry_no_event_announces_is_made_under_a_busy_log(store, tasks, noisy):
    """A driving error schedules a retry that no event announces; the wake-ups by the noise
    rescan everything once it is due (the timed whole scan is 30 s away here)."""
    (a,) = await awaiting(store, tasks, 1)
    o = orchestrator(store)
    failed = asyncio.Event()
    drive = o.drive

    async def flaky(task_id: str, phase: str | None = None) -> None:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("a passing fault")
        await drive(task_id, phase)

    o.drive = flaky  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.create_task(o.run(stop, poll_s=30.0))
    try:
        await asyncio.sleep(0.05)
        await Approvals(store).approve(a["id"], by="alice")
        async with asyncio.timeout(20):
            while (await tasks.get(a["subject"]))["phase"] != "completed":
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert failed.is_set() and o.errors and "a passing fault" in o.errors[0]
