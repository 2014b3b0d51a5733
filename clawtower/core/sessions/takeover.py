"""What a take-over does with the attempt that died (issue 22), and how `store verify` finds
turns nobody will ever close.

A job whose worker died is claimed again (claims._claim, attempt + 1). In that same commit:

- the dead attempt's turn is closed: `turn.finished` with stop_reason `interrupted`, its
  rounds and tool calls as recorded, its model calls and usage summed from the session's
  `agent.usage` events since the turn began (nothing it spent is dropped);
- if messages are waiting, the interrupted task goes to the backlog exactly as a live steer
  puts it (a `resume` item naming the rounds done) and the messages are taken as steered
  ones, so the new turn answers them first and the next job resumes the task.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .. import events as ev
from ..events import NewEvent
from ..ids import new_id
from ..store.interface import Store, WriteTx
from . import events as sev

INTERRUPTED = "interrupted"


def _turn_usage(tx: WriteTx, sid: str, turn_id: str, job_id: str
                ) -> tuple[int, int, int, float]:
    """(model calls, prompt tokens, completion tokens, cost) of a turn of session `sid`:
    its usage events lie between its start and the next turn of the session. A turn starts
    with `turn.started`, or (issue 24.2) with its job's `turnjob.started` carrying it, or
    (issue 36) with the session's `session.created` carrying that start."""
    start = tx.one("SELECT seq FROM events WHERE entity_id=? AND type='turn.started'",
                   (turn_id,)) or tx.one(
        "SELECT seq FROM events WHERE entity_id=? AND type='turnjob.started' AND"
        " json_extract(payload, '$.turn_id')=?", (job_id, turn_id)) or tx.one(
        "SELECT seq FROM events WHERE entity_id=? AND type='session.created' AND"
        " json_extract(payload, '$.start.turn_id')=?", (sid, turn_id))
    if start is None:
        return 0, 0, 0, 0.0
    nxt = tx.one("SELECT min(seq) AS s FROM events WHERE seq > ? AND ((type='turn.started'"
                 " AND json_extract(payload, '$.subject')=?) OR (type='turnjob.started' AND"
                 " json_extract(payload, '$.turn.subject')=?))", (start["seq"], sid, sid))
    end = nxt["s"] if nxt and nxt["s"] is not None else 1 << 62
    row = tx.one(
        "SELECT count(*) AS n, coalesce(sum(json_extract(payload, '$.prompt_tokens')), 0) AS p,"
        " coalesce(sum(json_extract(payload, '$.completion_tokens')), 0) AS c,"
        " coalesce(sum(json_extract(payload, '$.cost_usd')), 0) AS cost FROM events WHERE"
        " entity_id=? AND type='agent.usage' AND seq > ? AND seq < ?",
        (sid, start["seq"], end))
    if row is None:
        return 0, 0, 0, 0.0
    return int(row["n"]), int(row["p"]), int(row["c"]), float(row["cost"])


def first_start(tx: WriteTx, sid: str, job_id: str) -> int | None:
    """The seq the job's first attempt started at: its first `turnjob.started`, or (issue
    36) its session's `session.created` when the job was claimed in that command."""
    row = tx.one("SELECT min(seq) AS s FROM events WHERE entity='turnjob' AND entity_id=?"
                 " AND type='turnjob.started'", (job_id,))
    if row is not None and row["s"] is not None:
        return int(row["s"])
    row = tx.one("SELECT seq FROM events WHERE entity='session' AND entity_id=? AND"
                 " type='session.created' AND json_extract(payload, '$.job_id')=? AND"
                 " json_extract(payload, '$.start') IS NOT NULL", (sid, job_id))
    return int(row["seq"]) if row is not None else None


def close_dead_turn(tx: WriteTx, job: dict[str, Any], owner: str) -> int | None:
    """Close the turn of the job's previous attempt if it is still open; the tool rounds it
    had done (None when there was no open turn to close)."""
    turn_id = job.get("turn_id")
    if not turn_id:
        return None
    turn = tx.one("SELECT * FROM turns WHERE id=?", (turn_id,))
    if turn is None or turn["status"] != "running":
        return None
    calls, prompt, completion, cost = _turn_usage(tx, job["session_id"], turn_id, job["id"])
    tx.emit(NewEvent(entity_id=turn_id, actor=owner, role="system", payload=ev.TurnFinished(
        stop_reason=INTERRUPTED, rounds=int(turn["rounds"]), model_calls=calls,
        tool_calls=int(turn["tool_calls"]), prompt_tokens=prompt,
        completion_tokens=completion, cost_usd=cost,
        error=f"the worker running it ({job.get('owner')}) died; job {job['id']} was taken"
              f" over by {owner}")))
    return int(turn["rounds"])


