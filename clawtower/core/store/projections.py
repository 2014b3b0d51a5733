"""Projections: pure functions from an event to table rows (core's own events: tasks,
approvals, leases, turns, tool pins; each protocol registers its own in its module).

The same handlers run inside the write transaction (live) and during `rebuild` (replay),
so the two cannot drift. Handlers use only values carried by the event: never the clock.
Which module projects which type, and `apply`: core/store/handlers.py.
"""

from __future__ import annotations

import sqlite3

from .. import events as ev
from ..events import StoredEvent
from .handlers import (
    _REPAIRERS,
    PROJECTION_MODULES,
    PROJECTORS_OF,
    Handler,
    apply,
    canonical_json,
    find_repairs,
    finds_repairs,
    load_all,
    projects,
    repairs,
)

__all__ = ["PROJECTION_MODULES", "PROJECTORS_OF", "Handler", "add_turn", "apply",
           "canonical_json", "find_repairs", "finds_repairs", "finish_turn", "load_all",
           "projects", "repairs"]
_j = canonical_json


@projects(ev.TaskCreated)
def _task_created(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TaskCreated)
    num = int(e.entity_id.split("-", 1)[1])
    db.execute(
        "INSERT INTO tasks (id, num, title, phase, spec, spec_ok, spec_problems, spec_version,"
        " source, phase_reason, created_at, updated_at, last_seq)"
        " VALUES (?, ?, ?, 'spec_draft', ?, ?, ?, 1, ?, ?, ?, ?, ?)",
        (
            e.entity_id, num, p.title, _j(p.spec), int(p.spec_ok), _j(p.spec_problems),
            p.source, "; ".join(p.spec_problems), e.ts, e.ts, e.seq,
        ),
    )


@projects(ev.TaskSpecUpdated)
def _spec_updated(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TaskSpecUpdated)
    db.execute(
        "UPDATE tasks SET spec=?, spec_ok=?, spec_problems=?, spec_version=spec_version+1,"
        " phase_reason=?, updated_at=?, last_seq=? WHERE id=?",
        (
            _j(p.spec), int(p.spec_ok), _j(p.spec_problems), "; ".join(p.spec_problems),
            e.ts, e.seq, e.entity_id,
        ),
    )


@projects(ev.TaskTransitioned)
def _transitioned(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TaskTransitioned)
    db.execute(
        "INSERT INTO phase_history VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (e.seq, e.entity_id, p.from_phase, p.to_phase, e.actor, e.role, p.reason, p.attempt, e.ts),
    )
    # `reset_attempts` (leaving circuit_open) starts a fresh attempt budget; attempt numbers
    # keep counting up (see core.tasks.commands.budget_base), so `attempts` is not reset.
    circuit = "" if p.to_phase == "circuit_open" else ", circuit=NULL"
    db.execute(
        f"UPDATE tasks SET phase=?, phase_reason=?, updated_at=?, last_seq=?{circuit}"
        " WHERE id=?",
        (p.to_phase, p.reason, e.ts, e.seq, e.entity_id),
    )


@projects(ev.ReviewAppended)
def _review(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ReviewAppended)
    db.execute(
        "INSERT INTO reviews VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " (SELECT spec_version FROM tasks WHERE id=?), ?)",
        (
            e.seq, e.entity_id, p.kind, p.stage, p.reviewer, p.verdict, _j(p.findings),
            _j(p.details), p.attempt, e.entity_id, e.ts,
        ),
    )
    _touch(db, e)


@projects(ev.AttemptStarted)
def _attempt_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.AttemptStarted)
    db.execute(
        "INSERT INTO attempts (task_id, n, model, runtime, escalated, status, reason, started_at,"
        " heartbeats) VALUES (?, ?, ?, ?, ?, 'running', '', ?, 0)",
        (e.entity_id, p.attempt, p.model, p.runtime, int(p.escalated), e.ts),
    )
    db.execute(
        "UPDATE tasks SET attempts=?, retry_not_before=NULL, retry_escalate=0, updated_at=?,"
        " last_seq=? WHERE id=?",
        (p.attempt, e.ts, e.seq, e.entity_id),
    )


