"""Expert events (entity "expert"): what the policy did on its own, and learnings.

No projection table: the approvals list already holds the gates, and learnings files are
rebuilt from these events (core/experts/learning.py).
"""

from __future__ import annotations

from ..events import Payload


class ApprovalEscalated(Payload):
    """A confirm gate outlived `policy.approval.timeout` with `on_timeout: escalate`: the
    escalation channel is told; the gate stays open so a human can still approve late."""

    TYPE = "expert.approval_escalated"
    ENTITY = "expert"
    expert: str
    approval_id: str
    run_id: str
    step_id: str
    timeout: str
    channel: str = "main"


class LearningProposed(Payload):
    """A learning proposed for `scope` (`package` or a function name); `approval_id` is set
    when the policy asks a human (confirm/manual), empty when it was auto-approved."""

    TYPE = "expert.learning_proposed"
    ENTITY = "expert"
    expert: str
    scope: str
    title: str
    observation: str
    correction: str
    source: str = ""
    confidence: str = "medium"
    tier: str = "confirm"
    approval_id: str = ""
