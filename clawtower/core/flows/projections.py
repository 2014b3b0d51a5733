"""Projections of the flow events (tables created by schema migration 7).

Pure functions of the event and of rows earlier events wrote (never the clock), so a replay
rebuilds the same DAG, counters and mailboxes. The counters (`waiting` on a subtask: its
unfinished dependencies; `open_children` on a coordinator: its unfinished subtasks) are
what keeps scheduling O(nodes + edges): a reply touches its own row, its parent's and its
dependents', never a scan.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ..events import StoredEvent
from ..sessions import events as sev
from ..store.projections import canonical_json as _j
from ..store.projections import projects
from . import events as fev

OPEN = ("pending", "dispatched", "running", "waiting", "synthesizing")


def _flow(db: sqlite3.Connection, e: StoredEvent, sets: str = "",
          params: tuple[Any, ...] = ()) -> None:
    db.execute(f"UPDATE flows SET {sets}{', ' if sets else ''}updated_at=?, last_seq=?"
               " WHERE id=?", (*params, e.ts, e.seq, e.entity_id))


@projects(fev.FlowStarted)
def _started(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowStarted)
    _flow_row(db, e, p)
    db.execute(
        "INSERT INTO flow_tasks (task_id, flow_id, parent_id, local_id, depth, ord, agent,"
        " instruction, context, depends_on, dependents, waiting, status, last_seq)"
        " VALUES (?, ?, NULL, ?, 0, 0, ?, ?, ?, '[]', '[]', 0, 'pending', ?)",
        (p.root_task, e.entity_id, p.root_task.split("/", 1)[1], p.agent, p.instruction,
         _j(p.context), e.seq))


_RERUN_COLS = ("task_id", "parent_id", "local_id", "depth", "ord", "agent", "instruction",
               "context", "depends_on", "dependents", "waiting", "open_children", "children",
               "status", "mode", "result", "tokens")


@projects(fev.FlowRerun)
def _rerun(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowRerun)
    _flow_row(db, e, p.started)
    db.executemany(
        f"INSERT INTO flow_tasks (flow_id, last_seq, {', '.join(_RERUN_COLS)}) VALUES"
        f" (?, ?, {', '.join('?' * len(_RERUN_COLS))})",
        [(e.entity_id, e.seq, *(t.get(c) for c in _RERUN_COLS)) for t in p.tasks])
    done = sum(1 for t in p.tasks if t["status"] == "done")
    _flow(db, e, "nodes=?, done=?", (len(p.tasks), done))


def _flow_row(db: sqlite3.Connection, e: StoredEvent, p: fev.FlowStarted) -> None:
    num = int(e.entity_id.split("-", 1)[1])
    db.execute(
        "INSERT INTO flows (id, num, agent, instruction, status, root_task, limits, split,"
        " created_by, created_at, updated_at, last_seq, executor)"
        " VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
        (e.entity_id, num, p.agent, p.instruction, p.root_task, _j(p.limits), int(p.split),
         p.by, e.ts, e.ts, e.seq, p.executor))


@projects(fev.FlowTaskSent)
def _task_sent(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowTaskSent)
    ctx = _j(p.context)  # encoded once for its three uses
    db.execute(
        "INSERT INTO flow_messages (msg_id, flow_id, task_id, kind, from_agent, to_agent, body,"
        " context, status, seq, at) VALUES (?, ?, ?, 'TASK', ?, ?, ?, ?, 'inbox', ?, ?)",
        (p.msg_id, e.entity_id, p.task_id, p.from_agent, p.to_agent, p.instruction,
         ctx, e.seq, e.ts))
    db.execute("UPDATE flow_tasks SET status='dispatched', task_msg=?, context=?,"
               " session_id=nullif(?, ''), dispatched_at=?, last_seq=? WHERE task_id=?",
               (p.msg_id, ctx, p.session_id, e.ts, e.seq, p.task_id))
    _say(db, e, p.session_id, f"{p.msg_id}@in", "user",
         task_text(p.task_id, p.instruction, ctx if p.context else ""), p.task_id, "TASK")


def task_text(task_id: str, instruction: str, context: str) -> str:
    """A TASK as its agent's session shows it."""
    ctx = "" if context in ("", "{}", '""') else context
    return f"TASK {task_id}\n{instruction}" + (f"\n\nCONTEXT: {ctx}" if ctx else "")


