"""A TurnJob taken over after its worker died runs its turn again, but the tool calls its
earlier attempt made are not made again: a recorded result is reused (marked), a call made
without a recorded result is reported as interrupted. What a kill -9 leaves is written to
the log directly (the dead worker's start, call and result), then a live worker takes over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawtower.core import events as ev
from clawtower.core.events import NewEvent
from clawtower.core.sessions import events as sev
from clawtower.core.sessions.rerun import REUSED
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from tests.helpers.session_helpers import event_types, run_idle, runner, spec

ARGS = '{"text": "alpha beta"}'


async def dead_attempt(store: Any, sid: str, *, result: str | None) -> str:
    """The job of `sid`, started by a worker that died after calling text.count."""
    [job] = await store.fetchall("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
    [msg] = await store.fetchall("SELECT msg_id, text FROM session_inbox WHERE session_id=?",
                                 (sid,))
    spec_row = await store.fetchone("SELECT agent_id FROM sessions WHERE id=?", (sid,))
    assert spec_row is not None
    turn = "turn-dead"
    evs = [NewEvent(entity_id=job["id"], actor="dead", role="system", payload=sev.TurnJobStarted(
        session_id=sid, owner="dead-worker", attempt=1, turn_id=turn,
        agent_id=spec_row["agent_id"], provider="simulator", model="sim-standard",
        took=[msg["msg_id"]])),
        NewEvent(entity_id=sid, actor="operator", role="operator", payload=sev.SessionMessage(
            msg_id="m-dead", role="user", text=msg["text"],
            meta={"kind": "message", "inbound": msg["msg_id"], "job": job["id"]})),
        NewEvent(entity_id=turn, actor="clerk", role="agent", payload=ev.TurnToolCalled(
            round=1, call_id="c1", name="text.count", arguments=ARGS))]
    if result is not None:
        evs.append(NewEvent(entity_id=turn, actor="clerk", role="agent",
                            payload=ev.TurnToolResult(round=1, call_id="c1", name="text.count",
                                                      content=result)))
    await store.append(evs)
    return str(job["id"])


async def take_over(tmp_path: Path, result: str | None) -> tuple[list[Any], str]:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", policy={"tools": ["text.count"]})
        sid = await sessions.create(agent="clerk")
        await sessions.send(sid, f"#call text.count {ARGS}")
        await dead_attempt(store, sid, result=result)
        await run_idle(store, sid, lease_ttl_s=1.0)
        [job] = await store.fetchall("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
        assert (job["status"], job["attempt"]) == ("done", 2)
        results = [e["payload"] for e in await event_types(store, "turn.tool_result")]
        reply = [m["text"] for m in (await sessions.get(sid))["messages"]
                 if m["role"] == "assistant"]
        return results, reply[-1]
    finally:
        await store.close()


async def test_a_recorded_result_is_reused_not_run_again(tmp_path: Path) -> None:
    results, reply = await take_over(tmp_path, '{"words": 99}')
    # the dead attempt's result, then the taken-over turn's: the same, marked as reused
    assert [r["content"] for r in results] == ['{"words": 99}', REUSED + '{"words": 99}']
    assert '"words": 99' in reply  # not 2: text.count was not run again


async def test_a_call_without_a_result_is_not_run_again(tmp_path: Path) -> None:
    results, reply = await take_over(tmp_path, None)
    assert len(results) == 1 and results[0]["error_kind"] == "interrupted"
    assert "NOT run again" in results[0]["content"] and "NOT run again" in reply


async def test_a_first_attempt_runs_its_calls(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", policy={"tools": ["text.count"]})
        sid = await sessions.create(agent="clerk")
        await sessions.send(sid, f"#call text.count {ARGS}")
        r, _ = runner(store)
        try:
            assert await r.run_until_idle(30, {sid})
        finally:
            await r.aclose()
        [res] = [e["payload"] for e in await event_types(store, "turn.tool_result")]
        assert not res["content"].startswith(REUSED) and '"words": 2' in res["content"]
    finally:
        await store.close()


async def test_a_job_claimed_in_its_sessions_creation_is_re_run_the_same_way(
        tmp_path: Path) -> None:
    """Issue 36: a job claimed in the command that created its session (a flow node's, a
    spawned child's) has no `turnjob.started` of its own: its first attempt's start rides
    in `session.created`. A worker that died after its call's result was recorded is taken
    over: the re-run finds that attempt's turn there and reuses the result; the turn's
    history, its usage window and the re-run's start are read from the creation too."""
    from clawtower.core.sessions import history
    from clawtower.core.sessions.claims import claim_fresh

    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", policy={"tools": ["text.count"]})
        agent = await store.fetchone("SELECT agent_id FROM agent_specs WHERE name='clerk'")
        assert agent is not None
        sid, job = "S-1", "J-fresh"
        created = sev.SessionCreated(
            title="a node", agent_id=agent["agent_id"], channel="agent",
            inbound=sev.SessionInbound(msg_id="m-in", text=f"#call text.count {ARGS}",
                                       sender="flow:F-1"), job_id=job, job_reason="flow")
        claim = await store.execute(lambda tx: claim_fresh(
            tx, NewEvent(entity_id=sid, actor="flow:F-1", role="agent", payload=created),
            "dead-worker", 1.0, {}))
        assert claim is not None and claim.attempt == 1
        assert await event_types(store, "turnjob.started") == []  # folded into the creation
        await store.append([NewEvent(entity_id=claim.turn_id, actor="clerk", role="agent",
                                     payload=p) for p in (
            ev.TurnToolCalled(round=1, call_id="c1", name="text.count", arguments=ARGS),
            ev.TurnToolResult(round=1, call_id="c1", name="text.count",
                              content='{"words": 99}'))])
        await run_idle(store, sid, lease_ttl_s=1.0)
        [row] = await store.fetchall("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
        assert (row["status"], row["attempt"]) == ("done", 2)
        results = [e["payload"]["content"] for e in await event_types(store, "turn.tool_result")]
        assert results == ['{"words": 99}', REUSED + '{"words": 99}']  # not run again
        turns = (await history.read(store, sid)).turns  # `session history`, from the log
        assert [(t["job"], t["status"]) for t in turns] == [(job, "done")]
        assert turns[0]["message"].endswith(f"#call text.count {ARGS}")
        assert turns[0]["tool_calls"][0]["name"] == "text.count"  # the dead attempt's call
        assert await store.verify_projections() == []
    finally:
        await store.close()
