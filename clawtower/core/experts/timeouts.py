"""`policy.approval.timeout` / `on_timeout` for compiled expert confirm gates.

A compiled confirm gate carries the package's timeout and on_timeout in its step's env. A
sweep finds pending gates older than that: `reject` rejects the gate (the run is cancelled and
its `execution.on_failure` applies); `escalate` records one `expert.approval_escalated` event
(the escalation channel's message) and leaves the gate open, so a human can still approve.
"""

from __future__ import annotations

import time
from typing import Any

from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from ..workflows.kinds import GATE_KINDS
from ..workflows.load import WorkflowError, load_workflow
from ..workflows.service import Workflows
from .checks import duration_problem, duration_seconds
from .events import ApprovalEscalated

ACTOR = "expert-policy"


async def sweep(store: Store, workflows: Workflows | None = None, *,
                now: float | None = None) -> list[dict[str, Any]]:
    """Apply on_timeout to every overdue compiled confirm gate; returns what was done."""
    now = time.time() if now is None else now
    wf = workflows or Workflows(store, actor=ACTOR)
    rows = await store.fetchall(
        "SELECT a.id AS approval_id, a.requested_at, r.id AS run_id, r.file,"
        " r.waiting_step FROM approvals a JOIN workflow_runs r ON r.approval_id = a.id"
        " WHERE a.status='pending' AND a.kind=? AND r.status='paused'",
        (GATE_KINDS["approval"],))
    done: list[dict[str, Any]] = []
    for row in rows:
        try:
            workflow = load_workflow(row["file"])
        except WorkflowError:
            continue
        step = next((s for s in workflow["steps"] if s.get("id") == row["waiting_step"]), None)
        env = step.get("env") if isinstance(step, dict) else None
        if not isinstance(env, dict) or not isinstance(env.get("EXPERT_APPROVAL_TIMEOUT"), str):
            continue
        timeout = env["EXPERT_APPROVAL_TIMEOUT"]
        if duration_problem(timeout) or now - row["requested_at"] < duration_seconds(timeout):
            continue
        action = env.get("EXPERT_ON_TIMEOUT", "reject")
        item = {"approval": row["approval_id"], "run": row["run_id"], "action": action}
        if action == "escalate":
            if await _escalated(store, row["approval_id"]):
                continue
            payload = ApprovalEscalated(
                expert=str((workflow.get("env") or {}).get("EXPERT_NAME", "")),
                approval_id=row["approval_id"], run_id=row["run_id"],
                step_id=row["waiting_step"], timeout=timeout)

            def command(tx: WriteTx, p: ApprovalEscalated = payload) -> None:
                tx.emit(NewEvent(entity_id=p.approval_id, actor=ACTOR,
                                 role=Role.SYSTEM.value, payload=p))

            await store.execute(command)
        else:
            await wf.decide(row["approval_id"], False, by=ACTOR,
                            reason=f"no decision within {timeout} (on_timeout: reject)")
        done.append(item)
    return done


async def _escalated(store: Store, approval_id: str) -> bool:
    row = await store.fetchone(
        "SELECT 1 FROM events WHERE entity='expert' AND entity_id=? AND"
        " type='expert.approval_escalated' LIMIT 1", (approval_id,))
    return row is not None
