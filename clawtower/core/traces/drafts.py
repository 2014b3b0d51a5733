"""The spans being built (drafts), the walk's state and its shared helpers (builder.py
runs the walk; a module per kind of unit adds its handlers: spans_*.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..textsafe import safe

Redact = Callable[[str, str], str]


class Event(Protocol):
    """What the builder reads of an event: a StoredEvent, or a row of the log (rows.py)."""

    @property
    def seq(self) -> int: ...
    @property
    def ts(self) -> float: ...
    @property
    def entity_id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def payload(self) -> Any: ...


MAX_CONTENT = 4000  # characters of one captured text


@dataclass
class _Draft:
    key: str
    parent: _Draft | None
    name: str
    kind: str
    start: float
    end: float | None
    attrs: dict[str, Any]
    first_seq: int
    last_seq: int
    root_id: str = ""  # set on roots: the id the trace is about
    root_kind: str = ""
    error: str | None = None
    aliases: list[str] = field(default_factory=list)
    children: list[_Draft] = field(default_factory=list)

    def close(self, e: Event, **attrs: Any) -> None:
        self.end = e.ts
        self.last_seq = e.seq
        self.attrs.update({k: v for k, v in attrs.items() if v is not None})

    def root(self) -> _Draft:
        d = self
        seen = 0
        while d.parent is not None and seen < 10_000:
            d, seen = d.parent, seen + 1
        return d


@dataclass
class _Prescan:
    agent_names: dict[str, str] = field(default_factory=dict)  # agent id -> spec name
    session_flow: dict[str, str] = field(default_factory=dict)  # session -> flow
    session_node: dict[str, str] = field(default_factory=dict)  # a node's session -> task
    run_trigger: dict[str, tuple[str, int]] = field(default_factory=dict)  # run -> (inv, n)
    by_seq: dict[int, Event] = field(default_factory=dict)


def _prescan(events: Sequence[Event]) -> _Prescan:
    pre = _Prescan()
    for e in events:
        p: Any = e.payload
        pre.by_seq[e.seq] = e
        if e.type == "agentspec.set":
            pre.agent_names[e.entity_id] = p.name
        elif e.type == "flow.session_linked":
            pre.session_flow[p.session_id] = e.entity_id
        elif e.type == "flow.task_sent" and p.session_id:
            pre.session_flow.setdefault(p.session_id, e.entity_id)
        elif e.type == "session.created" and p.created_by.startswith("flow:") \
                and isinstance(p.task.get("flow_task"), str):
            # an executed node's own session (core/flows/turns.py)
            pre.session_flow[e.entity_id] = p.created_by.removeprefix("flow:")
            pre.session_node[e.entity_id] = p.task["flow_task"]
        elif e.type == "trigger.linked":
            pre.run_trigger[p.run_id] = (e.entity_id, p.attempt)
    return pre


class _Base:
    """The walk's state and the helpers every kind of span uses."""

    def __init__(self, events: Sequence[Event], *, salt: str,
                 capture_content: bool, redact: Redact | None) -> None:
        self.events = events
        self.salt = salt
        self.capture = capture_content
        self.redact = redact
        self.pre = _prescan(events)
        self.spans: dict[str, _Draft] = {}
        self.roots: dict[str, _Draft] = {}  # subject id -> its span (root or not)
        # sessions and turns
        self.session_span: dict[str, _Draft] = {}
        self.session_jobs: dict[str, set[str]] = {}  # session -> jobs queued or running
        self.sessions_ended: set[str] = set()  # their span stays closed (not an attribute)
        self.session_turn: dict[str, _Draft] = {}  # session -> its running turn
        self.session_agent: dict[str, str] = {}
        self.turn_span: dict[str, _Draft] = {}
        self.turn_job: dict[str, str] = {}
        self.job_turns: dict[str, list[str]] = {}  # job -> its turns not yet ended with it
        self.turn_session: dict[str, str] = {}
        self.turn_mark: dict[str, float] = {}  # the turn's previous event: a call starts there
        self.turn_model: dict[str, tuple[str, str]] = {}  # turn -> (provider, model)
        self.tool_span: dict[str, _Draft] = {}
        self.job_confirm: dict[str, _Draft] = {}  # job -> its tool call waiting to be decided
        self.job_tools: dict[str, list[_Draft]] = {}  # job -> its tool calls
        self.approval_asked: dict[str, Event] = {}
        self.approval_span: dict[str, _Draft] = {}
        # flows
        self.flow_parent: dict[tuple[str, str], str] = {}  # (flow, subtask) -> parent task
        self.flow_children: dict[tuple[str, str], set[str]] = {}  # open subtasks
        self.flow_open: dict[str, list[_Draft]] = {}  # session -> its open nodes, oldest first
        self.node_task: dict[str, tuple[str, str]] = {}  # node key -> (flow, task)
        self.flow_agent_nodes: dict[tuple[str, str], list[_Draft]] = {}  # (flow, agent)
        self.node_session: dict[str, str] = {}  # node key -> the session it was sent to
        # workflows, triggers, meetings, tasks
        self.step_open: dict[str, dict[str, _Draft]] = {}  # run -> step id -> span
        self.gate_open: dict[str, _Draft] = {}  # run -> its gate span
        self.trigger_attempt: dict[tuple[str, int], _Draft] = {}
        self.task_phase: dict[str, _Draft] = {}
        self.task_attempt: dict[tuple[str, int], _Draft] = {}
        self.last_ts: dict[str, float] = {}  # entity id -> its latest event's time

    # ------------------------------------------------------------------- helpers

    def text(self, value: str, tool: str = "") -> str:
        if self.redact is not None:
            value = self.redact(tool, value)
        value = safe(value)
        return value if len(value) <= MAX_CONTENT else value[:MAX_CONTENT - 1] + "…"

    def open(self, e: Event, key: str, name: str, kind: str,
             parent: _Draft | None, *, start: float | None = None, **attrs: Any) -> _Draft:
        d = _Draft(key=key, parent=parent, name=name, kind=kind,
                   start=e.ts if start is None else start, end=None,
                   attrs={"openinference.span.kind": kind,
                          **{k: v for k, v in attrs.items() if v is not None}},
                   first_seq=e.seq, last_seq=e.seq)
        self.spans[key] = d
        if parent is not None:
            parent.children.append(d)
        return d

    def root(self, e: Event, subject: str, kind: str, name: str, span_kind: str,
             **attrs: Any) -> _Draft:
        d = self.open(e, f"{kind}:{e.seq}", name, span_kind, None, **attrs)
        d.root_id, d.root_kind = subject, kind
        self.roots[subject] = d
        return d

    def agent_name(self, agent_id: str) -> str:
        return self.pre.agent_names.get(agent_id, agent_id)

    def mark(self, turn_id: str, e: Event) -> None:
        if turn_id in self.turn_mark:
            self.turn_mark[turn_id] = e.ts

    def end_root(self, e: Event, subject: str, status: str, *, failed: bool = False,
                 message: str = "") -> None:
        d = self.roots.get(subject)
        if d is None:
            return
        stack = list(d.children)
        while stack:  # what is still open under it ends with it (cancelled)
            s = stack.pop()
            stack.extend(s.children)
            if s.end is None:
                s.close(e, **{"clawtower.cancelled": True})
        d.close(e, **{"clawtower.status": status})
        if failed:
            d.error = message or status
            d.attrs["error.type"] = status

    def container(self, subject: str, agent: str = "") -> _Draft | None:
        """The span new work on `subject` goes under: a workflow's open step, a task's
        attempt or phase, a flow's latest open node of `agent`, else the subject's span."""
        root = self.roots.get(subject)
        if root is not None and root.root_kind == "flow" and agent:
            nodes = self.flow_agent_nodes.get((subject, agent), [])
            while nodes and nodes[-1].end is not None:  # ended ones leave from the end
                nodes.pop()
            if nodes:
                return nodes[-1]
        steps = self.step_open.get(subject)
        if steps:
            return list(steps.values())[-1]
        phase = self.task_phase.get(subject)
        if phase is not None and phase.end is None:
            attempts = [a for (t, _), a in self.task_attempt.items()
                        if t == subject and a.end is None]
            return attempts[-1] if attempts else phase
        return self.roots.get(subject)

    def decide(self, e: Event, approval_id: str, decision: str, by: str,
               reason: str = "") -> None:
        d = self.approval_span.pop(approval_id, None)
        if d is None or d.end is not None:
            return
        d.close(e, **{"clawtower.approval.decision": decision,
                      "clawtower.approval.decided_by": by,
                      "clawtower.approval.reason": (self.text(reason) if reason
                                                    and self.capture else None)})
        d.attrs["clawtower.approval.wait_s"] = round(e.ts - d.start, 6)
        if decision == "rejected":
            d.attrs["clawtower.approval.rejected"] = True

    def flow_node_for(self, sid: str) -> _Draft | None:
        """The node the session works on: the oldest open one that is not waiting for its
        subtasks (a coordinator whose subtasks all answered synthesises)."""
        for d in self.flow_open.get(sid, []):
            if not self.flow_children.get(self.node_task[d.key]):
                return d
        return None


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    return values
