"""Projections of the session events (tables created by schema migration 6).

Like every projection: pure functions of the event (and of rows earlier events wrote),
never the clock.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..events import StoredEvent
from ..store.projections import add_turn, finish_turn, projects
from ..store.projections import canonical_json as _j
from . import events as sev


def _touch(db: sqlite3.Connection, session_id: str, e: StoredEvent, sets: str = "",
           params: tuple[Any, ...] = ()) -> None:
    db.execute(f"UPDATE sessions SET {sets}{', ' if sets else ''}updated_at=?, last_seq=?"
               " WHERE id=?", (*params, e.ts, e.seq, session_id))


@projects(sev.AgentSpecSet)
def _spec_set(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.AgentSpecSet)
    db.execute(
        "INSERT INTO agent_specs (agent_id, name, config_json, source, created_at, updated_at,"
        " last_seq) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(agent_id) DO UPDATE SET"
        " name=excluded.name, config_json=excluded.config_json, source=excluded.source,"
        " updated_at=excluded.updated_at, last_seq=excluded.last_seq",
        (e.entity_id, p.name, _j(p.config), p.source, e.ts, e.ts, e.seq))


@projects(sev.SessionCreated)
def _created(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionCreated)
    _create(db, p, e)


@projects(sev.SessionForked)
def _forked(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionForked)
    _create(db, p.session, e)  # the copied messages are `session.message` events after it


def _create(db: sqlite3.Connection, p: sev.SessionCreated, e: StoredEvent) -> None:
    num = int(e.entity_id.split("-", 1)[1])
    # with a job folded in, the row is born as `_queue`'s touch would leave it (one
    # statement instead of an INSERT and two UPDATEs of the same row); with its start too,
    # the session, its first message and the job are born as the start leaves them
    start = p.start if p.job_id is not None and p.start is not None \
        and p.start.session_id == e.entity_id else None
    status = "idle" if p.job_id is None else "queued" if start is None else "running"
    db.execute(
        "INSERT INTO sessions (id, num, title, agent_id, provider_override, model_override,"
        " deliver, channel, parent_id, hop, trace_id, run_id, task, spawn_key, status,"
        " active_job, created_by, created_at, updated_at, last_seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (e.entity_id, num, p.title, p.agent_id, p.provider_override, p.model_override,
         int(p.deliver), p.channel, p.parent_id, p.hop, p.trace_id, p.run_id, _j(p.task),
         p.spawn_key, status, p.job_id, p.created_by, e.ts, e.ts, e.seq))
    taken = p.inbound.msg_id if p.inbound is not None and start is not None \
        and p.inbound.msg_id in start.took else ""
    if p.inbound is not None:  # the first message, folded in (issue 24.2)
        _inbox(db, e.entity_id, p.inbound, e, touch=False, taken_by=p.job_id if taken else None)
    if p.job_id is not None and start is not None:  # the job, born started (issue 36)
        _start(db, p.job_id, start, e, born=p.job_reason, taken=taken)
    elif p.job_id is not None:  # the job that takes it
        _queue(db, p.job_id, e.entity_id, p.job_reason, e, touch=False)
        if p.start is not None:  # and a start of another session's (never written)
            _start(db, p.job_id, p.start, e)


@projects(sev.SessionAgentSwitched)
def _switched(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionAgentSwitched)
    _touch(db, e.entity_id, e, "agent_id=?", (p.agent_id,))


@projects(sev.SessionModelSet)
def _model_set(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionModelSet)
    _touch(db, e.entity_id, e, "provider_override=?, model_override=?", (p.provider, p.model))


@projects(sev.SessionInbound)
def _inbound(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionInbound)
    _inbox(db, e.entity_id, p, e)


def _inbox(db: sqlite3.Connection, sid: str, p: sev.SessionInbound, e: StoredEvent,
           touch: bool = True, taken_by: str | None = None) -> None:
    """`taken_by`: the job that took it in the same event (born as `_take` leaves it)."""
    if taken_by is None:
        db.execute("INSERT INTO session_inbox (msg_id, session_id, text, sender, status, seq,"
                   " at) VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                   (p.msg_id, sid, p.text, p.sender, e.seq, e.ts))
    else:
        db.execute("INSERT INTO session_inbox (msg_id, session_id, text, sender, status,"
                   " job_id, seq, at, taken_at) VALUES (?, ?, ?, ?, 'taken', ?, ?, ?, ?)",
                   (p.msg_id, sid, p.text, p.sender, taken_by, e.seq, e.ts, e.ts))
    if touch:
        _touch(db, sid, e)


@projects(sev.SessionMessage)
def _message(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionMessage)
    _transcript(db, e.entity_id, p, e)
    _touch(db, e.entity_id, e)


def _transcript(db: sqlite3.Connection, sid: str, p: sev.SessionMessage, e: StoredEvent
                ) -> None:
    db.execute("INSERT INTO session_messages VALUES (?, ?, ?, ?, ?, ?, ?)",
               (e.seq, sid, p.msg_id, p.role, p.text, _j(p.meta), e.ts))


@projects(sev.SessionBacklogged)
def _backlogged(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionBacklogged)
    db.execute("INSERT INTO session_backlog (item_id, session_id, kind, text, data, status,"
               " seq, at) VALUES (?, ?, ?, ?, ?, 'waiting', ?, ?)",
               (p.item_id, e.entity_id, p.kind, p.text, _j(p.data), e.seq, e.ts))
    msg = p.data.get("msg_id")
    if p.kind == "message" and msg:
        db.execute("UPDATE session_inbox SET status='backlogged' WHERE msg_id=?", (msg,))
    _touch(db, e.entity_id, e)


@projects(sev.SessionStopRequested)
def _stop(db: sqlite3.Connection, e: StoredEvent) -> None:
    db.execute("UPDATE session_inbox SET status='cancelled' WHERE session_id=? AND"
               " status='pending'", (e.entity_id,))
    _touch(db, e.entity_id, e, "stop_requested=1, status='stopped'")


@projects(sev.SessionFinished)
def _finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionFinished)
    _end(db, e.entity_id, p.status, e)


def _ended(result: str) -> tuple[str, str]:
    """A session's (status, result) once it ended with `result`."""
    return ("stopped" if result == "stopped" else "finished"), result


