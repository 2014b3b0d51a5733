"""Confirm-tier tool calls in sessions: the durable half of the turn's approval gate.

The turn loop (core/agents/turns.py) stops at a confirm-tier call with "awaiting_approval".
The session worker then, in one commit, puts a `tool_call` approval in the one approvals list
(naming session, agent, tool, redacted arguments and the model's stated reason) and records
`turnjob.waiting` with the turn's checkpoint: no worker, thread or process holds the job
while it waits, so it survives kill -9 and restarts, and any process may decide it.

Deciding (`decide`, from `clawtower approve|reject`, the console, or the timeout sweep)
records the decision and `turnjob.resumed` in one commit; the job is queued again and the
next worker resumes the turn from the checkpoint. An approved call runs once: its intent is
committed before it runs and its result after (`toolcall.intent` / `toolcall.done`); a worker
that finds an intent without a result after a crash does not run it again and tells the
model so. A rejected (or expired) call becomes a policy message to the model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .. import events as ev
from ..agents.provider import ChatMessage, ToolCall
from ..errors import Conflict, NotFound
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from ..tools.approval import ToolApprovalPolicy
from ..tools.types import ToolResult
from . import events as sev

KIND = "tool_call"
POLICY_ACTOR = "tool-policy"
PREVIEW_CHARS = 4000


def checkpoint(messages: list[ChatMessage], pending: list[ToolCall], rounds: int
               ) -> dict[str, Any]:
    """What a resumed turn goes on from. Without the system prompt: it holds ephemeral
    blocks (subagent announces, recalled memories) that are never stored; the resumed turn
    renders it afresh."""
    messages = [m for m in messages if m.role != "system"]
    return {"messages": [m.model_dump(mode="json") for m in messages],
            "pending": [p.model_dump(mode="json") for p in pending], "rounds": rounds}


@dataclass
class Resume:
    """What a claim of a resumed job carries: the checkpoint and the decision."""

    approval_id: str
    messages: list[ChatMessage]
    pending: list[ToolCall]
    rounds: int
    decision: str  # approved | rejected
    decided_by: str
    reason: str
    done: ToolResult | None  # the approved call already ran (recorded before a crash)
    interrupted: bool  # its intent was recorded, its result never was


def _pretty(arguments: str) -> str:
    try:
        text = json.dumps(json.loads(arguments or "{}"), indent=2, sort_keys=True,
                          ensure_ascii=False)
    except ValueError:
        text = arguments
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "\n…"


def pause(tx: WriteTx, *, session_id: str, job_id: str, turn_id: str, agent: str,
          requester: str, messages: list[ChatMessage], pending: list[ToolCall], rounds: int,
          reason: str, policy: ToolApprovalPolicy | None, redacted_args: str,
          prompt_tokens: int, completion_tokens: int, cost_usd: float) -> str:
    """Record the approval and the waiting job in one commit; returns the approval id."""
    call = pending[0]
    timeout = policy.timeout_s if policy is not None else None
    on_timeout = policy.on_timeout if policy is not None else "reject"
    context = {"session": session_id, "job": job_id, "turn": turn_id, "agent": agent,
               "tool": call.name, "call_id": call.id, "arguments": redacted_args,
               "reason": reason[:2000], "timeout_s": timeout, "on_timeout": on_timeout,
               "deadline": tx.now + timeout if timeout is not None else None}
    why = f"\n\nThe agent's stated reason: {reason.strip()[:500]}" if reason.strip() else ""
    approval_id = c.request_approval(
        tx, kind=KIND, subject=session_id, title=f"{agent}: call {call.name}",
        prompt=(f"Session {session_id}: agent {agent} wants to call {call.name} (confirm"
                f" tier). Approve to run it once; reject to tell the agent no.{why}"),
        context=context, preview=_pretty(redacted_args), actor=requester,
        role=Role.ORCHESTRATOR,
        required_approver=policy.required_approver if policy is not None else None,
        require_different_approver=bool(policy and policy.require_different_approver))
    tx.emit(NewEvent(entity_id=job_id, actor=agent, role="system", payload=sev.TurnJobWaiting(
        session_id=session_id, approval_id=approval_id, turn_id=turn_id, tool=call.name,
        checkpoint=checkpoint(messages, pending, rounds), prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens, cost_usd=cost_usd)))
    return approval_id


def decide(tx: WriteTx, approval_id: str, approve: bool, by: str, reason: str,
           role: Role = Role.OPERATOR) -> dict[str, Any]:
    """Decide a `tool_call` approval and queue its job again, in one commit. A decision
    for a session that was stopped (or a job no longer waiting) is refused and recorded."""
    a = tx.one("SELECT * FROM approvals WHERE id=?", (approval_id,))
    if a is None:
        raise NotFound(f"approval {approval_id!r}: no such approval")
    ctx = json.loads(a["context"]) if isinstance(a["context"], str) else {}
    job = tx.one("SELECT * FROM turn_jobs WHERE id=?", (ctx.get("job", ""),))
    session = tx.one("SELECT * FROM sessions WHERE id=?", (a["subject"],))
    if a["status"] == "pending" and (job is None or job["status"] != "waiting"
                                     or session is None or session["stop_requested"]):
        state = "stopped" if session is None or session["stop_requested"] else \
            f"its job is {job['status'] if job else 'gone'}"
        tx.emit(NewEvent(entity_id=approval_id, actor=by or "operator", role=role.value,
                         payload=ev.PermissionRefused(action="approval.decide",
                                                      target=approval_id,
                                                      reason=f"session {a['subject']}:"
                                                             f" {state}")))
        tx.defer_error(Conflict(f"approval {approval_id!r}: session {a['subject']} is {state};"
                                " the call will not run"))
        return {}
    out = c.decide_approval(tx, approval_id, approve, by, reason, role)
    if not out:
        return out  # refused (wrong approver): recorded by decide_approval
    assert job is not None
    tx.emit(NewEvent(entity_id=job["id"], actor=by, role="system", payload=sev.TurnJobResumed(
        session_id=a["subject"], approval_id=approval_id,
        decision=out["decision"])))
    return {**out, "session": a["subject"], "job": job["id"], "tool": ctx.get("tool", "")}


def withdraw(tx: WriteTx, session_id: str, by: str, reason: str) -> list[str]:
    """The session stops: its waiting calls' approvals are withdrawn (never run)."""
    ids = []
    for a in tx.all("SELECT id FROM approvals WHERE kind=? AND subject=? AND status='pending'",
                    (KIND, session_id)):
        tx.emit(NewEvent(entity_id=a["id"], actor=by, role="system",
                         payload=ev.ApprovalDecided(decision="withdrawn",
                                                    reason=reason or "session stopped")))
        ids.append(a["id"])
    return ids


