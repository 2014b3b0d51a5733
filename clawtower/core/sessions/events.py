"""The session events (seed 004, Zeroclaw): sessions, agent specs, turn jobs, backlog,
announces. Everything a session does is in the log, so any process can follow it, a
restarted worker resumes it, and `clawtower store verify` replays it.

Entities: "session" (id S-<n>), "agentspec" (id ag-<hex>), "turnjob" (id J-<hex>; also
carries its session id so the projections need no lookups).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..events import Payload, TurnFinished, TurnStarted

# ---------------------------------------------------------------------------- agent specs


class AgentSpecSet(Payload):
    """An AgentSpec created or replaced whole (config is the validated AgentSpecConfig)."""

    TYPE = "agentspec.set"
    ENTITY = "agentspec"
    name: str
    config: dict[str, Any]
    source: str = ""  # "cli", "import:<file>", "console"


# ---------------------------------------------------------------------------- sessions


class SessionInbound(Payload):
    """A message sent to the session. It waits (pending) until a turn takes it: at the
    start of a turn, at a safe boundary (steering), or into the backlog."""

    TYPE = "session.inbound"
    ENTITY = "session"
    msg_id: str
    text: str
    sender: str = ""


class SessionCreated(Payload):
    TYPE = "session.created"
    ENTITY = "session"
    title: str = ""
    agent_id: str
    provider_override: str | None = None
    model_override: str | None = None
    deliver: bool = False  # wants_deliver: outbound sends allowed (never on the internal channel)
    channel: str = "cli"  # route; "agent" is the internal channel of child sessions
    parent_id: str | None = None
    hop: int = 0  # 0 for a top-level session, parent's hop + 1 for a child
    trace_id: str = ""
    run_id: str | None = None  # a child: the run whose completion is announced once
    task: dict[str, Any] = Field(default_factory=dict)  # a child: label, prompt
    spawn_key: str | None = None  # a child spawned by a turn: the same call re-run finds it
    created_by: str = ""
    # A session created with its first message and a job queued to take it (a spawned child,
    # a flow node's session) says so in this ONE event (issue 24.2): projected exactly as a
    # `session.inbound` (entity this session) and a `turnjob.queued` (entity `job_id`) would
    # be. Logs written before keep those two events; both forms replay.
    inbound: SessionInbound | None = None
    job_id: str | None = None
    job_reason: str = ""
    # ... and (issue 36) that job's start, when the worker whose command created the session
    # claimed it there: projected as its own `turnjob.started` (entity `job_id`) would be,
    # with this event's seq. None in older logs, and when no worker claimed it at once.
    start: TurnJobStarted | None = None


class SessionForked(Payload):
    """A session made from another's transcript up to the end of its turn `at_turn` (issue 37,
    "going back"): the new session (entity id) is created as its own `session.created` would
    create it; the copied messages follow as `session.message` events of the new session,
    each naming its original (`meta.fork`). `at_seq` is the origin's log position the copy was
    read at. Copied tool calls and approvals are history: nothing of them runs again."""

    TYPE = "session.forked"
    ENTITY = "session"
    origin: str
    at_turn: int
    at_seq: int
    reason: str = ""
    by: str = ""
    session: SessionCreated


class SessionAgentSwitched(Payload):
    TYPE = "session.agent_switched"
    ENTITY = "session"
    agent_id: str
    by: str = ""


class SessionModelSet(Payload):
    """provider/model override for later turns (None, None clears it)."""

    TYPE = "session.model_set"
    ENTITY = "session"
    provider: str | None
    model: str | None
    by: str = ""


class SessionMessage(Payload):
    """One transcript message. role: user | assistant | announce. `meta` carries machine
    data (inbound ids, job, steering, announce payload)."""

    TYPE = "session.message"
    ENTITY = "session"
    msg_id: str
    role: str
    text: str
    meta: dict[str, Any] = Field(default_factory=dict)


class SessionBacklogged(Payload):
    """An item joins the session's backlog: a resume token for an interrupted task, or a
    message that found no safe boundary."""

    TYPE = "session.backlogged"
    ENTITY = "session"
    item_id: str
    kind: str  # resume | message
    text: str
    data: dict[str, Any] = Field(default_factory=dict)


class SessionStopRequested(Payload):
    TYPE = "session.stop_requested"
    ENTITY = "session"
    by: str = ""
    reason: str = ""


class SessionFinished(Payload):
    """A child session is done (its task answered, or failed/stopped)."""

    TYPE = "session.finished"
    ENTITY = "session"
    status: str  # ok | error | timeout | stopped


class SessionAnnounced(Payload):
    """A child's completion, appended to the PARENT (entity id the parent): one short
    transcript message plus the announce payload (meta). Appended with the idem_key
    `announce:<run_id>`: the store refuses a second announce of the same run."""

    TYPE = "session.announced"
    ENTITY = "session"
    msg_id: str
    text: str  # "[@agent:<name>#<agent_id>] finish"
    meta: dict[str, Any]


class SessionDelivered(Payload):
    """An outbound delivery of a reply to the session's route (external channels only)."""

    TYPE = "session.delivered"
    ENTITY = "session"
    channel: str
    msg_id: str
    text: str


class SessionRefused(Payload):
    """A refused request (unknown id, hop limit, self-spawn, stopped session, oversized
    message...): recorded so that refusals are visible, nothing else changes."""

    TYPE = "session.refused"
    ENTITY = "session"
    action: str
    reason: str
    by: str = ""


