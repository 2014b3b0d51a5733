"""Projections of the ACP bridge events (tables created by schema migration 9).

Pure functions of the event and of rows earlier events wrote, never the clock.
"""

from __future__ import annotations

import sqlite3

from ..events import StoredEvent
from ..store.projections import canonical_json as _j
from ..store.projections import projects
from . import events as aev

TEXT_KEPT = 20_000  # characters of a run's streamed text kept on its row


@projects(aev.AcpRunStarted)
def _run_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRunStarted)
    db.execute(
        "INSERT INTO acp_runs (id, harness, workspace, subject, prompt, command, grp, driver,"
        " status, started_at, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?)",
        (e.entity_id, p.harness, p.workspace, p.subject, p.prompt, _j(p.command), p.group,
         p.driver, e.ts, e.seq))


@projects(aev.AcpRunGroup)
def _run_group(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRunGroup)
    db.execute("UPDATE acp_runs SET grp=?, last_seq=? WHERE id=?", (p.group, e.seq, e.entity_id))


@projects(aev.AcpRunInitialized)
def _run_initialized(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRunInitialized)
    db.execute("UPDATE acp_runs SET protocol_version=?, agent_info=?, acp_session_id=?,"
               " last_seq=? WHERE id=?",
               (p.protocol_version, _j(p.agent_info), p.acp_session_id, e.seq, e.entity_id))


@projects(aev.AcpText)
def _text(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpText)
    if p.kind != "message":
        return
    db.execute("UPDATE acp_runs SET text=substr(text || ?, 1, ?), last_seq=? WHERE id=?",
               (p.text, TEXT_KEPT, e.seq, e.entity_id))


@projects(aev.AcpToolCall)
def _tool_call(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpToolCall)
    old = db.execute("SELECT * FROM acp_tool_calls WHERE run_id=? AND call_id=?",
                     (e.entity_id, p.call_id)).fetchone()
    if old is None:
        db.execute("INSERT INTO acp_tool_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (e.entity_id, p.call_id, p.title, p.kind, p.status or "pending",
                    _j(p.locations), _j(p.content), e.seq, e.seq))
    else:  # an update names only what changed
        db.execute(
            "UPDATE acp_tool_calls SET title=?, kind=?, status=?, locations=?, content=?,"
            " last_seq=? WHERE run_id=? AND call_id=?",
            (p.title or old[2], p.kind or old[3], p.status or old[4],
             _j(p.locations) if p.locations else old[5],
             _j(p.content) if p.content else old[6], e.seq, e.entity_id, p.call_id))
    for c in p.content:
        if c.get("type") == "diff":
            db.execute("INSERT INTO acp_evidence VALUES (?, ?, 'diff', ?, ?)",
                       (e.seq, e.entity_id, _j({"call_id": p.call_id, **c}), e.ts))
            break
    db.execute("UPDATE acp_runs SET last_seq=? WHERE id=?", (e.seq, e.entity_id))


@projects(aev.AcpPlan)
def _plan(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpPlan)
    db.execute("INSERT INTO acp_evidence VALUES (?, ?, 'plan', ?, ?)",
               (e.seq, e.entity_id, _j({"entries": p.entries}), e.ts))


@projects(aev.AcpCancelRequested)
def _cancel(db: sqlite3.Connection, e: StoredEvent) -> None:
    db.execute("UPDATE acp_runs SET cancel_requested=1, last_seq=? WHERE id=?",
               (e.seq, e.entity_id))


@projects(aev.AcpRunFinished)
def _run_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRunFinished)
    db.execute("UPDATE acp_runs SET status=?, stop_reason=?, error=?, ended_at=?, last_seq=?"
               " WHERE id=?", (p.status, p.stop_reason, p.error, e.ts, e.seq, e.entity_id))


@projects(aev.AcpPermissionRequested)
def _permission(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpPermissionRequested)
    db.execute(
        "INSERT INTO acp_permissions (approval_id, run_id, harness, workspace, call_id,"
        " tool_kind, title, locations, command, options, status, requested_at, seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
        (e.entity_id, p.run_id, p.harness, p.workspace, p.call_id, p.tool_kind, p.title,
         _j(p.locations), p.command, _j(p.options), e.ts, e.seq))


@projects(aev.AcpPermissionAnswered)
def _answered(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpPermissionAnswered)
    db.execute(
        "UPDATE acp_permissions SET status='answered', outcome=?, option_id=?, option_kind=?,"
        " source=?, rule_id=?, answered_by=?, answered_at=? WHERE approval_id=?",
        (p.outcome, p.option_id, p.option_kind, p.source, p.rule_id, e.actor, e.ts,
         e.entity_id))


@projects(aev.AcpRuleSet)
def _rule_set(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRuleSet)
    # one live rule per key: a new "always" replaces the old one
    db.execute("UPDATE acp_rules SET active=0, revoked_by=?, revoked_at=?, reason='replaced'"
               " WHERE workspace=? AND harness=? AND tool_kind=? AND active=1",
               (e.actor, e.ts, p.workspace, p.harness, p.tool_kind))
    db.execute("INSERT INTO acp_rules (id, workspace, harness, tool_kind, decision,"
               " approval_id, created_by, created_at, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
               (e.entity_id, p.workspace, p.harness, p.tool_kind, p.decision, p.approval_id,
                e.actor, e.ts))


@projects(aev.AcpRuleRevoked)
def _rule_revoked(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpRuleRevoked)
    db.execute("UPDATE acp_rules SET active=0, revoked_by=?, revoked_at=?, reason=? WHERE id=?",
               (e.actor, e.ts, p.reason, e.entity_id))


@projects(aev.AcpWriteIntended)
def _write_intended(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpWriteIntended)
    db.execute("INSERT INTO acp_writes VALUES (?, ?, ?, ?, ?, 'intended', ?, NULL)",
               (p.idem_key, e.entity_id, p.path, p.sha256, p.size, e.ts))


@projects(aev.AcpWriteDone)
def _write_done(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, aev.AcpWriteDone)
    db.execute("UPDATE acp_writes SET status=?, done_at=? WHERE idem_key=?",
               (p.outcome, e.ts, p.idem_key))
