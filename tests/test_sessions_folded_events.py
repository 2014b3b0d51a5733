"""Issue 24.2: a subagent child's life in fewer, larger events. The facts that were split
(a child created + its task + its job queued; a job started + its turn started + the one
message it took; a turn's final `agent.usage` + `turn.finished`; the reply + the job
finished + the child's session finished) are now one event each; since issue 36 a job's
turn also ends in the job's `turnjob.finished` (`turn`), not in a `turn.finished` of its own.

`tests/data/sessions_log_pre_24_2.jsonl` is a log written by the release before (a parent
spawning 3 workers, each answering and announcing, the join answering). It must still
replay (`store verify`, `rebuild`), and the same log folded into the new shapes must project
exactly the same rows (only the sequence numbers move, as events are fewer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from folded_logs import import_log, read_log, same_as_folded
from session_helpers import runner, spec

from clawtower.core import events as ev
from clawtower.core.events import StoredEvent
from clawtower.core.sessions import events as sev
from clawtower.core.sessions.service import Sessions

OLD_LOG = Path(__file__).parent / "data" / "sessions_log_pre_24_2.jsonl"

# the projected tables a session's life writes, each with a key that does not depend on seq
TABLES = {"sessions": "id", "session_inbox": "msg_id", "session_messages": "msg_id",
          "turn_jobs": "id", "turns": "id", "usage": "subject, agent, model",
          "session_announces": "run_id"}




def _fold(events: list[StoredEvent]) -> list[StoredEvent]:
    """The old log written as the new code writes it (what each merge means, spelled out)."""
    out: list[StoredEvent] = []
    subject: dict[str, str] = {}  # turn id -> subject
    last_usage: dict[str, StoredEvent] = {}  # subject -> its latest agent.usage, unfolded
    for e in events:
        p = e.payload
        prev = out[-1] if out else None
        if isinstance(p, sev.SessionInbound) and prev is not None and isinstance(
                prev.payload, sev.SessionCreated) and prev.entity_id == e.entity_id \
                and prev.payload.parent_id is not None:  # a spawned child's task
            out[-1] = prev.model_copy(update={"payload": prev.payload.model_copy(
                update={"inbound": p})})
            continue
        if isinstance(p, sev.TurnJobQueued) and prev is not None and isinstance(
                prev.payload, sev.SessionCreated) and prev.payload.inbound is not None \
                and prev.entity_id == p.session_id:
            out[-1] = prev.model_copy(update={"payload": prev.payload.model_copy(
                update={"job_id": e.entity_id, "job_reason": p.reason})})
            continue
        if isinstance(p, sev.TurnJobStarted) and len(p.took) == 1 \
                and p.backlog_msg_id is None and prev is not None \
                and isinstance(prev.payload, sev.SessionMessage) \
                and prev.payload.meta.get("job") == e.entity_id:  # the one message it took
            out[-1] = e.model_copy(update={"payload": p.model_copy(
                update={"message": prev.payload})})
            continue
        if isinstance(p, ev.TurnStarted):
            subject[e.entity_id] = p.subject
            (i,) = [i for i, j in enumerate(out) if isinstance(j.payload, sev.TurnJobStarted)
                    and j.payload.turn_id == e.entity_id]
            out[i] = out[i].model_copy(update={"payload": out[i].payload.model_copy(
                update={"turn": p})})
            continue
        if isinstance(p, ev.AgentUsage):
            last_usage[e.entity_id] = e
        if isinstance(p, ev.TurnToolCalled):  # that round's usage was its own event
            last_usage.pop(subject[e.entity_id], None)
        if isinstance(p, ev.TurnFinished):
            u = last_usage.pop(subject[e.entity_id])
            out.remove(u)
            e = e.model_copy(update={"payload": p.model_copy(update={
                "usage": u.payload, "usage_subject": u.entity_id})})
        if isinstance(p, sev.TurnJobFinished):  # its turn's end (issue 36)
            (tid,) = [j.payload.turn_id for j in out if isinstance(j.payload, sev.TurnJobStarted)
                      and j.entity_id == e.entity_id][-1:]
            (end,) = [t for t in out if isinstance(t.payload, ev.TurnFinished)
                      and t.entity_id == tid]
            out.remove(end)
            p = p.model_copy(update={"turn": end.payload})
            e = e.model_copy(update={"payload": p})
        if isinstance(p, sev.TurnJobFinished) and p.reply_msg_id is not None:
            (reply,) = [m for m in out if isinstance(m.payload, sev.SessionMessage)
                        and m.payload.msg_id == p.reply_msg_id]
            out.remove(reply)
            e = e.model_copy(update={"payload": p.model_copy(update={
                "reply": reply.payload})})
        if isinstance(p, sev.SessionFinished) and prev is not None and isinstance(
                prev.payload, sev.TurnJobFinished) and prev.payload.session_id == e.entity_id:
            out[-1] = prev.model_copy(update={"payload": prev.payload.model_copy(
                update={"session_status": p.status})})
            continue
        out.append(e)
    return [x.model_copy(update={"seq": i}) for i, x in enumerate(out, 1)]








async def _spawned(store: Any, n: int, slots: int) -> str:
    """A lead spawning `n` workers with a trivial part each, run until idle by a worker
    with `slots` turns at once; the lead's session id."""
    s = Sessions(store)
    await spec(s, "lead", policy={"tools": ["spawn_subagent", "spawn_subagents"],
                                  "subagents": ["worker"]})
    await spec(s, "worker", policy={"tools": []})
    sid = await s.create(agent="lead")
    await s.send(sid, f"#spawn {n} worker a trivial part")
    r, _ = runner(store, max_concurrent=slots)
    assert await r.run_until_idle(30)
    return sid


