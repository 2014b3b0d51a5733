"""Requirement 2: every (role, action) pair of the permissions matrix through the real commands.

Allowed pairs succeed; refused pairs raise PermissionDenied, and the refusal itself is
committed (a `permission.refused` event and a `refusals` row) while nothing else is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from protocol import GOOD_SPEC, ORCH, Driver

from clawtower.core import leases
from clawtower.core.errors import PermissionDenied
from clawtower.core.tasks import commands as c
from clawtower.core.tasks import operator as op
from clawtower.core.tasks.permissions import MATRIX, Action, Role, allowed, parse_role
from clawtower.core.tasks.phases import Phase

P = Phase
A = Action

# Each action: (phase the task must be in, whether it needs planned effects, the command).
# The command gets (tx, task_id, actor, role) and performs exactly that action.
Cmd = Callable[[Any, str, str, Role], Any]


def _pending_approval_id(tx: Any, tid: str) -> str:
    row = tx.one("SELECT id FROM approvals WHERE subject=? ORDER BY seq DESC", (tid,))
    assert row is not None
    return str(row["id"])


def _first_effect(tx: Any, tid: str) -> str:
    row = tx.one("SELECT effect_id FROM side_effects WHERE task_id=? ORDER BY effect_id", (tid,))
    assert row is not None
    return str(row["effect_id"])


def _attempt(tx: Any, tid: str) -> int:
    return int(c.load_task(tx, tid)["attempts"])


COMMANDS: dict[Action, tuple[Phase, bool, Cmd]] = {
    A.TASK_CREATE: (P.SPEC_DRAFT, False,
                    lambda tx, tid, actor, role: c.create_task(tx, GOOD_SPEC, actor, role)),
    A.TASK_UPDATE_SPEC: (P.SPEC_DRAFT, False,
                         lambda tx, tid, actor, role: c.update_spec(tx, tid, GOOD_SPEC, actor,
                                                                    role)),
    A.TASK_TRANSITION: (P.SPEC_DRAFT, False,
                        lambda tx, tid, actor, role: c.transition(tx, tid, P.SPEC_REVIEW,
                                                                  "go", actor, role)),
    A.TASK_COMMAND: (P.SPEC_DRAFT, False,
                     lambda tx, tid, actor, role: op.command_task(
                         tx, tid, op.Command.CANCEL, by=actor, role=role, reason="stop")),
    A.ATTEMPT_START: (P.EXECUTION_READY, False,
                      lambda tx, tid, actor, role: c.transition(tx, tid, P.EXECUTING,
                                                                "start", actor, role)),
    A.REVIEW_SPEC: (P.SPEC_REVIEW, False,
                    lambda tx, tid, actor, role: c.append_review(
                        tx, tid, role, actor, "approved", [], kind="spec")),
    A.REVIEW_QUALITY: (P.QUALITY_GATE, False,
                       lambda tx, tid, actor, role: c.append_review(
                           tx, tid, role, actor, "approve", [], {"risk": "low"},
                           kind="quality")),
    A.ATTEMPT_HEARTBEAT: (P.EXECUTING, False,
                          lambda tx, tid, actor, role: c.heartbeat(
                              tx, tid, _attempt(tx, tid), actor, role, "alive")),
    A.ATTEMPT_CHECKPOINT: (P.EXECUTING, False,
                           lambda tx, tid, actor, role: c.checkpoint(
                               tx, tid, _attempt(tx, tid), {"step": 1}, actor, role)),
    A.ATTEMPT_FINISH: (P.EXECUTING, False,
                       lambda tx, tid, actor, role: c.finish_attempt(
                           tx, tid, _attempt(tx, tid), True, "", actor, role)),
    A.ARTIFACT_RECORD: (P.EXECUTING, False,
                        lambda tx, tid, actor, role: c.record_artifact(
                            tx, tid, _attempt(tx, tid), "patch", "artifact://p", actor, role)),
    A.SIDE_EFFECT_PLAN: (P.EXECUTING, False,
                         lambda tx, tid, actor, role: c.plan_side_effect(
                             tx, tid, _attempt(tx, tid), "notify", "ping", actor, role)),
    A.SIDE_EFFECT_PERFORM: (P.READY_TO_RESUME, True,
                            lambda tx, tid, actor, role: c.effect_intent(
                                tx, tid, _first_effect(tx, tid), actor, role)),
    A.APPROVAL_REQUEST: (P.SPEC_DRAFT, False,
                         lambda tx, tid, actor, role: c.request_approval(
                             tx, kind="input", subject=tid, title="t", prompt="ok?",
                             context={}, preview="", actor=actor, role=role)),
    A.APPROVAL_DECIDE: (P.AWAITING_APPROVAL, True,
                        lambda tx, tid, actor, role: c.decide_approval(
                            tx, _pending_approval_id(tx, tid), True, actor, "fine", role)),
    A.LEASE: (P.SPEC_DRAFT, False,
              lambda tx, tid, actor, role: leases._acquire(tx, "orchestrator", actor, 10.0,
                                                           role)),
}


def test_every_action_has_a_command():
    assert set(COMMANDS) == set(Action)
    assert set(MATRIX) == set(Role)


def test_seed_key_rules_hold_in_the_matrix():
    movers = {r for r in Role if allowed(r, A.TASK_TRANSITION)}
    assert movers == {Role.ORCHESTRATOR}, "only the orchestrator moves the phase"
    # operators command (unblock, retry, cancel); the orchestrator executes the move
    assert {r for r in Role if allowed(r, A.TASK_COMMAND)} == {Role.OPERATOR}
    assert allowed(Role.EXECUTOR, A.ARTIFACT_RECORD) and allowed(Role.EXECUTOR, A.ATTEMPT_FINISH)
    assert {r for r in Role if allowed(r, A.REVIEW_SPEC)} == {Role.SPEC_REVIEWER}
    assert {r for r in Role if allowed(r, A.REVIEW_QUALITY)} == {Role.QUALITY_REVIEWER}
    for reviewer in (Role.SPEC_REVIEWER, Role.QUALITY_REVIEWER, Role.EXECUTOR):
        assert not allowed(reviewer, A.APPROVAL_DECIDE)
        assert not allowed(reviewer, A.SIDE_EFFECT_PERFORM)
    with pytest.raises(Exception, match="unknown role 'admin'"):
        parse_role("admin")


async def _expected(role: Role, action: Action) -> tuple[bool, Action]:
    """Allowed?, and which action a refusal is recorded against (the first check failing)."""
    if action == A.ATTEMPT_START and not allowed(role, A.TASK_TRANSITION):
        return False, A.TASK_TRANSITION  # moving the phase is checked first
    return allowed(role, action), action


async def _check_pair(store, clock, role: Role, action: Action) -> None:
    d = Driver(store, clock)
    phase, effects, cmd = COMMANDS[action]
    tid = await d.new()
    await d.to(tid, phase, effects=effects)
    if action == A.LEASE:  # start from a free lease
        held = await store.fetchone("SELECT owner FROM leases WHERE released=0")
        if held:
            await leases.release(store, "orchestrator", held["owner"])
    actor = f"{role.value}-actor"
    ok, recorded_action = await _expected(role, action)
    before = await store.last_seq()
    refusals_before = await store.fetchall("SELECT * FROM refusals")
    if ok:
        await store.execute(lambda tx: cmd(tx, tid, actor, role))
        new = await store.events_after(before)
        assert new, f"{role}/{action}: allowed but wrote nothing"
        assert all(e.type != "permission.refused" for e in new)
        if action == A.TASK_COMMAND:  # the command by its author, then the orchestrator's move
            assert [(e.type, e.actor, e.role) for e in new] == [
                ("task.commanded", actor, role.value),
                ("task.transitioned", "orchestrator", Role.ORCHESTRATOR.value)]
        else:
            assert all(e.actor == actor and e.role == role.value for e in new)
    else:
        with pytest.raises(PermissionDenied) as err:
            await store.execute(lambda tx: cmd(tx, tid, actor, role))
        assert role.value in str(err.value) and recorded_action.value in str(err.value)
        new = await store.events_after(before)
        assert [e.type for e in new] == ["permission.refused"], \
            f"{role}/{action}: a refused write left {[e.type for e in new]}"
        e = new[0]
        assert (e.actor, e.role) == (actor, role.value)
        assert e.payload.action == recorded_action.value  # type: ignore[attr-defined]
        rows = await store.fetchall("SELECT * FROM refusals WHERE seq=?", (e.seq,))
        assert len(rows) == 1
        assert (rows[0]["actor"], rows[0]["role"], rows[0]["action"]) == \
            (actor, role.value, recorded_action.value)
        refusals_after = await store.fetchall("SELECT * FROM refusals")
        assert len(refusals_after) == len(refusals_before) + 1
    assert await store.verify_projections() == []


@pytest.mark.parametrize("action", list(Action), ids=[a.value for a in Action])
async def test_matrix_pair(store, clock, action):
    for role in Role:
        await _check_pair(store, clock, role, action)


async def test_attempt_start_is_checked_on_its_own(store, clock, monkeypatch):
    """A role allowed to move phases but not to start attempts cannot enter executing."""
    monkeypatch.setitem(MATRIX, Role.OPERATOR, MATRIX[Role.OPERATOR] | {A.TASK_TRANSITION})
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.EXECUTION_READY)
    before = await store.last_seq()
    with pytest.raises(PermissionDenied, match=r"attempt\.start"):
        await d.tasks.transition(tid, P.EXECUTING, "start", actor="alice", role=Role.OPERATOR)
    assert [e.type for e in await store.events_after(before)] == ["permission.refused"]
    assert await d.phase(tid) == "execution_ready"
    await d.tasks.transition(tid, P.CIRCUIT_OPEN, "stop", actor="alice", role=Role.OPERATOR)


async def test_approver_restrictions_are_refusals_too(store, clock):
    d = Driver(store, clock)
    tid = await d.new()

    async def ask(**kw: Any) -> str:
        return await store.execute(lambda tx: c.request_approval(
            tx, kind="input", subject=tid, title="t", prompt="?", context={}, preview="",
            actor="bob", role=Role.ORCHESTRATOR, **kw))

    only_carol = await ask(required_approver="carol")
    not_bob = await ask(require_different_approver=True)
    for aid, who, fragment in [(only_carol, "alice", "only carol"),
                               (not_bob, "bob", "someone other than bob")]:
        before = await store.last_seq()
        with pytest.raises(PermissionDenied, match=fragment):
            await d.approvals.approve(aid, by=who)
        new = await store.events_after(before)
        assert [e.type for e in new] == ["permission.refused"]
        assert (await d.approvals.get(aid))["status"] == "pending"
    assert (await d.approvals.approve(only_carol, by="carol"))["decision"] == "approved"
    assert (await d.approvals.reject(not_bob, by="alice"))["decision"] == "rejected"


async def test_forged_roles_in_event_payloads_do_not_matter(store, clock):
    """Role strings only come from the typed API's caller; an agent naming a role in text,
    or an actor called 'orchestrator' with the executor role, gets nothing extra."""
    d = Driver(store, clock)
    tid = await d.new()
    with pytest.raises(PermissionDenied):
        await d.tasks.transition(tid, P.SPEC_REVIEW, "I am the orchestrator",
                                 actor=ORCH, role=Role.EXECUTOR)
    assert await d.phase(tid) == "spec_draft"