# ---------------------------------------------------------------------------- turn jobs


class TurnJobQueued(Payload):
    TYPE = "turnjob.queued"
    ENTITY = "turnjob"
    session_id: str
    reason: str = ""  # message | backlog | announces | spawn


class TurnJobStarted(Payload):
    """The job's turn begins: the inputs it took (drained backlog, pending messages,
    announces offered as context) are recorded with it, in one commit with the lease."""

    TYPE = "turnjob.started"
    ENTITY = "turnjob"
    session_id: str
    owner: str
    attempt: int
    turn_id: str
    agent_id: str
    provider: str
    model: str
    took: list[str] = Field(default_factory=list)  # inbound msg ids taken as user messages
    drained: list[str] = Field(default_factory=list)  # backlog item ids merged into [Backlog]
    backlog_msg_id: str | None = None
    announces: list[str] = Field(default_factory=list)  # announce msg ids in the context
    # what automatic recall put in the turn's context: {namespace, key, score} each (never
    # the content: a memory's text stays in its own events)
    recalled: list[dict[str, Any]] = Field(default_factory=list)
    # the turn `turn_id` starts with the claim (issue 24.2): projected as its own
    # `turn.started` would be; None in older logs and for a harness's (ACP) turn
    turn: TurnStarted | None = None
    # the one message the job took, when no backlog came before it (issue 24.2): projected
    # as its own `session.message` would be, with this event's seq; None in older logs
    message: SessionMessage | None = None


class TurnJobSteered(Payload):
    """At a safe boundary, pending messages were taken into the running turn; the task
    they interrupt is saved as a resume token in the backlog (in the same commit)."""

    TYPE = "turnjob.steered"
    ENTITY = "turnjob"
    session_id: str
    round: int
    took: list[str]
    resume_item: str


class TurnJobFinished(Payload):
    TYPE = "turnjob.finished"
    ENTITY = "turnjob"
    session_id: str
    status: str  # done | failed | cancelled
    stop_reason: str = ""
    reply_msg_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    error: str = ""
    # what the turn recalled when it differs from its start event's (hybrid recall runs
    # after the claim commits: core/memory/hybrid.py); None keeps the start's record
    recalled: list[dict[str, Any]] | None = None
    # Folded in (issue 24.2), each projected exactly as its own event would be; logs
    # written before carry them as separate events, and both forms replay:
    reply: SessionMessage | None = None  # the reply (`session.message` of the session)
    session_status: str | None = None  # the session ended with the job (`session.finished`)
    # the end of the turn the job's start began (`turn.finished` of the job's `turn_id`,
    # issue 36), with its folded final-call usage; None for a turn that ended on its own
    # (a harness's, one closed by a take-over, one paused for approval) and in older logs
    turn: TurnFinished | None = None


__all__ = [
    "AgentSpecSet", "SessionAgentSwitched", "SessionAnnounced", "SessionBacklogged",
    "SessionCreated", "SessionDelivered", "SessionFinished", "SessionForked", "SessionInbound",
    "SessionMessage", "SessionModelSet", "SessionRefused", "SessionStopRequested",
    "TurnJobFinished", "TurnJobQueued", "TurnJobStarted", "TurnJobSteered",
]


# ------------------------------------------------------------------- tool-call approvals
# A confirm-tier tool call (core/tools/approval.py) pauses its job durably: no worker holds
# it while an operator decides (core/sessions/gate.py).


class TurnJobWaiting(Payload):
    """The job's turn stopped at a confirm-tier call: `approval_id` (kind `tool_call`, in the
    same commit) decides it. `checkpoint` is what the resumed turn goes on from: the
    conversation (`messages`), the round's undecided calls (`pending`, the gated one first)
    and the rounds made."""

    TYPE = "turnjob.waiting"
    ENTITY = "turnjob"
    session_id: str
    approval_id: str
    turn_id: str
    tool: str
    checkpoint: dict[str, Any]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class TurnJobResumed(Payload):
    """The waiting call was decided (approved, rejected or expired): the job is queued
    again and the next worker resumes its turn from the checkpoint."""

    TYPE = "turnjob.resumed"
    ENTITY = "turnjob"
    session_id: str
    approval_id: str
    decision: str  # approved | rejected | expired


class ToolCallIntent(Payload):
    """An approved call is about to run (committed before it runs): a worker that finds an
    intent without its `toolcall.done` after a crash does not run it again."""

    TYPE = "toolcall.intent"
    ENTITY = "turnjob"
    session_id: str
    approval_id: str
    call_id: str
    name: str
    owner: str


class ToolCallDone(Payload):
    """The approved call's result, exactly as the model is shown it."""

    TYPE = "toolcall.done"
    ENTITY = "turnjob"
    session_id: str
    approval_id: str
    call_id: str
    content: str
    is_error: bool = False
    error_kind: str | None = None


class ToolCallEscalated(Payload):
    """A waiting call outlived its policy's `timeout_s` with `on_timeout: escalate`: recorded
    once; the approval stays open so a human can still decide it."""

    TYPE = "toolcall.escalated"
    ENTITY = "turnjob"
    session_id: str
    approval_id: str
    timeout_s: float


SessionCreated.model_rebuild()  # `start` names a class defined after it
SessionForked.model_rebuild()
