"""Traces derived from the event log (core/traces): a session tree with subagents and a tool
call that waited for approval, a flow, a workflow run with a gate; ids derived twice are the
same; open spans; content only when asked, sanitised."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from trace_helpers import WAIT_S, session_tree

from clawtower.core.approvals import Approvals
from clawtower.core.errors import NotFound
from clawtower.core.store import open_store
from clawtower.core.traces import Span, Trace, find_trace, load
from clawtower.core.traces.builder import derive
from clawtower.core.traces.read import read_events, store_salt
from clawtower.core.traces.waterfall import render


def by_id(trace: Trace) -> dict[str, Span]:
    return {s.span_id: s for s in trace.spans}


def children(trace: Trace, span: Span) -> list[Span]:
    return [s for s in trace.spans if s.parent_id == span.span_id]


def check_tree(trace: Trace) -> None:
    """One root; every parent in the trace; ids unique; a child never starts before its
    parent."""
    spans = by_id(trace)
    assert len(spans) == len(trace.spans)
    assert [s.parent_id for s in trace.spans].count(None) == 1
    for s in trace.spans:
        assert s.trace_id == trace.trace_id
        assert len(s.span_id) == 16 and len(s.trace_id) == 32
        if s.parent_id is not None:
            assert s.parent_id in spans, s.name
            assert s.start >= spans[s.parent_id].start - 1e-6, s.name


async def test_session_tree_with_subagents_and_an_approval_wait(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    store = await open_store(db)
    try:
        traces = await load(store)
        assert [(t.kind, t.root) for t in traces] == [("session", sid)]
        trace = traces[0]
        assert sorted(trace.aliases) == ["S-2", "S-3", "S-4"]
        check_tree(trace)
        assert all(not s.open for s in trace.spans)
        root = trace.spans[0]
        assert root.name == f"session {sid} (lead)" and root.kind == "AGENT"
        assert root.attributes["gen_ai.agent.name"] == "lead"
        assert root.attributes["clawtower.session"] == sid
        turns = children(trace, root)
        assert [t.name for t in turns] == ["invoke_agent lead"] * 4
        spawner = turns[0]
        under = children(trace, spawner)
        # the spawning turn: a model call, three spawn calls, the three child sessions (its
        # children, as the runs it started), then the final model call
        assert sorted(s.name for s in under) == sorted(
            ["chat sim-standard"] * 2 + ["execute_tool spawn_subagent"] * 3
            + [f"session S-{i} (worker)" for i in (2, 3, 4)])
        for child in (s for s in under if s.name.startswith("session")):
            assert child.attributes["clawtower.session.parent"] == sid
            assert child.attributes["clawtower.session.status"] == "ok"
            # the walk's own bookkeeping is not exported as an attribute
            assert "clawtower.session.finished" not in child.attributes
            (turn,) = children(trace, child)
            assert turn.name == "invoke_agent worker"
            # its end folded into its job's (issue 36): the span closes there, with it
            assert turn.attributes["clawtower.stop_reason"] == "completed"
            assert turn.attributes["clawtower.model_calls"] == 1
            (call,) = children(trace, turn)
            assert call.name == "chat sim-standard" and call.kind == "LLM"
            assert call.attributes["gen_ai.operation.name"] == "chat"
            assert call.attributes["gen_ai.provider.name"] == "simulator"
            assert call.attributes["gen_ai.usage.input_tokens"] == \
                turn.attributes["gen_ai.usage.input_tokens"] > 0
        # every turn's tokens are the sum of its model calls'
        for t in turns:
            calls = [s for s in children(trace, t) if s.kind == "LLM"]
            assert calls, t.name
            for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
                assert sum(c.attributes[key] for c in calls) == t.attributes[key]
        # the confirm-tier call: its span runs until its result, the wait is its child
        (tool,) = [s for s in trace.spans if s.name == "execute_tool clock.now"]
        assert tool.kind == "TOOL"
        assert tool.attributes["gen_ai.tool.name"] == "clock.now"
        assert tool.attributes["clawtower.tool.tier"] == "confirm"
        assert by_id(trace)[tool.parent_id or ""].name == "invoke_agent lead"
        (wait,) = children(trace, tool)
        assert wait.name == "approval clock.now"
        assert wait.attributes["clawtower.approval.decided_by"] == "bob"
        assert wait.attributes["clawtower.approval.decision"] == "approved"
        assert WAIT_S <= wait.attributes["clawtower.approval.wait_s"] < WAIT_S + 5
        assert wait.duration == pytest.approx(wait.attributes["clawtower.approval.wait_s"],
                                              abs=1e-5)
        assert tool.start <= wait.start and wait.end <= tool.end  # type: ignore[operator]
        # no content unless asked
        assert not any(k in s.attributes for s in trace.spans
                       for k in ("input.value", "output.value", "gen_ai.tool.call.arguments"))
        # derived twice (and read again): identical spans, ids and all
        again = await load(store)
        assert again == traces
        # load reads rows (rows.py); StoredEvents give the same spans, value types and all
        via_models = derive(await read_events(store), salt=await store_salt(store))
        assert via_models == traces
        assert [[(s, [(k, type(v)) for k, v in s.attributes.items()]) for s in t.spans]
                for t in via_models] == [[(s, [(k, type(v)) for k, v in s.attributes.items()])
                                         for s in t.spans] for t in traces]
        # found by any id in it, or its trace id
        for ident in (sid, "S-3", trace.trace_id, trace.trace_id[:12]):
            assert (await find_trace(store, ident)).trace_id == trace.trace_id
        with pytest.raises(NotFound, match="'S-99'"):
            await find_trace(store, "S-99")
        lines = render(trace, width=30)
        assert lines[0].startswith(f"trace {trace.trace_id}  session {sid}")
        assert any("execute_tool clock.now [confirm]" in x for x in lines)
        (wait_line,) = [x for x in lines if "approval clock.now" in x]
        assert "░" in wait_line and "WAIT approved by bob" in wait_line
        assert all(len(x.split("│")[1]) == 30 for x in lines[2:])
    finally:
        await store.close()


async def test_a_span_whose_end_is_not_logged_is_open(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db, decide=False)
    store = await open_store(db)
    try:
        trace = await find_trace(store, sid)
        check_tree(trace)
        open_ = {s.name for s in trace.spans if s.open}
        assert open_ == {"execute_tool clock.now", "approval clock.now"}
        # the session is idle while it waits: it ends with its last job, for now
        assert not trace.spans[0].open
        before = {s.span_id for s in trace.spans}
        (approval,) = await Approvals(store).pending()
        await Approvals(store).approve(approval["id"], by="carol")
    finally:
        await store.close()
    store = await open_store(db)
    try:
        from session_helpers import run_idle

        await run_idle(store, sid)
        after = await find_trace(store, sid)
        assert before <= {s.span_id for s in after.spans}  # the same spans, now closed
        assert not any(s.open for s in after.spans)
        (wait,) = [s for s in after.spans if s.name == "approval clock.now"]
        assert wait.attributes["clawtower.approval.decided_by"] == "carol"
    finally:
        await store.close()


async def test_content_only_when_asked_and_sanitised(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db, message="#spawn 1 worker look \x1b[31mred\u202e here")
    store = await open_store(db)
    try:
        plain = await find_trace(store, sid)
        full = await find_trace(store, sid, capture_content=True)
        assert [s.span_id for s in plain.spans] == [s.span_id for s in full.spans]
        (first,) = [s for s in full.spans if s.name == "invoke_agent lead"][:1]
        text = first.attributes["input.value"]
        assert "\x1b" not in text and "\u202e" not in text
        assert "\\x1b[31mred<U+202E> here" in text
        (tool,) = [s for s in full.spans if s.name == "execute_tool clock.now"]
        assert tool.attributes["gen_ai.tool.call.arguments"] == '{"timezone": "UTC"}'
        assert "iso" in tool.attributes["gen_ai.tool.call.result"]
        redacted = await find_trace(store, sid, capture_content=True,
                                    redact=lambda tool, text: text.replace("UTC", "[TZ]"))
        (tool,) = [s for s in redacted.spans if s.name == "execute_tool clock.now"]
        assert tool.attributes["gen_ai.tool.call.arguments"] == '{"timezone": "[TZ]"}'
    finally:
        await store.close()


async def test_a_flow_nodes_and_their_turns(tmp_path: Path) -> None:
    from test_flows_turns import three_nodes

    store = await open_store(tmp_path / "db.sqlite")
    try:
        fid = await three_nodes(store)
        trace = await find_trace(store, fid)
        assert trace.kind == "flow" and trace.root == fid
        check_tree(trace)
        assert not any(s.open for s in trace.spans)
        root = trace.spans[0]
        assert root.name == f"invoke_workflow {fid}"
        assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
        (top,) = children(trace, root)
        assert top.name.startswith("node ") and top.name.endswith(" lead")
        assert top.attributes["clawtower.flow.decision"] == "decompose"
        assert top.attributes["clawtower.flow.subtasks"] == 3
        nodes = [s for s in children(trace, top) if s.name.startswith("node ")]
        assert len(nodes) == 3
        for node in nodes:
            assert node.attributes["gen_ai.agent.name"] == "worker"
            assert node.attributes["clawtower.flow"] == fid
            turns = [s for s in children(trace, node) if s.name == "invoke_agent worker"]
            assert len(turns) == 1, [s.name for s in children(trace, node)]
            tools = [s for s in children(trace, turns[0]) if s.kind == "TOOL"]
            assert [t.name for t in tools] == ["execute_tool text.count"]
            assert tools[0].attributes["clawtower.tool.tier"] == "auto"
        assert await load(store) == await load(store)
    finally:
        await store.close()


async def test_a_workflow_run_with_an_approval_gate(tmp_path: Path) -> None:
    from clawtower.core.workflows.service import Workflows

    (tmp_path / "wf.lobster").write_text("""
