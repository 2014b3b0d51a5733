"""Typed events: the only thing the store appends.

Every payload is a pydantic model registered under a dotted type name. The log stores the
name and the JSON payload; reading decodes it back to the model, so projections and
replays work on typed data. Later features register their own payloads the same way.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from .errors import StoreError, ValidationError
from .lazy import LazyModules

_REGISTRY: dict[str, type[Payload]] = {}

# The other modules that define payloads, each named by the first word of its event types
# (`session.created` -> sessions). The first decode of a type loads its word's module only:
# a `workflow run` builds the workflow payloads, not the sessions', flows' or ACP's (~50 ms
# of each CLI process that writes; start-up: BENCHMARKS.md). A type of a word not listed
# loads them all, so a process needs no import list of its own to read any event, and one
# that never decodes an event never builds their models. tests/test_core_imports.py checks
# the map against every Payload subclass in core.
PAYLOAD_MODULE_OF = {word: f"clawtower.core.{m}.events" for word, m in (
    ("acp", "acp"), ("agentspec", "sessions"), ("console", "signin"), ("expert", "experts"),
    ("flow", "flows"), ("meeting", "meetings"), ("memory", "memory"),
    ("session", "sessions"), ("toolcall", "sessions"), ("traces", "traces"),
    ("trigger", "triggers"), ("turnjob", "sessions"), ("workflow", "workflows"))}
PAYLOAD_MODULES = tuple(sorted(set(PAYLOAD_MODULE_OF.values())))
_payload_modules = LazyModules(*PAYLOAD_MODULES)

P = TypeVar("P", bound="Payload")


class Payload(BaseModel):
    """Base of event payloads. Subclasses set TYPE (e.g. "task.created") and ENTITY."""

    # NaN and ±Infinity encode as those constants, not as `null`: the writer refuses them
    # (core/store/storable.py) instead of logging a value the live projection never had.
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    TYPE: ClassVar[str] = ""
    ENTITY: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.TYPE:
            if cls.TYPE in _REGISTRY and _REGISTRY[cls.TYPE] is not cls:
                raise TypeError(f"event type {cls.TYPE!r} registered twice")
            _REGISTRY[cls.TYPE] = cls


def payload_class(type_name: str) -> type[Payload]:
    cls = _REGISTRY.get(type_name)
    if cls is None:
        module = PAYLOAD_MODULE_OF.get(type_name.split(".", 1)[0])
        if module is not None:
            importlib.import_module(module)
            cls = _REGISTRY.get(type_name)
    if cls is None and not _payload_modules.loaded:
        _payload_modules.load()
        cls = _REGISTRY.get(type_name)
    if cls is None:
        raise ValidationError(f"unknown event type {type_name!r}")
    return cls


def registered_types() -> list[str]:
    """Every event type (loading every payload module)."""
    _payload_modules.load()
    return sorted(_REGISTRY)


class NewEvent(BaseModel):
    """An event about to be appended: who did what to which entity."""

    model_config = ConfigDict(frozen=True)

    entity_id: str
    actor: str
    role: str
    payload: Payload
    idem_key: str | None = None

    @property
    def type(self) -> str:
        return self.payload.TYPE

    @property
    def entity(self) -> str:
        return self.payload.ENTITY


class StoredEvent(BaseModel):
    """An event as the log holds it: with its global sequence number and commit time."""

    model_config = ConfigDict(frozen=True)

    seq: int
    ts: float
    entity: str
    entity_id: str
    type: str
    actor: str
    role: str
    payload: Payload
    idem_key: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.ts,
            "entity": self.entity,
            "entity_id": self.entity_id,
            "type": self.type,
            "actor": self.actor,
            "role": self.role,
            "payload": self.payload.model_dump(mode="json"),
            "idem_key": self.idem_key,
        }


def decode(type_name: str, payload_json: str) -> Payload:
    return payload_class(type_name).model_validate_json(payload_json)


def decode_logged(seq: int, type_name: str, payload_json: str) -> Payload:
    """`decode` of the log's event `seq`: a payload this release cannot read is one line
    naming the event and the field (a StoreError), not a traceback. Releases before issue 34
    logged NaN and ±Infinity as `null`, which a required number cannot take back."""
    try:
        return payload_class(type_name).model_validate_json(payload_json)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(payload)"
        raise StoreError(f"event {seq} ({type_name}) in the log cannot be read: {where}:"
                         f" {err['msg']} (it holds {one_line_repr(err.get('input'))};"
                         " written by an older release?)") from None


def one_line_repr(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


# --------------------------------------------------------------------------- tasks


class TaskCreated(Payload):
    TYPE = "task.created"
    ENTITY = "task"
    title: str
    spec: dict[str, Any]
    spec_ok: bool
    spec_problems: list[str] = Field(default_factory=list)
    source: str | None = None


class TaskSpecUpdated(Payload):
    TYPE = "task.spec_updated"
    ENTITY = "task"
    spec: dict[str, Any]
    spec_ok: bool
    spec_problems: list[str] = Field(default_factory=list)


class TaskTransitioned(Payload):
    TYPE = "task.transitioned"
    ENTITY = "task"
    from_phase: str
    to_phase: str
    reason: str
    attempt: int = 0
    reset_attempts: bool = False


class TaskCommanded(Payload):
    """An operator's command on a task (unblock with a choice, retry, cancel), recorded with
    the operator as actor; the orchestrator's transition that executes it follows at once."""

    TYPE = "task.commanded"
    ENTITY = "task"
    command: str
    to_phase: str
    reason: str = ""


