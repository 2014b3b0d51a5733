"""Projections of workflow runs (Lobster workflows, expert processes): `workflow_runs` and
`workflow_steps` rows from workflow.* events. Loaded on the first workflow event applied
(core/store/handlers.py: PROJECTORS_OF).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from .. import events as ev
from ..events import StoredEvent
from ..store.projections import apply, projects
from . import events as wev


def _jo(value: Any) -> str:
    """JSON keeping key order: step results come back exactly as they were (envelopes show
    objects in their original order, as Lobster does)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@projects(wev.WorkflowStarted)
def _wf_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowStarted)
    _wf_create(db, e, p)


@projects(wev.WorkflowRerun)
def _wf_rerun(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowRerun)
    _wf_create(db, e, p.started)
    for r in p.reused:  # the origin's outputs, as this run's own (ended when it started)
        _wf_step(db, e, r.step_id, r.index, "", r.status, result=r.result, ended=True)
        for bid, b in r.branches.items():
            _wf_step(db, e, bid, r.index, "branch", "done", result=b, parent=r.step_id,
                     ended=True)


def _wf_create(db: sqlite3.Connection, e: StoredEvent, p: wev.WorkflowStarted) -> None:
    num = int(e.entity_id.split("-", 1)[1])
    db.execute(
        "INSERT INTO workflow_runs (id, num, name, file, args, steps, digest, status, started_by,"
        " started_at, updated_at, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
        (e.entity_id, num, p.name, p.file, _jo(p.args), _jo(p.steps), p.digest, e.actor, e.ts,
         e.ts, e.seq),
    )


def _wf_touch(db: sqlite3.Connection, e: StoredEvent, sets: str = "",
              params: tuple[Any, ...] = ()) -> None:
    db.execute(f"UPDATE workflow_runs SET {sets}updated_at=?, last_seq=? WHERE id=?",
               (*params, e.ts, e.seq, e.entity_id))


def _wf_step(db: sqlite3.Connection, e: StoredEvent, step_id: str, idx: int, kind: str | None,
             status: str, *, attempts: int | None = None, result: Any = None,
             error: str | None = None, parent: str | None = None, ended: bool = False) -> None:
    db.execute(
        "INSERT INTO workflow_steps (run_id, step_id, idx, kind, parent, status, attempts, result,"
        " error, started_at, ended_at, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(run_id, step_id) DO UPDATE SET status=excluded.status,"
        " kind=coalesce(?, kind), attempts=coalesce(?, attempts),"
        " result=coalesce(excluded.result, result), error=coalesce(excluded.error, error),"
        " ended_at=excluded.ended_at, seq=excluded.seq",
        (e.entity_id, step_id, idx, kind or "", parent, status, attempts or 0,
         None if result is None else _jo(result), error, e.ts, e.ts if ended else None, e.seq,
         kind, attempts),
    )


def _folded(db: sqlite3.Connection, e: StoredEvent, entity_id: str, payload: ev.Payload,
            actor: str | None = None, role: str | None = None) -> None:
    """A fact folded into a workflow event (issue 24.2), projected by the handlers of the
    event it replaces, as if that event had its own line in the log at this seq."""
    apply(db, StoredEvent(seq=e.seq, ts=e.ts, entity=payload.ENTITY, entity_id=entity_id,
                          type=payload.TYPE, actor=actor or e.actor, role=role or e.role,
                          payload=payload))


@projects(wev.WorkflowStepStarted)
def _wf_step_started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowStepStarted)
    _wf_started_step(db, e, p)


def _wf_started_step(db: sqlite3.Connection, e: StoredEvent, p: wev.WorkflowStepStarted) -> None:
    _wf_step(db, e, p.step_id, p.index, p.kind, "running", attempts=p.attempt)
    _wf_touch(db, e)


@projects(wev.WorkflowStepFinished)
def _wf_step_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowStepFinished)
    _wf_step(db, e, p.step_id, p.index, None, "done", result=p.result, ended=True)
    for bid, r in p.branches.items():
        _wf_step(db, e, bid, p.index, "branch", "done", result=r, parent=p.step_id, ended=True)
    _wf_touch(db, e)
    if p.next is not None:  # the next step's start, folded in
        _wf_started_step(db, e, p.next)


@projects(wev.WorkflowStepSkipped)
def _wf_step_skipped(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowStepSkipped)
    _wf_step(db, e, p.step_id, p.index, "", "skipped",
             result={"id": p.step_id, "skipped": True}, ended=True)
    _wf_touch(db, e)


