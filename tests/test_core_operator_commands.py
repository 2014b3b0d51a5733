"""Operator commands on a task (unblock with a choice, retry, cancel): recorded with the
operator as actor, executed by the orchestrator's own transition in the same write, refused
with nothing written when they no longer apply."""

from __future__ import annotations

import pytest
from protocol import Driver

from clawtower.core.errors import Conflict, PermissionDenied, ValidationError
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.phases import Phase

P = Phase


async def _blocked(d: Driver) -> str:
    tid = await d.new()
    await d.to(tid, P.CIRCUIT_OPEN)
    return tid


@pytest.mark.parametrize(("choice", "phase"), [
    ("retry", P.EXECUTION_READY), ("execution_ready", P.EXECUTION_READY),
    ("revise", P.SPEC_DRAFT), ("spec_draft", P.SPEC_DRAFT),
    ("abandon", P.FAILED), ("failed", P.FAILED),
])
async def test_unblock_with_each_choice(store, clock, choice: str, phase: Phase) -> None:
    d = Driver(store, clock)
    tid = await _blocked(d)
    before = await store.last_seq()
    r = await d.tasks.command(tid, "unblock", by="alice", choice=choice,
                              reason="staging is back")
    assert (r["from"], r["to"], r["command"], r["by"]) == ("circuit_open", phase.value,
                                                           "unblock", "alice")
    new = await store.events_after(before)
    # causal order: the operator's command, then the orchestrator's move it caused
    assert [(e.type, e.actor, e.role) for e in new] == [
        ("task.commanded", "alice", "operator"),
        ("task.transitioned", "orchestrator", "orchestrator")]
    assert new[0].payload.model_dump() == {"command": "unblock", "to_phase": phase.value,
                                           "reason": "staging is back"}
    assert new[1].payload.reason == "unblock by alice: staging is back"  # type: ignore[attr-defined]
    assert await d.phase(tid) == phase.value
    assert await store.verify_projections() == []


async def test_retry_gives_a_fresh_attempt_budget(store, clock) -> None:
    d = Driver(store, clock)
    tid = await _blocked(d)
    await d.tasks.command(tid, "retry", by="alice")
    assert await d.phase(tid) == "execution_ready"
    # the budget is fresh: the orchestrator may start an attempt again
    await d.move(tid, P.EXECUTING)
    assert await d.phase(tid) == "executing"


@pytest.mark.parametrize("phase", [P.SPEC_DRAFT, P.SPEC_REVIEW, P.EXECUTION_READY,
                                   P.EXECUTING, P.RETRYING, P.CIRCUIT_OPEN])
async def test_cancel_ends_any_unfinished_task(store, clock, phase: Phase) -> None:
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, phase)
    r = await d.tasks.command(tid, "cancel", by="alice", reason="not needed")
    assert (r["from"], r["to"]) == (phase.value, "failed")
    t = await d.get(tid)
    assert t["phase"] == "failed" and t["phase_reason"] == "cancel by alice: not needed"


async def test_cancel_withdraws_a_pending_approval(store, clock) -> None:
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.AWAITING_APPROVAL, effects=True)
    await d.tasks.command(tid, "cancel", by="alice")
    a = await d.latest_approval(tid)
    assert a["status"] == "withdrawn"
    assert await d.approvals.pending() == []


async def test_a_command_that_no_longer_applies_writes_nothing(store, clock) -> None:
    d = Driver(store, clock)
    tid = await _blocked(d)
    await d.tasks.command(tid, "unblock", by="alice", choice="retry")
    seq = await store.last_seq()
    # bob's console still showed the circuit: his unblock comes second and is refused
    with pytest.raises(Conflict, match=f"task '{tid}': nothing to unblock: it is in"
                                       " execution_ready, not circuit_open"):
        await d.tasks.command(tid, "unblock", by="bob", choice="abandon")
    with pytest.raises(Conflict, match="nothing to retry"):
        await d.tasks.command(tid, "retry", by="bob")
    await d.tasks.command(tid, "cancel", by="bob")
    seq = await store.last_seq()
    with pytest.raises(Conflict, match="already ended failed"):
        await d.tasks.command(tid, "cancel", by="bob")
    assert await store.last_seq() == seq


async def test_bad_commands_are_validation_errors(store, clock) -> None:
    d = Driver(store, clock)
    tid = await _blocked(d)
    seq = await store.last_seq()
    with pytest.raises(ValidationError, match="unknown unblock choice 'later'"):
        await d.tasks.command(tid, "unblock", by="alice", choice="later")
    with pytest.raises(ValidationError, match="unblock needs a choice"):
        await d.tasks.command(tid, "unblock", by="alice")
    with pytest.raises(ValidationError, match="unknown command 'restart'"):
        await d.tasks.command(tid, "restart", by="alice")
    with pytest.raises(ValidationError, match="operator's name"):
        await d.tasks.command(tid, "retry", by=" ")
    assert await store.last_seq() == seq


async def test_only_operators_command(store, clock) -> None:
    from clawtower.core.tasks import operator as op

    d = Driver(store, clock)
    tid = await _blocked(d)
    with pytest.raises(PermissionDenied, match=r"task\.command"):
        await store.execute(lambda tx: op.command_task(
            tx, tid, op.Command.RETRY, by="exec-1", role=Role.EXECUTOR))
    assert await d.phase(tid) == "circuit_open"
