"""The flow events (seed 003, Clawflow): recursive task DAGs whose agents talk through
mailboxes. Everything is an event of the entity "flow" (id F-<n>), so a flow's log is one
entity's history, a restarted engine resumes from the projections, and `clawtower store
verify` replays it.

Message ids are derived from the task they carry (`T:<task>`, `R:<task>`, `E:<task>`): the
same message sent twice is the same id, so a re-run after a crash is recognised as a
duplicate and recorded as ignored instead of being applied again.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..events import Payload


class FlowStarted(Payload):
    """A flow begins with its root task (the TASK to the root agent follows in the same
    commit as a FlowTaskSent)."""

    TYPE = "flow.started"
    ENTITY = "flow"
    agent: str
    instruction: str
    context: dict[str, Any] = Field(default_factory=dict)
    root_task: str
    limits: dict[str, int]
    split: bool = False  # the operator asked the root to decompose
    by: str = ""
    executor: str = ""  # builtin | acp:NAME: runs every executed node (default: its spec's)


class FlowRerun(Payload):
    """A flow started from node `node` of flow `origin` (issue 37, "going back"): created as
    its own `flow.started` (folded in) would create it, with its whole task tree in
    `tasks` (each a `flow_tasks` row of the new flow, ids relative to it): the replies not
    downstream of the node reused as they were (mode `reused`), the node and its
    dependents pending, every coordinator above them waiting for them again. Only what
    runs again writes events after this one: O(rerun nodes), not O(flow)."""

    TYPE = "flow.rerun"
    ENTITY = "flow"
    origin: str
    node: str  # the origin's task id
    instruction: str | None = None  # the node's edited instruction
    started: FlowStarted
    tasks: list[dict[str, Any]]


class FlowTaskSent(Payload):
    """A TASK message: into the receiver's inbox, the sender's outbox. `context` is what
    the parent passes down (its own notes and the results of the subtask's dependencies)."""

    TYPE = "flow.task_sent"
    ENTITY = "flow"
    msg_id: str
    task_id: str
    from_agent: str
    to_agent: str
    instruction: str
    context: dict[str, Any] = Field(default_factory=dict)
    session_id: str = ""  # the receiver's session in this flow: the TASK joins its transcript


class FlowTaskTaken(Payload):
    """The receiving agent started on a TASK (progress only: the TASK stays in the inbox
    until its outcome is committed, so a crash before that re-runs the work). Written only
    when the turn is still running after the engine's progress delay (50 ms): a faster
    turn goes from dispatched to done in its outcome's commit, one event fewer. A node run
    as a session turn (core/flows/turns.py) has none since issue 36: the `session.created`
    of its session (`task.taken`) takes the task; older logs keep this event and replay."""

    TYPE = "flow.task_taken"
    ENTITY = "flow"
    task_id: str
    msg_id: str


class FlowDecomposed(Payload):
    """The agent split its TASK into a validated sub-DAG and became its coordinator; the
    TASK is archived. Each subtask: {id, agent, instruction, depends_on, context}."""

    TYPE = "flow.decomposed"
    ENTITY = "flow"
    task_id: str
    msg_id: str
    subtasks: list[dict[str, Any]]
    tokens: int = 0


class FlowReplied(Payload):
    """A REPLY (kind REPLY) or ERROR from a task's agent to its parent (the operator for
    the root), applied on receipt: the task is done or failed, its parent's open count and
    its dependents' waiting counts drop by one."""

    TYPE = "flow.replied"
    ENTITY = "flow"
    msg_id: str
    kind: str  # REPLY | ERROR
    task_id: str
    from_agent: str
    to_agent: str
    body: str
    in_reply_to: str  # the TASK message this answers
    mode: str = ""  # execute | synthesis | refused | failed (how the body was made)
    tokens: int = 0


class FlowMessageIgnored(Payload):
    """A duplicate or late message, recorded and otherwise ignored."""

    TYPE = "flow.message_ignored"
    ENTITY = "flow"
    msg_id: str
    task_id: str
    kind: str
    agent: str
    reason: str


class FlowSessionLinked(Payload):
    """The session an agent works in for this flow (one per agent and flow, on the internal
    channel): its TASKs and answers are that session's transcript."""

    TYPE = "flow.session_linked"
    ENTITY = "flow"
    agent: str
    session_id: str


class FlowFinished(Payload):
    """The flow ends: done (the root replied), failed (an ERROR reached the root) or
    cancelled. Every task still open is cancelled with it."""

    TYPE = "flow.finished"
    ENTITY = "flow"
    status: str  # done | failed | cancelled
    result: str = ""
    error: str = ""
    by: str = ""


__all__ = ["FlowDecomposed", "FlowFinished", "FlowMessageIgnored", "FlowReplied", "FlowRerun",
           "FlowSessionLinked", "FlowStarted", "FlowTaskSent", "FlowTaskTaken"]
