"""Flow nodes run as session turns (issue 21 item 2): an executed node is one TurnJob in a
session of its agent, so the agent's tools work inside a flow and each call runs once; an
engine re-running a node after a crash takes the job already queued for it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_peers import FAKE, calls_received

from clawtower.core.agents.config import config_from_data
from clawtower.core.approvals import Approvals
from clawtower.core.errors import Conflict, ValidationError
from clawtower.core.events import NewEvent
from clawtower.core.flows.brains import PlanBrain
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.service import Flows, WorkItem, take
from clawtower.core.flows.turns import TurnBrain, node_job_id, queue_node_turn
from clawtower.core.sessions.events import SessionCreated
from clawtower.core.sessions.service import Sessions, _next_session_id, spec_by_ref
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store
from clawtower.core.tools.registry import ToolRegistry
from tests.helpers.session_helpers import event_types, record_commands

CALL = '#call text.count {"text": "alpha beta gamma"}'


async def setup(store: Any) -> None:
    s = Sessions(store)
    await s.set_spec("lead", AgentSpecConfig.model_validate(
        {"policy": {"subagents": ["worker"]}}))
    await s.set_spec("worker", AgentSpecConfig.model_validate(
        {"policy": {"subagents": [], "tools": ["text.count"]}}))


def engine(store: Any, plans: dict[str, list[dict[str, Any]]]) -> FlowEngine:
    brain = TurnBrain(store, PlanBrain(plans), config=config_from_data({"speed": 0}, "t"),
                      lease_ttl_s=2)
    return FlowEngine(store, brain)


async def test_a_node_calls_a_tool_once_in_its_own_session(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "db.sqlite")
    try:
        fid = await three_nodes(store)
        got = await Flows(store).get(fid)
        nodes = [t for t in got["tasks"] if t["parent_id"]]
        assert len(nodes) == 3
        for t in nodes:  # the reply is the turn's: it quotes the tool's result
            assert t["result"].startswith("text.count answered:"), t["result"]
            assert '"words": 3' in t["result"]
        results = [e for e in await event_types(store, "turn.tool_result")
                   if e["payload"]["name"] == "text.count"]
        assert len(results) == 3  # each node's call ran exactly once
        jobs = await store.fetchall("SELECT * FROM turn_jobs ORDER BY queued_seq")
        assert sorted(j["id"] for j in jobs) == sorted(node_job_id(t["task_id"])
                                                       for t in nodes)
        assert {j["status"] for j in jobs} == {"done"}
        # each node's session belongs to the flow, ran one turn, and is finished
        sessions = {r["id"]: r for r in await Sessions(store).list()}
        for j in jobs:
            s = sessions[j["session_id"]]
            assert s["created_by"] == f"flow:{fid}" and s["status"] == "finished"
            assert s["turns"] == 1 and s["channel"] == "agent"
    finally:
        await store.close()


async def test_queueing_a_node_twice_finds_the_same_job(tmp_path: Path) -> None:
    """What a restarted engine does for a node whose turn was queued before the crash."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        fid = await Flows(store).start("worker", "one node")
        item = WorkItem(flow_id=fid, task_id=f"{fid}/root", kind="task", agent="worker",
                        instruction=CALL)
        jid = node_job_id(item.task_id)
        first = await store.execute(lambda tx: queue_node_turn(tx, item, jid))
        second = await store.execute(lambda tx: queue_node_turn(tx, item, jid))
        assert first == second
        rows = await store.fetchall("SELECT id FROM turn_jobs")
        assert [r["id"] for r in rows] == [jid]
        inbox = await store.fetchall("SELECT * FROM session_inbox WHERE session_id=?",
                                     (first,))
        assert len(inbox) == 1 and inbox[0]["sender"] == f"flow:{fid}"
        flow = await engine(store, {}).run_flow(fid, timeout_s=60)
        assert flow["status"] == "done" and "text.count answered" in flow["result"]
        assert len(await store.fetchall("SELECT id FROM turn_jobs")) == 1
    finally:
        await store.close()


