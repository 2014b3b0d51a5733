"""Expert events (entity "expert"): what the policy did on its own, learnings, state notes.

No projection table: the approvals list already holds the gates; learnings files and state
files are rebuilt from these events (core/experts/learning.py, core/experts/state.py).
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


class StateBase(Payload):
    """The text a state file's projection starts from when it is not the package template:
    what the file held when its events began (earlier runs appended to it directly)."""

    TYPE = "expert.state_base"
    ENTITY = "expert"
    expert: str
    file: str  # state/<name>.md
    text: str


class StateNoted(Payload):
    """A compiled state step's note for `file` (from the run's `workflow.step_finished`,
    `step_seq`); the state file is the template (or base) plus these notes."""

    TYPE = "expert.state_noted"
    ENTITY = "expert"
    expert: str
    file: str
    note: str
    at: str  # "YYYY-MM-DD HH:MM" UTC, when the step ran
    run_id: str
    step_id: str
    step_seq: int


class StateReset(Payload):
    """A new expert session (`expert run`, `expert chat`) began: `scope: session` files drop
    the notes of steps before `at_seq`; a run's reset (`run_id`) keeps only that run's notes,
    so parallel runs never mix or cut each other's session."""

    TYPE = "expert.state_reset"
    ENTITY = "expert"
    expert: str
    files: list[str]
    at_seq: int
    run_id: str = ""
