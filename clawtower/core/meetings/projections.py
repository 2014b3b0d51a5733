"""Projections of the meeting events (tables created by schema migration 2).

Like every projection: pure functions of the event, never the clock.
"""

from __future__ import annotations

import json
import sqlite3

from ..events import StoredEvent
from ..store.projections import projects
from . import events as mev


@projects(mev.MeetingStarted)
def _started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.MeetingStarted)
    db.execute(
        "INSERT INTO meetings (id, topic, participants, summarizer, max_rounds, summary_tokens,"
        " agent_timeout_s, meeting_timeout_s, status, rounds, detail, started_at, last_seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', 0, '', ?, ?)",
        (
            e.entity_id, p.topic, json.dumps(p.participants), p.summarizer, p.max_rounds,
            p.summary_tokens, p.agent_timeout_s, p.meeting_timeout_s, e.ts, e.seq,
        ),
    )


@projects(mev.RoundStarted)
def _round_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.RoundStarted)
    db.execute(
        "INSERT INTO meeting_rounds (meeting_id, round, summary_in_tokens, reason, started_at)"
        " VALUES (?, ?, ?, '', ?)",
        (e.entity_id, p.round, p.summary_in_tokens, e.ts),
    )
    db.execute(
        "UPDATE meetings SET rounds=?, last_seq=? WHERE id=?", (p.round, e.seq, e.entity_id)
    )


@projects(mev.ReplyRecorded)
def _reply(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.ReplyRecorded)
    db.execute(
        "INSERT INTO meeting_replies VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            e.entity_id, p.round, p.agent, p.status, p.raw, p.stance, p.why, p.model,
            p.prompt_tokens, p.completion_tokens, p.elapsed_s, e.seq, e.ts,
        ),
    )
    db.execute("UPDATE meetings SET last_seq=? WHERE id=?", (e.seq, e.entity_id))


@projects(mev.RoundEnded)
def _round_ended(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.RoundEnded)
    db.execute(
        "UPDATE meeting_rounds SET consensus=?, reason=?, agree=?, disagree=?, neutral=?,"
        " ended_at=? WHERE meeting_id=? AND round=?",
        (p.consensus, p.reason, p.agree, p.disagree, p.neutral, e.ts, e.entity_id, p.round),
    )
    db.execute("UPDATE meetings SET last_seq=? WHERE id=?", (e.seq, e.entity_id))


@projects(mev.SummaryRecorded)
def _summary(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.SummaryRecorded)
    db.execute(
        "INSERT INTO meeting_summaries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            e.entity_id, p.round, p.text, p.tokens, p.cap, int(p.truncated), p.note,
            p.prompt_tokens, p.completion_tokens, e.seq, e.ts,
        ),
    )
    db.execute("UPDATE meetings SET last_seq=? WHERE id=?", (e.seq, e.entity_id))


@projects(mev.MeetingEnded)
def _ended(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.MeetingEnded)
    db.execute(
        "UPDATE meetings SET status='ended', result=?, end_reason=?, detail=?, rounds=?,"
        " ended_at=?, last_seq=? WHERE id=?",
        (p.result, p.reason, p.detail, p.rounds, e.ts, e.seq, e.entity_id),
    )


@projects(mev.MinutesWritten)
def _minutes(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.MinutesWritten)
    db.execute(
        "UPDATE meetings SET minutes_path=?, last_seq=? WHERE id=?", (p.path, e.seq, e.entity_id)
    )


@projects(mev.StopRequested)
def _stop(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.StopRequested)
    db.execute(
        "UPDATE meetings SET stop_requested=1, stop_by=?, stop_reason=?, last_seq=? WHERE id=?",
        (p.by, p.reason, e.seq, e.entity_id),
    )


@projects(mev.RoundsGranted)
def _granted(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, mev.RoundsGranted)
    db.execute(
        "UPDATE meetings SET max_rounds=?, last_seq=? WHERE id=?",
        (p.max_rounds, e.seq, e.entity_id),
    )