async def test_a_failed_turn_fails_its_node(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await Sessions(store).set_spec("broken", AgentSpecConfig.model_validate(
            {"defaults": {"provider": "nowhere"}}))
        fid = await Flows(store).start("broken", "anything")
        flow = await engine(store, {}).run_flow(fid, timeout_s=60)
        assert flow["status"] == "failed", flow
        assert "turn failed" in flow["error"] and "nowhere" in flow["error"], flow["error"]
        [job] = await store.fetchall("SELECT status FROM turn_jobs")
        assert job["status"] == "failed"
        # its session ends with an error in the job's finish (issue 36), nothing else
        await one_node_ended(store, fid, "error")
    finally:
        await store.close()


async def test_the_flow_executor_overrides_each_node_session(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "db.sqlite")
    try:
        s = Sessions(store)
        await s.set_spec("coder", AgentSpecConfig.model_validate(
            {"defaults": {"acp": "zed", "model": "sim-strong"}}))
        on_acp = await Flows(store).start("coder", "x", executor="acp:other")
        on_loop = await Flows(store).start("coder", "y", executor="builtin")
        spec_own = await Flows(store).start("coder", "z")
        got = {}
        for fid in (on_acp, on_loop, spec_own):
            item = WorkItem(flow_id=fid, task_id=f"{fid}/root", kind="task", agent="coder",
                            instruction="do")
            sid = await store.execute(
                lambda tx, i=item: queue_node_turn(tx, i, node_job_id(i.task_id)))
            row = await store.fetchone("SELECT provider_override AS p, model_override AS m"
                                       " FROM sessions WHERE id=?", (sid,))
            assert row is not None
            got[fid] = (row["p"], row["m"])
        assert got == {on_acp: ("acp", "other"), on_loop: ("simulator", "sim-strong"),
                       spec_own: (None, None)}
        with pytest.raises(ValidationError, match="not builtin or acp:NAME"):
            await Flows(store).start("coder", "w", executor="claude")
    finally:
        await store.close()


async def test_a_failed_flow_stops_the_turns_of_its_nodes_in_flight(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        await Sessions(store).set_spec("broken", AgentSpecConfig.model_validate(
            {"defaults": {"provider": "nowhere"}}))
        await Sessions(store).set_spec("lead", AgentSpecConfig.model_validate(
            {"policy": {"subagents": ["worker", "broken"]}}))
        plan = [{"id": "slow", "agent": "worker", "instruction": "#work 40", "depends_on": []},
                {"id": "bad", "agent": "broken", "instruction": "x", "depends_on": []}]
        fid = await Flows(store).start("lead", "two nodes")
        brain = TurnBrain(store, PlanBrain({"root": plan}), config=config_from_data(
            {"speed": 1, "delay_ms": [50, 50]}, "t"), lease_ttl_s=2)
        flow = await FlowEngine(store, brain).run_flow(fid, timeout_s=60)
        assert flow["status"] == "failed" and "bad" in flow["error"], flow
        slow = await store.fetchone("SELECT s.status, j.status AS job, j.stop_reason FROM"
                                    " sessions s JOIN turn_jobs j ON j.session_id=s.id WHERE"
                                    " s.title LIKE '% slow'")
        assert slow is not None and slow["status"] == "stopped", slow
        assert slow["job"] in ("cancelled", "running"), slow  # its worker stops it
        turns = await event_types(store, "turn.tool_result")
        assert len(turns) < 40  # it did not run to the end
    finally:
        await store.close()


async def test_a_flow_session_takes_sends_only_from_its_flow(tmp_path: Path) -> None:
    """Issue 22 item 6, below the CLI: send and spawn from anyone else are refused (and
    recorded); the flow itself sends to it (the node's TASK)."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        fid = await Flows(store).start("worker", "one node")
        item = WorkItem(flow_id=fid, task_id=f"{fid}/root", kind="task", agent="worker",
                        instruction="x")
        sid = await store.execute(lambda tx: queue_node_turn(tx, item, node_job_id(
            item.task_id)))
        s = Sessions(store)
        with pytest.raises(Conflict, match=f"^{sid} belongs to flow {fid}; use clawtower flow"):
            await s.send(sid, "hello", sender="operator")
        with pytest.raises(Conflict, match="belongs to flow"):
            await s.spawn(sid, "do more", by="operator")
        with pytest.raises(Conflict, match="belongs to flow"):
            await s.send("S-1", "hello")  # the agent's flow session too
        refusals = await event_types(store, "permission.refused")
        assert [r["payload"]["action"] for r in refusals] == ["session.send", "session.spawn",
                                                             "session.send"]
        inbox = await store.fetchall("SELECT * FROM session_inbox WHERE session_id=?", (sid,))
        assert len(inbox) == 1  # only the flow's TASK
    finally:
        await store.close()


async def test_a_node_with_a_queued_turn_is_not_decided_again(tmp_path: Path) -> None:
    """After a crash the engine re-runs the node: its turn exists, so it executes, even if
    the decider would now split it."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        fid = await Flows(store).start("lead", "one node")
        item = WorkItem(flow_id=fid, task_id=f"{fid}/root", kind="task", agent="lead",
                        instruction=CALL)
        await store.execute(lambda tx: queue_node_turn(tx, item, node_job_id(item.task_id)))
        split = [{"id": "n0", "agent": "worker", "instruction": "x", "depends_on": []}]
        flow = await engine(store, {"root": split}).run_flow(fid, timeout_s=60)
        assert flow["status"] == "done" and flow["nodes"] == 1, flow  # not decomposed
    finally:
        await store.close()


async def test_a_node_calls_an_mcp_tool_once(tmp_path: Path) -> None:
    """The node's agent reaches a real (stdio, fake) MCP server of clawtower.yaml through
    the session worker's registry: the server receives the call exactly once."""
    cfg = config_from_data({"speed": 0, "mcp_servers": {"fake": {
        "command": sys.executable, "args": [str(FAKE)],
        "env": {"FAKE_MCP_CALLS_FILE": str(tmp_path / "calls.txt")}}}},
        tmp_path / "clawtower.yaml")
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await Sessions(store).set_spec("worker", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["fake.echo"]}}))
        async with ToolRegistry.from_project(store, cfg) as registry:  # pin it first
            await registry.list_tools()  # first sight: a pin approval is requested
        [pin] = [a for a in await Approvals(store).pending()
                 if a["subject"] == "tool:fake.echo"]
        await Approvals(store).approve(pin["id"], by="alice")
        fid = await Flows(store).start("worker", '#call fake.echo {"text": "from a node"}')
        flow = await FlowEngine(store, TurnBrain(store, PlanBrain(), config=cfg)).run_flow(
            fid, timeout_s=60)
        assert flow["status"] == "done", flow
        assert flow["result"] == "fake.echo answered: from a node", flow["result"]
        assert calls_received(tmp_path) == ["echo"]
    finally:
        await store.close()