async def test_a_log_of_the_release_before_replays_and_verifies(store: Any) -> None:
    old = read_log(OLD_LOG)
    await import_log(store, old)
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []
    kids = await store.fetchall("SELECT * FROM sessions WHERE parent_id IS NOT NULL")
    assert len(kids) == 3 and {k["status"] for k in kids} == {"finished"}
    assert {k["result"] for k in kids} == {"ok"}
    usage = await store.fetchall("SELECT * FROM usage WHERE agent='worker'")
    assert sorted(u["calls"] for u in usage) == [1, 1, 1]
    announces = await store.fetchall("SELECT * FROM session_announces")
    assert len(announces) == 3 and all(a["consumed_by"] for a in announces)
    inbox = await store.fetchall("SELECT status FROM session_inbox")
    assert {r["status"] for r in inbox} == {"taken"}


async def test_the_folded_log_projects_the_same_rows_in_fewer_events(store: Any,
                                                                     tmp_path: Path) -> None:
    old = read_log(OLD_LOG)
    new = _fold(old)
    await same_as_folded(store, old, new, TABLES, tmp_path / "folded.db")
    # per child: its task, its job queued, the message its job took, its turn's start, its
    # final usage, its turn's end, its reply and its end folded (8); the parent's two turns:
    # their start, final usage, end, reply (2 x 4), and the message its first job took (the
    # join took none)
    assert len(old) - len(new) == 3 * 8 + 2 * 4 + 1


@pytest.mark.parametrize("slots", [16, 1])
async def test_a_child_runs_in_three_events(store: Any, slots: int) -> None:
    """What the new code writes for one child of `spawn_subagent`, by type (the parent's
    share aside): its turn's end rides in its job's (issue 36), no `turn.finished` of its
    own; with a free slot its job is claimed in the spawning command, its start folded
    into its creation (as `spawn_subagents`' children, test_sessions_milestones m4). With
    no slot (`slots=1`: the parent's turn holds it) the child is queued for whichever
    worker has room, and its start is an event of its own."""
    sid = await _spawned(store, 1, slots)
    (child,) = await store.fetchall("SELECT id FROM sessions WHERE parent_id=?", (sid,))
    job = await store.fetchone("SELECT id, turn_id FROM turn_jobs WHERE session_id=?",
                               (child["id"],))
    assert job is not None
    types = [e.type for eid in (child["id"], job["id"], job["turn_id"])
             for e in await store.events_after(0, entity_id=eid)]
    announce = await store.fetchall("SELECT 1 FROM events WHERE type='session.announced'"
                                    " AND entity_id=?", (sid,))
    folded = [e.payload for e in await store.events_after(0, entity_id=child["id"])
              if isinstance(e.payload, sev.SessionCreated)]
    assert len(folded) == 1 and (folded[0].start is not None) == (slots > 1)
    assert sorted(types) == sorted(["session.created", "turnjob.finished"] + (
        [] if slots > 1 else ["turnjob.started"])) and len(announce) == 1
    turn = await store.fetchone("SELECT status, subject, agent FROM turns WHERE id=?",
                                (job["turn_id"],))
    assert turn == {"status": "completed", "subject": child["id"], "agent": "worker"}
    row = await store.fetchone("SELECT status, result, turns FROM sessions WHERE id=?",
                               (child["id"],))
    assert row == {"status": "finished", "result": "ok", "turns": 1}
    msgs = await store.fetchall("SELECT role FROM session_messages WHERE session_id=?"
                                " ORDER BY seq", (child["id"],))
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    usage = await store.fetchone("SELECT calls FROM usage WHERE subject=? AND agent='worker'",
                                 (child["id"],))
    assert usage == {"calls": 1}
    assert await store.verify_projections() == []