@projects(wev.WorkflowStepFailed)
def _wf_step_failed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowStepFailed)
    if p.retrying:
        _wf_step(db, e, p.step_id, p.index, None, "retrying", error=p.error)
    else:
        result = ({"id": p.step_id, "error": True, "errorMessage": p.error}
                  if p.policy != "stop" else None)
        _wf_step(db, e, p.step_id, p.index, None, "failed", result=result, error=p.error,
                 ended=True)
    _wf_touch(db, e)


@projects(wev.WorkflowPaused)
def _wf_paused(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowPaused)
    kind = p.gate if p.gate == "input" else None
    if p.started is not None and p.started.step_id == p.step_id:
        # the gate's own start, folded in (issue 24.2): its row written once, as its start
        # then its wait would leave it (the start's kind and attempt unless the wait names
        # them; the run's row is touched below)
        _wf_step(db, e, p.step_id, p.started.index, kind if kind is not None
                 else p.started.kind, "waiting", attempts=p.started.attempt, result=p.result)
    elif p.started is not None:  # what one gate wrote as four events, folded in
        _wf_started_step(db, e, p.started)
    if p.released is not None:
        _folded(db, e, f"workflow:{e.entity_id}", p.released, p.released.owner, "system")
    if p.asked is not None:
        _folded(db, e, p.approval_id, p.asked, p.asked_by, p.asked_role)
    if p.started is None or p.started.step_id != p.step_id:
        _wf_step(db, e, p.step_id, p.index, kind, "waiting", result=p.result)
    _wf_touch(db, e, "status='paused', waiting_step=?, gate=?, resume_at=?, approval_id=?,"
              " token_hash=?, request=?, identity=?, input_schema=?, subject=?, ",
              (p.step_id, p.gate, p.resume_at, p.approval_id, p.token_hash, _jo(p.request),
               _jo(p.identity), _jo(p.input_schema), _jo(p.subject)))


@projects(wev.WorkflowResumed)
def _wf_resumed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowResumed)
    if p.decided is not None and p.approval_id:  # the gate's decision, folded in
        _folded(db, e, p.approval_id, p.decided)
    db.execute("UPDATE workflow_steps SET status='done', result=?, ended_at=?, seq=?"
               " WHERE run_id=? AND step_id=?", (_jo(p.result), e.ts, e.seq, e.entity_id,
                                                 p.step_id))
    _wf_touch(db, e, "status='running', waiting_step=NULL, gate=NULL, token_hash=NULL, ")
    if p.lease is not None:
        _folded(db, e, f"workflow:{e.entity_id}", p.lease, p.lease.owner, "system")


@projects(wev.WorkflowAdopted)
def _wf_adopted(db: sqlite3.Connection, e: StoredEvent) -> None:
    _wf_touch(db, e)


@projects(wev.WorkflowInterrupted)
def _wf_interrupted(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowInterrupted)
    _wf_step(db, e, p.step_id, p.index, None, "interrupted", error=p.reason)
    request = {"prompt": p.reason, "reason": p.reason, "choices": ["retry", "skip", "cancel"]}
    _wf_touch(db, e, "status='paused', waiting_step=?, gate='interrupted', resume_at=?,"
              " approval_id=NULL, token_hash=NULL, request=?, identity=NULL, input_schema=NULL,"
              " subject=NULL, error=?, ", (p.step_id, p.index, _jo(request), p.reason))


@projects(wev.WorkflowRecovered)
def _wf_recovered(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowRecovered)
    if p.decision == "skip":
        _wf_step(db, e, p.step_id, p.index, None, "skipped",
                 result={"id": p.step_id, "skipped": True}, ended=True)
    _wf_touch(db, e, "status='running', waiting_step=NULL, gate=NULL, request=NULL, error=NULL, ")


def _wf_end(db: sqlite3.Connection, e: StoredEvent, status: str, output: Any,
            error: str | None) -> None:
    db.execute("UPDATE workflow_steps SET status='cancelled', ended_at=? WHERE run_id=? AND"
               " status IN ('waiting', 'running', 'retrying', 'interrupted')", (e.ts, e.entity_id))
    _wf_touch(db, e, "status=?, output=?, error=?, token_hash=NULL, ended_at=?, ",
              (status, None if output is None else _jo(output), error, e.ts))


@projects(wev.WorkflowFinished)
def _wf_finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowFinished)
    _wf_end(db, e, "ok", p.output, None)


@projects(wev.WorkflowCancelled)
def _wf_cancelled(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowCancelled)
    _wf_end(db, e, "cancelled", [], p.reason or None)


@projects(wev.WorkflowFailed)
def _wf_failed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, wev.WorkflowFailed)
    _wf_end(db, e, "failed", None, p.error)
