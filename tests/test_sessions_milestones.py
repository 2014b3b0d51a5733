"""Seed 004 (Zeroclaw), the acceptance tests of milestones 1-5, on the simulator.

M1 agent specs and switching; M2 skills and tools filtering; M3 steer-backlog; M4
subagents as child sessions with announces; M5 idempotency, hop limits, no self-send.
(The kill -9 test is tests/test_sessions_crash.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from session_helpers import (
    GatedRegistry,
    event_types,
    record_commands,
    runner,
    running,
    spec,
    texts,
)

from clawtower.core.errors import Conflict, NotFound, PermissionDenied, StoreError, ValidationError
from clawtower.core.events import NewEvent
from clawtower.core.sessions import events as sev
from clawtower.core.sessions.commands import run_command
from clawtower.core.sessions.runner import SPAWN_TOOL, STEER_NOTE
from clawtower.core.sessions.service import SessionLimits, Sessions, announce
from clawtower.core.sessions.skills import load_skills
from clawtower.core.store import open_store


@pytest.fixture
def sessions(store: Any) -> Sessions:
    return Sessions(store)


# --------------------------------------------------------------------------- milestone 1


async def test_m1_agents_lists_specs_and_marks_the_active_one(sessions: Sessions) -> None:
    await spec(sessions, "coder", defaults={"model": "sim-strong"})
    await spec(sessions, "writer")
    sid = await sessions.create(agent="writer")
    out = await run_command(sessions, sid, "/agents")
    assert [(d["name"], d["active"]) for d in out.data] == [("coder", False), ("writer", True)]
    assert "* writer" in out.text and "  coder" in out.text


async def test_m1_agent_switches_by_exact_id_or_name_only(sessions: Sessions, store: Any) -> None:
    coder = await spec(sessions, "coder")
    await spec(sessions, "writer")
    sid = await sessions.create(agent="writer")
    await run_command(sessions, sid, "/agent coder")
    assert (await sessions.get(sid))["agent"] == "coder"
    await run_command(sessions, sid, "/agent writer")
    await run_command(sessions, sid, f"/agent {coder}")
    assert (await sessions.get(sid))["agent_id"] == coder
    before = await store.last_seq()
    with pytest.raises(NotFound, match=r"'code'.*did you mean coder"):
        await run_command(sessions, sid, "/agent code")  # a prefix is not an exact match
    assert await store.last_seq() == before  # nothing changed


async def test_m1_after_switching_turns_use_the_new_spec(store: Any, sessions: Sessions) -> None:
    await spec(sessions, "coder", defaults={"model": "sim-strong", "system_prompt": "CODER"},
               policy={"tools": ["text.count"]})
    await spec(sessions, "writer", defaults={"system_prompt": "WRITER"},
               policy={"tools": ["clock.now"]})
    r, rec = runner(store)
    sid = await sessions.create(agent="writer")
    await sessions.send(sid, "hello")
    assert await r.run_until_idle(30)
    await run_command(sessions, sid, "/agent coder")
    await sessions.send(sid, "again")
    assert await r.run_until_idle(30)
    first, second = rec.requests
    assert (first.model, first.messages[0].content[:6], rec.tools_seen(0)) == (
        "sim-standard", "WRITER", ["clock.now"])
    assert (second.model, second.messages[0].content[:5], rec.tools_seen(1)) == (
        "sim-strong", "CODER", ["text.count"])
    jobs = (await sessions.get(sid))["jobs"]
    assert [(j["model"], j["status"]) for j in jobs] == [("sim-standard", "done"),
                                                         ("sim-strong", "done")]


async def test_m1_models_and_model_override(store: Any, sessions: Sessions) -> None:
    r, rec = runner(store)
    sid = await sessions.create()
    out = await run_command(sessions, sid, "/models")
    assert "simulator/sim-standard" in out.text.splitlines()
    await run_command(sessions, sid, "/model simulator/sim-strong")
    assert "simulator/sim-strong *" in (await run_command(sessions, sid, "/models")).text
    await sessions.send(sid, "hi")
    assert await r.run_until_idle(30)
    assert rec.requests[-1].model == "sim-strong"
    with pytest.raises(ValidationError, match=r"no model 'sim-stron'.*sim-strong"):
        await run_command(sessions, sid, "/model simulator/sim-stron")
    with pytest.raises(ValidationError, match="unknown provider 'nope'"):
        await run_command(sessions, sid, "/model nope/x")
    await run_command(sessions, sid, "/model default")
    await sessions.send(sid, "hi again")
    assert await r.run_until_idle(30)
    assert rec.requests[-1].model == "sim-standard"


# --------------------------------------------------------------------------- milestone 2


def _skill(root: Path, name: str, body: str, tools: list[str] | None = None) -> None:
    d = root / name
    d.mkdir(parents=True)
    front = f"---\nname: {name}\ndescription: about {name}\n"
    if tools:
        front += f"tools: [{', '.join(tools)}]\n"
    (d / "SKILL.md").write_text(front + f"---\n{body}\n")


async def test_m2_switching_agents_changes_skills_and_callable_tools(
        store: Any, sessions: Sessions, tmp_path: Path) -> None:
    _skill(tmp_path, "release", "RELEASE-SKILL-BODY")
    _skill(tmp_path, "review", "REVIEW-SKILL-BODY")
    _skill(tmp_path, "counting", "COUNTING-SKILL-BODY", tools=["text.count"])
    await spec(sessions, "a", policy={"tools": ["clock.now"], "skills": ["release", "counting"]})
    await spec(sessions, "b", policy={"tools": ["text.count"], "skills": ["review", "counting"]})
    r, rec = runner(store, skills=load_skills(tmp_path))
    sid = await sessions.create(agent="a")
    await sessions.send(sid, "#call text.count {\"text\": \"a b\"}")
    assert await r.run_until_idle(30)
    system_a = rec.requests[0].messages[0].content
    # a: release injected; review not allowed; counting needs text.count, which a may not call
    assert "RELEASE-SKILL-BODY" in system_a and "REVIEW-SKILL-BODY" not in system_a
    assert "COUNTING-SKILL-BODY" not in system_a
    assert rec.tools_seen(0) == ["clock.now"]
    reply_a = (await sessions.get(sid))["messages"][-1]["text"]
    assert "not allowed" in reply_a  # hidden AND not callable
    await run_command(sessions, sid, "/agent b")
    await sessions.send(sid, "#call text.count {\"text\": \"a b\"}")
    assert await r.run_until_idle(30)
    system_b = rec.requests[-1].messages[0].content
    assert "REVIEW-SKILL-BODY" in system_b and "COUNTING-SKILL-BODY" in system_b
    assert "RELEASE-SKILL-BODY" not in system_b
    assert rec.tools_seen(-1) == ["text.count"]
    reply_b = (await sessions.get(sid))["messages"][-1]["text"]
    assert '"words": 2' in reply_b  # listed AND callable


async def test_m2_a_disallowed_call_is_refused_and_recorded(store: Any,
                                                            sessions: Sessions) -> None:
    await spec(sessions, "narrow", policy={"tools": ["text.count"]})
    r, rec = runner(store)
    sid = await sessions.create(agent="narrow")
    await sessions.send(sid, "#call clock.now {}")
    assert await r.run_until_idle(30)
    await sessions.send(sid, "#call spawn_subagent {\"task\": \"x\"}")  # also not allowed
    assert await r.run_until_idle(30)
    results = await store.fetchall("SELECT name, status, error_kind, result FROM turn_tools")
    assert {(x["name"], x["error_kind"]) for x in results} == {("clock.now", "policy"),
                                                               (SPAWN_TOOL, "policy")}
    refusals = await store.fetchall("SELECT action, target FROM refusals")
    assert {"target": "clock.now", "action": "tool.call"} in refusals
    assert {"target": SPAWN_TOOL, "action": "tool.call"} in refusals
    # the policy message went back to the model: its next call saw it as the tool result
    tool_msgs = [m.content for m in rec.requests[1].messages if m.role == "tool"]
    assert tool_msgs and "not allowed" in tool_msgs[0]
    assert (await sessions.get(sid))["children"] == []


async def test_m2_every_visible_tool_is_callable_and_every_hidden_one_refused(
        store: Any, sessions: Sessions) -> None:
    await spec(sessions, "mixed", policy={"tools": ["clock.*", "spawn_subagent"]})
    await spec(sessions, "helper")
    r, rec = runner(store)
    sid = await sessions.create(agent="mixed")
    await sessions.send(sid, "hi")
    assert await r.run_until_idle(30)
    visible = rec.tools_seen(0)
    assert visible == ["clock.now", SPAWN_TOOL]
    from clawtower.core.sessions.runner import SessionToolBox

    claim_like = type("C", (), {})()
    claim_like.spec = await sessions.spec("mixed")
    claim_like.session_id = sid
    claim_like.job_id = "J-test"
    box = SessionToolBox(r, claim_like)
    for name in ("clock.now", "json.query", "text.count", SPAWN_TOOL):
        args = '{"task": "t", "agent": "helper"}' if name == SPAWN_TOOL else "{}"
        res = await box.call(name, args)
        shown = name in ("clock.now", SPAWN_TOOL)
        assert (res.error_kind != "policy") == shown, (name, res)


# --------------------------------------------------------------------------- milestone 3


async def working(store: Any, sessions: Sessions, task: str) -> tuple[Any, Any, Any, str]:
    """A worker session sent `task` (a `#work N` loop of text.count calls), its runner's
    tool calls gated at the second: (gated registry, runner, recording, session id)."""
    await spec(sessions, "worker", policy={"tools": ["text.count"]})
    gated = GatedRegistry(store, gate_at=2)
    r, rec = runner(store, registry=gated)
    sid = await sessions.create(agent="worker")
    await sessions.send(sid, task)
    return gated, r, rec, sid


async def test_m3_steer_at_the_boundary_then_the_backlog_resumes_the_task(
        store: Any, sessions: Sessions) -> None:
    gated, r, rec, sid = await working(store, sessions, "#work 5 build the report")
    async with running(r, sid):
        await asyncio.wait_for(gated.reached.wait(), 20)  # inside tool round 2
        sent = await sessions.send(sid, "what is the status?")
        assert sent["status"] == "pending" and sent["busy"]
        gated.release.set()
    s = await sessions.get(sid)
    roles = texts(s)
    assert roles[0] == ("user", "#work 5 build the report")
    assert roles[1] == ("user", "what is the status?")
    assert s["messages"][1]["meta"]["steered"] is True
    assert roles[2][0] == "assistant" and "what is the status?" in roles[2][1]
    assert roles[3][0] == "user" and roles[3][1].startswith("[Backlog]\n- Resume the"
                                                            " interrupted task: #work 5")
    assert "interrupted after 2 tool round(s)" in roles[3][1]
    assert roles[4][0] == "assistant" and roles[4][1].startswith("Resumed and finished")
    assert len(roles) == 5  # nothing answered twice
    # the task's 5 steps ran exactly once: 2 before the steer, 3 after the resume
    assert [json.loads(a)["text"][:9] for _, a in gated.calls] == [
        "step 1 of", "step 2 of", "step 3 of", "step 4 of", "step 5 of"]
    # the model saw the steered message with the note, right after round 2's results
    steered_req = next(q for q in rec.requests if any(
        m.content.startswith(STEER_NOTE) for m in q.messages))
    assert sum(1 for m in steered_req.messages if m.role == "tool") == 2
    assert [b["status"] for b in s["backlog"]] == ["drained"]
    assert [j["status"] for j in s["jobs"]] == ["done", "done"]
    assert [j["steers"] for j in s["jobs"]] == [1, 0]
    steered = await event_types(store, "turn.steered")
    assert len(steered) == 1 and steered[0]["payload"]["round"] == 2
    assert s["pending"] == [] and await store.verify_projections() == []


async def test_m3_a_task_steered_twice_resumes_once_worded_with_its_rounds_in_total(
        store: Any, sessions: Sessions) -> None:
    """A resumed task steered again is saved as the task itself, not as the [Backlog]
    message that resumed it: its resume text stays one line however often it is steered
    (it nested, and grew by the whole wording at every steer), its rounds count those of
    every job on it, and each of its steps runs once."""
    gated, r, _, sid = await working(store, sessions, "#work 8 build the report")
    async with running(r, sid):
        await asyncio.wait_for(gated.reached.wait(), 20)  # inside tool round 2
        await sessions.send(sid, "first question?")
        gated.release.set()
        # the gate again at the resumed job's second call (its round 2, step 4 in total)
        gated.reached, gated.release, gated.gate_at = asyncio.Event(), asyncio.Event(), 4
        await asyncio.wait_for(gated.reached.wait(), 20)
        await sessions.send(sid, "second question?")
        gated.release.set()
    s = await sessions.get(sid)
    resumes = [b["text"] for b in s["backlog"]]
    assert len(resumes) == 2 and all(t.count("Resume the interrupted task:") == 1
                                     for t in resumes)
    assert resumes[0].startswith("Resume the interrupted task: #work 8 build the report")
    assert resumes[1].startswith("Resume the interrupted task: #work 8 build the report")
    assert "interrupted after 2 tool round(s)" in resumes[0]
    assert "interrupted after 4 tool round(s)" in resumes[1]
    assert [json.loads(a)["text"][:9] for _, a in gated.calls] == [
        f"step {i} of" for i in range(1, 9)]
    assert texts(s)[-1][1].startswith("Resumed and finished")
    assert await store.verify_projections() == []


async def test_m3_the_rounds_last_result_and_the_steer_are_one_commit(
        store: Any, sessions: Sessions) -> None:
    """Issue 36 (steer p50): the message is taken by the command that appends the round's
    last result, with its `turnjob.steered` and `turn.steered`; the turn awaits no second
    commit at the boundary."""
    await spec(sessions, "worker", policy={"tools": ["text.count"]})
    gated = GatedRegistry(store, gate_at=2)
    r, _ = runner(store, registry=gated)
    commands = record_commands(store)
    sid = await sessions.create(agent="worker")
    await sessions.send(sid, "#work 3 build the report")
    async with running(r, sid):
        await asyncio.wait_for(gated.reached.wait(), 20)  # inside tool round 2
        await sessions.send(sid, "what is the status?")
        gated.release.set()
    steering = [c for c in commands if "turnjob.steered" in c]
    assert steering == [["turn.tool_result", "session.backlogged", "session.message",
                         "turnjob.steered", "turn.steered"]]
    assert len(await event_types(store, "turn.steered")) == 1
    assert await store.verify_projections() == []


async def test_m3_without_a_safe_boundary_the_message_waits_in_the_backlog(
        store: Any, sessions: Sessions) -> None:
    r, rec = runner(store)
    sid = await sessions.create()
    rec.hold = True  # the model is mid-call: a turn without tools has no boundary
    await sessions.send(sid, "first question")
    async with running(r, sid):
        await asyncio.wait_for(rec.entered.wait(), 20)
        assert (await sessions.send(sid, "second question"))["status"] == "pending"
        rec.release.set()
    s = await sessions.get(sid)
    assert [m["role"] for m in s["messages"]] == ["user", "assistant", "user", "assistant"]
    assert "first question" in s["messages"][1]["text"]
    assert s["messages"][2]["text"] == "[Backlog]\n- Message from operator: second question"
    assert "second question" in s["messages"][3]["text"]
    assert [(b["kind"], b["status"]) for b in s["backlog"]] == [("message", "drained")]
    assert await event_types(store, "turn.steered") == []


# --------------------------------------------------------------------------- milestone 4


async def test_m4_children_are_claimed_in_the_command_that_spawns_them(tmp_path: Path) -> None:
    """Issue 36: a worker spawning from a turn claims each new child's job in the spawning
    commit while it has free slots (no claim command per child, nothing read back); the
    children beyond its slots are queued and claimed by its claim loop as before."""
    for slots, claimed_at_once in ((8, 3), (3, 2)):  # the parent's own turn holds a slot
        store = await open_store(tmp_path / f"db-{slots}.sqlite")
        try:
            sessions = Sessions(store)
            await spec(sessions, "lead", policy={"tools": ["spawn_subagents"],
                                                 "subagents": ["worker"]})
            await spec(sessions, "worker", policy={"tools": []})
            commands = record_commands(store)
            r, _ = runner(store, max_concurrent=slots)
            sid = await sessions.create(agent="lead")
            await sessions.send(sid, "#spawn 3 worker a part")
            assert await r.run_until_idle(60)
            spawning = [c for c in commands
                        if sum(t.startswith("session.created") for t in c) == 3]
            assert len(spawning) == 1, commands
            # each claimed child's start rides in its `session.created` (one event a child)
            assert spawning[0].count("session.created+start") == claimed_at_once, spawning
            assert "turnjob.started" not in spawning[0], spawning
            jobs = await store.fetchall("SELECT j.status, j.attempt FROM turn_jobs j JOIN"
                                        " sessions s ON s.id=j.session_id WHERE"
                                        " s.parent_id=?", (sid,))
            assert [(j["status"], j["attempt"]) for j in jobs] == [("done", 1)] * 3
            last = (await sessions.get(sid))["messages"][-1]
            assert last["role"] == "assistant" and last["text"].startswith("Synthesis of 3")
            assert await store.verify_projections() == []
        finally:
            await store.close()



async def test_m4_parent_spawns_children_in_parallel_and_synthesises(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "real-clock.db")  # real timestamps: overlap check
    try:
        sessions = Sessions(store)
        await spec(sessions, "lead", policy={"tools": [SPAWN_TOOL], "subagents": ["worker"]})
        await spec(sessions, "worker", policy={"tools": []})
        cfg_extra = {"speed": 1.0, "delay_ms": [150, 150]}
        from session_helpers import sim_config

        r, rec = runner(store, sim_config(cfg_extra))
        # parallel: each worker's model call waits until all four are in one (serial
        # children would never get there); a condition, not a race against 150 ms
        inside, most, all_in = 0, 0, asyncio.Event()
        stream = rec.stream

        async def gated(request: Any) -> Any:
            nonlocal inside, most
            worker = request.metadata.get("agent") == "worker"
            if worker:
                inside += 1
                most = max(most, inside)
                if most == 4:
                    all_in.set()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(20):
                        await all_in.wait()
            try:
                async for event in stream(request):
                    yield event
            finally:
                if worker:
                    inside -= 1

        rec.stream = gated  # type: ignore[method-assign]
        sid = await sessions.create(agent="lead", deliver=True, channel="cli")
        await sessions.send(sid, "#spawn 4 worker check one shard each")
        assert await r.run_until_idle(60)
        s = await sessions.get(sid)
        kids = s["children"]
        assert len(kids) == 4
        assert {(k["channel"], k["deliver"], k["hop"], k["parent_id"], k["status"])
                for k in kids} == {("agent", False, 1, sid, "finished")}
        assert {k["trace_id"] for k in kids} == {s["trace_id"]}
        jobs = await store.fetchall("SELECT started_at, ended_at FROM turn_jobs WHERE"
                                    " session_id IN (?, ?, ?, ?)",
                                    tuple(k["id"] for k in kids))
        assert most == 4, most  # all four children's turns were in a model call at once
        assert max(j["started_at"] for j in jobs) < min(j["ended_at"] for j in jobs)
        # children never deliver; the parent (deliver=true, channel cli) does
        deliveries = await store.fetchall("SELECT session_id FROM session_deliveries")
        assert deliveries and {d["session_id"] for d in deliveries} == {sid}
        ann = [m for m in s["messages"] if m["role"] == "announce"]
        assert len(ann) == 4
        worker = await sessions.spec("worker")
        assert {m["text"] for m in ann} == {f"[@agent:worker#{worker.agent_id}] finish"}
        meta = ann[0]["meta"]
        assert set(meta) == {"task", "result", "source", "stats", "idempotency_key",
                             "trace_id", "hop"}
        assert meta["result"]["status"] == "ok" and "part" in meta["task"]["prompt"]
        assert meta["source"]["run_id"] == meta["idempotency_key"]
        assert meta["stats"]["tokens"] > 0 and meta["hop"] == 1
        final = s["messages"][-1]
        assert final["role"] == "assistant" and final["text"].startswith(
            "Synthesis of 4 subagent result(s) (4 ok)")
        # the rendered context block went to the model, never into any transcript
        synth = rec.requests[-1].messages[0].content
        assert "# Subagent results" in synth
        rows = await store.fetchall("SELECT text FROM session_messages")
        assert not any("# Subagent results" in r["text"] for r in rows)
        assert all(a["consumed_by"] for a in s["announces"])
        assert await store.verify_projections() == []
    finally:
        await store.close()


# --------------------------------------------------------------------------- milestone 5


async def test_m5_announce_is_idempotent_by_run_id(store: Any, sessions: Sessions) -> None:
    await spec(sessions, "worker")
    r, _ = runner(store)
    sid = await sessions.create()
    out = await sessions.spawn(sid, "do a thing", agent="worker")
    assert await r.run_until_idle(30)
    child = await store.fetchone("SELECT * FROM sessions WHERE id=?", (out["session"],))
    again = await store.execute(lambda tx: announce(tx, child, "ok", "again", "test",
                                                    artifacts=[]))
    assert again is False
    # and the store itself refuses a second announce event of the run
    with pytest.raises(StoreError, match="duplicate idempotency key"):
        await store.append([NewEvent(
            entity_id=sid, actor="test", role="system", idem_key=f"announce:{out['run_id']}",
            payload=sev.SessionAnnounced(msg_id="m-x", text="dup", meta={}))])
    anns = await event_types(store, "session.announced")
    assert len(anns) == 1 and len((await sessions.get(sid))["announces"]) == 1


async def test_m5_hop_limit_and_self_spawn_are_refused_and_recorded(
        store: Any, sessions: Sessions) -> None:
    await spec(sessions, "lead", policy={"subagents": ["worker"]})
    await spec(sessions, "worker", policy={"tools": [SPAWN_TOOL], "subagents": ["worker"]})
    await spec(sessions, "solo", policy={"tools": [SPAWN_TOOL]})
    r, _ = runner(store)
    sid = await sessions.create(agent="lead")
    # the child (hop 1) tries to spawn a grandchild (hop 2 > max 1)
    child = await sessions.spawn(sid, "#spawn 1 worker go deeper", agent="worker")
    assert await r.run_until_idle(30)
    c = await sessions.get(child["session"])
    assert c["children"] == [] and "Refused" in c["messages"][-1]["text"]
    refusals = await store.fetchall("SELECT * FROM refusals WHERE action='session.spawn'")
    assert any("hop limit" in x["reason"] for x in refusals)
    # a model spawning its own spec is refused (policy message), nothing created
    solo = await sessions.create(agent="solo")
    await sessions.send(solo, "#spawn 1 solo again")
    assert await r.run_until_idle(30)
    s = await sessions.get(solo)
    assert s["children"] == [] and "self-spawn" in s["messages"][-1]["text"]
    live = await sessions.spawn(sid, "not run yet", agent="worker")
    with pytest.raises(PermissionDenied, match="hop 2"):
        await sessions.spawn(live["session"], "deeper")
    # a session never sends to itself
    with pytest.raises(PermissionDenied, match="itself"):
        await sessions.send(sid, "loop", sender=sid)


async def test_m5_steering_and_announces_are_traced(store: Any, sessions: Sessions) -> None:
    await spec(sessions, "worker", policy={"tools": ["text.count"]})
    r, _ = runner(store)
    sid = await sessions.create()
    kid = await sessions.spawn(sid, "#work 2 small", agent="worker")
    assert await r.run_until_idle(30)
    anns = await event_types(store, "session.announced")
    assert anns[0]["idem_key"] == f"announce:{kid['run_id']}"
    assert anns[0]["payload"]["meta"]["trace_id"] == (await sessions.get(sid))["trace_id"]
    started = await event_types(store, "turnjob.started")
    assert all(e["payload"]["turn_id"].startswith("turn-") for e in started)


# --------------------------------------------------------------------------- bad input


async def test_bad_input_is_one_clear_error_and_no_state_change(
        store: Any, sessions: Sessions) -> None:
    sessions = Sessions(store, SessionLimits(max_message_chars=100))
    sid = await sessions.create()
    before = await store.last_seq()
    with pytest.raises(NotFound, match="session 'S-99': no such session"):
        await sessions.send("S-99", "hi")
    with pytest.raises(NotFound, match="agent 'ghost'"):
        await sessions.create(agent="ghost")
    with pytest.raises(ValidationError, match="expected <provider>/<model>"):
        await sessions.set_model(sid, "sim-standard")
    assert await store.last_seq() == before
    with pytest.raises(ValidationError, match="message too long"):
        await sessions.send(sid, "x" * 101)
    assert (await sessions.get(sid))["pending"] == []
    await sessions.stop(sid)
    with pytest.raises(Conflict, match="stopped"):
        await sessions.send(sid, "anyone there?")
    s = await sessions.get(sid)
    assert s["messages"] == [] and s["status"] == "stopped"
    refusals = await store.fetchall("SELECT action, reason FROM refusals ORDER BY seq")
    assert [r["action"] for r in refusals] == ["session.send", "session.send"]
    assert await store.verify_projections() == []


async def test_m4_spawn_many_is_one_commit_with_per_item_refusals(store: Any,
                                                                sessions: Sessions) -> None:
    await spec(sessions, "lead", policy={"subagents": ["worker"]})
    await spec(sessions, "worker")
    await spec(sessions, "other")
    sid = await sessions.create(agent="lead")
    before = (await store.fetchone("SELECT count(*) AS n FROM events"))["n"]
    out = await sessions.spawn_many(sid, [{"task": "a", "agent": "worker"},
                                          {"task": "b", "agent": "other"},
                                          {"task": "c", "agent": "worker"}],
                                    caller="tool", key="J-x:k")
    assert [o["status"] for o in out] == ["accepted", "refused", "accepted"]
    assert "may not spawn other" in out[1]["reason"]
    again = await sessions.spawn_many(sid, [{"task": "a", "agent": "worker"},
                                            {"task": "b", "agent": "other"},
                                            {"task": "c", "agent": "worker"}],
                                      caller="tool", key="J-x:k")
    assert [o.get("session") for o in again] == [o.get("session") for o in out]
    kids = (await sessions.get(sid))["children"]
    assert [k["title"] for k in kids] == ["a", "c"]
    refusals = await store.fetchall("SELECT reason FROM refusals WHERE action='session.spawn'")
    assert len(refusals) == 2  # each attempt's refusal is recorded
    assert (await store.fetchone("SELECT count(*) AS n FROM events"))["n"] > before


async def test_star_in_policy_subagents_allows_any_spec_itself_included(
        store: Any, sessions: Sessions) -> None:
    """The seed's `allowAgents: ["*"]`: any spec, the spawning one too (unset allows any
    other spec, never itself)."""
    await spec(sessions, "star", policy={"subagents": ["*"]})
    await spec(sessions, "plain")
    await spec(sessions, "other")
    sid = await sessions.create(agent="star")
    out = await sessions.spawn_many(sid, [{"task": "a", "agent": "star"},
                                          {"task": "b", "agent": "other"}],
                                    caller="tool", key="J-star:k")
    assert [o["status"] for o in out] == ["accepted", "accepted"]
    plain = await sessions.create(agent="plain")
    out = await sessions.spawn_many(plain, [{"task": "a", "agent": "plain"},
                                            {"task": "b", "agent": "other"}],
                                    caller="tool", key="J-plain:k")
    assert [o["status"] for o in out] == ["refused", "accepted"]
    assert "self-spawn" in out[0]["reason"]
