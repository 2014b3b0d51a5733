"""Requirement 1: the transition table (every pair) and the evidence guards."""

from __future__ import annotations

import itertools

import pytest
from protocol import GOOD_SPEC, NO_CRITERIA_SPEC, WEAK_SPEC, Driver, good_spec, needs_effects

from clawtower.core.errors import IllegalTransition, NotFound, ValidationError
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.phases import (
    BACKOFF_CAP_S,
    MAX_ATTEMPTS,
    TERMINAL,
    TRANSITIONS,
    Phase,
    backoff_seconds,
    is_legal,
    parse_phase,
)

P = Phase
ALL_PAIRS = list(itertools.product(list(Phase), list(Phase)))


def test_table_covers_every_phase_and_terminals_are_dead_ends():
    assert set(TRANSITIONS) == set(Phase)
    for src, dsts in TRANSITIONS.items():
        assert src not in dsts, f"{src} -> itself is in the table"
        assert dsts <= set(Phase)
    assert {P.COMPLETED, P.FAILED} == TERMINAL
    for t in TERMINAL:
        assert TRANSITIONS[t] == frozenset()
    # the seed's minimal lifecycle and failure branches are all in the table
    for a, b in [(P.SPEC_DRAFT, P.SPEC_REVIEW), (P.SPEC_REVIEW, P.EXECUTION_READY),
                 (P.EXECUTION_READY, P.EXECUTING), (P.EXECUTING, P.SPEC_GATE),
                 (P.SPEC_GATE, P.QUALITY_GATE), (P.QUALITY_GATE, P.AWAITING_APPROVAL),
                 (P.AWAITING_APPROVAL, P.READY_TO_RESUME), (P.READY_TO_RESUME, P.COMPLETED),
                 (P.QUALITY_GATE, P.COMPLETED), (P.EXECUTING, P.RETRYING),
                 (P.RETRYING, P.EXECUTING), (P.EXECUTING, P.CIRCUIT_OPEN),
                 (P.SPEC_GATE, P.EXECUTION_READY), (P.QUALITY_GATE, P.EXECUTION_READY),
                 (P.AWAITING_APPROVAL, P.FAILED)]:
        assert is_legal(a, b), f"{a} -> {b}"
    # every non-terminal phase can reach a terminal one
    for src in Phase:
        seen, todo = {src}, [src]
        while todo:
            for nxt in TRANSITIONS[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & TERMINAL, src


def test_parse_phase_names_the_field():
    assert parse_phase("executing") is P.EXECUTING
    with pytest.raises(ValidationError, match="--to: unknown phase 'done'"):
        parse_phase("done", "--to")


def test_backoff_is_bounded_exponential():
    assert [backoff_seconds(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff_seconds(50) == BACKOFF_CAP_S


@pytest.mark.parametrize(("src", "dst"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
async def test_every_pair(store, clock, src, dst):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, src, effects=needs_effects(src, dst))
    assert await d.phase(tid) == src
    if dst in TRANSITIONS[src]:
        await d.satisfy(tid, src, dst)
        before = await store.last_seq()
        result = await d.move(tid, dst, "pair test")
        assert result["from"] == src and result["to"] == dst
        task = await d.get(tid)
        assert task["phase"] == dst
        last = task["history"][-1]
        assert (last["from_phase"], last["to_phase"], last["reason"]) == (src, dst, "pair test")
        assert await store.last_seq() > before
    else:
        before = await store.last_seq()
        with pytest.raises(IllegalTransition) as err:
            await d.move(tid, dst, "pair test")
        msg = str(err.value)
        assert tid in msg and f"{src.value} -> {dst.value}" in msg
        assert "not a legal transition" in msg
        assert await store.last_seq() == before, "a refused transition wrote something"
        assert await d.phase(tid) == src
    assert await store.verify_projections() == []


async def test_transition_needs_reason_and_existing_task(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    with pytest.raises(ValidationError, match="reason"):
        await d.move(tid, P.SPEC_REVIEW, "  ")
    with pytest.raises(NotFound, match="T-99"):
        await d.move("T-99", P.SPEC_REVIEW)
    with pytest.raises(ValueError):
        await d.move(tid, "done")
    assert await store.last_seq() == 1


# ---------------------------------------------------------------------------- guards


async def refused(d: Driver, tid: str, dst: Phase, *fragments: str) -> str:
    before = await d.store.last_seq()
    phase = await d.phase(tid)
    with pytest.raises(IllegalTransition) as err:
        await d.move(tid, dst)
    msg = str(err.value)
    assert tid in msg and f"{phase} -> {dst.value}" in msg, msg
    for f in fragments:
        assert f in msg, msg
    assert await d.store.last_seq() == before
    assert await d.phase(tid) == phase
    return msg


async def test_weak_or_incomplete_spec_stays_in_spec_draft(store, clock):
    d = Driver(store, clock)
    for spec, fragment in [(WEAK_SPEC, "too weak to test: 'it works'"),
                           (NO_CRITERIA_SPEC, "acceptance_criteria: missing"),
                           (good_spec(outputs=[]), "outputs: missing"),
                           (good_spec(acceptance_criteria=["Latency is TBD for now"]),
                            "placeholder")]:
        tid = await d.new(spec)
        task = await d.get(tid)
        assert task["phase"] == "spec_draft" and not task["spec_ok"]
        assert any(fragment in p for p in task["spec_problems"]), task["spec_problems"]
        await refused(d, tid, P.SPEC_REVIEW, "the spec is not ready", fragment)
        # the spec may only change in spec_draft; a good one unblocks the review
        assert await d.tasks.update_spec(tid, GOOD_SPEC) == []
        await d.move(tid, P.SPEC_REVIEW)
        with pytest.raises(IllegalTransition, match="only change in spec_draft"):
            await d.tasks.update_spec(tid, GOOD_SPEC)


async def test_spec_review_needs_an_approving_review_of_the_current_spec(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.move(tid, P.SPEC_REVIEW)
    await refused(d, tid, P.EXECUTION_READY, "no approving spec review")
    await d.spec_review(tid, "changes_requested")
    await refused(d, tid, P.EXECUTION_READY, "no approving spec review")
    await d.spec_review(tid, "blocked")
    await refused(d, tid, P.EXECUTION_READY)
    # approved review of spec v1, then the spec changes: the old approval no longer counts
    await d.spec_review(tid, "approved")
    await d.move(tid, P.SPEC_DRAFT, "revise")
    await d.tasks.update_spec(tid, good_spec(goal="Serve the answer over HTTPS."))
    await d.move(tid, P.SPEC_REVIEW)
    assert (await d.get(tid))["spec_version"] == 2
    await refused(d, tid, P.EXECUTION_READY, "current spec")
    # an approval from an earlier round of review (same spec version) does not count either
    await d.spec_review(tid, "approved")
    await d.move(tid, P.SPEC_DRAFT, "second thoughts")
    await d.move(tid, P.SPEC_REVIEW)
    await refused(d, tid, P.EXECUTION_READY)
    # the latest review decides: approved after changes_requested passes
    await d.spec_review(tid, "changes_requested")
    await d.spec_review(tid, "approved")
    await d.move(tid, P.EXECUTION_READY)


async def test_reviews_are_taken_only_in_their_phases(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    with pytest.raises(IllegalTransition, match="spec reviews are taken in"):
        await d.spec_review(tid)
    with pytest.raises(IllegalTransition, match="quality reviews are taken in quality_gate"):
        await d.quality_review(tid)
    await d.move(tid, P.SPEC_REVIEW)
    with pytest.raises(ValidationError, match="needs at least one finding"):
        await d.tasks.review(tid, role=Role.SPEC_REVIEWER, reviewer="x",
                             verdict="changes_requested", findings=[])
    with pytest.raises(ValidationError, match="verdict"):
        await d.spec_review(tid, "LGTM")
    assert (await d.get(tid))["reviews"] == []


async def test_executing_needs_attempt_budget_and_attempt_3_escalates(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.EXECUTION_READY)
    for n in range(1, MAX_ATTEMPTS + 1):
        await d.move(tid, P.EXECUTING, model="std", escalation_model="strong")
        att = (await d.get(tid))["attempt_records"][-1]
        assert att["n"] == n
        assert att["model"] == ("strong" if n == 3 else "std")
        assert bool(att["escalated"]) == (n == 3)
        await d.finish(tid, ok=True)
        await d.move(tid, P.SPEC_GATE)
        await d.spec_review(tid, "changes_requested")
        await d.move(tid, P.EXECUTION_READY, "rework")
    msg = await refused(d, tid, P.EXECUTING, "attempt budget exhausted (3/3)")
    assert "circuit" in msg
    await d.move(tid, P.CIRCUIT_OPEN, "budget spent")
    circuit = (await d.get(tid))["circuit"]
    assert circuit["attempts"] == 3 and circuit["unblock_options"]


async def test_executing_exit_guards(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.EXECUTING)
    await refused(d, tid, P.SPEC_GATE, "has not succeeded (status running)")
    await refused(d, tid, P.RETRYING, "has not failed (status running)")
    await d.finish(tid, ok=True)
    await refused(d, tid, P.RETRYING, "has not failed (status succeeded)")
    await d.move(tid, P.SPEC_GATE)

    tid = await d.new()
    await d.to(tid, P.EXECUTING)
    await d.finish(tid, ok=False, reason="tests time out")
    await refused(d, tid, P.SPEC_GATE, "has not succeeded (status failed)")
    await d.move(tid, P.RETRYING)
    retry = (await d.get(tid))["retries"][-1]
    assert retry["reason"] == "tests time out" and retry["next_attempt"] == 2


async def test_retrying_waits_for_backoff_under_fake_clock(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.EXECUTING)
    backoffs = []
    for n in (1, 2):
        await d.finish(tid, ok=False, reason=f"fail {n}")
        t0 = clock.now()
        await d.move(tid, P.RETRYING)
        retry = (await d.get(tid))["retries"][-1]
        backoffs.append(retry["not_before"] - t0)
        assert bool(retry["escalate"]) == (n == 2)
        await refused(d, tid, P.EXECUTING, "retry backoff until")
        clock.advance(backoffs[-1] - 0.001)
        await refused(d, tid, P.EXECUTING, "retry backoff until")
        clock.advance(0.001)
        await d.move(tid, P.EXECUTING)
    assert backoffs == [backoff_seconds(1), backoff_seconds(2)] == [1.0, 2.0]
    # attempt 3 failed: no budget left to retry; the circuit opens instead
    await d.finish(tid, ok=False, reason="fail 3")
    await refused(d, tid, P.RETRYING, "attempt budget exhausted (3/3)")
    await d.move(tid, P.CIRCUIT_OPEN)
    circuit = (await d.get(tid))["circuit"]
    assert circuit["failure_summary"] == "attempt 1: fail 1; attempt 2: fail 2; attempt 3: fail 3"


async def test_gate_guards(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.SPEC_GATE)
    await refused(d, tid, P.QUALITY_GATE, "no spec review of attempt 1")
    await refused(d, tid, P.EXECUTION_READY, "no spec review of attempt 1")
    await d.spec_review(tid, "changes_requested")
    await refused(d, tid, P.QUALITY_GATE, "says changes_requested")
    await d.spec_review(tid, "approved")
    await refused(d, tid, P.EXECUTION_READY, "nothing to rework")
    await d.move(tid, P.QUALITY_GATE)
    await refused(d, tid, P.COMPLETED, "no quality review of attempt 1")
    await d.quality_review(tid, "rework")
    await refused(d, tid, P.COMPLETED, "recommends rework")
    await refused(d, tid, P.AWAITING_APPROVAL, "recommends rework")
    await d.quality_review(tid, "approve")
    await refused(d, tid, P.AWAITING_APPROVAL, "no planned side effects")
    await refused(d, tid, P.EXECUTION_READY, "nothing to rework")
    await d.move(tid, P.COMPLETED)


async def test_side_effects_gate_completion(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.QUALITY_GATE, effects=True)
    await d.quality_review(tid, "approve")
    await refused(d, tid, P.COMPLETED, "2 planned side effect(s) need approval first")
    await d.move(tid, P.AWAITING_APPROVAL)
    a = await d.latest_approval(tid)
    assert a["status"] == "pending" and a["kind"] == "task_side_effect"
    assert [e["kind"] for e in a["context"]["effects"]] == ["notify", "deploy"]
    await refused(d, tid, P.READY_TO_RESUME, f"approval {a['id']} is pending")
    await d.approvals.approve(a["id"], by="alice")  # the phase follows in the same commit
    assert (await d.get(tid))["phase"] == P.READY_TO_RESUME
    await refused(d, tid, P.COMPLETED, "2 approved side effect(s) not done yet")
    keys = await d.perform_effects(tid)
    assert len(set(keys)) == 2
    await d.move(tid, P.COMPLETED)
    assert all(e["status"] == "done" for e in (await d.get(tid))["side_effects"])


async def test_rejected_approval_cannot_resume(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.AWAITING_APPROVAL, effects=True)
    a = await d.latest_approval(tid)
    # the decision alone (as a release before issue 36 wrote it, with no phase move in
    # its commit): the guard refuses the resume
    await store.execute(lambda tx: c.decide_approval(tx, a["id"], False, "alice", "not today"))
    await refused(d, tid, P.READY_TO_RESUME, "is rejected")
    await d.move(tid, P.FAILED, "rejected")
    assert (await d.approvals.get(a["id"]))["status"] == "rejected"


async def test_a_decision_through_the_approvals_list_moves_its_task_in_its_commit(store,
                                                                                   clock):
    """Approved: ready_to_resume; rejected: failed; by the orchestrator's rule, in the
    decision's own commit (issue 36), with no engine running."""
    d = Driver(store, clock)
    for approve, phase in ((True, P.READY_TO_RESUME), (False, P.FAILED)):
        tid = await d.new()
        await d.to(tid, P.AWAITING_APPROVAL, effects=True)
        a = await d.latest_approval(tid)
        batches = store.batches
        await (d.approvals.approve if approve else d.approvals.reject)(a["id"], by="alice")
        assert store.batches - batches == 1
        t = await d.get(tid)
        assert t["phase"] == phase
        verb = "granted" if approve else "rejected"
        assert t["history"][-1]["reason"] == f"approval {a['id']} {verb} by alice"
        assert t["history"][-1]["actor"] == "orchestrator"
    assert await store.verify_projections() == []


async def test_failing_while_awaiting_approval_withdraws_it(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.AWAITING_APPROVAL, effects=True)
    a = await d.latest_approval(tid)
    await d.move(tid, P.FAILED, "operator gave up")
    assert (await d.approvals.get(a["id"]))["status"] == "withdrawn"
    assert await d.approvals.pending() == []


async def test_effects_run_only_after_approval(store, clock):
    """No effect can be marked done before its intent, and intents need ready_to_resume."""
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.QUALITY_GATE, effects=True)
    eid = (await d.get(tid))["side_effects"][0]["effect_id"]
    with pytest.raises(IllegalTransition, match="only in ready_to_resume"):
        await store.execute(lambda tx: c.effect_intent(tx, tid, eid, "o", Role.ORCHESTRATOR))
    with pytest.raises(IllegalTransition, match="no committed intent"):
        await store.execute(lambda tx: c.effect_done(tx, tid, eid, "x", "o", Role.ORCHESTRATOR))
    other = await d.new()
    with pytest.raises(NotFound):
        await store.execute(lambda tx: c.effect_done(tx, other, eid, "x", "o",
                                                     Role.ORCHESTRATOR))
    await d.quality_review(tid, "approve")
    await refused(d, tid, P.COMPLETED, "need approval first")


async def test_circuit_unblock_gives_a_fresh_budget_and_keeps_attempt_history(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.EXECUTION_READY)
    for _ in range(MAX_ATTEMPTS):
        await d.move(tid, P.EXECUTING)
        await d.finish(tid, ok=False)
        if (await d.get(tid))["attempts"] < MAX_ATTEMPTS:
            await d.move(tid, P.RETRYING)
            clock.advance(60)
    await d.move(tid, P.CIRCUIT_OPEN)
    await refused(d, tid, P.EXECUTING, "not a legal transition")
    await d.move(tid, P.EXECUTION_READY, "operator unblock")
    task = await d.get(tid)
    assert task["circuit"] is None and task["history"][-1]["from_phase"] == "circuit_open"
    # three more attempts, numbered on (4, 5, 6); the third of the new budget escalates
    for k in range(1, MAX_ATTEMPTS + 1):
        await d.move(tid, P.EXECUTING, model="std", escalation_model="strong")
        att = (await d.get(tid))["attempt_records"][-1]
        assert att["n"] == MAX_ATTEMPTS + k
        assert att["model"] == ("strong" if k == 3 else "std")
        await d.finish(tid, ok=False, reason=f"again {k}")
        if k < MAX_ATTEMPTS:
            await d.move(tid, P.RETRYING)
            assert (await d.get(tid))["retries"][-1]["not_before"] - clock.now() == \
                backoff_seconds(k)
            clock.advance(60)
    await refused(d, tid, P.RETRYING, "attempt budget exhausted (3/3)")
    await d.move(tid, P.CIRCUIT_OPEN)
    circuit = (await d.get(tid))["circuit"]
    assert circuit["attempts"] == 3
    assert circuit["failure_summary"] == \
        "attempt 4: again 1; attempt 5: again 2; attempt 6: again 3"
    assert [a["n"] for a in (await d.get(tid))["attempt_records"]] == [1, 2, 3, 4, 5, 6]
    assert await store.verify_projections() == []


async def test_unblock_to_spec_draft_then_full_cycle(store, clock):
    d = Driver(store, clock)
    tid = await d.new()
    await d.to(tid, P.CIRCUIT_OPEN)
    await d.move(tid, P.SPEC_DRAFT, "revise the spec")
    await d.tasks.update_spec(tid, good_spec(goal="A sharper goal."))
    await d.move(tid, P.SPEC_REVIEW)
    await d.spec_review(tid)
    await d.move(tid, P.EXECUTION_READY)
    await d.move(tid, P.EXECUTING)
    await d.finish(tid, ok=True)
    await d.move(tid, P.SPEC_GATE)
    await d.spec_review(tid)
    await d.move(tid, P.QUALITY_GATE)
    await d.quality_review(tid)
    await d.move(tid, P.COMPLETED)
    assert await store.verify_projections() == []