def _say(db: sqlite3.Connection, e: StoredEvent, sid: str | None, msg_id: str, role: str,
         text: str, task_id: str, kind: str) -> None:
    """A message of the agent's flow session, derived from the flow event itself (the
    flow's messages are the session's transcript: no second event per message)."""
    if not sid:
        return
    # the session row itself is touched when its flow ends (session.finished), not per
    # message: the flow's own events are what followers watch while it runs
    db.execute("INSERT INTO session_messages VALUES (?, ?, ?, ?, ?, ?, ?)",
               (e.seq, sid, msg_id, role, text, _j({"flow": e.entity_id, "task": task_id,
                                                    "msg": msg_id.split("@")[0],
                                                    "kind": kind}), e.ts))


@projects(fev.FlowTaskTaken)
def _task_taken(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowTaskTaken)
    _take(db, e, p.task_id)


@projects(sev.SessionCreated)
def _node_session(db: sqlite3.Connection, e: StoredEvent) -> None:
    """A flow node's own session (core/flows/turns.py), created with its turn queued, takes
    the node's task as `flow.task_taken` would (issue 36: the same fact, one event fewer).
    Only a session saying so (`task.taken`): one logged before is followed by its
    `flow.task_taken` (or by none, the turn being faster), and replays as it did."""
    p = e.payload
    assert isinstance(p, sev.SessionCreated)
    if p.task.get("taken") is True and isinstance(tid := p.task.get("flow_task"), str):
        _take(db, e, tid)


def _take(db: sqlite3.Connection, e: StoredEvent, task_id: str) -> None:
    db.execute("UPDATE flow_tasks SET status='running', started_at=?, last_seq=?"
               " WHERE task_id=? AND status='dispatched'", (e.ts, e.seq, task_id))


def _archive(db: sqlite3.Connection, msg_id: str, e: StoredEvent) -> None:
    db.execute("UPDATE flow_messages SET status='archived', processed_at=? WHERE msg_id=?"
               " AND status='inbox'", (e.ts, msg_id))


@projects(fev.FlowDecomposed)
def _decomposed(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowDecomposed)
    parent = db.execute("SELECT depth FROM flow_tasks WHERE task_id=?",
                        (p.task_id,)).fetchone()
    depth = int(parent[0]) + 1 if parent else 1
    dependents: dict[str, list[str]] = {str(s["id"]): [] for s in p.subtasks}
    for s in p.subtasks:
        for dep in s.get("depends_on", []):
            dependents[str(dep)].append(str(s["id"]))
    db.executemany(
        "INSERT INTO flow_tasks (task_id, flow_id, parent_id, local_id, depth, ord, agent,"
        " instruction, context, depends_on, dependents, waiting, status, last_seq)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)",
        [(f"{p.task_id}/{s['id']}", e.entity_id, p.task_id, str(s["id"]), depth, i,
          str(s["agent"]), str(s["instruction"]), _j(s.get("context", "")),
          _j(list(s.get("depends_on", []))), _j(dependents[str(s["id"])]),
          len(s.get("depends_on", [])), e.seq) for i, s in enumerate(p.subtasks)])
    db.execute("UPDATE flow_tasks SET session_id=(SELECT session_id FROM flow_sessions s"
               " WHERE s.flow_id=flow_tasks.flow_id AND s.agent=flow_tasks.agent)"
               " WHERE parent_id=?", (p.task_id,))
    n = len(p.subtasks)
    sid = db.execute("SELECT session_id FROM flow_tasks WHERE task_id=?",
                     (p.task_id,)).fetchone()
    if sid and sid[0]:
        plan = "; ".join(f"{s['id']} -> {s['agent']}" + (
            f" after {', '.join(s['depends_on'])}" if s.get("depends_on") else "")
            for s in p.subtasks[:50]) + (f"; and {n - 50} more" if n > 50 else "")
        _say(db, e, sid[0], f"{p.msg_id}@plan", "assistant",
             f"Decomposed into {n} subtasks: {plan}", p.task_id, "DECOMPOSE")
    db.execute("UPDATE flow_tasks SET status='waiting', mode='decompose', open_children=?,"
               " children=?, tokens=tokens+?, last_seq=? WHERE task_id=?",
               (n, n, p.tokens, e.seq, p.task_id))
    _archive(db, p.msg_id, e)
    _flow(db, e, "nodes=nodes+?, tokens=tokens+?", (n, p.tokens))