async def test_a_claimed_turn_that_never_runs_is_closed(store: Any) -> None:
    """The claim starts the turn; a job that fails before its turn runs (here: a provider
    the config does not know) closes it, so `store verify` finds no open turn."""
    from clawtower.core.sessions.takeover import open_turns
    s = Sessions(store)
    await spec(s, "worker", policy={"tools": []},
               defaults={"provider": "no-such-provider", "model": "m"})
    sid = await s.create(agent="worker")
    await s.send(sid, "hello")
    r, _ = runner(store)
    assert await r.run_until_idle(30)
    job = await store.fetchone("SELECT status, turn_id FROM turn_jobs WHERE session_id=?",
                               (sid,))
    assert job is not None and job["status"] == "failed"
    turn = await store.fetchone("SELECT status, stop_reason, error FROM turns WHERE id=?",
                                (job["turn_id"],))
    assert turn is not None and turn["status"] == "failed" and turn["stop_reason"] == "error"
    assert "no-such-provider" in turn["error"]
    assert await open_turns(store) == [] and await store.verify_projections() == []


# ------------------------------------------------------------ issue 36: the turn's end


def _unfold(events: list[StoredEvent]) -> list[StoredEvent]:
    """A log of the new code written as the code before issue 36 wrote it: each job's turn
    end its own `turn.finished` (on the turn, just before the job's end, same time), and a
    job claimed in its session's creation started by its own `turnjob.started` (on the
    job, just after the creation, same time)."""
    out: list[StoredEvent] = []
    turn_of: dict[str, tuple[str, str]] = {}  # job id -> (its latest turn id, its agent)
    for e in events:
        p = e.payload
        if isinstance(p, sev.SessionCreated) and p.start is not None and p.job_id:
            s = p.start
            turn_of[p.job_id] = (s.turn_id, s.turn.agent if s.turn is not None else "")
            out.append(e.model_copy(update={"payload": p.model_copy(update={"start": None})}))
            out.append(StoredEvent(seq=0, ts=e.ts, entity="turnjob", entity_id=p.job_id,
                                   type="turnjob.started", actor=s.owner, role="system",
                                   payload=s, idem_key=None))
            continue
        if isinstance(p, sev.TurnJobStarted):
            turn_of[e.entity_id] = (p.turn_id, p.turn.agent if p.turn is not None else "")
        if isinstance(p, sev.TurnJobFinished) and p.turn is not None:
            tid, agent = turn_of[e.entity_id]
            out.append(StoredEvent(seq=0, ts=e.ts, entity="turn", entity_id=tid,
                                   type="turn.finished", actor=agent, role="agent",
                                   payload=p.turn, idem_key=None))
            e = e.model_copy(update={"payload": p.model_copy(update={"turn": None})})
        out.append(e)
    return [x.model_copy(update={"seq": i}) for i, x in enumerate(out, 1)]


