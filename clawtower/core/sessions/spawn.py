"""Subagents: a child session with its task and the job that takes it, one or many in
one command, each checked (hop limit, children per session, task size, the spawning
agent's `policy.subagents`) and refused on its own with the refusal recorded; a spawn
made again with the same key (a turn re-run after a crash) finds the same child. A worker
spawning from a turn claims new children's jobs in the same command (`ClaimFresh`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import events as ev
from ..errors import PermissionDenied, ValidationError
from ..events import NewEvent
from ..ids import new_id
from ..store.interface import WriteTx
from . import events as sev
from .checks import (
    INTERNAL_CHANNEL,
    SessionLimits,
    _ev,
    _foreign,
    _next_session_id,
    _open_for,
    _session,
    refuse,
)
from .registry import spec_by_ref, spec_name
from .specs import may_spawn

# What claims a child's job in the command that spawns it (core/sessions/runner.py's
# `claim_fresh_in`, passed in: (tx, the child's `session.created`, not emitted yet) -> it
# emits it, with the job's start folded in when it claims the job; a claim, or
# None when no slot or lease is left)
ClaimFresh = Callable[[WriteTx, NewEvent], Any]


class _Refused(Exception):
    def __init__(self, reason: str, error: Exception) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = error


def _spawn_one(tx: WriteTx, parent: dict[str, Any], task: str, agent: str | None, label: str,
               by: str, limits: SessionLimits, caller: str, key: str | None,
               children: int, keyed: dict[str, dict[str, Any]] | None = None,
               claim: ClaimFresh | None = None, claims: list[Any] | None = None
               ) -> dict[str, Any]:
    """One child of `parent` (checked); raises _Refused (nothing emitted) when refused.
    `keyed`: the parent's children by spawn key, when the caller read them already.
    `claim`: a new child's job is claimed in this command (into `claims`, issue 36)."""
    parent_id = parent["id"]
    if not task.strip():
        raise _Refused("empty task", ValidationError(
            f"session {parent_id!r}: spawn: the task is empty"))
    if key is not None:  # the same spawn again (a turn re-run after a crash): the same child
        row = keyed.get(key) if keyed is not None else tx.one(
            "SELECT * FROM sessions WHERE parent_id=? AND spawn_key=?", (parent_id, key))
        if row is not None:
            return {"status": "accepted", "session": row["id"], "run_id": row["run_id"],
                    "job": None, "agent": spec_name(tx, row["agent_id"]),
                    "agent_id": row["agent_id"], "hop": row["hop"], "existing": True}
    hop = int(parent["hop"]) + 1
    if hop > limits.max_hop:
        raise _Refused(f"hop limit: a child of {parent_id} would be hop {hop}, over the limit"
                       f" of {limits.max_hop}", PermissionDenied(
                           f"session {parent_id!r}: spawn refused: hop {hop} is over the"
                           f" limit of {limits.max_hop}"))
    if len(task) > limits.max_message_chars:
        raise _Refused(f"task of {len(task)} characters is over the limit of"
                       f" {limits.max_message_chars}", ValidationError(
                           f"session {parent_id!r}: spawn: task too long ({len(task)}"
                           f" characters; at most {limits.max_message_chars})"))
    if children >= limits.max_children:
        raise _Refused(f"child limit: {parent_id} already has {children} children (at most"
                       f" {limits.max_children})", PermissionDenied(
                           f"session {parent_id!r}: spawn refused: at most"
                           f" {limits.max_children} children"))
    own = spec_by_ref(tx, parent["agent_id"])
    spec = spec_by_ref(tx, agent) if agent else own
    allow = own.config.policy.subagents
    if caller == "tool" and not may_spawn(allow, own.name, spec.name):
        reason = (f"self-spawn: agent {own.name} may not spawn itself (list it, or '*', in"
                  " policy.subagents to allow it)" if allow is None else
                  f"agent {own.name} may not spawn {spec.name} (policy.subagents:"
                  f" {', '.join(allow) or 'none'})")
        raise _Refused(reason, PermissionDenied(f"{parent_id}: {reason}"))
    sid = _next_session_id(tx)
    run_id = new_id("run")
    job = new_id("J")  # the child, its task and the job that takes it: one event
    created = sev.SessionCreated(
        title=label or task.strip().splitlines()[0][:60], agent_id=spec.agent_id,
        deliver=False, channel=INTERNAL_CHANNEL, parent_id=parent_id, hop=hop,
        trace_id=parent["trace_id"], run_id=run_id, spawn_key=key,
        task={"label": label, "prompt": task}, created_by=by,
        inbound=sev.SessionInbound(msg_id=new_id("m"), text=task, sender=parent_id),
        job_id=job, job_reason="spawn")
    creation = _ev(sid, by, created)
    if claim is not None and claims is not None:
        got = claim(tx, creation)  # emits it, the job's start folded in when claimed
        if got is not None:
            claims.append(got)
    else:
        tx.emit(creation)
    return {"status": "accepted", "session": sid, "run_id": run_id, "job": job,
            "agent": spec.name, "agent_id": spec.agent_id, "hop": hop}