@projects(fev.FlowReplied)
def _replied(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowReplied)
    ok = p.kind == "REPLY"
    db.execute(
        "INSERT INTO flow_messages (msg_id, flow_id, task_id, kind, from_agent, to_agent, body,"
        " context, status, seq, at, processed_at) VALUES (?, ?, ?, ?, ?, ?, ?, '{}',"
        " 'archived', ?, ?, ?)",
        (p.msg_id, e.entity_id, p.task_id, p.kind, p.from_agent, p.to_agent, p.body, e.seq,
         e.ts, e.ts))
    _archive(db, p.in_reply_to, e)
    row = db.execute("SELECT parent_id, dependents, session_id FROM flow_tasks WHERE"
                     " task_id=?", (p.task_id,)).fetchone()
    if row is not None:
        _say(db, e, row[2], f"{p.msg_id}@out", "assistant", p.body, p.task_id, p.kind)
    db.execute(f"UPDATE flow_tasks SET status=?, {'result' if ok else 'error'}=?,"
               " mode=coalesce(nullif(?, ''), mode), tokens=tokens+?, ended_at=?, last_seq=?"
               " WHERE task_id=?",
               ("done" if ok else "failed", p.body, p.mode, p.tokens, e.ts, e.seq, p.task_id))
    _flow(db, e, "done=done+?, tokens=tokens+?", (int(ok), p.tokens))
    if not ok or row is None or row[0] is None:
        return
    parent, dependents = str(row[0]), json.loads(row[1])
    if dependents:
        db.executemany("UPDATE flow_tasks SET waiting=waiting-1 WHERE task_id=?",
                       [(f"{parent}/{d}",) for d in dependents])
    db.execute("UPDATE flow_tasks SET open_children=open_children-1, status=CASE WHEN"
               " open_children=1 AND status='waiting' THEN 'synthesizing' ELSE status END,"
               " last_seq=? WHERE task_id=?", (e.seq, parent))


@projects(fev.FlowMessageIgnored)
def _ignored(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowMessageIgnored)
    db.execute("INSERT INTO flow_ignored VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
               (e.seq, e.entity_id, p.msg_id, p.task_id, p.kind, p.agent, p.reason, e.ts))
    _flow(db, e, "ignored=ignored+1")


@projects(fev.FlowFinished)
def _finished(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowFinished)
    marks = ",".join("?" * len(OPEN))
    # the open tasks' TASK messages leave the inboxes (through the tasks' index, no scan)
    db.execute(f"UPDATE flow_messages SET status='cancelled', processed_at=? WHERE msg_id IN"
               f" (SELECT task_msg FROM flow_tasks WHERE flow_id=? AND status IN ({marks}))"
               " AND status='inbox'", (e.ts, e.entity_id, *OPEN))
    db.execute(f"UPDATE flow_tasks SET status='cancelled', ended_at=?, last_seq=? WHERE"
               f" flow_id=? AND status IN ({marks})", (e.ts, e.seq, e.entity_id, *OPEN))
    _flow(db, e, "status=?, result=?, error=?, ended_at=?",
          (p.status, p.result or None, p.error or None, e.ts))


@projects(fev.FlowSessionLinked)
def _session_linked(db: sqlite3.Connection, e: StoredEvent) -> None:
    p = e.payload
    assert isinstance(p, fev.FlowSessionLinked)
    db.execute("INSERT INTO flow_sessions VALUES (?, ?, ?)", (e.entity_id, p.agent,
                                                               p.session_id))