def close_unrun_turn(tx: WriteTx, sid: str, job_id: str, turn_id: str, owner: str,
                     error: str) -> None:
    """A job that ends with no turn result (its turn never ran, or died with a bug) closes
    the turn its claim started, so no `running` turn is left behind (issue 24.2)."""
    turn = tx.one("SELECT status, rounds, tool_calls FROM turns WHERE id=?", (turn_id,))
    if turn is None or turn["status"] != "running":
        return
    calls, prompt, completion, cost = _turn_usage(tx, sid, turn_id, job_id)
    tx.emit(NewEvent(entity_id=turn_id, actor=owner, role="system", payload=ev.TurnFinished(
        stop_reason="error", rounds=int(turn["rounds"]), model_calls=calls,
        tool_calls=int(turn["tool_calls"]), prompt_tokens=prompt,
        completion_tokens=completion, cost_usd=cost,
        error=error[:2000] or "the job ended before its turn ran")))


def resume_text(task: str, rounds: int, last: str) -> str:
    """A `resume` backlog item's text: one wording for a live steer and a take-over."""
    return (f"Resume the interrupted task: {' '.join(task.split())} (interrupted after"
            f" {rounds} tool round(s)" + (f"; last result: {_clip(last, 200)}" if last
                                          else "") + ")")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def resumed_task(item: dict[str, Any]) -> tuple[str, int]:
    """A `resume` backlog item's task and the tool rounds done on it (its `data`)."""
    d = json.loads(item["data"] or "{}")
    return str(d.get("task") or ""), int(d.get("rounds_done") or 0)


def job_task(tx: WriteTx, job: dict[str, Any]) -> tuple[str, int]:
    """What the job was working on and the tool rounds done on it before the job: the task
    a resume item it drained names (continued, not nested), else its last steered message,
    else its own messages."""
    resumed = tx.all("SELECT data FROM session_backlog WHERE drained_by=? AND kind='resume'"
                     " ORDER BY seq", (job["id"],))
    if resumed:
        return resumed_task(resumed[-1])
    mine = [(r["text"], json.loads(r["meta"])) for r in tx.all(
        "SELECT text, meta FROM session_messages WHERE session_id=? AND role='user' AND"
        " json_extract(meta, '$.job')=? ORDER BY seq", (job["session_id"], job["id"]))]
    steered = [t for t, m in mine if m.get("steered")]
    return (steered[-1] if steered else "\n".join(t for t, _ in mine)), 0


def stopped_note(sid: str, rounds: int) -> str:
    """What a reply cut off by max_tool_rounds says, so nobody mistakes it for an answer."""
    return (f"[Stopped after {rounds} tool round(s): the turn's limit (max_tool_rounds). The"
            f" task is not finished; continue it with /continue (clawtower session resume"
            f" {sid}).]")


def backlog_interrupted(tx: WriteTx, job: dict[str, Any], owner: str, rounds: int,
                        task: str) -> str:
    """The interrupted task as a `resume` backlog item, worded as a live steer words it."""
    item = new_id("b")
    tx.emit(NewEvent(entity_id=job["session_id"], actor=owner, role="system",
                     payload=sev.SessionBacklogged(
                         item_id=item, kind="resume", text=resume_text(task, rounds, ""),
                         data={"job": job["id"], "turn": job.get("turn_id"), "task": task,
                               "rounds_done": rounds, "round": rounds,
                               "taken_over": True})))
    return item


async def open_turns(store: Store, now: float | None = None) -> list[str]:
    """Session turns still `running` that no live job runs (their worker died and nobody
    took the job over, or it was settled without closing them): one line each."""
    rows = await store.fetchall(
        "SELECT t.id, t.subject, t.rounds FROM turns t JOIN sessions s ON s.id = t.subject"
        " WHERE t.status='running' ORDER BY t.started_at")
    if not rows:
        return []
    at = time.time() if now is None else now
    out = []
    for r in rows:
        job = await store.fetchone(
            "SELECT j.id, j.status, j.turn_id, l.released, l.expires_at FROM turn_jobs j"
            " LEFT JOIN leases l ON l.name = 'worker:' || j.owner WHERE j.turn_id=?",
            (r["id"],))
        live = (job is not None and job["status"] == "running" and job["released"] == 0
                and job["expires_at"] is not None and float(job["expires_at"]) > at)
        if live:
            continue
        why = ("no job runs it" if job is None else
               f"job {job['id']} is {job['status']}" if job["status"] != "running" else
               f"job {job['id']}'s worker lease has expired (not yet taken over)")
        out.append(f"turn {r['id']} (session {r['subject']}): open after {r['rounds']}"
                   f" round(s), {why}")
    return out