# --------------------------------------------------------------------------- issue 36


async def node_sessions(store: Any, fid: str) -> dict[str, dict[str, Any]]:
    """The flow's node sessions (not its agents' flow sessions, `flow.session_linked`)."""
    rows = await store.fetchall("SELECT * FROM sessions WHERE created_by=? AND"
                                " json_extract(task, '$.flow_task') IS NOT NULL",
                                (f"flow:{fid}",))
    return {r["id"]: r for r in rows}


async def finished_nodes(store: Any, fid: str) -> set[str]:
    """The node sessions a `session.finished` ended."""
    ended = {e["entity_id"] for e in await event_types(store, "session.finished")}
    return ended & set(await node_sessions(store, fid))


async def one_node_ended(store: Any, fid: str, result: str) -> None:
    """The flow's one node session ended with `result` in its job's finish (issue 36): no
    `session.finished`, no `flow.task_taken`, and the projections replay."""
    [s] = (await node_sessions(store, fid)).values()
    assert (s["status"], s["result"]) == ("finished", result), s
    assert await finished_nodes(store, fid) == set()
    assert await event_types(store, "flow.task_taken") == []
    assert await store.verify_projections() == []


async def three_nodes(store: Any) -> str:
    """A flow of three independent nodes, each a text.count turn, run to its end."""
    await setup(store)
    plan = [{"id": f"n{i}", "agent": "worker", "instruction": CALL, "depends_on": []}
            for i in range(3)]
    fid = await Flows(store).start("lead", "count words")
    flow = await engine(store, {"root": plan}).run_flow(fid, timeout_s=60)
    assert flow["status"] == "done", flow
    return fid


