"""The permissions matrix: which role may perform which write. Data, enforced on every write.

Key rule of seed 000: executors write artifacts and attempts, reviewers write findings,
only the orchestrator moves the phase. Operators are the humans at the console or CLI.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ORCHESTRATOR = "orchestrator"
    EXECUTOR = "executor"
    SPEC_REVIEWER = "spec_reviewer"
    QUALITY_REVIEWER = "quality_reviewer"
    OPERATOR = "operator"
    APPROVER = "approver"  # the gate actor (Lobster's role): writes approval state only
    SYSTEM = "system"


class Action(StrEnum):
    TASK_CREATE = "task.create"
    TASK_UPDATE_SPEC = "task.update_spec"
    TASK_TRANSITION = "task.transition"
    TASK_COMMAND = "task.command"  # an operator's unblock/retry/cancel (core/tasks/operator.py)
    REVIEW_SPEC = "review.spec"
    REVIEW_QUALITY = "review.quality"
    ATTEMPT_START = "attempt.start"
    ATTEMPT_HEARTBEAT = "attempt.heartbeat"
    ATTEMPT_CHECKPOINT = "attempt.checkpoint"
    ATTEMPT_FINISH = "attempt.finish"
    ARTIFACT_RECORD = "artifact.record"
    SIDE_EFFECT_PLAN = "side_effect.plan"
    SIDE_EFFECT_PERFORM = "side_effect.perform"
    APPROVAL_REQUEST = "approval.request"
    APPROVAL_DECIDE = "approval.decide"
    LEASE = "lease"


A = Action
R = Role

MATRIX: dict[Role, frozenset[Action]] = {
    R.ORCHESTRATOR: frozenset({
        A.TASK_CREATE, A.TASK_UPDATE_SPEC, A.TASK_TRANSITION, A.ATTEMPT_START,
        A.ATTEMPT_FINISH, A.SIDE_EFFECT_PERFORM, A.APPROVAL_REQUEST, A.LEASE,
    }),
    R.EXECUTOR: frozenset({
        A.ATTEMPT_HEARTBEAT, A.ATTEMPT_CHECKPOINT, A.ATTEMPT_FINISH, A.ARTIFACT_RECORD,
        A.SIDE_EFFECT_PLAN,
    }),
    R.SPEC_REVIEWER: frozenset({A.REVIEW_SPEC}),
    R.QUALITY_REVIEWER: frozenset({A.REVIEW_QUALITY}),
    R.OPERATOR: frozenset({A.TASK_CREATE, A.TASK_UPDATE_SPEC, A.TASK_COMMAND,
                           A.APPROVAL_DECIDE}),
    R.APPROVER: frozenset({A.APPROVAL_DECIDE, A.APPROVAL_REQUEST}),
    R.SYSTEM: frozenset({A.LEASE}),
}


def allowed(role: Role, action: Action) -> bool:
    return action in MATRIX.get(role, frozenset())


def parse_role(value: str, field: str = "--as") -> Role:
    from ..errors import ValidationError

    try:
        return Role(value)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise ValidationError(f"{field}: unknown role {value!r} (known: {known})") from None