async def test_a_jobs_turn_ends_in_its_finish_as_its_own_event_did(store: Any,
                                                                   tmp_path: Path) -> None:
    """A child's and a tool-calling session's turns: no `turn.finished` is written, and the
    `turns` rows (status, stop reason, rounds, calls, tokens, cost, text, ended_at) and the
    usage sums are those the same log with separate `turn.finished` events projects."""
    from folded_logs import import_log, rows, same

    from clawtower.core.store import open_store

    s = Sessions(store)
    await spec(s, "lead", policy={"tools": ["spawn_subagent", "spawn_subagents"],
                                  "subagents": ["worker"]})
    await spec(s, "worker", policy={"tools": ["clock.now"]})
    lead = await s.create(agent="lead")
    await s.send(lead, "#spawn 2 worker a trivial part")
    solo = await s.create(agent="worker")
    await s.send(solo, '#call clock.now {"timezone": "UTC"}')
    r, _ = runner(store)
    assert await r.run_until_idle(30)
    assert await store.fetchall("SELECT 1 FROM events WHERE type='turn.finished'") == []
    turns = await store.fetchall(
        "SELECT t.*, j.reply_msg_id FROM turns t JOIN turn_jobs j ON j.turn_id = t.id")
    assert len(turns) == 5  # the lead's two, two children's, the solo session's
    for t in turns:
        assert (t["status"], t["stop_reason"]) == ("completed", "completed")
        assert t["ended_at"] is not None and t["ended_at"] >= t["started_at"]
        assert t["prompt_tokens"] > 0 and t["completion_tokens"] > 0 and t["model_calls"] >= 1
        reply = await store.fetchone("SELECT text FROM session_messages WHERE msg_id=?",
                                     (t["reply_msg_id"],))
        assert reply is not None and t["text"] == reply["text"]
    (called,) = [t for t in turns if t["subject"] == solo]
    assert (called["rounds"], called["tool_calls"], called["model_calls"]) == (1, 1, 2)
    tools = await store.fetchall("SELECT status FROM turn_tools WHERE turn_id=?",
                                 (called["id"],))
    assert [x["status"] for x in tools] == ["ok"]
    usage = await store.fetchall("SELECT * FROM usage WHERE subject=?", (solo,))
    assert [(u["calls"], u["prompt_tokens"]) for u in usage] == [
        (2, called["prompt_tokens"])]
    assert await store.verify_projections() == []

    new = await store.events_after(0, limit=100_000)
    from clawtower.core.describe import event_summary
    (fin,) = [e for e in new if isinstance(e.payload, sev.TurnJobFinished)
              and e.payload.session_id == solo]
    assert isinstance(fin.payload, sev.TurnJobFinished) and fin.payload.turn is not None
    u = fin.payload.turn.usage
    assert u is not None and event_summary(fin) == (
        "job done; turn finished (completed): 1 tool round(s), 2 model call(s); last call"
        f" worker turn on sim-standard: {u.prompt_tokens}+{u.completion_tokens} tokens")
    old = _unfold(new)
    starts = sum(1 for e in new if isinstance(e.payload, sev.SessionCreated)
                 and e.payload.start is not None)
    assert starts == 2  # the two children, claimed in the command that spawned them
    assert len(old) - len(new) == 5 + starts
    tables = {**TABLES, "turn_tools": "turn_id, call_id"}
    live = await rows(store, tables)
    for name, log in (("old", old), ("new", new)):  # both forms replay to the same rows
        other = await open_store(tmp_path / f"{name}.db")
        try:
            await import_log(other, log)
            assert await other.verify_projections() == []
            same(await rows(other, tables), live)
            await other.rebuild_projections()
            same(await rows(other, tables), live)
        finally:
            await other.close()