def _end(db: sqlite3.Connection, sid: str, result: str, e: StoredEvent) -> None:
    _touch(db, sid, e, "status=?, result=?", _ended(result))


@projects(sev.SessionAnnounced)
def _announced(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionAnnounced)
    meta = _j(p.meta)  # encoded once for its two rows
    db.execute("INSERT INTO session_messages VALUES (?, ?, ?, 'announce', ?, ?, ?)",
               (e.seq, e.entity_id, p.msg_id, p.text, meta, e.ts))
    src = p.meta.get("source", {})
    res = p.meta.get("result", {})
    stats = p.meta.get("stats", {})
    db.execute(
        "INSERT INTO session_announces (run_id, parent_id, child_id, msg_id, agent_id,"
        " agent_name, status, summary, meta, tokens, cost_usd, seq, at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (str(src.get("run_id", "")), e.entity_id, str(src.get("session_id", "")), p.msg_id,
         str(src.get("agent_id", "")), str(src.get("agent_name", "")),
         str(res.get("status", "")), str(res.get("summary", "")), meta,
         int(stats.get("tokens", 0)), float(stats.get("cost_usd", 0.0)), e.seq, e.ts))
    _touch(db, e.entity_id, e)


@projects(sev.SessionDelivered)
def _delivered(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.SessionDelivered)
    db.execute("INSERT INTO session_deliveries VALUES (?, ?, ?, ?, ?, ?)",
               (e.seq, e.entity_id, p.channel, p.msg_id, p.text, e.ts))


def _take(db: sqlite3.Connection, e: StoredEvent, msgs: list[str], job_id: str = "") -> None:
    """Inbox messages `msgs` are taken by the job `e` is about (at its start or a steer),
    or by `job_id` (a start folded into its session's creation)."""
    for msg in msgs:
        db.execute("UPDATE session_inbox SET status='taken', job_id=?, taken_at=?"
                   " WHERE msg_id=?", (job_id or e.entity_id, e.ts, msg))


@projects(sev.TurnJobQueued)
def _job_queued(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobQueued)
    _queue(db, e.entity_id, p.session_id, p.reason, e)


def _queue(db: sqlite3.Connection, job_id: str, sid: str, reason: str, e: StoredEvent,
           touch: bool = True) -> None:
    db.execute("INSERT INTO turn_jobs (id, session_id, status, reason, queued_at, queued_seq,"
               " last_seq) VALUES (?, ?, 'queued', ?, ?, ?, ?)",
               (job_id, sid, reason, e.ts, e.seq, e.seq))
    if touch:
        _touch(db, sid, e,
               "active_job=?, status=CASE WHEN status IN ('idle','queued') THEN 'queued'"
               " ELSE status END", (job_id,))


@projects(sev.TurnJobStarted)
def _job_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobStarted)
    _start(db, e.entity_id, p, e)


