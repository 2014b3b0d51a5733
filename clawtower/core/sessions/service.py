"""The sessions API the fronts use (CLI, console, the spawn tool): agent specs, sessions,
messages, steering, stopping, subagents; and the read side (tree, transcript, backlog,
announces). Every write is one store command: validation and the write are atomic across
processes, and a refused request records a `permission.refused` event and changes nothing
else.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..errors import Conflict, NotFound, PermissionDenied, ValidationError
from ..events import NewEvent, Payload
from ..store.interface import Store, WriteTx
from . import events as sev
from . import takeover
from .fork import fork_in
from .gate import withdraw
from .reads import SessionReads, clip
from .registry import (
    _default_spec,
    _set_spec,
    new_id,
    spec_by_ref,
    spec_for,
    spec_name,
)
from .specs import (
    AgentSpec,
    AgentSpecConfig,
    check_model,
    check_name,
    from_agent_config,
    known_models,
    may_spawn,
)

# What claims a child's job in the command that spawns it (core/sessions/runner.py's
# `claim_fresh_in`, passed in: (tx, job id, the session's row, its inbox row, the job's
# reason) -> a claim, or None when no slot or lease is left)
ClaimFresh = Callable[[WriteTx, str, dict[str, Any], dict[str, Any], str], Any]


if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

INTERNAL_CHANNEL = "agent"  # child sessions: internal execution, never delivered outside
ACTIVE = ("idle", "queued", "running", "waiting")  # waiting: a tool call awaits approval
#: the transcript message of an announce, exactly as the seed has it
ANNOUNCE_TEXT = "[@agent:{name}#{agent_id}] finish"


@dataclass(frozen=True)
class SessionLimits:
    """Loop prevention and input bounds (OpenClaw's maxSpawnDepth, maxChildrenPerAgent)."""

    max_hop: int = 1  # a child is hop 1; its own spawns (hop 2) are refused by default
    max_children: int = 100  # children one session may have in total
    max_message_chars: int = 32_000


def _ev(entity_id: str, by: str, payload: Payload, role: str = "operator",
        idem_key: str | None = None) -> NewEvent:
    return NewEvent(entity_id=entity_id, actor=by or "operator", role=role, payload=payload,
                    idem_key=idem_key)


def refuse(tx: WriteTx, target: str, action: str, reason: str, by: str,
           error: Exception | None = None) -> None:
    """Record a refusal (the one refusals list: `permission.refused`) and fail with it."""
    tx.emit(NewEvent(entity_id=target, actor=by or "operator", role="operator",
                     payload=ev.PermissionRefused(action=action, target=target, reason=reason)))
    tx.defer_error(error or PermissionDenied(f"{target}: {reason}"))


# --------------------------------------------------------------------------- sessions


def _session(tx: WriteTx, sid: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM sessions WHERE id=?", (sid,))
    if row is None:
        raise NotFound(f"session {sid!r}: no such session")
    return row


def _next_session_id(tx: WriteTx) -> str:
    row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM sessions")
    return f"S-{int(row['n']) if row else 1}"


def _open_for(tx: WriteTx, sid: str, action: str, by: str) -> dict[str, Any] | None:
    """The session if it can take `action`; None after recording a refusal."""
    row = _session(tx, sid)
    if row["status"] not in ACTIVE:
        refuse(tx, sid, action, f"the session is {row['status']}", by,
               Conflict(f"session {sid!r}: {row['status']}; it takes no more messages"))
        return None
    return row


#: what may own a session (its `created_by` is `<kind>:<id>`): only the owner sends to it
OWNER_KINDS = ("flow", "meeting", "expert-run", "acp-task")


def owned_by(session: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, id) of the protocol run that created the session and drives it, or None for
    a session that takes messages from anybody (the CLI's, the console's, a chat's)."""
    kind, sep, ref = str(session.get("created_by") or "").partition(":")
    return (kind, ref) if sep and kind in OWNER_KINDS and ref else None


def _foreign(tx: WriteTx, session: dict[str, Any], action: str, by: str) -> bool:
    """True (after recording a refusal) when `by` is neither the session's owner nor the
    session itself (its own turn may use its tools, spawns included)."""
    owner = owned_by(session)
    sid = session["id"]
    if owner is None or by in (f"{owner[0]}:{owner[1]}", sid):
        return False
    kind, ref = owner
    refuse(tx, sid, action, f"the session belongs to {kind} {ref}", by,
           Conflict(f"{sid} belongs to {kind} {ref}; use clawtower {kind} ..."))
    return True


def queue_job(tx: WriteTx, sid: str, reason: str, by: str) -> str:
    jid = new_id("J")
    tx.emit(_ev(jid, by, sev.TurnJobQueued(session_id=sid, reason=reason), role="system"))
    return jid


def continue_in(tx: WriteTx, sid: str, by: str) -> dict[str, Any]:
    """`/continue`: the task of the session's last turn, stopped by max_tool_rounds, goes to
    the backlog as a resume item (its rounds so far counted) and a job takes it."""
    session = tx.one("SELECT * FROM sessions WHERE id=?", (sid,))
    if session is None:
        raise NotFound(f"session {sid!r}: no such session")
    job = tx.one("SELECT * FROM turn_jobs WHERE session_id=? AND status NOT IN ('queued',"
                 " 'running') ORDER BY queued_seq DESC LIMIT 1", (sid,))
    if job is None or job["status"] != "done" or job["stop_reason"] != "max_tool_rounds":
        raise Conflict(f"session {sid!r}: its last turn did not stop at max_tool_rounds;"
                       " nothing to continue")
    if tx.one("SELECT 1 FROM session_backlog WHERE session_id=? AND kind='resume' AND"
              " json_extract(data, '$.continues')=?", (sid, job["id"])) is not None:
        raise Conflict(f"session {sid!r}: already continued (job {job['id']})")
    task, prior = takeover.job_task(tx, job)
    turn = tx.one("SELECT rounds FROM turns WHERE id=?", (job["turn_id"],))
    rounds = prior + (int(turn["rounds"]) if turn is not None else 0)
    item = new_id("b")
    tx.emit(NewEvent(entity_id=sid, actor=by, role="operator", payload=sev.SessionBacklogged(
        item_id=item, kind="resume", text=takeover.resume_text(task, rounds, ""),
        data={"job": job["id"], "turn": job["turn_id"], "task": task, "rounds_done": rounds,
              "round": rounds, "continues": job["id"]})))
    queued = None
    if session["active_job"] is None and session["status"] not in ("stopped", "finished"):
        queued = queue_job(tx, sid, "backlog", by)
    return {"session": sid, "item": item, "job": queued, "rounds_done": rounds}


def _send(tx: WriteTx, sid: str, text: str, sender: str, limits: SessionLimits
          ) -> dict[str, Any]:
    if not text.strip():
        raise ValidationError(f"session {sid!r}: the message is empty")
    if _foreign(tx, _session(tx, sid), "session.send", sender):
        return {}
    row = _open_for(tx, sid, "session.send", sender)
    if row is None:
        return {}
    if len(text) > limits.max_message_chars:
        refuse(tx, sid, "session.send", f"message of {len(text)} characters is over the"
               f" limit of {limits.max_message_chars}", sender,
               ValidationError(f"session {sid!r}: message too long ({len(text)} characters;"
                               f" at most {limits.max_message_chars})"))
        return {}
    if sender == sid:
        refuse(tx, sid, "session.send", "a session cannot send to itself", sender)
        return {}
    msg_id = new_id("m")
    tx.emit(_ev(sid, sender, sev.SessionInbound(msg_id=msg_id, text=text, sender=sender)))
    job = None
    if row["active_job"] is None:
        job = queue_job(tx, sid, "message", sender)
    # a turn runs only under a live worker's lease: a queued job, or one whose worker died,
    # takes the message when a worker claims it (not at a "safe boundary")
    running = tx.one(
        "SELECT 1 FROM turn_jobs j JOIN leases l ON l.name = 'worker:' || j.owner WHERE"
        " j.session_id=? AND j.status='running' AND l.released=0 AND l.expires_at > ?"
        " LIMIT 1", (sid, tx.now)) is not None
    return {"session": sid, "msg_id": msg_id, "job": job,
            "status": "queued" if job else "pending",
            "busy": running, "turn_running": running, "waiting": row["status"] == "waiting"}


def _stop(tx: WriteTx, sid: str, by: str, reason: str) -> list[str]:
    """Stop `sid` and every active descendant; queued jobs are cancelled here, a running
    turn by its worker (it watches the store). A stopped child announces 'stopped' to its
    parent, so no parent waits forever on it."""
    row = _session(tx, sid)
    if row["status"] not in ACTIVE:
        raise Conflict(f"session {sid!r}: already {row['status']}")
    stopped: list[str] = []
    todo = [row]
    while todo:
        r = todo.pop()
        if r["status"] not in ACTIVE:
            continue
        tx.emit(_ev(r["id"], by, sev.SessionStopRequested(by=by, reason=reason)))
        stopped.append(r["id"])
        withdraw(tx, r["id"], by, reason)  # its waiting tool calls never run
        for j in tx.all("SELECT id FROM turn_jobs WHERE session_id=? AND status IN"
                        " ('queued', 'waiting')", (r["id"],)):
            tx.emit(_ev(j["id"], by, sev.TurnJobFinished(session_id=r["id"],
                                                         status="cancelled",
                                                         stop_reason="stopped",
                                                         error=reason or "stopped"),
                        role="system"))
        if r["parent_id"]:
            announce(tx, r, "stopped", reason or f"stopped by {by}", by, artifacts=[])
        todo.extend(tx.all("SELECT * FROM sessions WHERE parent_id=?", (r["id"],)))
    return stopped


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
    inbound = sev.SessionInbound(msg_id=new_id("m"), text=task, sender=parent_id)
    tx.emit(_ev(sid, by, sev.SessionCreated(
        title=label or task.strip().splitlines()[0][:60], agent_id=spec.agent_id,
        deliver=False, channel=INTERNAL_CHANNEL, parent_id=parent_id, hop=hop,
        trace_id=parent["trace_id"], run_id=run_id, spawn_key=key,
        task={"label": label, "prompt": task}, created_by=by,
        inbound=inbound, job_id=job, job_reason="spawn")))
    if claim is not None and claims is not None:
        got = claim(tx, job, {"id": sid, "status": "queued", "agent_id": spec.agent_id,
                              "provider_override": None, "model_override": None,
                              "task": json.dumps({"label": label, "prompt": task})},
                    inbound.model_dump(), "spawn")
        if got is not None:
            claims.append(got)
    return {"status": "accepted", "session": sid, "run_id": run_id, "job": job,
            "agent": spec.name, "agent_id": spec.agent_id, "hop": hop}


def _children(tx: WriteTx, parent_id: str) -> int:
    n = tx.one("SELECT count(*) AS n FROM sessions WHERE parent_id=?", (parent_id,))
    return int(n["n"]) if n else 0


def _spawn(tx: WriteTx, parent_id: str, task: str, agent: str | None, label: str, by: str,
           limits: SessionLimits, caller: str = "operator", key: str | None = None
           ) -> dict[str, Any]:
    if _foreign(tx, _session(tx, parent_id), "session.spawn", by):
        return {}
    parent = _open_for(tx, parent_id, "session.spawn", by)
    if parent is None:
        return {}
    try:
        return _spawn_one(tx, parent, task, agent, label, by, limits, caller, key,
                          _children(tx, parent_id))
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





def announce(tx: WriteTx, child: dict[str, Any], status: str, summary: str, by: str, *,
             artifacts: list[str], duration_s: float | None = None) -> bool:
    """Append the child's ONE announce to its parent (idempotent by run_id: a second call
    for the same run changes nothing and returns False). The store enforces it too: the
    event carries the unique idem_key `announce:<run_id>`."""
    run_id = child["run_id"]
    parent_id = child["parent_id"]
    if not run_id or not parent_id:
        return False
    if parent_id == child["id"]:  # no self-send: a session never announces to itself
        return False
    usage = tx.one("SELECT EXISTS(SELECT 1 FROM session_announces WHERE run_id=?) AS sent,"
                   " coalesce(sum(prompt_tokens), 0) AS p,"
                   " coalesce(sum(completion_tokens), 0) AS c, coalesce(sum(cost_usd), 0)"
                   " AS cost, count(*) AS turns FROM turn_jobs WHERE session_id=? AND"
                   " status IN ('done', 'failed')", (run_id, child["id"])) or {}
    if usage.get("sent"):
        return False
    name = spec_name(tx, child["agent_id"])
    task = json.loads(child["task"] or "{}")
    meta = {
        "task": {"label": task.get("label", ""), "prompt": task.get("prompt", "")},
        "result": {"status": status, "summary": clip(summary, 500), "artifacts": artifacts},
        "source": {"agent_id": child["agent_id"], "agent_name": name,
                   "session_id": child["id"], "run_id": run_id},
        "stats": {"duration_s": round(duration_s if duration_s is not None
                                      else tx.now - float(child["created_at"]), 3),
                  "prompt_tokens": int(usage.get("p", 0)),
                  "completion_tokens": int(usage.get("c", 0)),
                  "tokens": int(usage.get("p", 0)) + int(usage.get("c", 0)),
                  "cost_usd": float(usage.get("cost", 0.0)),
                  "turns": int(usage.get("turns", 0))},
        "idempotency_key": run_id,
        "trace_id": child["trace_id"],
        "hop": int(child["hop"]),
    }
    tx.emit(_ev(parent_id, by, sev.SessionAnnounced(
        msg_id=new_id("m"), text=ANNOUNCE_TEXT.format(name=name, agent_id=child["agent_id"]),
        meta=meta), role="system", idem_key=f"announce:{run_id}"))
    return True


def wake_parent(tx: WriteTx, parent_id: str, by: str) -> str | None:
    """Queue the parent's next turn once no child of it is still active and it has
    unconsumed announces (the join); None when it waits or is busy."""
    parent = tx.one("SELECT status, active_job, EXISTS(SELECT 1 FROM sessions WHERE"
                    " parent_id=?1 AND status IN ('idle', 'queued', 'running', 'waiting'))"
                    " AS busy FROM sessions WHERE id=?1", (parent_id,))
    if parent is None or parent["status"] not in ACTIVE or parent["active_job"] is not None \
            or parent["busy"]:
        return None
    fresh = tx.one("SELECT 1 FROM session_announces WHERE parent_id=? AND consumed_by IS NULL"
                   " LIMIT 1", (parent_id,))
    if fresh is None:
        return None
    return queue_job(tx, parent_id, "announces", by)




class Sessions(SessionReads):
    """See the package docstring for the whole API."""

    def __init__(self, store: Store, limits: SessionLimits | None = None) -> None:
        super().__init__(store)
        self.limits = limits or SessionLimits()

    # ------------------------------------------------------------- specs

    async def set_spec(self, name: str, config: AgentSpecConfig, *, source: str = "cli",
                       by: str = "operator") -> str:
        check_name(name)
        return await self.store.execute(lambda tx: _set_spec(tx, name, config, source, by))

    async def import_specs(self, cfg: ClawtowerConfig, names: list[str] | None = None, *,
                           by: str = "operator") -> dict[str, str]:
        """Specs from the agents of clawtower.yaml (created, or replaced by name)."""
        chosen = names or sorted(cfg.agents)
        configs = {n: from_agent_config(cfg, check_name(n, f"{cfg.source}: agent")) for n in
                   chosen}

        def command(tx: WriteTx) -> dict[str, str]:
            return {n: _set_spec(tx, n, c, f"import:{cfg.source}", by)
                    for n, c in configs.items()}

        return await self.store.execute(command)

    async def specs(self) -> list[AgentSpec]:
        rows = await self.store.fetchall("SELECT * FROM agent_specs ORDER BY name")
        return [AgentSpec.from_row(r) for r in rows]

    async def spec(self, ref: str) -> AgentSpec:
        return spec_by_ref(await self.store.fetchall("SELECT * FROM agent_specs"), ref)

    # ------------------------------------------------------------- sessions

    async def create(self, *, agent: str | None = None, title: str = "",
                     model: str | None = None, cfg: ClawtowerConfig | None = None,
                     channel: str = "cli", deliver: bool = False,
                     by: str = "operator") -> str:
        provider = model_name = None
        if model is not None:
            provider, model_name = check_model(model, cfg)

        def command(tx: WriteTx) -> str:
            spec = spec_for(tx, agent, cfg, by) if agent else _default_spec(tx, by)
            sid = _next_session_id(tx)
            tx.emit(_ev(sid, by, sev.SessionCreated(
                title=title, agent_id=spec.agent_id, provider_override=provider,
                model_override=model_name, deliver=deliver, channel=channel,
                trace_id=new_id("tr"), created_by=by)))
            return sid

        return await self.store.execute(command)

    async def send(self, sid: str, text: str, *, sender: str = "operator") -> dict[str, Any]:
        """Queue a message. Idle session: a TurnJob is queued with it. Busy session: it is
        taken at the next safe boundary of the running turn (steering), or, if that turn
        reaches none, it waits in the backlog for the next turn."""
        return await self.store.execute(lambda tx: _send(tx, sid, text, sender, self.limits))

    async def fork(self, sid: str, at: int, *, message: str | None = None,
                   agent: str | None = None, reason: str = "", by: str = "operator"
                   ) -> dict[str, Any]:
        """A new session whose transcript is `sid`'s up to the end of its turn `at`
        (`fork.py`); with `message`, sent to it as `send` does (a job queued). Bad input
        (unknown session or agent, a turn out of range or not ended, a flow's session, an
        empty or oversized message) is refused with nothing written."""
        if message is not None:
            if not message.strip():
                raise ValidationError(f"session {sid!r}: fork: --message is empty")
            if len(message) > self.limits.max_message_chars:
                raise ValidationError(
                    f"session {sid!r}: fork: --message too long ({len(message)} characters;"
                    f" at most {self.limits.max_message_chars})")

        def command(tx: WriteTx) -> dict[str, Any]:
            row = _session(tx, sid)
            owner = owned_by(row)
            if owner is not None and owner[0] == "flow":  # its node's reply feeds the flow
                raise Conflict(f"session {sid!r} belongs to flow {owner[1]}; go back in a"
                               f" flow with `clawtower flow rerun {owner[1]}/NODE`")
            new, _ = fork_in(tx, row, at, agent=agent, reason=reason, by=by,
                             new_session_id=_next_session_id)
            sent = _send(tx, new, message, by, self.limits) if message is not None else None
            return {"session": new, "origin": sid, "turn": at, "sent": sent}

        return await self.store.execute(command)

    async def continue_task(self, sid: str, *, by: str = "operator") -> dict[str, Any]:
        """Continue the task of a turn stopped by max_tool_rounds (`/continue`)."""
        return await self.store.execute(lambda tx: continue_in(tx, sid, by))

    async def stop(self, sid: str, *, by: str = "operator", reason: str = "") -> list[str]:
        return await self.store.execute(lambda tx: _stop(tx, sid, by, reason))

    async def spawn(self, parent_id: str, task: str, *, agent: str | None = None,
                    label: str = "", by: str = "operator", caller: str = "operator",
                    key: str | None = None) -> dict[str, Any]:
        """A child session on the internal channel (deliver=false) with `task` queued;
        returns at once: {status: accepted, session, run_id, job, agent, hop}. A `key`
        already used by a child of `parent_id` returns that child (nothing new)."""
        return await self.store.execute(
            lambda tx: _spawn(tx, parent_id, task, agent, label, by, self.limits, caller, key))

    async def spawn_many(self, parent_id: str, items: list[dict[str, Any]], *,
                         by: str = "operator", caller: str = "operator",
                         key: str | None = None) -> list[dict[str, Any]]:
        """Many children in one commit: items are {task, agent?, label?}; each result is
        accepted (as `spawn` returns) or {status: refused, reason} (recorded)."""
        return await self.store.execute(
            lambda tx: _spawn_many(tx, parent_id, items, by, self.limits, caller, key))

    async def spawn_many_claimed(self, parent_id: str, items: list[dict[str, Any]],
                                 claim: ClaimFresh, limit: int, *, by: str = "operator",
                                 caller: str = "operator", key: str | None = None
                                 ) -> tuple[list[dict[str, Any]], list[Any]]:
        """`spawn_many`, the jobs of up to `limit` new children claimed by `claim` in the
        same commit (a worker spawning from a turn, with that many free slots: issue 36);
        returns the results and the claims."""
        def command(tx: WriteTx) -> tuple[list[dict[str, Any]], list[Any]]:
            claims: list[Any] = []  # this run's: a command run again starts empty

            def budgeted(tx: WriteTx, job: str, session: dict[str, Any],
                         inbound: dict[str, Any], reason: str) -> Any:
                return claim(tx, job, session, inbound, reason) if len(claims) < limit \
                    else None

            return _spawn_many(tx, parent_id, items, by, self.limits, caller, key, budgeted,
                               claims), claims

        return await self.store.execute(command)

    async def set_agent(self, sid: str, ref: str, *, by: str = "operator") -> AgentSpec:
        def command(tx: WriteTx) -> AgentSpec:
            _session(tx, sid)
            spec = spec_by_ref(tx, ref)
            tx.emit(_ev(sid, by, sev.SessionAgentSwitched(agent_id=spec.agent_id, by=by)))
            return spec

        return await self.store.execute(command)

    async def set_model(self, sid: str, ref: str | None, *, cfg: ClawtowerConfig | None = None,
                        by: str = "operator") -> tuple[str | None, str | None]:
        provider, model = check_model(ref, cfg) if ref else (None, None)

        def command(tx: WriteTx) -> tuple[str | None, str | None]:
            _session(tx, sid)
            tx.emit(_ev(sid, by, sev.SessionModelSet(provider=provider, model=model, by=by)))
            return provider, model

        return await self.store.execute(command)

    @staticmethod
    def models(cfg: ClawtowerConfig | None) -> dict[str, list[str]]:
        return known_models(cfg)


__all__ = ["ANNOUNCE_TEXT", "INTERNAL_CHANNEL", "OWNER_KINDS", "SessionLimits", "Sessions",
           "announce", "new_id", "owned_by", "queue_job", "refuse",
           "spec_by_ref", "spec_for", "wake_parent"]
