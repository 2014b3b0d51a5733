"""Requirement 3: a stateful hypothesis test of the phase machine against the REAL store.

A pure-python model of the transition table and its evidence guards predicts, for every
random command (random actor role, random target phase, reviews, attempt finishes, effects,
approvals, clock moves), whether the store must accept or refuse it. We count illegal
transitions accepted and legal ones refused (both must stay 0), and after every step the
projections must equal a replay of the log.

Default: 60 examples x 30 steps. HYPOTHESIS_PROFILE=thorough: 2,000 examples x 50 steps.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from protocol import GOOD_SPEC, WEAK_SPEC

from clawtower.core.clock import FakeClock
from clawtower.core.errors import Conflict, IllegalTransition, PermissionDenied
from clawtower.core.store import open_store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Action, Role, allowed
from clawtower.core.tasks.phases import MAX_ATTEMPTS, TRANSITIONS, Phase, backoff_seconds

# one xdist worker (--dist loadgroup) runs these: the figures test reads the machine's counts
pytestmark = pytest.mark.xdist_group("phase-machine")

P = Phase
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
EXAMPLES, STEPS = (2000, 50) if PROFILE == "thorough" else (60, 30)

# figures over the whole run (reported by the suite's summary)
STATS = {"rule_steps": 0, "steps": 0, "transitions_accepted": 0, "transitions_refused": 0,
         "illegal_accepted": 0, "legal_refused": 0, "examples": 0}
PAIRS_ACCEPTED: set[tuple[str, str]] = set()
LEGAL_PAIRS = {(a.value, b.value) for a, dsts in TRANSITIONS.items() for b in dsts}

# the lifecycle's forward moves (the walk prefers them, the table has more)
FORWARD: dict[Phase, tuple[Phase, ...]] = {
    P.SPEC_DRAFT: (P.SPEC_REVIEW,), P.SPEC_REVIEW: (P.EXECUTION_READY,),
    P.EXECUTION_READY: (P.EXECUTING,), P.EXECUTING: (P.SPEC_GATE, P.RETRYING),
    P.RETRYING: (P.EXECUTING,), P.SPEC_GATE: (P.QUALITY_GATE,),
    P.QUALITY_GATE: (P.COMPLETED, P.AWAITING_APPROVAL),
    P.AWAITING_APPROVAL: (P.READY_TO_RESUME,), P.READY_TO_RESUME: (P.COMPLETED,),
    P.CIRCUIT_OPEN: (P.EXECUTION_READY,),
}

ACTIONS = (["advance"] * 16 + ["transition_any"] * 3 + ["transition_in_table"] * 2
           + ["cooperative_write", "spec_review", "quality_review", "finish_attempt",
              "plan_effect", "decide", "perform_effect", "update_spec", "advance_clock",
              "create_task"])

roles = st.one_of(st.just(Role.ORCHESTRATOR), st.sampled_from(list(Role)))


@dataclass
class TaskModel:
    tid: str
    spec_ok: bool
    phase: Phase = P.SPEC_DRAFT
    spec_version: int = 1
    attempts: int = 0
    base: int = 0  # attempts made before the last circuit unblock
    status: dict[int, str] = field(default_factory=dict)
    review_round: str | None = None  # latest spec_review verdict since entering spec_review
    gate: dict[tuple[str, int], str] = field(default_factory=dict)
    effects: dict[str, str] = field(default_factory=dict)
    approval: str | None = None
    retry_not_before: float | None = None

    def pending_effects(self) -> bool:
        return any(s != "done" for s in self.effects.values())

    def guard(self, dst: Phase, now: float) -> bool:
        src = self.phase
        if dst in (P.FAILED, P.CIRCUIT_OPEN):
            return True
        if (src, dst) == (P.SPEC_DRAFT, P.SPEC_REVIEW):
            return self.spec_ok
        if (src, dst) == (P.SPEC_REVIEW, P.EXECUTION_READY):
            return self.review_round == "approved"
        used = self.attempts - self.base
        if dst == P.EXECUTING:
            if used >= MAX_ATTEMPTS:
                return False
            return not (src == P.RETRYING and self.retry_not_before is not None
                        and now < self.retry_not_before)
        if src == P.EXECUTING:
            status = self.status.get(self.attempts, "missing")
            if dst == P.SPEC_GATE:
                return status == "succeeded"
            if dst == P.RETRYING:
                return status not in ("succeeded", "running") and used < MAX_ATTEMPTS
            return True
        if src in (P.SPEC_GATE, P.QUALITY_GATE):
            verdict = self.gate.get((src.value, self.attempts))
            if verdict is None:
                return False
            ok = "approved" if src == P.SPEC_GATE else "approve"
            if dst == P.EXECUTION_READY:
                return verdict != ok
            if dst in (P.QUALITY_GATE, P.COMPLETED, P.AWAITING_APPROVAL) and verdict != ok:
                return False
            if dst == P.COMPLETED:
                return not self.pending_effects()
            if dst == P.AWAITING_APPROVAL:
                return self.pending_effects()
            return True
        if (src, dst) == (P.AWAITING_APPROVAL, P.READY_TO_RESUME):
            return self.approval == "approved"
        if (src, dst) == (P.READY_TO_RESUME, P.COMPLETED):
            return not self.pending_effects()
        return True

    def apply(self, dst: Phase, now: float) -> None:
        src = self.phase
        if src == P.CIRCUIT_OPEN:
            self.base = self.attempts
        if dst == P.SPEC_REVIEW:
            self.review_round = None
        if dst == P.EXECUTING:
            self.attempts += 1
            self.status[self.attempts] = "running"
            self.retry_not_before = None
        if dst == P.RETRYING:
            self.retry_not_before = now + backoff_seconds(self.attempts - self.base)
        if dst == P.AWAITING_APPROVAL:
            self.approval = "pending"
        if src == P.AWAITING_APPROVAL and dst == P.FAILED and self.approval == "pending":
            self.approval = "withdrawn"
        self.phase = dst


class PhaseMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.mkdtemp(prefix="clawtower-hyp-")
        self.clock = FakeClock()
        self.store = self.loop.run_until_complete(
            open_store(os.path.join(self.dir, "store.db"), clock=self.clock))
        self.model: list[TaskModel] = []
        STATS["examples"] += 1

    def teardown(self) -> None:
        try:
            self.loop.run_until_complete(self.store.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ plumbing

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def execute(self, command: Any) -> tuple[str, Any]:
        """Run a command; return ('ok', value) or (error class name, error)."""
        before = self.run(self.store.last_seq())
        try:
            return "ok", self.run(self.store.execute(command))
        except PermissionDenied as exc:
            new = self.run(self.store.events_after(before))
            assert [e.type for e in new] == ["permission.refused"], new
            return "denied", exc
        except (IllegalTransition, Conflict) as exc:
            assert self.run(self.store.last_seq()) == before, "a refused command wrote events"
            return type(exc).__name__, exc

    def task(self, i: int) -> TaskModel:
        return self.model[i % len(self.model)]

    def pick(self, i: int, *phases: Phase) -> TaskModel:
        """Mostly a task the command applies to (so evidence lands where guards look);
        every tenth pick (and when none applies) any task, so misplaced writes are tried."""
        relevant = [t for t in self.model if t.phase in phases]
        if relevant and i % 10:
            return relevant[(i // 10) % len(relevant)]
        return self.task(i)

    # ------------------------------------------------------------------ rules

    @initialize(good=st.sampled_from([True, True, True, False]))
    def first_task(self, good: bool) -> None:
        self._create_task(good)

    def _create_task(self, good: bool) -> None:
        spec = GOOD_SPEC if good else WEAK_SPEC
        outcome, tid = self.execute(lambda tx: c.create_task(tx, spec, "op", Role.OPERATOR))
        assert outcome == "ok"
        self.model.append(TaskModel(tid=tid, spec_ok=good))

    def _transition(self, t: TaskModel, dst: Phase, role: Role) -> None:
        STATS["steps"] += 1
        now = self.clock.now()
        permitted = allowed(role, Action.TASK_TRANSITION) and (
            dst != P.EXECUTING or allowed(role, Action.ATTEMPT_START))
        legal = dst in TRANSITIONS[t.phase] and t.guard(dst, now)
        outcome, value = self.execute(lambda tx: c.transition(
            tx, t.tid, dst, "hypothesis", f"{role.value}-x", role,
            model="std", escalation_model="strong"))
        if not permitted:
            assert outcome == "denied", (t.phase, dst, role, outcome, value)
            return
        if outcome == "ok":
            STATS["transitions_accepted"] += 1
            if not legal:
                STATS["illegal_accepted"] += 1
            assert legal, f"illegal transition accepted: {t.tid} {t.phase} -> {dst}"
            PAIRS_ACCEPTED.add((t.phase.value, dst.value))
            t.apply(dst, now)
        else:
            STATS["transitions_refused"] += 1
            if legal:
                STATS["legal_refused"] += 1
            assert outcome == "IllegalTransition", (outcome, value)
            assert not legal, f"legal transition refused: {t.tid} {t.phase} -> {dst}: {value}"
            assert t.tid in str(value) and f"{t.phase.value} -> {dst.value}" in str(value)

    def _live(self, i: int) -> TaskModel | None:
        live = [t for t in self.model if t.phase not in (P.COMPLETED, P.FAILED)]
        return live[i % len(live)] if live else None

    def _in_table(self, t: TaskModel, k: int) -> None:
        """A move the table allows (its guard may still refuse it), mostly a forward one:
        going back or giving up ends the walk early."""
        targets = sorted(TRANSITIONS[t.phase])
        onward = [p for p in targets if p in FORWARD.get(t.phase, ())]
        if onward and k % 12 < 8:
            targets = onward
        if targets:
            self._transition(t, targets[k % len(targets)], Role.ORCHESTRATOR)

    # ------------------------------------------------------------- evidence writes

    def _spec_review(self, t: TaskModel, verdict: str, role: Role) -> None:
        findings = [] if verdict == "approved" else [{"ref": None, "text": "nope"}]
        outcome, _ = self.execute(lambda tx: c.append_review(
            tx, t.tid, role, "rev", verdict, findings, kind="spec"))
        if not allowed(role, Action.REVIEW_SPEC):
            assert outcome == "denied"
        elif t.phase in (P.SPEC_REVIEW, P.SPEC_GATE):
            assert outcome == "ok"
            if t.phase == P.SPEC_REVIEW:
                t.review_round = verdict
            else:
                t.gate[("spec_gate", t.attempts)] = verdict
        else:
            assert outcome == "IllegalTransition"

    def _quality_review(self, t: TaskModel, verdict: str, role: Role) -> None:
        findings = [] if verdict == "approve" else [{"ref": None, "text": "rework"}]
        outcome, _ = self.execute(lambda tx: c.append_review(
            tx, t.tid, role, "rev", verdict, findings, {"risk": "low"}, kind="quality"))
        if not allowed(role, Action.REVIEW_QUALITY):
            assert outcome == "denied"
        elif t.phase == P.QUALITY_GATE:
            assert outcome == "ok"
            t.gate[("quality_gate", t.attempts)] = verdict
        else:
            assert outcome == "IllegalTransition"

    def _finish(self, t: TaskModel, ok: bool, stale: bool, role: Role) -> None:
        n = t.attempts - 1 if stale else t.attempts
        outcome, _ = self.execute(lambda tx: c.finish_attempt(
            tx, t.tid, n, ok, "" if ok else "it broke", "builder", role))
        if not allowed(role, Action.ATTEMPT_FINISH):
            assert outcome == "denied"
        elif t.phase == P.EXECUTING and n == t.attempts and t.status.get(n) == "running":
            assert outcome == "ok"
            t.status[n] = "succeeded" if ok else "failed"
        else:
            assert outcome == "IllegalTransition"

    def _plan_effect(self, t: TaskModel) -> None:
        outcome, eid = self.execute(lambda tx: c.plan_side_effect(
            tx, t.tid, t.attempts, "notify", "ping", "builder", Role.EXECUTOR))
        if t.phase == P.EXECUTING and t.status.get(t.attempts) == "running":
            assert outcome == "ok"
            t.effects[eid] = "planned"
        else:
            assert outcome == "IllegalTransition"

    def _decide(self, t: TaskModel, approve: bool, role: Role) -> None:
        row = self.run(self.store.fetchone(
            "SELECT id FROM approvals WHERE subject=? ORDER BY seq DESC LIMIT 1", (t.tid,)))
        if row is None:
            assert t.approval is None
            return
        outcome, _ = self.execute(lambda tx: c.decide_approval(
            tx, row["id"], approve, "alice", "why not", role))
        if not allowed(role, Action.APPROVAL_DECIDE):
            assert outcome == "denied"
        elif t.approval == "pending":
            assert outcome == "ok"
            t.approval = "approved" if approve else "rejected"
        else:  # decided already: the loser is told so (AlreadyDecided is a Conflict)
            assert outcome in ("AlreadyDecided", "Conflict")

    def _perform(self, t: TaskModel, eid: str, skip_intent: bool) -> None:
        if not skip_intent:
            outcome, _ = self.execute(lambda tx: c.effect_intent(
                tx, t.tid, eid, "orch", Role.ORCHESTRATOR))
            if t.phase != P.READY_TO_RESUME:
                assert outcome == "IllegalTransition"
                return
            assert outcome == "ok"
            if t.effects[eid] == "planned":
                t.effects[eid] = "intent"
        outcome, _ = self.execute(lambda tx: c.effect_done(
            tx, t.tid, eid, "done", "orch", Role.ORCHESTRATOR))
        if t.effects[eid] == "planned":
            assert outcome == "IllegalTransition", "an effect was done without an intent"
        else:
            assert outcome == "ok"
            t.effects[eid] = "done"

    def _update_spec(self, t: TaskModel, good: bool) -> None:
        spec = GOOD_SPEC if good else WEAK_SPEC
        outcome, _ = self.execute(lambda tx: c.update_spec(tx, t.tid, spec, "op", Role.OPERATOR))
        if t.phase == P.SPEC_DRAFT:
            assert outcome == "ok"
            t.spec_ok = good
            t.spec_version += 1
        else:
            assert outcome == "IllegalTransition"

    def _helpful(self, t: TaskModel, i: int, good: bool) -> None:
        """The write a cooperative actor would make next for the task's phase."""
        if t.phase == P.SPEC_DRAFT and not t.spec_ok:
            self._update_spec(t, good)
        elif t.phase in (P.SPEC_REVIEW, P.SPEC_GATE):
            self._spec_review(t, "approved" if good else "changes_requested", Role.SPEC_REVIEWER)
        elif t.phase == P.QUALITY_GATE:
            self._quality_review(t, "approve" if good else "rework", Role.QUALITY_REVIEWER)
        elif t.phase == P.EXECUTING and t.status.get(t.attempts) == "running":
            if i % 3 == 0 and len(t.effects) < 3:
                self._plan_effect(t)
            else:
                self._finish(t, good, False, Role.EXECUTOR)
        elif t.phase == P.RETRYING and t.retry_not_before is not None:
            wait = max(0.0, t.retry_not_before - self.clock.now())
            # sit out the backoff, or only part of it (the move after it must then fail)
            self.clock.advance(wait if good and i % 3 else wait / 2)
        elif t.phase == P.AWAITING_APPROVAL and t.approval == "pending":
            self._decide(t, good, Role.OPERATOR)
        elif t.phase == P.READY_TO_RESUME:
            for eid in sorted(t.effects):
                self._perform(t, eid, skip_intent=False)

    # ------------------------------------------------------------------ the rule

    # One rule that dispatches on a weighted action: hypothesis's simplest choice (the first
    # entry) is `advance`, and no action is switched off for a whole example (hypothesis's
    # swarm testing does that to separate rules, which kept walks short at 60 examples).
    @rule(action=st.sampled_from(ACTIONS), i=st.integers(0, 99), k=st.integers(0, 99),
          good=st.sampled_from([True, True, True, False]), role=roles,
          dst=st.sampled_from(list(Phase)))
    def step(self, action: str, i: int, k: int, good: bool, role: Role, dst: Phase) -> None:
        if action == "advance":  # one to three cooperative moves of one task
            t = self._live(i)
            for rep in range(1 + k % 3):
                if t is None or t.phase in (P.COMPLETED, P.FAILED):
                    break
                self._helpful(t, i + rep, good or rep > 0)
                self._in_table(t, k // 3 + rep)
        elif action == "cooperative_write":
            t = self._live(i)
            if t is not None:
                self._helpful(t, i, good)
        elif action == "transition_in_table":
            t = self._live(i)
            if t is not None:
                self._in_table(t, k)
        elif action == "transition_any":
            self._transition(self.task(i), dst, role)
        elif action == "spec_review":
            verdict = "approved" if good else ("changes_requested", "blocked")[k % 2]
            reviewer = Role.SPEC_REVIEWER if k % 3 else role
            self._spec_review(self.pick(i, P.SPEC_REVIEW, P.SPEC_GATE), verdict, reviewer)
        elif action == "quality_review":
            reviewer = Role.QUALITY_REVIEWER if k % 3 else role
            self._quality_review(self.pick(i, P.QUALITY_GATE), "approve" if good else "rework",
                                 reviewer)
        elif action == "finish_attempt":
            worker = (Role.EXECUTOR, Role.EXECUTOR, Role.ORCHESTRATOR, role)[k % 4]
            self._finish(self.pick(i, P.EXECUTING), good, k % 7 == 0, worker)
        elif action == "plan_effect":
            self._plan_effect(self.pick(i, P.EXECUTING))
        elif action == "decide":
            decider = (Role.OPERATOR, Role.OPERATOR, Role.APPROVER, role)[k % 4]
            self._decide(self.pick(i, P.AWAITING_APPROVAL), good, decider)
        elif action == "perform_effect":
            t = self.pick(i, P.READY_TO_RESUME)
            if t.effects:
                self._perform(t, sorted(t.effects)[k % len(t.effects)], k % 2 == 0)
        elif action == "update_spec":
            self._update_spec(self.pick(i, P.SPEC_DRAFT), good)
        elif action == "advance_clock":
            self.clock.advance((0.0, 0.5, 1.0, 2.0, 5.0)[k % 5])
        elif action == "create_task":
            if len(self.model) < 3:
                self._create_task(good)
        else:  # pragma: no cover
            raise AssertionError(action)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def store_matches_model_and_replay(self) -> None:
        STATS["rule_steps"] += 1
        assert self.run(self.store.verify_projections()) == []
        rows = self.run(self.store.fetchall(
            "SELECT id, phase, attempts, spec_version, spec_ok FROM tasks ORDER BY num"))
        assert [(r["id"], r["phase"], r["attempts"], r["spec_version"], bool(r["spec_ok"]))
                for r in rows] == [(t.tid, t.phase.value, t.attempts, t.spec_version, t.spec_ok)
                                   for t in self.model]


PhaseMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestPhaseMachine = PhaseMachine.TestCase


def test_phase_machine_figures(record_property: Any) -> None:
    """Runs after the machine (file order, one xdist worker): the figures of this run, kept
    out of the progress output (a report property, and the failure message when it fails)."""
    if STATS["examples"] == 0:
        pytest.skip("the state machine did not run in this session")
    figures = (f"phase machine [{PROFILE}]: {STATS['examples']} examples (max {EXAMPLES}"
               f" x {STEPS} steps), {STATS['rule_steps']} steps,"
               f" {STATS['steps']} transition attempts,"
               f" {STATS['transitions_accepted']} accepted, {STATS['transitions_refused']}"
               f" refused; illegal accepted {STATS['illegal_accepted']},"
               f" legal refused {STATS['legal_refused']};"
               f" {len(PAIRS_ACCEPTED)}/{len(LEGAL_PAIRS)} legal pairs taken;"
               f" missing {sorted(LEGAL_PAIRS - PAIRS_ACCEPTED)}")
    record_property("phase_machine", figures)
    assert STATS["illegal_accepted"] == 0 and STATS["legal_refused"] == 0, figures
    assert STATS["transitions_accepted"] > 0 and STATS["transitions_refused"] > 0, figures