async def test_a_nodes_job_is_claimed_in_the_command_that_queues_it(tmp_path: Path) -> None:
    """Issue 36: the node's session, its job and the job's claim are one event
    (`session.created` with the job's `start`) in one command: the job is never queued for
    another worker to take, and the claim is neither a command nor an event of its own.
    With no free slot in the worker, the job is queued and claimed by the worker's claim
    loop as before (here: one slot for three nodes at once)."""
    for slots in (8, 1):
        store = await open_store(tmp_path / f"db-{slots}.sqlite")
        try:
            commands = record_commands(store)
            await setup(store)
            plan = [{"id": f"n{i}", "agent": "worker", "instruction": CALL, "depends_on": []}
                    for i in range(3)]
            fid = await Flows(store).start("lead", "count words")
            brain = TurnBrain(store, PlanBrain({"root": plan}), lease_ttl_s=2,
                              config=config_from_data({"speed": 0}, "t"),
                              max_concurrent=slots)
            flow = await FlowEngine(store, brain).run_flow(fid, timeout_s=60)
            assert flow["status"] == "done", flow
            queued = [c for c in commands if c == ["session.created"]]  # a node's, alone
            claimed = [c for c in commands if "session.created+start" in c]
            if slots == 8:
                assert len(claimed) == 3 and queued == [], commands
                for c in claimed:  # (the worker's lease, once per batch) the session claimed
                    assert c[-1] == "session.created+start" and "turnjob.started" not in c, c
            else:  # one slot: the first node claimed at once, the others by the claim loop
                assert len(claimed) == 1 and len(queued) == 2, commands
            jobs = await store.fetchall("SELECT status, attempt FROM turn_jobs")
            assert [(j["status"], j["attempt"]) for j in jobs] == [("done", 1)] * 3
            assert await store.verify_projections() == []
        finally:
            await store.close()


