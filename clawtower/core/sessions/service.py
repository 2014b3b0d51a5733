"""The sessions API the fronts use (CLI, console, the spawn tool): agent specs, sessions,
messages, steering, stopping, subagents; and the read side (tree, transcript, backlog,
announces). Every write is one store command: validation and the write are atomic across
processes, and a refused request records a `permission.refused` event and changes nothing
else.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, ValidationError
from ..events import NewEvent
from ..ids import new_id
from ..store.interface import Store, WriteTx
from . import events as sev
from . import takeover
from .checks import (  # re-exported: the sessions' commands elsewhere import them from here
    ACTIVE,
    INTERNAL_CHANNEL,
    OWNER_KINDS,
    SessionLimits,
    _ev,
    _foreign,
    _next_session_id,
    _open_for,
    _session,
    owned_by,
    refuse,
)
from .fork import fork_in
from .gate import withdraw
from .reads import SessionReads, clip
from .registry import (
    _default_spec,
    _set_spec,
    spec_by_ref,
    spec_for,
    spec_name,
)
from .spawn import ClaimFresh, _spawn, _spawn_many
from .specs import (
    AgentSpec,
    AgentSpecConfig,
    check_model,
    check_name,
    from_agent_config,
    known_models,
)

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

#: the transcript message of an announce, exactly as the seed has it
ANNOUNCE_TEXT = "[@agent:{name}#{agent_id}] finish"

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

    async def spawn_claimed(self, parent_id: str, task: str, claim: ClaimFresh, *,
                            agent: str | None = None, label: str = "", by: str = "operator",
                            caller: str = "operator", key: str | None = None
                            ) -> tuple[dict[str, Any], Any]:
        """`spawn`, the new child's job claimed by `claim` in the same commit (a worker
        spawning from a turn, with a free slot: issue 36, as `spawn_many_claimed`);
        returns the result and the claim (None: no new child, e.g. the same key again)."""
        def command(tx: WriteTx) -> tuple[dict[str, Any], Any]:
            claims: list[Any] = []  # this run's: a command run again starts empty
            out = _spawn(tx, parent_id, task, agent, label, by, self.limits, caller, key,
                         claim, claims)
            return out, claims[0] if claims else None

        return await self.store.execute(command)

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

            def budgeted(tx: WriteTx, creation: NewEvent) -> Any:
                if len(claims) < limit:
                    return claim(tx, creation)
                tx.emit(creation)  # no free slot: queued for the claim loop
                return None

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
