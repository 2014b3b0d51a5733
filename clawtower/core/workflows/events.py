"""The payloads of a Lobster-compatible workflow run (core/workflows): its own module, like
every protocol's (core.events.PAYLOAD_MODULE_OF loads it with the first decode of a
workflow event). Entity id:
the run id (W-1, W-2, ...). Step results are Lobster's result objects ({id, stdout, json,
approved, ...}) as JSON: a paused run is rebuilt from them in any process, so every result
that a later step may reference is in the log."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..events import ApprovalDecided, ApprovalRequested, LeaseAcquired, LeaseReleased, Payload


class WorkflowStarted(Payload):
    TYPE = "workflow.started"
    ENTITY = "workflow"
    file: str
    name: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    steps: list[str] = Field(default_factory=list)  # the top-level step ids, in order
    digest: str = ""  # sha256 of the file as it started (a resume re-reads it, as Lobster does)
    cost_limit: dict[str, Any] | None = None  # {max_usd, action}: what `workflow show` reports
    owner: str = ""  # the process driving it, host:pid:start (core/liveness.py)
    cwd: str = ""  # where its steps run: an adopter runs the rest there too


class ReusedStep(Payload):
    """A step of the origin run whose recorded output a rerun takes as its own (not run)."""

    step_id: str
    index: int
    status: str  # done | skipped | failed (a failure its on_error let the run go on from)
    result: dict[str, Any]
    branches: dict[str, dict[str, Any]] = Field(default_factory=dict)


class WorkflowRerun(Payload):
    """A run started from step `from_step` of run `origin` (issue 37, "going back"): created
    as its own `workflow.started` (folded in) would create it, with the recorded outputs of
    the origin's steps before `from_step` (read from its log up to `at_seq`) as its own,
    marked reused. Its steps from `from_step` on run anew; their gates ask again."""

    TYPE = "workflow.rerun"
    ENTITY = "workflow"
    origin: str
    from_step: str
    index: int
    at_seq: int
    by: str = ""
    started: WorkflowStarted
    reused: list[ReusedStep] = Field(default_factory=list)


class WorkflowStepStarted(Payload):
    TYPE = "workflow.step_started"
    ENTITY = "workflow"
    step_id: str
    index: int
    kind: str  # shell | pipeline | workflow | parallel | for_each | approval | input | none
    attempt: int = 1


class WorkflowStepFinished(Payload):
    TYPE = "workflow.step_finished"
    ENTITY = "workflow"
    step_id: str
    index: int
    result: dict[str, Any]
    branches: dict[str, dict[str, Any]] = Field(default_factory=dict)  # parallel branch results
    # spend billed from this step's output items (core/workflows/cost.py, Lobster's rule)
    cost: list[dict[str, Any]] = Field(default_factory=list)
    # The next step's start, committed with this result (issue 24.2): projected as its own
    # `workflow.step_started` was. Logs written before keep that event; both forms replay.
    next: WorkflowStepStarted | None = None


class WorkflowStepSkipped(Payload):
    TYPE = "workflow.step_skipped"
    ENTITY = "workflow"
    step_id: str
    index: int


class WorkflowStepFailed(Payload):
    TYPE = "workflow.step_failed"
    ENTITY = "workflow"
    step_id: str
    index: int
    error: str
    policy: str  # on_error: stop | continue | skip_rest
    retrying: bool = False  # another attempt follows
    cost: list[dict[str, Any]] = Field(default_factory=list)  # billed before it failed


class WorkflowPaused(Payload):
    """The run waits at a gate. Only the token's sha256 is stored, never the token."""

    TYPE = "workflow.paused"
    ENTITY = "workflow"
    step_id: str
    index: int
    gate: str  # approval | input
    resume_at: int
    approval_id: str
    token_hash: str
    request: dict[str, Any]  # Lobster's requiresApproval / requiresInput, minus token and id
    identity: dict[str, Any] = Field(default_factory=dict)
    input_schema: Any = None
    subject: Any = None
    # An approval step's output so far (what is being approved) and the spend billed with it:
    # recorded here, after approval.requested, not as a step_finished before it (the step is
    # not done until the gate is decided). None in stores written before this field.
    result: dict[str, Any] | None = None
    cost: list[dict[str, Any]] = Field(default_factory=list)
    # One event per gate (issue 24.2), projected by the handlers of the events it replaces: the
    # gate step's start, its item of the approvals list (entity `approval_id`, requested by
    # `asked_by` as `asked_role`) and the run's lease let go (entity `workflow:<run id>`).
    # Logs written before have those as events of their own; both forms replay.
    started: WorkflowStepStarted | None = None
    asked: ApprovalRequested | None = None
    asked_by: str = ""
    asked_role: str = ""
    released: LeaseReleased | None = None


class WorkflowResumed(Payload):
    TYPE = "workflow.resumed"
    ENTITY = "workflow"
    step_id: str
    decision: str  # approved | answered
    by: str | None = None
    result: dict[str, Any]  # the gate step's result with approved/approvedBy or response
    owner: str = ""  # the process that drives the run from here on (core/liveness.py)
    # Folded in (issue 24.2), as `approval.decided` (entity `approval_id`, by this event's
    # actor) and `lease.acquired` (entity `workflow:<run id>`) were projected.
    approval_id: str | None = None
    decided: ApprovalDecided | None = None
    lease: LeaseAcquired | None = None


class WorkflowStepSpawned(Payload):
    """A step's process group started (host:pid:start of its leader): an adopter kills
    what is left of it before deciding about the step."""

    TYPE = "workflow.step_spawned"
    ENTITY = "workflow"
    step_id: str
    process: str


class WorkflowAdopted(Payload):
    """A run whose driver died is driven on by `owner` from step `index`."""

    TYPE = "workflow.adopted"
    ENTITY = "workflow"
    owner: str
    previous_owner: str | None = None
    index: int  # the step it continues at (len(steps): only the ending was left)
    step_id: str | None = None
    rerun: bool = False  # that step had started: it runs again (safe to repeat)


class WorkflowInterrupted(Payload):
    """A step that had started when its driver died may not be repeated: the run waits for
    the operator (retry, skip or cancel)."""

    TYPE = "workflow.interrupted"
    ENTITY = "workflow"
    step_id: str
    index: int
    reason: str


class WorkflowRecovered(Payload):
    """The operator's choice for an interrupted step: retry it or skip it."""

    TYPE = "workflow.recovered"
    ENTITY = "workflow"
    step_id: str
    index: int
    decision: str  # retry | skip
    by: str | None = None
    owner: str = ""  # the process that drives the run from here on


class WorkflowFinished(Payload):
    TYPE = "workflow.finished"
    ENTITY = "workflow"
    output: list[Any] = Field(default_factory=list)


class WorkflowCancelled(Payload):
    TYPE = "workflow.cancelled"
    ENTITY = "workflow"
    reason: str = ""
    by: str | None = None


class WorkflowFailed(Payload):
    TYPE = "workflow.failed"
    ENTITY = "workflow"
    error: str
    kind: str = "runtime_error"