@projects(ev.AttemptHeartbeat)
def _heartbeat(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.AttemptHeartbeat)
    db.execute(
        "UPDATE attempts SET heartbeat_at=?, heartbeats=heartbeats+1 WHERE task_id=? AND n=?",
        (e.ts, e.entity_id, p.attempt),
    )


@projects(ev.AttemptCheckpoint)
def _checkpoint(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.AttemptCheckpoint)
    db.execute(
        "UPDATE attempts SET checkpoint=?, heartbeat_at=? WHERE task_id=? AND n=?",
        (_j(p.data), e.ts, e.entity_id, p.attempt),
    )


@projects(ev.AttemptFinished)
def _attempt_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.AttemptFinished)
    db.execute(
        "UPDATE attempts SET status=?, reason=?, output=?, finished_at=? WHERE task_id=? AND n=?",
        (p.status, p.reason, _j(p.output), e.ts, e.entity_id, p.attempt),
    )
    _touch(db, e)


@projects(ev.RetryScheduled)
def _retry(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.RetryScheduled)
    db.execute(
        "INSERT INTO retries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (e.seq, e.entity_id, p.attempt, p.next_attempt, p.reason, p.not_before,
         int(p.escalate), e.ts),
    )
    db.execute(
        "UPDATE tasks SET retry_not_before=?, retry_escalate=?, updated_at=?, last_seq=?"
        " WHERE id=?",
        (p.not_before, int(p.escalate), e.ts, e.seq, e.entity_id),
    )


@projects(ev.CircuitOpened)
def _circuit(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.CircuitOpened)
    db.execute(
        "UPDATE tasks SET circuit=?, updated_at=?, last_seq=? WHERE id=?",
        (_j(p.model_dump(mode="json")), e.ts, e.seq, e.entity_id),
    )


@projects(ev.ArtifactRecorded)
def _artifact(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ArtifactRecorded)
    db.execute(
        "INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (e.seq, e.entity_id, p.attempt, p.name, p.uri, p.digest, p.summary, e.ts),
    )
    _touch(db, e)


@projects(ev.SideEffectPlanned)
def _effect_planned(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.SideEffectPlanned)
    db.execute(
        "INSERT INTO side_effects VALUES (?, ?, ?, ?, ?, ?, ?, 'planned', '', ?, NULL)",
        (p.effect_id, e.entity_id, p.attempt, p.kind, p.description, p.target, p.idem_key, e.ts),
    )
    _touch(db, e)


@projects(ev.SideEffectIntent)
def _effect_intent(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.SideEffectIntent)
    db.execute("UPDATE side_effects SET status='intent' WHERE effect_id=?", (p.effect_id,))


@projects(ev.SideEffectDone)
def _effect_done(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.SideEffectDone)
    db.execute(
        "UPDATE side_effects SET status='done', result=?, done_at=? WHERE effect_id=?",
        (p.result, e.ts, p.effect_id),
    )
    _touch(db, e)


@projects(ev.ApprovalRequested)
def _approval_requested(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ApprovalRequested)
    db.execute(
        "INSERT INTO approvals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', NULL, NULL,"
        " '', ?)",
        (
            e.entity_id, p.kind, p.subject, p.title, p.prompt, _j(p.context), p.preview,
            e.actor, e.role, e.ts, p.required_approver, int(p.require_different_approver), e.seq,
        ),
    )


@projects(ev.ApprovalDecided)
def _approval_decided(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ApprovalDecided)
    db.execute(
        "UPDATE approvals SET status=?, decided_by=?, decided_at=?, reason=? WHERE id=?",
        (p.decision, e.actor, e.ts, p.reason, e.entity_id),
    )