class ReviewAppended(Payload):
    TYPE = "review.appended"
    ENTITY = "task"
    kind: str  # spec | quality
    stage: str  # the phase the task was in: spec_review, spec_gate, quality_gate
    reviewer: str
    verdict: str
    findings: list[dict[str, Any]] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0


class AttemptStarted(Payload):
    TYPE = "attempt.started"
    ENTITY = "task"
    attempt: int
    model: str
    runtime: str = "local"
    escalated: bool = False


class AttemptHeartbeat(Payload):
    TYPE = "attempt.heartbeat"
    ENTITY = "task"
    attempt: int
    note: str = ""


class AttemptCheckpoint(Payload):
    TYPE = "attempt.checkpoint"
    ENTITY = "task"
    attempt: int
    data: dict[str, Any]


class AttemptFinished(Payload):
    TYPE = "attempt.finished"
    ENTITY = "task"
    attempt: int
    status: str  # succeeded | failed | abandoned
    reason: str = ""
    output: dict[str, Any] = Field(default_factory=dict)


class RetryScheduled(Payload):
    TYPE = "retry.scheduled"
    ENTITY = "task"
    attempt: int  # the attempt that failed
    next_attempt: int
    reason: str
    not_before: float
    escalate: bool = False


class CircuitOpened(Payload):
    TYPE = "circuit.opened"
    ENTITY = "task"
    failure_summary: str
    attempts: int
    last_good_artifact: str | None = None
    unblock_options: list[str]


class ArtifactRecorded(Payload):
    TYPE = "artifact.recorded"
    ENTITY = "task"
    attempt: int
    name: str
    uri: str
    digest: str = ""
    summary: str = ""


class SideEffectPlanned(Payload):
    TYPE = "side_effect.planned"
    ENTITY = "task"
    effect_id: str
    attempt: int
    kind: str
    description: str
    target: str = ""
    idem_key: str


class SideEffectIntent(Payload):
    TYPE = "side_effect.intent"
    ENTITY = "task"
    effect_id: str
    idem_key: str


class SideEffectDone(Payload):
    TYPE = "side_effect.done"
    ENTITY = "task"
    effect_id: str
    idem_key: str
    result: str = ""


# ------------------------------------------------------------------------- approvals


class ApprovalRequested(Payload):
    TYPE = "approval.requested"
    ENTITY = "approval"
    kind: str  # task_side_effect; later: workflow_gate, input, tool_permission, expert_confirm
    subject: str  # the id of what waits (a task id, a run id, ...)
    title: str
    prompt: str
    context: dict[str, Any] = Field(default_factory=dict)
    preview: str = ""
    required_approver: str | None = None
    require_different_approver: bool = False


class ApprovalDecided(Payload):
    TYPE = "approval.decided"
    ENTITY = "approval"
    decision: str  # approved | rejected
    reason: str = ""


# ---------------------------------------------------------------------------- system


class PermissionRefused(Payload):
    TYPE = "permission.refused"
    ENTITY = "security"
    action: str
    target: str
    reason: str


class RepairedValue(Payload):
    """One value `store repair` replaced: event `seq` (`type`, about `entity_id`) carried
    `was` (as text) in `field`; the projections hold `now` from the repair on."""

    seq: int
    type: str
    entity_id: str
    field: str
    was: str
    now: Any = None