def load_resume(tx: WriteTx, job_id: str) -> Resume | None:
    """The checkpoint and decision of a job queued again by `decide` (None if it never
    waited, or its decision is missing)."""
    rows = tx.all("SELECT type, payload FROM events WHERE entity='turnjob' AND entity_id=?"
                  " AND type IN ('turnjob.waiting', 'toolcall.intent', 'toolcall.done')"
                  " ORDER BY seq", (job_id,))
    waiting: dict[str, Any] | None = None
    intent = done = None
    for r in rows:
        p = json.loads(r["payload"])
        if r["type"] == "turnjob.waiting":
            waiting, intent, done = p, None, None
        elif waiting is not None and p.get("approval_id") == waiting["approval_id"]:
            if r["type"] == "toolcall.intent":
                intent = p
            else:
                done = p
    if waiting is None:
        return None
    a = tx.one("SELECT * FROM approvals WHERE id=?", (waiting["approval_id"],))
    if a is None or a["status"] not in ("approved", "rejected"):
        return None
    cp = waiting["checkpoint"]
    return Resume(
        approval_id=a["id"],
        messages=[ChatMessage.model_validate(m) for m in cp["messages"]],
        pending=[ToolCall.model_validate(p) for p in cp["pending"]],
        rounds=int(cp.get("rounds", 0)), decision=a["status"],
        decided_by=a["decided_by"] or "", reason=a["reason"] or "",
        done=ToolResult(content=done["content"], is_error=done["is_error"],
                        error_kind=done["error_kind"]) if done is not None else None,
        interrupted=intent is not None and done is None)


