"""A session job's end, one command (the worker's, core/sessions/runner.py): its reply,
the turn's end folded in, the messages that came meanwhile into the backlog, the next job
(backlog) or the parent's join, and a child's one announce. A flow node's or a leaf
child's session ends with its job when nothing else can come to it."""

from __future__ import annotations

import re
from typing import Any

from .. import events as ev
from ..agents.turns import TurnResult
from ..events import NewEvent
from ..memory.service import recalled_refs
from ..store.interface import WriteTx
from . import events as sev
from . import takeover
from .claims import Claim, _ours
from .flownodes import flow_node_of
from .reads import clip
from .service import INTERNAL_CHANNEL, announce, new_id, queue_job, wake_parent

ARTIFACT = re.compile(r"artifact://[^\s\"'<>)\]]+")


def _finish(tx: WriteTx, claim: Claim, owner: str, result: TurnResult | None, error: str,
            end: NewEvent | None = None) -> str:
    """Record the end of the job, folding `end` (its turn's `turn.finished`, issue 36) in;
    "lost" when another worker owns it now (nothing written)."""
    if not _ours(tx, claim, owner):
        return "lost"
    sid = claim.session_id
    turn = end.payload if end is not None and isinstance(end.payload, ev.TurnFinished) \
        else None
    if result is None and turn is None:  # no turn: close the one its claim started
        takeover.close_unrun_turn(tx, sid, claim.job_id, claim.turn_id, owner, error)
    # the columns used, here and by the announce (its fields never change: read once)
    session = tx.one("SELECT id, status, stop_requested, deliver, channel, parent_id, run_id,"
                     " agent_id, task, created_at, trace_id, hop, created_by FROM sessions"
                     " WHERE id=?", (sid,))
    assert session is not None
    stopped = session["status"] in ("stopped", "finished") or bool(session["stop_requested"])
    stop_reason = result.stop_reason if result is not None else "error"
    if result is None or stop_reason == "error":
        status = "failed"
    elif stop_reason == "cancelled":
        status = "cancelled"
    else:
        status = "done"
    reply = None
    text = result.text if result is not None else ""
    if stop_reason == "max_tool_rounds" and result is not None:  # cut off: say so, and how
        text = (text + "\n\n" if text else "") + takeover.stopped_note(sid, result.rounds)
    if status == "done":  # the reply: recorded by the job's finish (one event, issue 24.2)
        reply = sev.SessionMessage(
            msg_id=new_id("m"), role="assistant", text=text,
            meta={"kind": "reply", "job": claim.job_id, "turn": claim.turn_id,
                  "stop_reason": stop_reason, "model": f"{claim.provider}/{claim.model}",
                  "agent_id": claim.spec.agent_id,
                  "announces": [a["msg_id"] for a in claim.announces]})
    reply_id = reply.msg_id if reply is not None else None
    outcome = "ok" if stop_reason == "completed" else "timeout" \
        if stop_reason == "max_wall_clock" else "error"
    node = flow_node_of(session, claim.job_id) is not None  # a flow node's own job
    ends = _leaf_ends(tx, session, sid, status, stopped, node)
    if node:  # the node's session ends with its turn: ok when the job is done (issue 36)
        outcome = "ok" if status == "done" else "error"
    usage = result.usage if result is not None else None
    tx.emit(NewEvent(entity_id=claim.job_id, actor=owner, role="system",
                     payload=sev.TurnJobFinished(
                         session_id=sid, status=status, stop_reason=stop_reason,
                         reply_msg_id=reply_id,
                         prompt_tokens=usage.prompt_tokens if usage else 0,
                         completion_tokens=usage.completion_tokens if usage else 0,
                         cost_usd=result.cost_usd if result is not None else 0.0,
                         error=clip(error or (result.error if result else ""), 2000),
                         recalled=recalled_refs(claim.memories) if claim.rerecalled
                         else None, reply=reply, session_status=outcome if ends else None,
                         turn=turn)))
    if ends:  # a child with nothing left to do ended with its job: announce it (a flow
        if not node:  # node has no parent: its reply goes to its flow, not an announce)
            _announce_end(tx, session, owner, status, text, error, result, outcome)
    elif not stopped:
        for m in tx.all("SELECT * FROM session_inbox WHERE session_id=? AND status='pending'"
                        " ORDER BY seq", (sid,)):
            tx.emit(NewEvent(entity_id=sid, actor=owner, role="system",
                             payload=sev.SessionBacklogged(
                                 item_id=new_id("b"), kind="message",
                                 text=f"Message from {m['sender'] or 'the user'}: {m['text']}",
                                 data={"msg_id": m["msg_id"], "sender": m["sender"],
                                       "job": claim.job_id})))
        if reply_id is not None and session["deliver"] and session["channel"] \
                != INTERNAL_CHANNEL:
            tx.emit(NewEvent(entity_id=sid, actor=owner, role="system",
                             payload=sev.SessionDelivered(channel=session["channel"],
                                                          msg_id=reply_id, text=text)))
        nxt = None
        if tx.one("SELECT 1 FROM session_backlog WHERE session_id=? AND status='waiting'"
                  " LIMIT 1", (sid,)) is not None:
            nxt = queue_job(tx, sid, "backlog", owner)
        else:
            nxt = wake_parent(tx, sid, owner)  # announces that came in during this turn
        if nxt is None and session["parent_id"] and status in ("done", "failed"):
            tx.emit(NewEvent(entity_id=sid, actor=owner, role="system",
                             payload=sev.SessionFinished(status=outcome)))
            _announce_end(tx, session, owner, status, text, error, result, outcome)
    return status


def _leaf_ends(tx: WriteTx, session: dict[str, Any], sid: str, status: str, stopped: bool,
               node: bool = False) -> bool:
    """Whether this job's finish also ends its session, known before the finish is written
    so that one event says both: a child (done or failed, not stopped, nothing to deliver)
    with no message pending, no backlog waiting and no children of its own (so no announce
    can wake it). Anything else takes the general path below, which decides after.

    `node`: the job is a flow node's turn (core/flows/turns.py), whose session takes no
    more work once it ends (done, failed or cancelled), on the same conditions; it has no
    parent, so nobody is announced to. A node session that does not end so is ended by
    the flow after the job (`turns._close_session`, as before issue 36)."""
    if stopped or not (session["parent_id"] or node) or status not in (
            ("done", "failed", "cancelled") if node else ("done", "failed")):
        return False
    if session["deliver"] and session["channel"] != INTERNAL_CHANNEL:
        return False
    return tx.one(
        "SELECT 1 FROM session_inbox WHERE session_id=? AND status='pending' UNION ALL"
        " SELECT 1 FROM session_backlog WHERE session_id=? AND status='waiting' UNION ALL"
        " SELECT 1 FROM sessions WHERE parent_id=? LIMIT 1", (sid, sid, sid)) is None


def _announce_end(tx: WriteTx, child: dict[str, Any], owner: str, status: str, text: str,
                  error: str, result: TurnResult | None, outcome: str) -> None:
    """The ended child's one announce to its parent, and the parent's join."""
    stop_reason = result.stop_reason if result is not None else "error"
    summary = text if status == "done" else (error or (result.error if result
                                                      else "") or stop_reason)
    announce(tx, child, outcome, summary or "(no reply)", owner,
             artifacts=sorted(set(ARTIFACT.findall(text))),
             duration_s=tx.now - float(child["created_at"]))
    wake_parent(tx, child["parent_id"], owner)