@projects(ev.PermissionRefused)
def _refused(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.PermissionRefused)
    db.execute(
        "INSERT INTO refusals VALUES (?, ?, ?, ?, ?, ?, ?)",
        (e.seq, e.actor, e.role, p.action, p.target, p.reason, e.ts),
    )


@projects(ev.LeaseAcquired)
def _lease_acquired(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.LeaseAcquired)
    db.execute(
        "INSERT INTO leases VALUES (?, ?, ?, ?, 0) ON CONFLICT(name) DO UPDATE SET"
        " owner=excluded.owner, expires_at=excluded.expires_at, since=excluded.since, released=0",
        (e.entity_id, p.owner, p.expires_at, e.ts),
    )


@projects(ev.LeaseRenewed)
def _lease_renewed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.LeaseRenewed)
    db.execute(
        "UPDATE leases SET expires_at=? WHERE name=? AND owner=?",
        (p.expires_at, e.entity_id, p.owner),
    )


@projects(ev.LeaseReleased)
def _lease_released(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.LeaseReleased)
    db.execute(
        "UPDATE leases SET released=1, expires_at=? WHERE name=? AND owner=?",
        (e.ts, e.entity_id, p.owner),
    )


@projects(ev.AgentUsage)
def _usage(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.AgentUsage)
    _add_usage(db, e.entity_id, p)


def _add_usage(db: sqlite3.Connection, subject: str, p: ev.AgentUsage) -> None:
    """One model call into the per (subject, agent, model) sums: from an `agent.usage`
    event, or the final call folded into `turn.finished`."""
    db.execute(
        "INSERT INTO usage (subject, agent, model, calls, prompt_tokens, completion_tokens,"
        " cost_usd) VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT(subject, agent, model) DO UPDATE"
        " SET calls=calls+1, prompt_tokens=prompt_tokens+excluded.prompt_tokens,"
        " completion_tokens=completion_tokens+excluded.completion_tokens,"
        " cost_usd=cost_usd+excluded.cost_usd",
        (subject, p.agent, p.model, p.prompt_tokens, p.completion_tokens, p.cost_usd),
    )


@projects(ev.TurnStarted)
def _turn_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TurnStarted)
    add_turn(db, e.entity_id, p, e)


def add_turn(db: sqlite3.Connection, turn_id: str, p: ev.TurnStarted, e: StoredEvent) -> None:
    """A turn begins: from `turn.started`, or folded into a session job's start."""
    db.execute(
        "INSERT INTO turns (id, subject, agent, model, status, rounds, tool_calls, started_at,"
        " last_seq) VALUES (?, ?, ?, ?, 'running', 0, 0, ?, ?)",
        (turn_id, p.subject, p.agent, p.model, e.ts, e.seq),
    )


@projects(ev.TurnToolCalled)
def _turn_tool_called(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TurnToolCalled)
    db.execute(
        "INSERT OR REPLACE INTO turn_tools VALUES (?, ?, ?, ?, ?, 'running', NULL, NULL, ?, ?)",
        (e.entity_id, p.call_id, p.round, p.name, p.arguments, e.seq, e.ts),
    )
    db.execute(
        "UPDATE turns SET rounds=max(rounds, ?), tool_calls=tool_calls+1, last_seq=?"
        " WHERE id=?", (p.round, e.seq, e.entity_id))


@projects(ev.TurnToolResult)
def _turn_tool_result(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TurnToolResult)
    db.execute(
        "UPDATE turn_tools SET status=?, error_kind=?, result=? WHERE turn_id=? AND call_id=?",
        ("error" if p.is_error else "ok", p.error_kind, p.content, e.entity_id, p.call_id),
    )
    db.execute("UPDATE turns SET last_seq=? WHERE id=?", (e.seq, e.entity_id))


@projects(ev.TurnFinished)
def _turn_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.TurnFinished)
    finish_turn(db, e.entity_id, p, e)