class StoreRepaired(Payload):
    """`clawtower store repair` (issue 34): values a release before the writer's check
    logged or projected that no reader can use (an expiry of Infinity or 1e308), replaced
    in the projections by this event's handlers, live and in every replay alike; the events
    that carried them stay as they are. `differences` is what `store verify` said before."""

    TYPE = "store.repaired"
    ENTITY = "store"
    reason: str
    values: list[RepairedValue] = Field(default_factory=list)
    differences: list[str] = Field(default_factory=list)


class LeaseAcquired(Payload):
    TYPE = "lease.acquired"
    ENTITY = "lease"
    owner: str
    expires_at: float
    took_over_from: str | None = None


class LeaseRenewed(Payload):
    TYPE = "lease.renewed"
    ENTITY = "lease"
    owner: str
    expires_at: float


class LeaseReleased(Payload):
    TYPE = "lease.released"
    ENTITY = "lease"
    owner: str


class AgentUsage(Payload):
    TYPE = "agent.usage"
    ENTITY = "usage"
    agent: str
    model: str
    purpose: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0  # US dollars, from the agent's price when the call was made
    estimated: bool = False  # the provider reported no usage; the figures were counted locally


# ------------------------------------------------------------------------------ turns
# A turn (core/agents/turns.py): model -> tool calls -> tool results -> model. Entity id: the
# turn id; `subject` is what the turn works for (a task, meeting, session, workflow run).


class TurnStarted(Payload):
    TYPE = "turn.started"
    ENTITY = "turn"
    subject: str
    agent: str
    model: str
    budget: dict[str, Any] = Field(default_factory=dict)


class TurnToolCalled(Payload):
    TYPE = "turn.tool_called"
    ENTITY = "turn"
    round: int
    call_id: str
    name: str
    arguments: str  # the model's JSON text, clipped
    # the gate's decision, made before the call runs: auto | confirm | manual | refused
    # ("" in logs written before issue 34)
    tier: str = ""


class TurnToolResult(Payload):
    TYPE = "turn.tool_result"
    ENTITY = "turn"
    round: int
    call_id: str
    name: str
    content: str  # what the model was shown, clipped
    is_error: bool = False
    error_kind: str | None = None


class TurnToolDrafted(Payload):
    """A manual-tier call: recorded for an operator to read, never run."""

    TYPE = "turn.tool_drafted"
    ENTITY = "turn"
    round: int
    call_id: str
    name: str
    arguments: str  # the model's JSON text, clipped


class TurnSteered(Payload):
    TYPE = "turn.steered"
    ENTITY = "turn"
    round: int
    messages: list[str] = Field(default_factory=list)  # the injected contents, clipped


class TurnFinished(Payload):
    TYPE = "turn.finished"
    ENTITY = "turn"
    # completed | max_tool_rounds | max_tokens | max_wall_clock | cancelled | error |
    # awaiting_approval (a confirm-tier call paused it; the session worker resumes it)
    # | interrupted (its worker died; a take-over closed it: core/sessions/takeover.py)
    stop_reason: str
    rounds: int
    model_calls: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0
    text: str = ""  # the final answer (or the last text seen), clipped
    error: str = ""
    # the turn's last model call, folded in (issue 24.2: one event, not an `agent.usage`
    # beside it): projected into `usage` exactly as that `agent.usage` would be, under the
    # subject `usage_subject`. None in logs written before the fold (their final call has its
    # own `agent.usage` event) and when the turn ended without a call to account for.
    usage: AgentUsage | None = None
    usage_subject: str = ""


# ----------------------------------------------------------------------------- tools
# Entity "tool", entity id the tool's full name `<server>.<tool>`. A definition is the
# tool's description and input schema; its sha256 is taken over their canonical JSON.


class ToolDefinitionSeen(Payload):
    """A tool definition the registry had not seen before (first sight, or a change).
    When it is not pinned, `approval_id` is the `tool_pin` approval requested with it."""

    TYPE = "tool.definition_seen"
    ENTITY = "tool"
    server: str
    sha256: str
    definition: dict[str, Any]
    approval_id: str | None = None
    previous_sha256: str | None = None  # the pinned definition it replaces, if any


class ToolPinned(Payload):
    """A definition pinned without an approval (`pin: auto`). Approving a `tool_pin`
    approval pins through the approval.decided event itself."""

    TYPE = "tool.pinned"
    ENTITY = "tool"
    server: str
    sha256: str
    definition: dict[str, Any]
    how: str = "auto"


class Note(Payload):
    """A free-form operator or system note about an entity; carries no control meaning."""

    TYPE = "note.added"
    ENTITY = "note"
    text: str