async def test_a_node_writes_no_task_taken_and_no_session_finished(tmp_path: Path) -> None:
    """Issue 36: a node's session ends in its job's finish (`session_status`), and the
    `session.created` that queues its turn takes its task: neither `session.finished` nor
    `flow.task_taken` is written for it, and the projections replay as they were."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        fid = await three_nodes(store)
        assert await event_types(store, "flow.task_taken") == []
        nodes = await node_sessions(store, fid)
        assert len(nodes) == 3
        assert await finished_nodes(store, fid) == set()
        for s in nodes.values():
            assert (s["status"], s["result"]) == ("finished", "ok"), s
        finished = {e["payload"]["session_id"]: e["payload"]
                    for e in await event_types(store, "turnjob.finished")}
        assert {finished[sid]["session_status"] for sid in nodes} == {"ok"}
        # taken when its turn was queued: the session's creation is the task's start
        created = {e["entity_id"]: e for e in await event_types(store, "session.created")}
        for t in (await Flows(store).get(fid))["tasks"]:
            if t["parent_id"]:
                [sid] = [s for s, r in nodes.items() if r["title"].endswith(f" {t['local_id']}")]
                assert t["started_at"] == created[sid]["ts"], t
        assert await event_types(store, "session.announced") == []  # nobody to tell
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_node_waiting_for_an_approval_shows_as_running(tmp_path: Path) -> None:
    """The node's task is running while its turn waits (no `flow.task_taken`: its session's
    creation took it), and its session ends with the job once the call is approved."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await Sessions(store).set_spec("clerk", AgentSpecConfig.model_validate(
            {"policy": {"tools": ["clock.now"], "approval": {"default": "confirm"}}}))
        fid = await Flows(store).start("clerk", "#call clock.now {}")
        run = asyncio.create_task(engine(store, {}).run_flow(fid, timeout_s=60))
        try:
            for _ in range(600):
                pending = await Approvals(store).pending()
                if pending or run.done():
                    break
                await asyncio.sleep(0.05)
            [a] = pending
            [task] = (await Flows(store).get(fid))["tasks"]
            assert task["status"] == "running" and task["started_at"] is not None, task
            [s] = (await node_sessions(store, fid)).values()
            assert s["status"] == "waiting", s
            assert await event_types(store, "flow.task_taken") == []
            await Approvals(store).approve(a["id"], by="bob")
            flow = await asyncio.wait_for(run, 60)
        finally:
            if not run.done():
                run.cancel()
        assert flow["status"] == "done" and flow["result"].startswith("clock.now answered:")
        await one_node_ended(store, fid, "ok")
    finally:
        await store.close()


async def test_a_node_session_logged_before_issue_36_replays_as_before(tmp_path: Path) -> None:
    """A node session created without `task.taken` (logs written before issue 36) does not
    take its task: its `flow.task_taken`, when there is one, does, as it always did."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        fid = await Flows(store).start("worker", "one node")
        item = WorkItem(flow_id=fid, task_id=f"{fid}/root", kind="task", agent="worker",
                        instruction="x", msg_id=(await Flows(store).get(fid))["tasks"][0][
                            "task_msg"])
        by = f"flow:{fid}"

        def old_node(tx: Any) -> None:  # its session as logged before: no `taken`
            tx.emit(NewEvent(entity_id=_next_session_id(tx), actor=by, role="agent",
                             payload=SessionCreated(
                                 title=f"{fid} worker root", created_by=by, channel="agent",
                                 agent_id=spec_by_ref(tx, "worker").agent_id,
                                 task={"label": "root", "prompt": "x",
                                       "flow_task": item.task_id})))

        await store.execute(old_node)
        [task] = (await Flows(store).get(fid))["tasks"]
        assert task["status"] == "dispatched" and task["started_at"] is None, task
        await store.execute(lambda tx: take(tx, item))
        [taken] = await event_types(store, "flow.task_taken")
        [task] = (await Flows(store).get(fid))["tasks"]
        assert (task["status"], task["started_at"], task["last_seq"]) == (
            "running", taken["ts"], taken["seq"]), task
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_node_session_with_children_is_ended_by_its_flow(tmp_path: Path) -> None:
    """A node whose turn spawned a subagent does not end in its job's finish (an announce
    could still wake it): the flow ends it after the job, with a `session.finished`."""
    store = await open_store(tmp_path / "db.sqlite")
    try:
        await setup(store)
        fid = await Flows(store).start("lead", "#spawn 1 worker")
        flow = await engine(store, {}).run_flow(fid, timeout_s=60)
        assert flow["status"] == "done", flow
        [s] = (await node_sessions(store, fid)).values()
        assert (s["status"], s["result"]) == ("finished", "ok"), s
        assert await finished_nodes(store, fid) == {s["id"]}
        assert await store.verify_projections() == []
    finally:
        await store.close()
