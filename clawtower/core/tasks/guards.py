"""Phase guards: which moves the stored evidence justifies (reviews, attempts, approvals).

The transition table (phases.py) says which moves exist; these say which are justified by
what is stored, never by agent text. They run inside the transition's write transaction and
read only the columns they use: a transition is on the approval round trip's critical path.
"""

from __future__ import annotations

from typing import Any

from ..store.interface import WriteTx
from .phases import MAX_ATTEMPTS, Phase

#: moves whose guard or events count the attempts of the current budget (budget_base),
#: with every move out of executing
NEEDS_BUDGET = frozenset({Phase.EXECUTING, Phase.RETRYING, Phase.CIRCUIT_OPEN})


def budget_base(tx: WriteTx, task_id: str) -> int:
    """Attempts made before the circuit was last unblocked: the budget counts only later ones.

    Attempt numbers never restart, so every attempt keeps its own records and reviews.
    """
    row = tx.one("SELECT attempt FROM phase_history WHERE task_id=? AND from_phase=?"
                 " ORDER BY seq DESC LIMIT 1", (task_id, Phase.CIRCUIT_OPEN.value))
    return int(row["attempt"]) if row else 0


def latest_review(tx: WriteTx, task: dict[str, Any], stage: str) -> dict[str, Any] | None:
    if stage == Phase.SPEC_REVIEW:
        return tx.one(
            "SELECT * FROM reviews WHERE task_id=? AND stage=? AND spec_version=?"
            " AND seq > coalesce((SELECT max(seq) FROM phase_history WHERE task_id=?"
            " AND to_phase='spec_review'), 0) ORDER BY seq DESC LIMIT 1",
            (task["id"], stage, task["spec_version"], task["id"]),
        )
    return tx.one(
        "SELECT * FROM reviews WHERE task_id=? AND stage=? AND attempt=?"
        " ORDER BY seq DESC LIMIT 1",
        (task["id"], stage, task["attempts"]),
    )


def current_attempt(tx: WriteTx, task: dict[str, Any]) -> dict[str, Any] | None:
    return tx.one("SELECT * FROM attempts WHERE task_id=? AND n=?", (task["id"], task["attempts"]))


def pending_effects(tx: WriteTx, task_id: str) -> list[dict[str, Any]]:
    return tx.all(
        "SELECT * FROM side_effects WHERE task_id=? AND status != 'done' ORDER BY planned_at,"
        " effect_id", (task_id,),
    )


def latest_approval(tx: WriteTx, task_id: str) -> dict[str, Any] | None:
    """The task's latest side-effect approval: what the moves out of awaiting_approval use."""
    return tx.one(
        "SELECT id, status, decided_by, reason FROM approvals WHERE subject=?"
        " AND kind='task_side_effect' ORDER BY seq DESC LIMIT 1", (task_id,),
    )


def guard(tx: WriteTx, task: dict[str, Any], dst: Phase, base: int | None = None) -> str | None:
    """Why the evidence forbids moving `task` to `dst` (None = allowed). `base`: the
    task's budget_base when the caller read it already."""
    src = Phase(task["phase"])
    tid = task["id"]
    if dst == Phase.FAILED or dst == Phase.CIRCUIT_OPEN:
        return None  # the orchestrator may always stop or trip the breaker, with a reason
    if src == Phase.SPEC_DRAFT and dst == Phase.SPEC_REVIEW:
        if not task["spec_ok"]:
            return f"the spec is not ready: {task['phase_reason'] or 'see spec problems'}"
        return None
    if src == Phase.SPEC_REVIEW and dst == Phase.EXECUTION_READY:
        r = latest_review(tx, task, Phase.SPEC_REVIEW)
        if r is None or r["verdict"] != "approved":
            return "no approving spec review of the current spec"
        return None
    if dst == Phase.EXECUTING or src == Phase.EXECUTING:
        used = task["attempts"] - (budget_base(tx, tid) if base is None else base)
        return _attempt_guard(tx, task, src, dst, used)
    if src == Phase.SPEC_GATE:
        r = latest_review(tx, task, Phase.SPEC_GATE)
        if r is None:
            return f"no spec review of attempt {task['attempts']} yet"
        if dst == Phase.QUALITY_GATE and r["verdict"] != "approved":
            return f"the spec review says {r['verdict']}"
        if dst == Phase.EXECUTION_READY and r["verdict"] == "approved":
            return "the spec review approved the artifact: nothing to rework"
        return None
    if src == Phase.QUALITY_GATE:
        r = latest_review(tx, task, Phase.QUALITY_GATE)
        if r is None:
            return f"no quality review of attempt {task['attempts']} yet"
        effects = pending_effects(tx, tid)
        if dst in (Phase.COMPLETED, Phase.AWAITING_APPROVAL) and r["verdict"] != "approve":
            return f"the quality review recommends {r['verdict']}"
        if dst == Phase.COMPLETED and effects:
            return f"{len(effects)} planned side effect(s) need approval first"
        if dst == Phase.AWAITING_APPROVAL and not effects:
            return "no planned side effects to approve"
        if dst == Phase.EXECUTION_READY and r["verdict"] == "approve":
            return "the quality review approved: nothing to rework"
        return None
    if src == Phase.AWAITING_APPROVAL and dst == Phase.READY_TO_RESUME:
        a = latest_approval(tx, tid)
        if a is None or a["status"] != "approved":
            return f"approval {a['id'] if a else '(none)'} is {a['status'] if a else 'missing'}"
        return None
    if src == Phase.READY_TO_RESUME and dst == Phase.COMPLETED:
        left = tx.one("SELECT count(*) AS n FROM side_effects WHERE task_id=?"
                      " AND status != 'done'", (tid,))
        if left and left["n"]:
            return f"{left['n']} approved side effect(s) not done yet"
        return None
    return None


def _attempt_guard(tx: WriteTx, task: dict[str, Any], src: Phase, dst: Phase,
                   used: int) -> str | None:
    """Moves into or out of executing: the attempt budget, the backoff, the attempt's status."""
    if dst == Phase.EXECUTING:
        if used >= MAX_ATTEMPTS:
            return (f"attempt budget exhausted ({used}/{MAX_ATTEMPTS}):"
                    " open the circuit instead")
        if src == Phase.RETRYING and task["retry_not_before"] is not None \
                and tx.now < task["retry_not_before"]:
            return f"retry backoff until {task['retry_not_before']:.3f} (now {tx.now:.3f})"
        return None
    att = current_attempt(tx, task)
    status = att["status"] if att else "missing"
    if dst == Phase.SPEC_GATE and status != "succeeded":
        return f"attempt {task['attempts']} has not succeeded (status {status})"
    if dst == Phase.RETRYING:
        if status == "succeeded" or status == "running":
            return f"attempt {task['attempts']} has not failed (status {status})"
        if used >= MAX_ATTEMPTS:
            return f"attempt budget exhausted ({used}/{MAX_ATTEMPTS})"
    return None
