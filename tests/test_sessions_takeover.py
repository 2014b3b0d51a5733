"""Issue 22 item 5: session crash semantics. A worker died 5 rounds into a 25-round task
(what it leaves in the store is written here as it would have: its claim, its open turn,
its rounds and usage); a message arrives while no worker runs. `session send` says the
message is queued with no turn running; `store verify`'s open-turn check names the turn;
the take-over closes the dead turn (`interrupted`, rounds and usage kept), puts the task in
the backlog as a live steer would, answers the message first, then resumes the task to
completion. (Real SIGKILLs at random points: scripts/kill_soak.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from session_helpers import runner, spec

from clawtower.core import events as ev
from clawtower.core.errors import Conflict
from clawtower.core.events import NewEvent
from clawtower.core.sessions.commands import run_command
from clawtower.core.sessions.runner import _claim
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.takeover import open_turns


async def _die_after(store: Any, clock: Any, owner: str, rounds: int) -> tuple[str, str]:
    """A worker that claimed the session's job, ran `rounds` tool rounds and was killed."""
    claims = await store.execute(lambda tx: _claim(tx, owner, 5.0, 1, set(), {}, None, True))
    (c,) = claims

    def turn(tx: Any) -> None:  # its turn started with the claim (`turnjob.started.turn`)
        for i in range(1, rounds + 1):
            tx.emit(NewEvent(entity_id=c.session_id, actor="worker", role="agent",
                             payload=ev.AgentUsage(agent="worker", model=c.model,
                                                   purpose="turn", prompt_tokens=10,
                                                   completion_tokens=3, cost_usd=0.01)))
            tx.emit(NewEvent(entity_id=c.turn_id, actor="worker", role="agent",
                             payload=ev.TurnToolCalled(round=i, call_id=f"c{i}",
                                                       name="text.count", arguments="{}")))

    await store.execute(turn)
    clock.advance(6.0)  # its lease runs out: nobody renews it
    return c.job_id, c.turn_id


@pytest.mark.both_backends
async def test_take_over_closes_the_dead_turn_and_resumes_the_task_after_the_message(
        store: Any, clock: Any) -> None:
    sessions = Sessions(store)
    await spec(sessions, "worker", policy={"tools": ["text.count"]},
               context_policy={"budgets": {"max_tool_rounds": 30}})
    sid = await sessions.create(agent="worker")
    await sessions.send(sid, "#work 25 big task")
    job_id, dead_turn = await _die_after(store, clock, "dead-worker", 5)
    sent = await sessions.send(sid, "what is the status?")
    assert sent["status"] == "pending" and sent["turn_running"] is False  # (c)
    stuck = await open_turns(store, now=clock.now())
    assert len(stuck) == 1 and dead_turn in stuck[0] and "expired" in stuck[0]
    r, _rec = runner(store)
    assert await r.run_until_idle(60)
    turn = await store.fetchone("SELECT * FROM turns WHERE id=?", (dead_turn,))
    assert (turn["status"], turn["stop_reason"], turn["rounds"], turn["model_calls"],
            turn["prompt_tokens"], turn["completion_tokens"]) == (
        "interrupted", "interrupted", 5, 5, 50, 15)
    assert abs(turn["cost_usd"] - 0.05) < 1e-9
    backlog = await store.fetchall("SELECT * FROM session_backlog WHERE session_id=?", (sid,))
    assert [(b["kind"], b["status"]) for b in backlog] == [("resume", "drained")]
    assert backlog[0]["text"] == ("Resume the interrupted task: #work 25 big task"
                                  " (interrupted after 5 tool round(s))")
    assert json.loads(backlog[0]["data"])["rounds_done"] == 5
    msgs = (await sessions.get(sid))["messages"]
    replies = [m["text"] for m in msgs if m["role"] == "assistant"]
    assert len(replies) == 2, replies
    assert "what is the status?" in replies[0]  # the message is answered first
    assert replies[1] == ("Resumed and finished: #work 25 big task (25 steps; 5 before the"
                          " interruption).")
    jobs = await store.fetchall("SELECT id, attempt, status FROM turn_jobs WHERE"
                                " session_id=? ORDER BY queued_seq", (sid,))
    assert [(j["attempt"], j["status"]) for j in jobs] == [(2, "done"), (1, "done")]
    assert jobs[0]["id"] == job_id
    assert await open_turns(store, now=clock.now()) == []
    assert await store.verify_projections() == []


async def test_take_over_without_a_message_reruns_the_task_and_closes_the_dead_turn(
        store: Any, clock: Any) -> None:
    sessions = Sessions(store)
    await spec(sessions, "worker", policy={"tools": ["text.count"]})
    sid = await sessions.create(agent="worker")
    await sessions.send(sid, "#work 3 small task")
    _job, dead_turn = await _die_after(store, clock, "dead-worker", 2)
    r, _rec = runner(store)
    assert await r.run_until_idle(60)
    turn = await store.fetchone("SELECT status, rounds FROM turns WHERE id=?", (dead_turn,))
    assert (turn["status"], turn["rounds"]) == ("interrupted", 2)
    replies = [m["text"] for m in (await sessions.get(sid))["messages"]
               if m["role"] == "assistant"]
    assert replies == ["Done: #work 3 small task (3 tool rounds)."]
    assert await store.fetchall("SELECT 1 FROM session_backlog") == []
    assert await open_turns(store, now=clock.now()) == []