def _children(tx: WriteTx, parent_id: str) -> int:
    n = tx.one("SELECT count(*) AS n FROM sessions WHERE parent_id=?", (parent_id,))
    return int(n["n"]) if n else 0


def _spawn(tx: WriteTx, parent_id: str, task: str, agent: str | None, label: str, by: str,
           limits: SessionLimits, caller: str = "operator", key: str | None = None,
           claim: ClaimFresh | None = None, claims: list[Any] | None = None
           ) -> dict[str, Any]:
    """One child (`Sessions.spawn`); refused as `_spawn_one` says. `claim`: see there."""
    if _foreign(tx, _session(tx, parent_id), "session.spawn", by):
        return {}
    parent = _open_for(tx, parent_id, "session.spawn", by)
    if parent is None:
        return {}
    try:
        return _spawn_one(tx, parent, task, agent, label, by, limits, caller, key,
                          _children(tx, parent_id), claim=claim, claims=claims)
    except _Refused as r:
        if isinstance(r.error, ValidationError) and r.reason == "empty task":
            raise r.error from None
        refuse(tx, parent_id, "session.spawn", r.reason, by, r.error)
        return {}


def _spawn_many(tx: WriteTx, parent_id: str, items: list[dict[str, Any]], by: str,
                limits: SessionLimits, caller: str, key: str | None,
                claim: ClaimFresh | None = None, claims: list[Any] | None = None
                ) -> list[dict[str, Any]]:
    """Several children in ONE commit; each item is accepted or refused on its own (every
    refusal recorded), as that many single spawns would be. `claim`: see `_spawn_one`."""
    if _foreign(tx, _session(tx, parent_id), "session.spawn", by):
        return []
    parent = _open_for(tx, parent_id, "session.spawn", by)
    if parent is None:
        return []
    out: list[dict[str, Any]] = []
    children = _children(tx, parent_id)
    keyed = None  # the children an earlier run of this spawn made: one read, not one a child
    if key:
        keyed = {r["spawn_key"]: r for r in tx.all(
            "SELECT * FROM sessions WHERE parent_id=? AND spawn_key IS NOT NULL",
            (parent_id,))}
    for i, item in enumerate(items):
        try:
            res = _spawn_one(tx, parent, str(item.get("task") or ""), item.get("agent") or None,
                             str(item.get("label") or ""), by, limits, caller,
                             f"{key}:{i}" if key else None, children, keyed, claim, claims)
        except _Refused as r:
            tx.emit(NewEvent(entity_id=parent_id, actor=by or "operator", role="operator",
                             payload=ev.PermissionRefused(action="session.spawn",
                                                          target=parent_id, reason=r.reason)))
            out.append({"status": "refused", "reason": r.reason})
            continue
        if not res.get("existing"):
            children += 1
        out.append(res)
    return out
