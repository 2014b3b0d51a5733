"""Events in, spans out: one walk over the log in seq order.

What becomes a span (the events it comes from):
- a session (`session.created` .. `session.finished`, or the job that ended it; a top-level
  session that is idle ends with its last job), its agent turns (`invoke_agent {agent}`:
  `turnjob.started`/`turn.started` .. `turn.finished`), each model call (`chat {model}`: from
  the turn's previous event to the `agent.usage` committed with the round's tool calls, or
  the usage folded into `turn.finished`), each tool call (`execute_tool {tool}`: its first
  `turn.tool_called` .. its `turn.tool_result`, across a resumed turn of the same job) and a
  confirm-tier call's approval wait (`approval.requested` .. `approval.decided`, naming who
  decided). A child session is a child of the parent's turn that was running when it was
  created.
- a flow (`flow.started` .. `flow.finished`), each node (`flow.task_sent` .. `flow.replied`,
  children of the node that decomposed into them); the turns of a flow's sessions are
  children of the node their session was working on.
- a workflow run, its steps and gates (an approval or input gate's wait); a run started by
  a trigger is a child of that invocation's attempt.
- a meeting, its rounds, each reply (an `invoke_agent` span of the reply's elapsed time) and
  each rolling summary.
- a task, its phases and attempts; approvals on it.

Content (messages, replies, tool arguments and results) is included only with
`capture_content`, after `redact(tool_name, text)` and textsafe.safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..textsafe import safe
from . import ids
from .spans import AGENT, CHAIN, LLM, TOOL, Span, Trace

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
TASK_TERMINAL = frozenset({"completed", "failed"})


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


class _Builder:
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

    # ------------------------------------------------------------------- the walk

    def run(self) -> list[Trace]:
        for e in self.events:
            handler = getattr(self, "on_" + e.type.replace(".", "_"), None)
            if handler is not None:
                handler(e, e.payload)
            self.last_ts[e.entity_id] = e.ts  # after: a handler sees the one before
        return self.finish()

    # sessions ------------------------------------------------------------------

    def session_parent(self, sid: str) -> _Draft | None:
        turn = self.session_turn.get(sid)
        if turn is not None:
            return turn
        return self.session_span.get(sid) or self.roots.get(sid)

    def on_session_created(self, e: Event, p: Any) -> None:
        sid = e.entity_id
        agent = self.agent_name(p.agent_id)
        self.session_agent[sid] = agent
        if sid in self.pre.session_flow:
            flow = self.roots.get(self.pre.session_flow[sid])
            if flow is not None:
                self.roots[sid] = flow
                flow.root().aliases.append(sid)  # `clawtower trace S-n` finds its flow
            if p.job_id:
                self.session_jobs.setdefault(sid, set()).add(p.job_id)
            return
        parent = self.session_parent(p.parent_id) if p.parent_id else None
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                 "gen_ai.agent.id": p.agent_id, "gen_ai.conversation.id": sid,
                 "clawtower.session": sid, "clawtower.session.channel": p.channel,
                 "clawtower.session.parent": p.parent_id, "clawtower.session.hop": p.hop}
        if p.task and self.capture and isinstance(p.task.get("prompt"), str):
            attrs["input.value"] = self.text(p.task["prompt"])
        name = f"session {sid} ({agent})"
        if parent is None:
            d = self.root(e, sid, "session", name, AGENT, **attrs)
        else:
            d = self.open(e, f"session:{e.seq}", name, AGENT, parent, **attrs)
            parent.root().aliases.append(sid)
            self.roots[sid] = d
        self.session_span[sid] = d
        if p.job_id:
            self.session_jobs.setdefault(sid, set()).add(p.job_id)

    def on_session_forked(self, e: Event, p: Any) -> None:
        """A fork (issue 37) is a session of its own: a trace of its own, naming its origin
        (the copied transcript is history: no spans)."""
        self.on_session_created(e, p.session)
        d = self.session_span.get(e.entity_id)
        if d is not None:
            d.attrs.update({"clawtower.session.forked_from": p.origin,
                            "clawtower.session.fork_at_turn": p.at_turn})

    def on_session_finished(self, e: Event, p: Any) -> None:
        self.end_session(e, e.entity_id, p.status)

    def end_session(self, e: Event, sid: str, status: str) -> None:
        d = self.session_span.get(sid)
        if d is not None:
            d.close(e, **{"clawtower.session.status": status})
            d.attrs["clawtower.session.finished"] = True
            if status not in ("ok", "done"):
                d.error = status

    def on_turnjob_queued(self, e: Event, p: Any) -> None:
        self.session_jobs.setdefault(p.session_id, set()).add(e.entity_id)
        d = self.session_span.get(p.session_id)
        if d is not None and not d.attrs.get("clawtower.session.finished"):
            d.end = None  # busy again: the session span is open until it is idle

    def on_turnjob_resumed(self, e: Event, p: Any) -> None:
        self.on_turnjob_queued(e, p)

    def on_turnjob_started(self, e: Event, p: Any) -> None:
        sid, job = p.session_id, e.entity_id
        self.session_jobs.setdefault(sid, set()).add(job)
        sd = self.session_span.get(sid)
        if sd is not None and not sd.attrs.get("clawtower.session.finished"):
            sd.end = None
        agent = p.turn.agent if p.turn is not None else self.agent_name(p.agent_id)
        self.start_turn(e, p.turn_id, sid, agent, p.model, p.provider, job=job,
                        attempt=p.attempt)
        if self.capture and p.message is not None:
            self.turn_span[p.turn_id].attrs["input.value"] = self.text(p.message.text)

    def on_turn_started(self, e: Event, p: Any) -> None:
        if e.entity_id not in self.turn_span:
            self.start_turn(e, e.entity_id, p.subject, p.agent, p.model, "", job="")

    def start_turn(self, e: Event, turn_id: str, subject: str, agent: str, model: str,
                   provider: str, *, job: str, attempt: int | None = None) -> None:
        if subject in self.pre.session_flow:
            fid = self.pre.session_flow[subject]
            node = self.pre.session_node.get(subject)
            parent = (self.spans.get(f"node:{fid}:{node}") if node else None) \
                or self.flow_node_for(subject) or self.roots.get(fid)
        elif subject in self.session_span:
            parent = self.session_span[subject]
        else:
            parent = self.container(subject)
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
            "gen_ai.request.model": model or None, "gen_ai.provider.name": provider or None,
            "clawtower.turn": turn_id, "clawtower.job": job or None,
            "clawtower.job.attempt": attempt}
        if subject in self.session_span or subject in self.pre.session_flow:
            attrs["gen_ai.conversation.id"] = subject
            attrs["clawtower.session"] = subject
        else:
            attrs["clawtower.subject"] = subject
        if parent is None:
            d = self.root(e, turn_id, "turn", f"invoke_agent {agent}", AGENT, **attrs)
        else:
            d = self.open(e, f"turn:{e.seq}", f"invoke_agent {agent}", AGENT, parent, **attrs)
        self.turn_span[turn_id] = d
        self.turn_job[turn_id] = job
        if job:
            self.job_turns.setdefault(job, []).append(turn_id)
        self.turn_session[turn_id] = subject
        self.turn_mark[turn_id] = e.ts
        self.turn_model[turn_id] = (provider, model)
        self.session_turn[subject] = d

    def on_agent_usage(self, e: Event, p: Any) -> None:
        nxt = self.pre.by_seq.get(e.seq + 1)
        if p.purpose == "turn" and nxt is not None and nxt.type == "turn.tool_called" \
                and nxt.entity_id in self.turn_span:
            self.chat(e, nxt.entity_id, p)
            return
        if e.entity_id in self.roots and self.roots[e.entity_id].root_kind == "meeting":
            return  # a meeting's replies and summaries carry their own tokens
        parent = self.container(e.entity_id, agent=p.agent)
        if parent is None:
            return
        # a call outside a turn logs only its end: it is taken to start after the last
        # event of what it worked for (or its parent's start)
        start = max(self.last_ts.get(e.entity_id, parent.start), parent.start)
        d = self.open(e, f"chat:{e.seq}", f"chat {p.model}", LLM, parent, start=start,
                      **self.usage_attrs(p, ""), **{"clawtower.purpose": p.purpose,
                                                    "clawtower.start": "previous event"})
        d.close(e)

    def usage_attrs(self, p: Any, provider: str) -> dict[str, Any]:
        return {"gen_ai.operation.name": "chat", "gen_ai.request.model": p.model,
                "gen_ai.provider.name": provider or None, "gen_ai.agent.name": p.agent,
                "gen_ai.usage.input_tokens": p.prompt_tokens,
                "gen_ai.usage.output_tokens": p.completion_tokens,
                "llm.model_name": p.model, "llm.token_count.prompt": p.prompt_tokens,
                "llm.token_count.completion": p.completion_tokens,
                "llm.token_count.total": p.prompt_tokens + p.completion_tokens,
                "clawtower.cost_usd": p.cost_usd,
                "clawtower.usage.estimated": p.estimated or None}

    def chat(self, e: Event, turn_id: str, usage: Any) -> None:
        turn = self.turn_span[turn_id]
        provider = self.turn_model.get(turn_id, ("", ""))[0]
        d = self.open(e, f"chat:{e.seq}", f"chat {usage.model}", LLM, turn,
                      start=self.turn_mark.get(turn_id, turn.start),
                      **self.usage_attrs(usage, provider))
        d.close(e)
        self.turn_mark[turn_id] = e.ts

    def on_turn_tool_called(self, e: Event, p: Any) -> None:
        turn = self.turn_span.get(e.entity_id)
        if turn is None:
            return
        job = self.turn_job.get(e.entity_id) or e.entity_id
        key = f"tool:{job}:{p.call_id}"
        if key in self.tool_span and self.tool_span[key].end is None:
            return  # the call a resumed turn goes on with: the span opened before the wait
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": p.name,
            "gen_ai.tool.call.id": p.call_id, "tool.name": p.name,
            "clawtower.tool.tier": p.tier or None, "clawtower.turn": e.entity_id,
            "clawtower.round": p.round}
        if self.capture:
            attrs["gen_ai.tool.call.arguments"] = self.text(p.arguments, p.name)
        d = self.open(e, f"tool:{e.seq}", f"execute_tool {p.name}", TOOL, turn, **attrs)
        self.tool_span[key] = d
        self.job_tools.setdefault(job, []).append(d)
        if p.tier == "confirm":
            self.job_confirm[job] = d

    def tool_key(self, turn_id: str, call_id: str) -> str:
        return f"tool:{self.turn_job.get(turn_id) or turn_id}:{call_id}"

    def on_turn_tool_result(self, e: Event, p: Any) -> None:
        d = self.tool_span.get(self.tool_key(e.entity_id, p.call_id))
        self.mark(e.entity_id, e)
        if d is None or d.end is not None:
            return
        d.close(e, **{"clawtower.tool.error_kind": p.error_kind})
        if p.is_error:
            d.error = p.error_kind or "error"
            d.attrs["error.type"] = p.error_kind or "tool_error"
        if self.capture:
            d.attrs["gen_ai.tool.call.result"] = self.text(p.content, p.name)

    def on_turn_tool_drafted(self, e: Event, p: Any) -> None:
        d = self.tool_span.get(self.tool_key(e.entity_id, p.call_id))
        self.mark(e.entity_id, e)
        if d is not None:
            d.attrs["clawtower.tool.drafted"] = True

    def on_turn_steered(self, e: Event, p: Any) -> None:
        self.mark(e.entity_id, e)

    def on_turn_finished(self, e: Event, p: Any) -> None:
        turn_id = e.entity_id
        d = self.turn_span.get(turn_id)
        if d is None:
            return
        if p.usage is not None:
            self.chat(e, turn_id, p.usage)
        d.close(e, **{"clawtower.stop_reason": p.stop_reason,
                      "gen_ai.usage.input_tokens": p.prompt_tokens,
                      "gen_ai.usage.output_tokens": p.completion_tokens,
                      "clawtower.cost_usd": p.cost_usd, "clawtower.rounds": p.rounds,
                      "clawtower.model_calls": p.model_calls,
                      "clawtower.tool_calls": p.tool_calls})
        if p.stop_reason == "error":
            d.error = p.error or "error"
            d.attrs["error.type"] = "error"
        if self.capture and p.text:
            d.attrs["output.value"] = self.text(p.text)
        self.turn_mark.pop(turn_id, None)
        sid = self.turn_session.get(turn_id, "")
        if self.session_turn.get(sid) is d:
            del self.session_turn[sid]

    def end_job(self, e: Event, sid: str, job: str) -> None:
        jobs = self.session_jobs.get(sid, set())
        jobs.discard(job)
        for turn_id in self.job_turns.pop(job, []):  # a harness's turn: no turn events
            d = self.turn_span[turn_id]
            if d.end is None:
                d.close(e)
                if self.session_turn.get(sid) is d:
                    del self.session_turn[sid]
        sd = self.session_span.get(sid)
        if sd is not None and not jobs and not sd.attrs.get("clawtower.session.finished"):
            sd.close(e)  # idle: ends with its last job until another one starts

    def on_turnjob_finished(self, e: Event, p: Any) -> None:
        for tool in self.job_tools.pop(e.entity_id, []):  # e.g. stopped while it waited
            if tool.end is None:
                tool.close(e, **{"clawtower.cancelled": True})
                tool.error = f"not run: the job ended {p.status}"
        self.end_job(e, p.session_id, e.entity_id)
        if p.session_status is not None:
            self.end_session(e, p.session_id, p.session_status)

    def on_turnjob_waiting(self, e: Event, p: Any) -> None:
        tool = self.job_confirm.pop(e.entity_id, None)
        asked = self.approval_asked.get(p.approval_id)
        if tool is not None:
            start = asked.ts if asked is not None else e.ts
            w = self.open(asked or e, f"wait:{(asked or e).seq}", f"approval {p.tool}", CHAIN,
                          tool, start=start, **{"clawtower.approval": p.approval_id,
                                                "clawtower.wait": True,
                                                "gen_ai.tool.name": p.tool})
            self.approval_span[p.approval_id] = w
        jobs = self.session_jobs.get(p.session_id, set())
        jobs.discard(e.entity_id)
        self.end_job(e, p.session_id, e.entity_id)

    def on_approval_requested(self, e: Event, p: Any) -> None:
        self.approval_asked[e.entity_id] = e
        if p.kind == "tool_call" or p.subject in self.step_open:
            return  # a tool call's wait (turnjob.waiting) or a workflow gate (its own span)
        parent = self.container(p.subject)
        if parent is not None:
            self.approval_span[e.entity_id] = self.open(
                e, f"wait:{e.seq}", f"approval {p.kind}", CHAIN, parent,
                **{"clawtower.approval": e.entity_id, "clawtower.approval.kind": p.kind,
                   "clawtower.wait": True})

    def on_approval_decided(self, e: Event, p: Any) -> None:
        self.decide(e, e.entity_id, p.decision, e.actor, p.reason)

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

    # flows ------------------------------------------------------------------------

    def on_flow_started(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        self.root(e, fid, "flow", f"invoke_workflow {fid}", CHAIN,
                  **{"gen_ai.operation.name": "invoke_workflow", "clawtower.flow": fid,
                     "gen_ai.agent.name": p.agent, "clawtower.flow.root_task": p.root_task,
                     "input.value": self.text(p.instruction) if self.capture else None})

    def on_flow_rerun(self, e: Event, p: Any) -> None:
        """A flow rerun from a node (issue 37): a flow of its own, naming its origin. Its
        reused replies are history (no spans); the coordinators above the node wait for it
        again, so they are open nodes from here, with the node's TASK sent under them."""
        fid = e.entity_id
        self.on_flow_started(e, p.started)
        flow = self.roots[fid]
        flow.attrs.update({"clawtower.flow.rerun_of": p.origin, "clawtower.flow.rerun_node":
                           p.node, "clawtower.flow.reused": sum(
                               1 for t in p.tasks if t.get("mode") == "reused")})
        for t in p.tasks:
            tid, parent = str(t.get("task_id")), t.get("parent_id")
            if parent:
                self.flow_parent[(fid, tid)] = str(parent)
                if t.get("status") != "done":
                    self.flow_children.setdefault((fid, str(parent)), set()).add(tid)
            if t.get("status") == "waiting":
                up = self.spans.get(f"node:{fid}:{parent}") if parent else None
                agent = str(t.get("agent") or "")
                d = self.open(e, f"node:{fid}:{tid}", f"node {tid} {agent}", AGENT, up or flow,
                              **_attrs({"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.agent.name": agent, "clawtower.flow": fid,
                                        "clawtower.flow.task": tid,
                                        "clawtower.flow.decision": "decompose"}))
                self.node_task[d.key] = (fid, tid)
                self.flow_agent_nodes.setdefault((fid, agent), []).append(d)

    def on_flow_task_sent(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        flow = self.roots.get(fid)
        if flow is None:
            return
        parent_task = self.flow_parent.get((fid, p.task_id))
        parent = self.spans.get(f"node:{fid}:{parent_task}") if parent_task else None
        d = self.open(e, f"node:{fid}:{p.task_id}", f"node {p.task_id} {p.to_agent}", AGENT,
                      parent or flow, **{"gen_ai.operation.name": "invoke_agent",
                                         "gen_ai.agent.name": p.to_agent,
                                         "clawtower.flow": fid, "clawtower.flow.task": p.task_id,
                                         "clawtower.flow.from": p.from_agent,
                                         "clawtower.session": p.session_id or None})
        if self.capture:
            d.attrs["input.value"] = self.text(p.instruction)
        self.node_task[d.key] = (fid, p.task_id)
        self.flow_agent_nodes.setdefault((fid, p.to_agent), []).append(d)
        if p.session_id:
            self.flow_open.setdefault(p.session_id, []).append(d)
            self.node_session[d.key] = p.session_id

    def flow_node_for(self, sid: str) -> _Draft | None:
        """The node the session works on: the oldest open one that is not waiting for its
        subtasks (a coordinator whose subtasks all answered synthesises)."""
        for d in self.flow_open.get(sid, []):
            if not self.flow_children.get(self.node_task[d.key]):
                return d
        return None

    def on_flow_decomposed(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        # a subtask's task id is its coordinator's task id / its id in the plan
        subs = [f"{p.task_id}/{s.get('id')}" for s in p.subtasks]
        for s in subs:
            self.flow_parent[(fid, s)] = p.task_id
        self.flow_children[(fid, p.task_id)] = set(subs)
        d = self.spans.get(f"node:{fid}:{p.task_id}")
        if d is not None:
            d.attrs.update({"clawtower.flow.decision": "decompose",
                            "clawtower.flow.subtasks": len(subs),
                            "clawtower.flow.decompose_tokens": p.tokens})
            d.last_seq = e.seq

    def on_flow_replied(self, e: Event, p: Any) -> None:
        fid = e.entity_id
        d = self.spans.get(f"node:{fid}:{p.task_id}")
        parent = self.flow_parent.get((fid, p.task_id))
        if parent is not None:
            self.flow_children.get((fid, parent), set()).discard(p.task_id)
        if d is None or d.end is not None:
            return
        d.attrs.setdefault("clawtower.flow.decision", p.mode or "execute")
        d.close(e, **{"clawtower.flow.mode": p.mode or None, "clawtower.flow.tokens": p.tokens,
                      "clawtower.flow.reply": p.kind})
        if p.kind == "ERROR":
            d.error = p.mode or "failed"
            d.attrs["error.type"] = p.mode or "flow_error"
        if self.capture:
            d.attrs["output.value"] = self.text(p.body)
        sid = self.node_session.pop(d.key, "")
        if d in self.flow_open.get(sid, ()):
            self.flow_open[sid].remove(d)

    def on_flow_finished(self, e: Event, p: Any) -> None:
        self.end_root(e, e.entity_id, p.status, failed=p.status != "done",
                      message=p.error or p.status)

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

    # workflows and triggers ---------------------------------------------------------

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

    def on_workflow_started(self, e: Event, p: Any) -> None:
        run = e.entity_id
        link = self.pre.run_trigger.get(run)
        parent = self.trigger_attempt.get(link) if link is not None else None
        if parent is None and link is not None:
            parent = self.roots.get(link[0])
        name = p.name or p.file
        attrs = {"gen_ai.operation.name": "invoke_workflow", "clawtower.workflow": run,
                 "clawtower.workflow.file": p.file, "clawtower.workflow.name": p.name or None}
        if parent is None:
            self.root(e, run, "workflow", f"invoke_workflow {name}", CHAIN, **attrs)
        else:
            d = self.open(e, f"workflow:{e.seq}", f"invoke_workflow {name}", CHAIN, parent,
                          **attrs)
            self.roots[run] = d
            parent.root().aliases.append(run)
        self.step_open[run] = {}

    def on_workflow_rerun(self, e: Event, p: Any) -> None:
        """A run from a step of another (issue 37): a run of its own, naming its origin; the
        reused steps' outputs are history (no spans)."""
        self.on_workflow_started(e, p.started)
        self.roots[e.entity_id].attrs.update({
            "clawtower.workflow.rerun_of": p.origin, "clawtower.workflow.from_step":
            p.from_step, "clawtower.workflow.reused": len(p.reused)})

    def on_workflow_step_started(self, e: Event, p: Any) -> None:
        run = e.entity_id
        wf = self.roots.get(run)
        if wf is None:
            return
        self.step_open.setdefault(run, {})[p.step_id] = self.open(
            e, f"step:{e.seq}", f"step {p.step_id}", CHAIN, wf,
            **{"clawtower.workflow": run, "clawtower.workflow.step": p.step_id,
               "clawtower.workflow.step.kind": p.kind, "clawtower.workflow.step.index": p.index,
               "clawtower.workflow.step.attempt": p.attempt})

    def end_step(self, e: Event, run: str, step_id: str, **attrs: Any) -> _Draft | None:
        d = self.step_open.get(run, {}).pop(step_id, None)
        if d is not None:
            d.close(e, **attrs)
        return d

    def on_workflow_step_finished(self, e: Event, p: Any) -> None:
        d = self.end_step(e, e.entity_id, p.step_id)
        if d is not None and p.cost:
            d.attrs["clawtower.cost_usd"] = sum(float(c.get("usd", c.get("cost_usd", 0)) or 0)
                                                for c in p.cost if isinstance(c, dict))
        if p.next is not None:
            self.on_workflow_step_started(e, p.next)

    def on_workflow_step_skipped(self, e: Event, p: Any) -> None:
        self.on_workflow_step_started(e, p)
        self.end_step(e, e.entity_id, p.step_id, **{"clawtower.workflow.step.skipped": True})

    def on_workflow_step_failed(self, e: Event, p: Any) -> None:
        d = self.end_step(e, e.entity_id, p.step_id,
                          **{"clawtower.workflow.step.policy": p.policy,
                             "clawtower.workflow.step.retrying": p.retrying})
        if d is not None:
            d.error = p.error[:500]
            d.attrs["error.type"] = "step_failed"

    def on_workflow_paused(self, e: Event, p: Any) -> None:
        run = e.entity_id
        if p.started is not None:
            self.on_workflow_step_started(e, p.started)
        if p.asked is not None:
            self.approval_asked[p.approval_id] = e
        parent = self.step_open.get(run, {}).get(p.step_id) or self.roots.get(run)
        if parent is None:
            return
        g = self.open(e, f"gate:{e.seq}", f"gate {p.gate} {p.step_id}", CHAIN, parent,
                      **{"clawtower.workflow": run, "clawtower.workflow.gate": p.gate,
                         "clawtower.approval": p.approval_id, "clawtower.wait": True})
        self.gate_open[run] = g
        self.approval_span[p.approval_id] = g

    def on_workflow_resumed(self, e: Event, p: Any) -> None:
        g = self.gate_open.pop(e.entity_id, None)
        if g is None:
            return
        aid = str(g.attrs.get("clawtower.approval", ""))
        self.decide(e, aid, p.decision, p.by or e.actor)

    def on_workflow_finished(self, e: Event, p: Any) -> None:
        self.end_run(e, "finished")

    def on_workflow_cancelled(self, e: Event, p: Any) -> None:
        self.end_run(e, "cancelled", failed=True, message=p.reason or "cancelled")

    def on_workflow_failed(self, e: Event, p: Any) -> None:
        self.end_run(e, "failed", failed=True, message=p.error[:500])

    def end_run(self, e: Event, status: str, *, failed: bool = False,
                message: str = "") -> None:
        run = e.entity_id
        for step_id in list(self.step_open.get(run, {})):
            self.end_step(e, run, step_id)
        self.step_open.pop(run, None)
        self.end_root(e, run, status, failed=failed, message=message)

    def on_trigger_received(self, e: Event, p: Any) -> None:
        self.root(e, e.entity_id, "trigger", f"trigger {p.expert}/{p.trigger}", CHAIN,
                  **{"clawtower.trigger": e.entity_id, "clawtower.trigger.name": p.trigger,
                     "clawtower.expert": p.expert, "clawtower.trigger.source": p.source})

    def on_trigger_skipped(self, e: Event, p: Any) -> None:
        d = self.root(e, e.entity_id, "trigger", f"trigger {p.expert}/{p.trigger}", CHAIN,
                      **{"clawtower.trigger": e.entity_id, "clawtower.expert": p.expert,
                         "clawtower.trigger.duplicate_of": p.duplicate_of})
        d.close(e)

    def on_trigger_claimed(self, e: Event, p: Any) -> None:
        root = self.roots.get(e.entity_id)
        if root is not None:
            self.trigger_attempt[(e.entity_id, p.attempt)] = self.open(
                e, f"attempt:{e.seq}", f"attempt {p.attempt}", CHAIN, root,
                **{"clawtower.trigger": e.entity_id, "clawtower.attempt": p.attempt,
                   "clawtower.recovered": p.recovered or None})

    def on_trigger_finished(self, e: Event, p: Any) -> None:
        a = self.trigger_attempt.get((e.entity_id, p.attempt))
        if a is not None and a.end is None:
            a.close(e)
        self.end_root(e, e.entity_id, "done")

    def on_trigger_failed(self, e: Event, p: Any) -> None:
        a = self.trigger_attempt.get((e.entity_id, p.attempt))
        if a is not None and a.end is None:
            a.close(e)
            a.error = p.error[:500]
        if p.retry_at is None:
            self.end_root(e, e.entity_id, p.action or "failed", failed=True,
                          message=p.error[:500])

    # meetings ---------------------------------------------------------------------

    def on_meeting_started(self, e: Event, p: Any) -> None:
        self.root(e, e.entity_id, "meeting", f"meeting {e.entity_id}", CHAIN,
                  **{"clawtower.meeting": e.entity_id,
                     "clawtower.meeting.participants": list(p.participants),
                     "clawtower.meeting.max_rounds": p.max_rounds,
                     "input.value": self.text(p.topic) if self.capture else None})

    def on_meeting_round_started(self, e: Event, p: Any) -> None:
        m = self.roots.get(e.entity_id)
        if m is not None:
            self.open(e, f"round:{e.entity_id}:{p.round}", f"round {p.round}", CHAIN, m,
                      **{"clawtower.meeting": e.entity_id, "clawtower.meeting.round": p.round,
                         "clawtower.meeting.summary_in_tokens": p.summary_in_tokens})

    def on_meeting_reply_recorded(self, e: Event, p: Any) -> None:
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if r is None:
            return
        start = max(r.start, e.ts - max(p.elapsed_s, 0.0))
        d = self.open(e, f"reply:{e.seq}", f"invoke_agent {p.agent}", AGENT, r, start=start,
                      **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": p.agent,
                         "gen_ai.request.model": p.model or None,
                         "gen_ai.usage.input_tokens": p.prompt_tokens,
                         "gen_ai.usage.output_tokens": p.completion_tokens,
                         "llm.token_count.prompt": p.prompt_tokens,
                         "llm.token_count.completion": p.completion_tokens,
                         "clawtower.meeting": e.entity_id, "clawtower.meeting.round": p.round,
                         "clawtower.meeting.stance": p.stance,
                         "clawtower.meeting.status": p.status})
        d.close(e)
        if p.status != "replied":
            d.error = p.status
            d.attrs["error.type"] = p.status
        if self.capture and p.raw:
            d.attrs["output.value"] = self.text(p.raw)

    def on_meeting_round_ended(self, e: Event, p: Any) -> None:
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if r is not None and r.end is None:
            r.close(e, **{"clawtower.meeting.consensus": p.consensus,
                          "clawtower.meeting.agree": p.agree,
                          "clawtower.meeting.disagree": p.disagree,
                          "clawtower.meeting.neutral": p.neutral})

    def on_meeting_summary_recorded(self, e: Event, p: Any) -> None:
        m = self.roots.get(e.entity_id)
        r = self.spans.get(f"round:{e.entity_id}:{p.round}")
        if m is None:
            return
        start = r.end if r is not None and r.end is not None else e.ts
        d = self.open(e, f"summary:{e.seq}", f"chat summary {p.round}", LLM, m, start=start,
                      **{"gen_ai.operation.name": "chat",
                         "gen_ai.usage.input_tokens": p.prompt_tokens,
                         "gen_ai.usage.output_tokens": p.completion_tokens,
                         "clawtower.meeting.round": p.round,
                         "clawtower.meeting.summary_tokens": p.tokens,
                         "clawtower.meeting.summary_truncated": p.truncated})
        d.close(e)
        if self.capture:
            d.attrs["output.value"] = self.text(p.text)

    def on_meeting_ended(self, e: Event, p: Any) -> None:
        d = self.roots.get(e.entity_id)
        if d is not None:
            d.attrs.update({"clawtower.meeting.result": p.result,
                            "clawtower.meeting.reason": p.reason,
                            "clawtower.meeting.rounds": p.rounds})
        self.end_root(e, e.entity_id, p.reason, failed=p.reason == "error",
                      message=p.detail)

    # tasks ------------------------------------------------------------------------

    def on_task_created(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        d = self.root(e, tid, "task", f"task {tid}", CHAIN,
                      **{"clawtower.task": tid,
                         "input.value": self.text(p.title) if self.capture else None})
        self.task_phase[tid] = self.open(e, f"phase:{e.seq}", "phase spec_draft", CHAIN, d,
                                         **_attrs({"clawtower.task": tid,
                                                   "clawtower.task.phase": "spec_draft"}))

    def on_task_transitioned(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        root = self.roots.get(tid)
        if root is None:
            return
        old = self.task_phase.pop(tid, None)
        if old is not None and old.end is None:
            old.close(e, **{"clawtower.task.reason": self.text(p.reason)[:200]
                            if self.capture else None})
        if p.to_phase in TASK_TERMINAL:
            self.end_root(e, tid, p.to_phase, failed=p.to_phase == "failed",
                          message=p.reason[:500])
            return
        self.task_phase[tid] = self.open(e, f"phase:{e.seq}", f"phase {p.to_phase}", CHAIN,
                                         root, **{"clawtower.task": tid,
                                                  "clawtower.task.phase": p.to_phase,
                                                  "clawtower.task.attempt": p.attempt})

    def on_attempt_started(self, e: Event, p: Any) -> None:
        tid = e.entity_id
        parent = self.task_phase.get(tid) or self.roots.get(tid)
        if parent is not None:
            self.task_attempt[(tid, p.attempt)] = self.open(
                e, f"attempt:{e.seq}", f"attempt {p.attempt}", CHAIN, parent,
                **{"clawtower.task": tid, "clawtower.attempt": p.attempt,
                   "gen_ai.request.model": p.model, "clawtower.runtime": p.runtime})

    def on_attempt_finished(self, e: Event, p: Any) -> None:
        d = self.task_attempt.get((e.entity_id, p.attempt))
        if d is not None and d.end is None:
            d.close(e, **{"clawtower.attempt.status": p.status})
            if p.status != "succeeded":
                d.error = p.reason[:500] or p.status

    # ------------------------------------------------------------------- finishing

    def finish(self) -> list[Trace]:
        ids_of: dict[int, str] = {}
        for d in self.spans.values():
            ids_of[id(d)] = ids.span_id(self.salt, d.key)
        by_root: dict[int, list[_Draft]] = {}
        for d in self.spans.values():
            by_root.setdefault(id(d.root()), []).append(d)
        traces = []
        for members in by_root.values():
            root = members[0].root()
            if not root.root_id:
                continue
            tid = ids.trace_id(self.salt, root.key)
            spans = tuple(Span(
                trace_id=tid, span_id=ids_of[id(d)],
                parent_id=ids_of[id(d.parent)] if d.parent is not None else None,
                name=safe(d.name).replace("\n", " "), kind=d.kind, start=d.start,
                end=None if d.end is None else max(d.end, d.start),
                attributes=dict(d.attrs), error=d.error, first_seq=d.first_seq,
                last_seq=d.last_seq) for d in _ordered(members))
            traces.append(Trace(trace_id=tid, root=root.root_id, kind=root.root_kind,
                                spans=spans, aliases=tuple(root.aliases)))
        traces.sort(key=lambda t: t.spans[0].first_seq)
        return traces


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    return values


def _ordered(members: list[_Draft]) -> list[_Draft]:
    """Depth first from the root, children by (start, seq): the waterfall's row order."""
    kids: dict[int, list[_Draft]] = {}
    roots = []
    for d in members:
        if d.parent is None:
            roots.append(d)
        else:
            kids.setdefault(id(d.parent), []).append(d)
    out: list[_Draft] = []
    stack = sorted(roots, key=lambda d: (d.start, d.first_seq), reverse=True)
    while stack:
        d = stack.pop()
        out.append(d)
        stack.extend(sorted(kids.get(id(d), []), key=lambda c: (c.start, c.first_seq),
                            reverse=True))
    return out


def derive(events: Iterable[Event], *, salt: str = "",
           capture_content: bool = False, redact: Redact | None = None) -> list[Trace]:
    """Every trace the events hold, oldest first. Pure: the same events give the same
    traces, ids and all. `salt`: the store's identity (read.store_salt)."""
    return _Builder(list(events), salt=salt, capture_content=capture_content,
                    redact=redact).run()