@pytest.mark.both_backends
async def test_a_max_tool_rounds_stop_says_so_in_reply_and_announce_and_continues(
        store: Any, clock: Any) -> None:
    sessions = Sessions(store)
    await spec(sessions, "worker", policy={"tools": ["text.count"]},
               context_policy={"budgets": {"max_tool_rounds": 3}})
    await spec(sessions, "lead", policy={"tools": ["spawn_subagent"], "subagents": ["worker"]})
    sid = await sessions.create(agent="worker")
    await sessions.send(sid, "#work 5 five steps")
    r, _rec = runner(store)
    assert await r.run_until_idle(60)
    replies = [m["text"] for m in (await sessions.get(sid))["messages"]
               if m["role"] == "assistant"]
    assert replies == [f"[Stopped after 3 tool round(s): the turn's limit (max_tool_rounds)."
                       f" The task is not finished; continue it with /continue (clawtower"
                       f" session resume {sid}).]"]
    out = await run_command(sessions, sid, "/continue")
    assert out.data["rounds_done"] == 3 and out.data["job"]
    with pytest.raises(Conflict, match="already continued"):
        await run_command(sessions, sid, "/continue")
    assert await r.run_until_idle(60)
    replies = [m["text"] for m in (await sessions.get(sid))["messages"]
               if m["role"] == "assistant"]
    assert replies[-1] == ("Resumed and finished: #work 5 five steps (5 steps; 3 before the"
                           " interruption).")
    with pytest.raises(Conflict, match="did not stop at max_tool_rounds"):
        await run_command(sessions, sid, "/continue")
    # a child cut off the same way announces it to its parent, with the way to go on
    parent = await sessions.create(agent="lead")
    child = await sessions.spawn(parent, "#work 4 child steps", agent="worker")
    assert await r.run_until_idle(60)
    (a,) = (await sessions.get(parent))["announces"]
    assert "Stopped after 3 tool round(s)" in a["summary"], a
    assert f"session resume {child['session']}" in a["summary"]


async def test_cli_send_says_queued_and_store_verify_names_the_open_turn(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.cli.main import main
    from clawtower.core.clock import FakeClock
    from clawtower.core.store import open_store

    db = str(tmp_path / "v.db")
    clock = FakeClock(start=__import__("time").time() - 3600)  # its lease ran out an hour ago
    store = await open_store(db, clock=clock)
    try:
        sessions = Sessions(store)
        await spec(sessions, "worker", policy={"tools": ["text.count"]})
        sid = await sessions.create(agent="worker")
        await sessions.send(sid, "#work 9 task")
        _job, turn = await _die_after(store, clock, "dead-worker", 2)
    finally:
        await store.close()
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["session", "send", sid, "hello", "--no-wait",
                                          "--db", db]) == 0
    assert f"{sid}: queued (no turn running)" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["store", "verify", "--db", db]) == 1
    out = capsys.readouterr().out
    assert f"turn {turn} (session {sid}): open after 2 round(s)" in out
    assert "1 open turn(s) with no live job" in out


async def test_a_take_over_re_runs_the_turn_on_its_inputs_and_the_join_takes_the_rest(
        store: Any, clock: Any) -> None:
    """A child announced while its parent's worker was dead. The take-over re-runs the
    parent's turn on what the dead attempt took (no announce): taking the new one, a re-run
    that was spawning would answer it instead and leave its spawns unfinished (seen as a
    lost child in test_sessions_crash). The announce is not lost: the join after the re-run
    takes it."""
    sessions = Sessions(store)
    await spec(sessions, "lead", policy={"tools": ["spawn_subagent"], "subagents": ["worker"]})
    await spec(sessions, "worker", policy={"tools": []})
    parent = await sessions.create(agent="lead")
    await sessions.send(parent, "#spawn 1 worker a part")
    (dead,) = await store.execute(lambda tx: _claim(tx, "dead", 5.0, 1, set(), {}, None, True))
    assert dead.session_id == parent and dead.announces == []
    child = await sessions.spawn(parent, "an earlier part", agent="worker", by=parent,
                                 caller=parent)
    r, _rec = runner(store)
    assert await r.run_until_idle(30, sessions={child["session"]})  # it ends, announces
    clock.advance(6.0)  # the dead worker's lease runs out
    (again,) = await store.execute(lambda tx: _claim(tx, "w2", 5.0, 1, set(), {}, None, True))
    assert (again.job_id, again.attempt, again.announces) == (dead.job_id, 2, [])
    clock.advance(6.0)  # w2 dies too: the runner below takes the job over and finishes
    assert await r.run_until_idle(60)
    announces = await store.fetchall("SELECT consumed_by FROM session_announces WHERE"
                                     " parent_id=?", (parent,))
    assert len(announces) == 2 and all(a["consumed_by"] for a in announces)
    assert (await store.verify_projections()) == []