def rejected_result(name: str, by: str, reason: str) -> ToolResult:
    why = f": {reason}" if reason.strip() else ""
    return ToolResult(content=f"{name}: rejected by {by or 'an operator'}{why}. The call was"
                      " not made; do not try it again unless the user asks.", is_error=True,
                      error_kind="policy")


def interrupted_result(name: str, what: str = "approved, but the worker running it") -> ToolResult:
    """A call whose intent (or `turn.tool_called`) was recorded and its result never was:
    not run again, and the model is told it may have taken effect."""
    return ToolResult(content=f"{name}: {what} stopped before its result was recorded; it was"
                      " NOT run again (it may have taken effect). Check before retrying.",
                      is_error=True, error_kind="interrupted")


def intent_event(job_id: str, session_id: str, approval_id: str, call: ToolCall,
                 owner: str) -> NewEvent:
    return NewEvent(entity_id=job_id, actor=owner, role="system", payload=sev.ToolCallIntent(
        session_id=session_id, approval_id=approval_id, call_id=call.id, name=call.name,
        owner=owner))


def done_event(job_id: str, session_id: str, approval_id: str, call: ToolCall,
               result: ToolResult, owner: str) -> NewEvent:
    return NewEvent(entity_id=job_id, actor=owner, role="system", payload=sev.ToolCallDone(
        session_id=session_id, approval_id=approval_id, call_id=call.id,
        content=result.content, is_error=result.is_error, error_kind=result.error_kind))


async def sweep(store: Store, now: float | None = None) -> list[dict[str, Any]]:
    """Apply `on_timeout` to every overdue `tool_call` approval: `reject` rejects it (the
    model is told), `escalate` records `toolcall.escalated` once and keeps it open."""
    now = time.time() if now is None else now
    rows = await store.fetchall(
        "SELECT id, context FROM approvals WHERE status='pending' AND kind=?", (KIND,))
    done: list[dict[str, Any]] = []
    for r in rows:
        ctx = json.loads(r["context"])
        deadline = ctx.get("deadline")
        if deadline is None or now < float(deadline):
            continue
        if ctx.get("on_timeout") == "escalate":
            if await store.fetchone("SELECT 1 FROM events WHERE entity='turnjob' AND"
                                    " entity_id=? AND type='toolcall.escalated' LIMIT 1",
                                    (ctx["job"],)) is not None:
                continue
            payload = sev.ToolCallEscalated(session_id=ctx["session"], approval_id=r["id"],
                                            timeout_s=float(ctx.get("timeout_s") or 0))

            def escalate(tx: WriteTx, p: sev.ToolCallEscalated = payload,
                         job: str = ctx["job"]) -> None:
                tx.emit(NewEvent(entity_id=job, actor=POLICY_ACTOR, role="system",
                                 payload=p))

            await store.execute(escalate)
            done.append({"approval": r["id"], "action": "escalate"})
            continue
        why = f"no decision within {float(ctx.get('timeout_s') or 0):g} s (on_timeout: reject)"
        def expire(tx: WriteTx, aid: str = r["id"], why: str = why) -> bool:
            return _expire(tx, aid, why)

        if await store.execute(expire):
            done.append({"approval": r["id"], "action": "reject"})
    return done


def _expire(tx: WriteTx, approval_id: str, why: str) -> bool:
    """Reject an overdue call for the policy (no approver rule applies to a timeout)."""
    a = tx.one("SELECT * FROM approvals WHERE id=?", (approval_id,))
    if a is None or a["status"] != "pending":
        return False  # decided meanwhile
    job_id = json.loads(a["context"]).get("job", "")
    job = tx.one("SELECT status FROM turn_jobs WHERE id=?", (job_id,))
    tx.emit(NewEvent(entity_id=approval_id, actor=POLICY_ACTOR, role=Role.SYSTEM.value,
                     payload=ev.ApprovalDecided(decision="rejected", reason=why)))
    if job is not None and job["status"] == "waiting":
        tx.emit(NewEvent(entity_id=job_id, actor=POLICY_ACTOR, role="system",
                         payload=sev.TurnJobResumed(session_id=a["subject"],
                                                    approval_id=approval_id,
                                                    decision="expired")))
    return True


__all__ = ["KIND", "Resume", "checkpoint", "decide", "done_event", "intent_event",
           "interrupted_result", "load_resume", "pause", "rejected_result", "sweep",
           "withdraw"]