steps:
  - id: prep
    run: echo '{"count":2}'
  - id: gate
    approval: "Apply changes?"
    stdin: $prep.json
  - id: after
    run: echo "done $gate.approvedBy"
    when: $gate.approved
""")
    store = await open_store(tmp_path / "db.sqlite")
    try:
        wf = Workflows(store, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                       cwd=str(tmp_path), stderr=lambda s: None)
        env: dict[str, Any] = await wf.run(str(tmp_path / "wf.lobster"))
        aid = env["requiresApproval"]["approvalId"]
        paused = await find_trace(store, "W-1")
        assert {s.name for s in paused.spans if s.open} == {
            "invoke_workflow wf", "step gate", "gate approval gate"}
        await Approvals(store).approve(aid, by="ops")
        trace = await find_trace(store, "W-1")
        check_tree(trace)
        assert trace.kind == "workflow"
        assert not any(s.open for s in trace.spans)
        root = trace.spans[0]
        assert root.attributes["clawtower.workflow"] == "W-1"
        steps = children(trace, root)
        assert [s.name for s in steps] == ["step prep", "step gate", "step after"]
        (gate,) = children(trace, steps[1])
        assert gate.name == "gate approval gate"
        assert gate.attributes["clawtower.approval.decided_by"] == "ops"
        assert gate.attributes["clawtower.approval.decision"] == "approved"
        assert gate.attributes["clawtower.approval"] == aid
    finally:
        await store.close()


async def test_a_meeting_rounds_replies_and_summaries(tmp_path: Path) -> None:
    from test_meetings_service import NAMES, st, team

    from clawtower.core import start_meeting
    from clawtower.core.meetings.config import MeetingConfig

    store = await open_store(tmp_path / "db.sqlite")
    try:
        agents = team({"alice": st("DISAGREE", "AGREE"), "bob": st("AGREE"),
                       "carol": st("AGREE")})
        mid, task = await start_meeting(store, agents, MeetingConfig(
            topic="Cache?", participants=NAMES), minutes_dir=tmp_path)
        await task
        trace = await find_trace(store, mid)
        check_tree(trace)
        assert trace.kind == "meeting" and not any(s.open for s in trace.spans)
        root = trace.spans[0]
        assert root.attributes["clawtower.meeting.result"] == "FULL"
        rounds = [s for s in children(trace, root) if s.name.startswith("round")]
        assert [r.name for r in rounds] == ["round 1", "round 2"]
        assert rounds[0].attributes["clawtower.meeting.consensus"] == "NO"
        replies = children(trace, rounds[0])
        assert sorted(r.name for r in replies) == [f"invoke_agent {n}" for n in NAMES]
        stances = {r.attributes["gen_ai.agent.name"]: r.attributes["clawtower.meeting.stance"]
                   for r in replies}
        assert stances == {"alice": "DISAGREE", "bob": "AGREE", "carol": "AGREE"}
        assert all(r.attributes["gen_ai.usage.input_tokens"] > 0 for r in replies)
        summaries = [s for s in children(trace, root) if s.kind == "LLM"]
        assert [s.name for s in summaries] == ["chat summary 1", "chat summary 2"]
        # a meeting's calls are its replies and summaries: no second span per call
        assert len([s for s in trace.spans if s.kind in ("LLM", "AGENT")]) == 6 + 2
    finally:
        await store.close()


async def test_a_task_phases_attempts_and_calls(store: Any, clock: Any, tasks: Any) -> None:
    from protocol import GOOD_SPEC
    from test_core_orchestrator import LIFECYCLE, idle, orch, script

    tid = await tasks.create(GOOD_SPEC)
    await idle(orch(store, clock, script()))
    trace = await find_trace(store, tid)
    check_tree(trace)
    assert trace.kind == "task" and not any(s.open for s in trace.spans)
    root = trace.spans[0]
    assert root.name == f"task {tid}" and root.attributes["clawtower.status"] == "completed"
    phases = children(trace, root)
    assert [p.attributes["clawtower.task.phase"] for p in phases] == LIFECYCLE[:-1]
    (executing,) = [p for p in phases if p.name == "phase executing"]
    (attempt,) = children(trace, executing)
    assert attempt.name == "attempt 1"
    assert attempt.attributes["clawtower.attempt.status"] == "succeeded"
    # each model call under the phase (or attempt) it was made in: reviews and the work
    calls = [s for s in trace.spans if s.kind == "LLM"]
    assert calls and all(c.attributes["gen_ai.usage.input_tokens"] > 0 for c in calls)
    assert {by_id(trace)[c.parent_id or ""].name for c in calls} == {
        "phase spec_review", "attempt 1", "phase spec_gate", "phase quality_gate"}


def test_a_trigger_invocation_holds_the_run_it_started() -> None:
    """Pure derivation over a hand-written log: an invocation, its two attempts (the first
    failed and was retried), the workflow run the second started, linked in the run's own
    start commit."""
    from clawtower.core.events import StoredEvent
    from clawtower.core.triggers import events as te
    from clawtower.core.workflows import events as we

    log: list[StoredEvent] = []

    def add(ts: float, entity: str, eid: str, payload: Any) -> None:
        log.append(StoredEvent(seq=len(log) + 1, ts=ts, entity=entity, entity_id=eid,
                               type=payload.TYPE, actor="x", role="system", payload=payload))

    add(10.0, "trigger", "I-1", te.TriggerReceived(
        expert="crm", trigger="deal", process="p", source="webhook", lane="I-1",
        mode="parallel", payload={}, inputs={}))
    add(10.5, "trigger", "I-1", te.TriggerClaimed(owner="o", attempt=1))
    add(11.0, "trigger", "I-1", te.TriggerFailed(attempt=1, error="boom", retry_at=12.0))
    add(12.0, "trigger", "I-1", te.TriggerClaimed(owner="o", attempt=2))
    add(12.1, "workflow", "W-7", we.WorkflowStarted(file="deal.lobster", steps=["a"]))
    add(12.1, "trigger", "I-1", te.TriggerLinked(run_id="W-7", attempt=2))
    add(12.2, "workflow", "W-7", we.WorkflowStepStarted(step_id="a", index=0, kind="shell"))
    add(12.9, "workflow", "W-7", we.WorkflowStepFinished(step_id="a", index=0, result={}))
    add(13.0, "workflow", "W-7", we.WorkflowFinished())
    add(13.1, "trigger", "I-1", te.TriggerFinished(attempt=2, run_id="W-7"))
    (trace,) = derive(log, salt="s")
    assert (trace.kind, trace.root, trace.aliases) == ("trigger", "I-1", ("W-7",))
    check_tree(trace)
    names = {s.name: s for s in trace.spans}
    assert list(names) == ["trigger crm/deal", "attempt 1", "attempt 2",
                           "invoke_workflow deal.lobster", "step a"]
    assert names["attempt 1"].error == "boom" and names["attempt 2"].error is None
    assert names["invoke_workflow deal.lobster"].parent_id == names["attempt 2"].span_id
    assert names["step a"].duration == pytest.approx(0.7)
    assert names["trigger crm/deal"].duration == pytest.approx(3.1)
    assert derive(log, salt="s") == [trace]
    assert derive(log, salt="other")[0].trace_id != trace.trace_id  # another store


async def test_a_session_stopped_while_a_call_waits_closes_the_call(tmp_path: Path) -> None:
    from clawtower.core.sessions.service import Sessions

    db = tmp_path / "db.sqlite"
    sid = await session_tree(db, decide=False)
    store = await open_store(db)
    try:
        await Sessions(store).stop(sid, by="alice", reason="enough")
        trace = await find_trace(store, sid)
        assert not any(s.open for s in trace.spans)
        (tool,) = [s for s in trace.spans if s.name == "execute_tool clock.now"]
        (wait,) = children(trace, tool)
        assert wait.attributes["clawtower.approval.decision"] == "withdrawn"
        assert tool.attributes["clawtower.cancelled"] is True
        assert tool.error is not None and tool.error.startswith("not run")
    finally:
        await store.close()


async def test_a_flow_rerun_is_a_trace_of_its_own(store: Any) -> None:
    from flow_helpers import GatedBrain
    from test_flows_rerun import PLANS, drive, origin

    from clawtower.core.flows.rerun import rerun_flow

    fid = await origin(store)
    new = await rerun_flow(store, f"{fid}/root/a/a1", "do a1 better", by="alice")
    await drive(store, GatedBrain(PLANS), new)
    first, again = await find_trace(store, fid), await find_trace(store, new)
    assert first.trace_id != again.trace_id
    check_tree(again)
    assert not any(s.open for s in again.spans)
    root = again.spans[0]
    assert root.attributes["clawtower.flow.rerun_of"] == fid
    assert root.attributes["clawtower.flow.reused"] > 0
    nodes = {s.attributes["clawtower.flow.task"]: s for s in again.spans
             if s.name.startswith("node ")}
    # what ran again, under the coordinators that waited for it; nothing reused
    assert sorted(t.split("/", 1)[1] for t in nodes) == [
        "root", "root/a", "root/a/a1", "root/a/a2", "root/b"]
    by = by_id(again)
    assert by[nodes[f"{new}/root/a/a1"].parent_id or ""] is nodes[f"{new}/root/a"]
    assert by[nodes[f"{new}/root/a"].parent_id or ""] is nodes[f"{new}/root"]
    assert by[nodes[f"{new}/root/b"].parent_id or ""] is nodes[f"{new}/root"]


async def test_a_forked_session_and_a_workflow_rerun_name_their_origin(tmp_path: Path) -> None:
    from clawtower.core.sessions.service import Sessions
    from clawtower.core.workflows.service import Workflows

    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    store = await open_store(db)
    try:
        fork = await Sessions(store).fork(sid, 1, reason="try again")
        trace = await find_trace(store, fork["session"])
        assert trace.kind == "session" and trace.root == fork["session"]
        assert trace.spans[0].attributes["clawtower.session.forked_from"] == sid
        (tmp_path / "wf.lobster").write_text(
            "steps:\n  - id: a\n    run: echo a\n  - id: b\n    run: echo b\n")
        wf = Workflows(store, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                       cwd=str(tmp_path), stderr=lambda s: None)
        await wf.run(str(tmp_path / "wf.lobster"))
        new, _ = await wf.rerun("W-1", "b")
        trace = await find_trace(store, new)
        check_tree(trace)
        root = trace.spans[0]
        assert root.attributes["clawtower.workflow.rerun_of"] == "W-1"
        assert root.attributes["clawtower.workflow.reused"] == 1
        assert [s.name for s in children(trace, root)] == ["step b"]
    finally:
        await store.close()