def _start(db: sqlite3.Connection, job_id: str, p: sev.TurnJobStarted, e: StoredEvent,
           born: str | None = None, taken: str = "") -> None:
    """Job `job_id` starts: `e` is its `turnjob.started`, or the `session.created` that
    carries it (issue 36). `born`: the job is created by `e` too, with this reason, and
    its session row was inserted running; `taken`: an inbox message inserted taken. The
    rows are the same as a queue then a start leave them, in fewer statements."""
    if p.message is not None:  # the message the job took, folded in (issue 24.2)
        _transcript(db, p.session_id, p.message, e)
    took: dict[str, Any] = {"msgs": p.took, "drained": p.drained, "announces": p.announces,
                            "backlog_msg_id": p.backlog_msg_id}
    if p.recalled:  # only when there is one: a store projected before it verifies the same
        took["recalled"] = p.recalled
    if born is None:
        db.execute("UPDATE turn_jobs SET status='running', owner=?, attempt=?, turn_id=?,"
                   " agent_id=?, provider=?, model=?, took=?, started_at=?, last_seq=?"
                   " WHERE id=?", (p.owner, p.attempt, p.turn_id, p.agent_id, p.provider,
                                   p.model, _j(took), e.ts, e.seq, job_id))
    else:
        db.execute("INSERT INTO turn_jobs (id, session_id, status, reason, owner, attempt,"
                   " turn_id, agent_id, provider, model, took, queued_at, started_at,"
                   " queued_seq, last_seq) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?,"
                   " ?, ?, ?, ?)",
                   (job_id, p.session_id, born, p.owner, p.attempt, p.turn_id, p.agent_id,
                    p.provider, p.model, _j(took), e.ts, e.ts, e.seq, e.seq))
    if p.turn is not None:  # the turn starts with the claim (issue 24.2)
        add_turn(db, p.turn_id, p.turn, e)
    _take(db, e, [m for m in p.took if m != taken] if taken else p.took, job_id)
    for item in p.drained:
        db.execute("UPDATE session_backlog SET status='drained', drained_by=? WHERE item_id=?",
                   (job_id, item))
    if born is not None:
        return
    _touch(db, p.session_id, e,
           "status=CASE WHEN status IN ('stopped','finished') THEN status ELSE 'running' END,"
           " active_job=?", (job_id,))


@projects(sev.TurnJobSteered)
def _job_steered(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobSteered)
    _take(db, e, p.took)
    db.execute("UPDATE turn_jobs SET steers=steers+1, last_seq=? WHERE id=?",
               (e.seq, e.entity_id))
    _touch(db, p.session_id, e)


@projects(sev.TurnJobFinished)
def _job_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobFinished)
    if p.reply is not None:  # the reply, folded in (issue 24.2)
        _transcript(db, p.session_id, p.reply, e)
    # the session first: whether the job ran is read before its row changes below; a
    # session that ended with the job (folded in, issue 24.2) ends in the same statement
    ends = "" if p.session_status is None else ", status=?, result=?"
    _touch(db, p.session_id, e,
           "status=CASE WHEN status IN ('running','queued','waiting') THEN 'idle' ELSE status"
           " END, active_job=NULL, turns=turns+(SELECT count(*) FROM turn_jobs WHERE id=? AND"
           " status='running'), prompt_tokens=prompt_tokens+?,"
           " completion_tokens=completion_tokens+?, cost_usd=cost_usd+?" + ends,
           (e.entity_id, p.prompt_tokens, p.completion_tokens, p.cost_usd,
            *(() if p.session_status is None else _ended(p.session_status))))
    row = db.execute("UPDATE turn_jobs SET status=?, stop_reason=?, error=?, reply_msg_id=?,"
                     " prompt_tokens=?, completion_tokens=?, cost_usd=?, ended_at=?, last_seq=?"
                     " WHERE id=? RETURNING took, turn_id",
                     (p.status, p.stop_reason, p.error, p.reply_msg_id, p.prompt_tokens,
                      p.completion_tokens, p.cost_usd, e.ts, e.seq, e.entity_id)).fetchall()
    if row and p.turn is not None:  # the turn its start began ends with it (issue 36)
        finish_turn(db, row[0][1], p.turn, e)
    if row and p.recalled is not None:  # hybrid recall replaced the claim's
        took = json.loads(row[0][0] or "{}")
        took["recalled"] = p.recalled
        db.execute("UPDATE turn_jobs SET took=? WHERE id=?", (_j(took), e.entity_id))
    if p.status == "done" and row:
        taken = json.loads(row[0][0] or "{}").get("announces", [])
        if taken:  # one statement over the parent's announces (msg_id has no index of its
            # own: a statement per announce scanned the whole table, quadratic in a fan-out)
            db.execute("UPDATE session_announces SET consumed_by=? WHERE parent_id=? AND"
                       " msg_id IN (SELECT value FROM json_each(?))",
                       (e.entity_id, p.session_id, json.dumps(taken)))


@projects(sev.TurnJobWaiting)
def _job_waiting(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobWaiting)
    db.execute("UPDATE turn_jobs SET status='waiting', last_seq=? WHERE id=?",
               (e.seq, e.entity_id))
    _touch(db, p.session_id, e,
           "status=CASE WHEN status IN ('stopped','finished') THEN status ELSE 'waiting' END,"
           " turns=turns+1, prompt_tokens=prompt_tokens+?,"
           " completion_tokens=completion_tokens+?, cost_usd=cost_usd+?",
           (p.prompt_tokens, p.completion_tokens, p.cost_usd))


@projects(sev.TurnJobResumed)
def _job_resumed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, sev.TurnJobResumed)
    db.execute("UPDATE turn_jobs SET status='queued', reason='resume', last_seq=? WHERE id=?",
               (e.seq, e.entity_id))
    _touch(db, p.session_id, e,
           "status=CASE WHEN status='waiting' THEN 'queued' ELSE status END")