def finish_turn(db: sqlite3.Connection, turn_id: str, p: ev.TurnFinished, e: StoredEvent
                ) -> None:
    """A turn ends: from `turn.finished`, or folded into a session job's end (issue 36)."""
    db.execute(
        "UPDATE turns SET status=?, stop_reason=?, rounds=?, model_calls=?, tool_calls=?,"
        " prompt_tokens=?, completion_tokens=?, cost_usd=?, text=?, error=?, ended_at=?,"
        " last_seq=? WHERE id=?",
        ("completed" if p.stop_reason == "completed" else
         "cancelled" if p.stop_reason == "cancelled" else
         "failed" if p.stop_reason == "error" else
         "paused" if p.stop_reason == "awaiting_approval" else
         "interrupted" if p.stop_reason == "interrupted" else "stopped",
         p.stop_reason, p.rounds, p.model_calls, p.tool_calls, p.prompt_tokens,
         p.completion_tokens, p.cost_usd, p.text, p.error, e.ts, e.seq, turn_id),
    )
    if p.usage is not None:  # the final call's usage, folded in
        _add_usage(db, p.usage_subject, p.usage)
    if p.stop_reason == "awaiting_approval":  # the calls it stopped at wait for an operator
        db.execute("UPDATE turn_tools SET status='waiting' WHERE turn_id=? AND"
                   " status='running'", (turn_id,))
    elif p.stop_reason == "interrupted":  # its worker died: a take-over closed it
        db.execute("UPDATE turn_tools SET status='interrupted' WHERE turn_id=? AND"
                   " status='running'", (turn_id,))


# ------------------------------------------------------------------ tool pins (v4)


@projects(ev.ToolDefinitionSeen)
def _tool_seen(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ToolDefinitionSeen)
    status = "pending" if p.approval_id else None
    db.execute(
        "INSERT INTO tool_pins (name, server, seen_sha256, seen_definition, seen_at,"
        " approval_id, approval_status, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(name) DO UPDATE SET server=excluded.server,"
        " seen_sha256=excluded.seen_sha256, seen_definition=excluded.seen_definition,"
        " seen_at=excluded.seen_at, approval_id=excluded.approval_id,"
        " approval_status=excluded.approval_status, last_seq=excluded.last_seq",
        (e.entity_id, p.server, p.sha256, _j(p.definition), e.ts, p.approval_id, status, e.seq),
    )


@projects(ev.ToolPinned)
def _tool_pinned(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.ToolPinned)
    db.execute(
        "UPDATE tool_pins SET pinned_sha256=?, pinned_definition=?, pinned_by=?, pinned_at=?,"
        " approval_status=NULL, last_seq=? WHERE name=?",
        (p.sha256, _j(p.definition), f"{e.actor} ({p.how})", e.ts, e.seq, e.entity_id),
    )


@projects(ev.ApprovalDecided)
def _tool_pin_decided(db: sqlite3.Connection, e: StoredEvent) -> None:
    """Approving a tool_pin approval pins the definition it was requested for (the one
    seen with it: a later change withdraws the old request first)."""
    p = e.payload
    assert isinstance(p, ev.ApprovalDecided)
    if p.decision == "approved":
        db.execute(
            "UPDATE tool_pins SET pinned_sha256=seen_sha256, pinned_definition=seen_definition,"
            " pinned_by=?, pinned_at=?, approval_status='approved', last_seq=?"
            " WHERE approval_id=? AND approval_status='pending'",
            (e.actor, e.ts, e.seq, e.entity_id),
        )
    else:
        db.execute(
            "UPDATE tool_pins SET approval_status=?, last_seq=?"
            " WHERE approval_id=? AND approval_status='pending'",
            (p.decision, e.seq, e.entity_id),
        )


@projects(ev.StoreRepaired)
def _store_repaired(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, ev.StoreRepaired)
    for value in p.values:
        for fn in _REPAIRERS.get(value.type, ()):
            fn(db, e, value)


def _touch(db: sqlite3.Connection, e: StoredEvent) -> None:
    db.execute("UPDATE tasks SET updated_at=?, last_seq=? WHERE id=?", (e.ts, e.seq, e.entity_id))