async def test_a_turn_paused_for_approval_still_records_its_end(tmp_path: Path) -> None:
    """The pause writes the turn's end (`awaiting_approval`) beside `turnjob.waiting`; the
    turn that goes on after the decision ends in its job's finish."""
    from session_helpers import run_idle

    from clawtower.core.approvals import Approvals
    from clawtower.core.sessions.takeover import open_turns
    from clawtower.core.store import open_store

    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        s = Sessions(store)
        await spec(s, "clerk", policy={"tools": ["clock.now"], "approval": {
            "default": "auto", "tools": {"clock.*": "confirm"}}})
        sid = await s.create(agent="clerk")
        await s.send(sid, "#call clock.now {}")
        await run_idle(store, sid)
        ends = await store.fetchall("SELECT entity_id, payload FROM events WHERE"
                                    " type='turn.finished'")
        assert len(ends) == 1 and '"awaiting_approval"' in ends[0]["payload"]
        paused = await store.fetchone("SELECT * FROM turns WHERE id=?",
                                      (ends[0]["entity_id"],))
        assert paused is not None and paused["status"] == "paused"
        assert paused["ended_at"] is not None and paused["rounds"] == 1
        tools = await store.fetchall("SELECT status FROM turn_tools WHERE turn_id=?",
                                     (paused["id"],))
        assert [x["status"] for x in tools] == ["waiting"]
        assert await open_turns(store) == [] and await store.verify_projections() == []
        [a] = await Approvals(store).pending()
        await Approvals(store).approve(a["id"], by="bob")
        await run_idle(store, sid)
        assert len(await store.fetchall("SELECT 1 FROM events WHERE"
                                        " type='turn.finished'")) == 1
        job = await store.fetchone("SELECT status, turn_id FROM turn_jobs WHERE"
                                   " session_id=?", (sid,))
        assert job is not None and job["status"] == "done" and job["turn_id"] != paused["id"]
        resumed = await store.fetchone("SELECT status, ended_at FROM turns WHERE id=?",
                                       (job["turn_id"],))
        assert resumed is not None and resumed["status"] == "completed"
        assert resumed["ended_at"] is not None
        assert await open_turns(store) == [] and await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_worker_stopping_mid_turn_still_closes_its_turn(store: Any) -> None:
    """A worker that gives its job up (stopping) writes its turn's end on its own, as
    before issue 36 (the job is left for a take-over)."""
    from session_helpers import Recording

    s = Sessions(store)
    sid = await s.create()
    r, rec = runner(store)
    assert isinstance(rec, Recording)
    rec.hold = True  # the model is mid-call
    await s.send(sid, "a question")
    await r.claim()
    await asyncio.wait_for(rec.entered.wait(), 20)
    await r.aclose()
    await store.last_seq()  # a read after the queued write
    job = await store.fetchone("SELECT status, turn_id FROM turn_jobs WHERE session_id=?",
                               (sid,))
    assert job is not None and job["status"] == "running"  # for a take-over
    turn = await store.fetchone("SELECT status, stop_reason FROM turns WHERE id=?",
                                (job["turn_id"],))
    assert turn == {"status": "cancelled", "stop_reason": "cancelled"}
    assert len(await store.fetchall("SELECT 1 FROM events WHERE type='turn.finished'")) == 1
    assert await store.verify_projections() == []

async def test_a_session_born_started_has_the_rows_a_queue_then_a_start_leave(
        store: Any) -> None:
    """Issue 36: a `session.created` that carries its job and the job's start inserts the
    session, its first message and the job as the start leaves them (3 statements fewer
    per spawned child or flow node). Each such event of a real fan-out, projected alone,
    gives the same rows as the path before: the job queued, then the start applied."""
    from clawtower.core.sessions.projections import _create, _start
    from clawtower.core.store.projections import apply
    from clawtower.core.store.replay import empty_projections

    await _spawned(store, 3, 16)
    born = [e for e in await store.events_after(0) if isinstance(e.payload, sev.SessionCreated)
            and e.payload.start is not None]
    assert len(born) == 3
    for e in born:
        p = e.payload
        assert isinstance(p, sev.SessionCreated) and p.start is not None
        assert p.job_id is not None and p.inbound is not None
        assert p.inbound.msg_id in p.start.took
        now, before = empty_projections(), empty_projections()
        said: dict[str, list[str]] = {"now": [], "before": []}
        now.set_trace_callback(said["now"].append)
        before.set_trace_callback(said["before"].append)
        apply(now, e)
        _create(before, p.model_copy(update={"start": None}), e)
        _start(before, p.job_id, p.start, e)
        # the UPDATEs of the job, the message and the session are in their INSERTs
        assert len(said["now"]) == len(said["before"]) - 3
        for table in TABLES:
            rows = [sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
                    for db in (now, before)]
            assert rows[0] == rows[1], table
        status = now.execute("SELECT s.status, j.status, i.status FROM sessions s JOIN"
                             " turn_jobs j ON j.session_id=s.id JOIN session_inbox i ON"
                             " i.session_id=s.id").fetchall()
        assert status == [("running", "running", "taken")]
    assert await store.verify_projections() == []
