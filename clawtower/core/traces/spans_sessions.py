"""Sessions' spans: a session, its turns, model calls, tool calls and approval waits; a
subagent under the turn that spawned it."""

from __future__ import annotations

from typing import Any

from .drafts import Event, _Base, _Draft
from .spans import AGENT, CHAIN, LLM, TOOL


class _SessionSpans(_Base):
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
            self.start_claimed(e, p)
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
        self.start_claimed(e, p)

    def start_claimed(self, e: Event, p: Any) -> None:
        """The job claimed in the session's creation starts there (issue 36: `start`, as
        its own `turnjob.started` would; absent from older logs and a fork's copy)."""
        if getattr(p, "start", None) is not None and p.job_id:
            self.start_job(e, p.start, p.job_id)

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
            self.sessions_ended.add(sid)
            if status not in ("ok", "done"):
                d.error = status

    def on_turnjob_queued(self, e: Event, p: Any) -> None:
        self.session_jobs.setdefault(p.session_id, set()).add(e.entity_id)
        d = self.session_span.get(p.session_id)
        if d is not None and p.session_id not in self.sessions_ended:
            d.end = None  # busy again: the session span is open until it is idle

    def on_turnjob_resumed(self, e: Event, p: Any) -> None:
        self.on_turnjob_queued(e, p)

    def on_turnjob_started(self, e: Event, p: Any) -> None:
        self.start_job(e, p, e.entity_id)

    def start_job(self, e: Event, p: Any, job: str) -> None:
        sid = p.session_id
        self.session_jobs.setdefault(sid, set()).add(job)
        sd = self.session_span.get(sid)
        if sd is not None and sid not in self.sessions_ended:
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
        self.end_turn(e, e.entity_id, p)

    def end_turn(self, e: Event, turn_id: str, p: Any) -> None:
        """A turn's span ends: at `turn.finished`, or (issue 36) at its job's end carrying
        it (`turnjob.finished`'s `turn`: the turn its job started last)."""
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
        if sd is not None and not jobs and sid not in self.sessions_ended:
            sd.close(e)  # idle: ends with its last job until another one starts

    def on_turnjob_finished(self, e: Event, p: Any) -> None:
        turns = self.job_turns.get(e.entity_id)
        if p.turn is not None and turns:  # the turn's end, folded in (issue 36)
            self.end_turn(e, turns[-1], p.turn)
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
