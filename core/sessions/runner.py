"""The session worker: claims queued TurnJobs and runs each as ONE turn of
`core.agents.turns.run_turn`. At most one TurnJob per session is active, across processes:
a worker runs its jobs under ONE lease of its own (`worker:<owner>`, renewed while it
runs), and a job is claimed only if no other job of its session runs under a live
worker's lease, checked in the claiming commit. A batch of claims takes or renews that
lease once (not a lease per job: two events per child less in a fan-out).

A job's life, each step one store command:

1. claim: take (or renew) the worker's lease, drain the session's backlog into ONE
   `[Backlog]` user message, take its pending messages as user messages, note the
   unconsumed announces, record `turnjob.started` (a job whose worker died is claimed
   again once that worker's lease expired: attempt + 1, same inputs, they are already in
   the transcript);
2. the turn runs; at every safe boundary (after a tool round) the steering hook looks for
   pending messages: if there are any, it saves a resume token for the interrupted task in
   the backlog and injects them (`turnjob.steered`);
3. finish: the reply, `turnjob.finished`, messages that found no boundary go to the
   backlog, a non-empty backlog queues the next job, a finished child announces to its
   parent (once per run_id), a parent whose children are all done is woken, external
   delivery if wanted and the channel is not internal. A worker that lost the job
   meanwhile (its lease expired and another worker took the job over) writes nothing: the
   job's new owner answers, never both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import events as ev
from .. import leases
from ..acp.session import ACP_PROVIDER, harness_name, run_acp_turn
from ..agents.config import BUILTIN, SIMULATOR, ClawtowerConfig, config_from_data
from ..agents.provider import ChatMessage
from ..agents.turns import (
    CancelHandle,
    TurnBudget,
    TurnResult,
    TurnResume,
    TurnState,
    run_turn,
)
from ..agents.usage import Price
from ..errors import ClawError
from ..events import NewEvent
from ..memory.hybrid import turn_recall
from ..memory.policy import recall_namespaces
from ..memory.service import memory_context, recall_sync, recalled_refs
from ..store.interface import Store, WriteTx
from ..tools.approval import TierGate
from ..tools.registry import ToolRegistry
from . import events as sev
from . import gate, takeover
from .reads import announce_context, clip
from .records import TurnRecords
from .rerun import TakeOverToolBox
from .service import (
    INTERNAL_CHANNEL,
    SessionLimits,
    Sessions,
    announce,
    new_id,
    queue_job,
    spec_by_ref,
    wake_parent,
)
from .skills import SkillSet, load_skills
from .specs import SIM_MODELS, AgentSpec
from .toolbox import SPAWN_MANY_TOOL, SPAWN_TOOL, SessionToolBox

STEER_NOTE = ("[Steer] The user sent a new message while you were working. Answer it now;"
              " your interrupted task is saved in the backlog and continues after your"
              " answer.")
ARTIFACT = re.compile(r"artifact://[^\s\"'<>)\]]+")
TextSink = Callable[[str, str, str], None]  # (session id, turn id, text delta)


def worker_lease(owner: str) -> str:
    """The lease a worker holds while it runs jobs: its running jobs are its own while the
    lease lives, and anybody's to take over once it has expired (the worker died)."""
    return f"worker:{owner}"


def _busy(tx: WriteTx, job: dict[str, Any]) -> bool:
    """Another job of the job's session runs under a live worker's lease (a session has at
    most one active TurnJob, across processes: this check and the claim are one commit)."""
    return tx.one(
        "SELECT 1 FROM turn_jobs j JOIN leases l ON l.name = 'worker:' || j.owner"
        " WHERE j.session_id=? AND j.status='running' AND j.id<>? AND l.released=0"
        " AND l.expires_at > ? LIMIT 1", (job["session_id"], job["id"], tx.now)) is not None


@dataclass
class _Cadence:
    """When a claim loop last swept expired leases and last renewed its own (loop time)."""

    expired: float
    renewed: float


@dataclass
class Claim:
    """A job this worker runs, as the claim command prepared it."""

    job_id: str
    session_id: str
    attempt: int
    turn_id: str
    spec: AgentSpec
    provider: str
    model: str
    history: list[dict[str, Any]]  # transcript tail, oldest first
    announces: list[dict[str, Any]]
    focus: str  # the task this turn works on (saved as a resume token when steered)
    started_at: float
    focus_round: int = 0
    cancel: CancelHandle = field(default_factory=CancelHandle)
    lost: bool = False
    resume: gate.Resume | None = None  # a job queued again after its tool call was decided
    requester: str = "operator"  # who sent what this job answers (an approval names them)
    label: str = ""  # the session's task label (a flow node's id): a simulator script key
    memories: list[dict[str, Any]] = field(default_factory=list)  # recalled for this turn
    rerecalled: bool = False  # hybrid recall replaced the claim's BM25 memories


# --------------------------------------------------------------------------- commands


def _render(m: dict[str, Any]) -> ChatMessage:
    meta = m["meta"]
    if m["role"] == "assistant":
        return ChatMessage(role="assistant", content=m["text"])
    if meta.get("steered"):
        return ChatMessage(role="user", content=f"{STEER_NOTE}\n\n{m['text']}")
    return ChatMessage(role="user", content=m["text"])  # user, [Backlog], announce lines


def _history(tx: WriteTx, sid: str, n: int) -> list[dict[str, Any]]:
    if n <= 0:
        return []
    rows = tx.all("SELECT * FROM session_messages WHERE session_id=? ORDER BY seq DESC"
                  " LIMIT ?", (sid, n))
    return [{"seq": r["seq"], "msg_id": r["msg_id"], "role": r["role"], "text": r["text"],
             "meta": json.loads(r["meta"])} for r in reversed(rows)]


def _budget(spec: AgentSpec) -> TurnBudget:
    b = spec.config.context_policy.budgets
    return TurnBudget(max_tool_rounds=b.max_tool_rounds, max_tokens=b.max_tokens,
                      max_wall_s=b.max_wall_s)


def _start(tx: WriteTx, job: dict[str, Any], owner: str, defaults: dict[str, str]
           ) -> Claim | None:
    sid = job["session_id"]
    session = tx.one("SELECT status, agent_id, provider_override, model_override, task"
                     " FROM sessions WHERE id=?", (sid,))  # the columns used (a wide row)
    if session is None or session["status"] in ("stopped", "finished"):
        tx.emit(NewEvent(entity_id=job["id"], actor=owner, role="system",
                         payload=sev.TurnJobFinished(session_id=sid, status="cancelled",
                                                     stop_reason="stopped")))
        return None
    spec = spec_by_ref(tx, session["agent_id"])
    d = spec.config.defaults
    provider = session["provider_override"] or d.provider or SIMULATOR
    model = session["model_override"] or (d.model if (d.provider or SIMULATOR) == provider
                                          else None) or defaults.get(provider, "")
    if d.acp is not None and not session["provider_override"]:  # a harness runs the turn
        provider, model = ACP_PROVIDER, harness_name(d.acp)
    attempt = int(job["attempt"] or 0) + 1
    took: list[str] = []
    drained: list[str] = []
    backlog_msg: str | None = None
    resume = gate.load_resume(tx, job["id"]) if job["reason"] == "resume" else None
    steer_round: int | None = None  # a take-over with messages waiting: they steer
    rounds = takeover.close_dead_turn(tx, job, owner) if attempt > 1 else None
    if attempt > 1 and resume is None:  # the dead attempt's turn closes, its task waits
        task, prior = takeover.job_task(tx, job)
        if task and tx.one("SELECT 1 FROM session_inbox WHERE session_id=? AND"
                           " status='pending' LIMIT 1", (sid,)) is not None:
            steer_round = rounds or 0
            takeover.backlog_interrupted(tx, job, owner, prior + steer_round, task)
    if resume is not None:  # messages sent meanwhile are taken at the next safe boundary
        pass
    elif attempt == 1:
        waiting = tx.all("SELECT * FROM session_backlog WHERE session_id=? AND"
                         " status='waiting' ORDER BY seq", (sid,))
        if waiting:
            backlog_msg = new_id("m")
            text = "[Backlog]\n" + "\n".join(f"- {b['text']}" for b in waiting)
            drained = [b["item_id"] for b in waiting]
            tx.emit(NewEvent(entity_id=sid, actor=owner, role="system",
                             payload=sev.SessionMessage(
                                 msg_id=backlog_msg, role="user", text=text,
                                 meta={"kind": "backlog", "items": drained,
                                       "job": job["id"]})))
    requester = ""
    for m in tx.all("SELECT * FROM session_inbox WHERE session_id=? AND status='pending'"
                    " ORDER BY seq", (sid,)) if resume is None else []:
        took.append(m["msg_id"])
        requester = requester or m["sender"] or "operator"
        tx.emit(NewEvent(entity_id=sid, actor=m["sender"] or "operator", role="operator",
                         payload=sev.SessionMessage(
                             msg_id=new_id("m"), role="user", text=m["text"],
                             meta={"kind": "message", "inbound": m["msg_id"],
                                   "sender": m["sender"], "job": job["id"],
                                   **({} if steer_round is None else
                                      {"steered": True, "round": steer_round})})))
    announces = []
    if spec.config.context_policy.announces:
        announces = [dict(r) for r in tx.all(
            "SELECT * FROM session_announces WHERE parent_id=? AND consumed_by IS NULL"
            " ORDER BY seq", (sid,))]
    turn_id = f"turn-{uuid.uuid4().hex[:12]}"
    history = _history(tx, sid, spec.config.context_policy.history_messages)
    mine = [h for h in history if h["role"] == "user" and h["meta"].get("job") == job["id"]]
    steered = [h for h in mine if h["meta"].get("steered")]
    focus_msgs = steered[-1:] if steered else mine
    focus = "\n".join(h["text"] for h in focus_msgs) or (history[-1]["text"] if history
                                                          else "")
    memories = recall_sync(tx.all, recall_namespaces(
        spec.config.context_policy.recall, spec.config.policy.memory, spec.name), focus,
        k=spec.config.context_policy.recall.top_k, now=tx.now,
        min_score=spec.config.context_policy.recall.min_score,
        token_budget=spec.config.context_policy.recall.token_budget)
    # the model turn starts with the claim (one event); a harness's turn records its own
    turn = None if provider == ACP_PROVIDER else ev.TurnStarted(
        subject=sid, agent=spec.name, model=model, budget=_budget(spec).as_json())
    tx.emit(NewEvent(entity_id=job["id"], actor=owner, role="system",
                     payload=sev.TurnJobStarted(
                         session_id=sid, owner=owner, attempt=attempt, turn_id=turn_id,
                         agent_id=spec.agent_id, provider=provider, model=model, took=took,
                         drained=drained, backlog_msg_id=backlog_msg,
                         announces=[a["msg_id"] for a in announces],
                         recalled=recalled_refs(memories), turn=turn)))
    if not requester:
        requester = next((h["meta"].get("sender") or "operator" for h in reversed(mine)),
                         "operator")
    return Claim(job_id=job["id"], session_id=sid, attempt=attempt, turn_id=turn_id,
                 spec=spec, provider=provider, model=model, history=history,
                 announces=announces, focus=focus, started_at=tx.now, resume=resume,
                 requester=requester, memories=memories,
                 label=str(json.loads(session["task"] or "{}").get("label") or ""))


def _claim(tx: WriteTx, owner: str, ttl: float, n: int, mine: set[str],
           defaults: dict[str, str], only: set[str] | None, expired: bool) -> list[Claim]:
    """Up to `n` jobs: queued ones, and (with `expired`) running ones whose worker's lease
    has expired (it died) or that are this worker's but no task of it runs them. Each
    only if no other job of its session runs under a live worker; all under this worker's
    lease (taken or renewed once), in this one commit."""
    rows = tx.all("SELECT * FROM turn_jobs WHERE status='queued' ORDER BY queued_seq"
                  " LIMIT ?", (n * 4 + 16,))
    if expired:
        rows += tx.all(
            "SELECT j.* FROM turn_jobs j LEFT JOIN leases l ON l.name = 'worker:' ||"
            " j.owner WHERE j.status='running' AND (l.name IS NULL OR l.released=1"
            " OR l.expires_at <= ? OR j.owner = ?) ORDER BY j.queued_seq LIMIT ?",
            (tx.now, owner, n + len(mine) + 16))
    if only is not None:  # these sessions and their descendants
        marks = ",".join("?" * len(only))
        only = {r["id"] for r in tx.all(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE id IN (" + marks + ")"
            " UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id)"
            " SELECT id FROM tree", tuple(only))}
    out: list[Claim] = []
    leased = False
    for job in rows:
        if len(out) >= n:
            break
        if job["id"] in mine or (only is not None and job["session_id"] not in only):
            continue
        if _busy(tx, job):
            continue
        if not leased:
            if not leases.acquire_in(tx, worker_lease(owner), owner, ttl):
                break
            leased = True
        claim = _start(tx, job, owner, defaults)
        if claim is not None:
            out.append(claim)
    return out


def _ours(tx: WriteTx, claim: Claim, owner: str) -> dict[str, Any] | None:
    job = tx.one("SELECT * FROM turn_jobs WHERE id=?", (claim.job_id,))
    if job is None or job["status"] != "running" or job["owner"] != owner \
            or int(job["attempt"]) != claim.attempt:
        return None
    lease = tx.one("SELECT * FROM leases WHERE name=?", (worker_lease(owner),))
    if lease is None or lease["owner"] != owner or lease["released"]:
        return None
    if _busy(tx, job):  # our lease lapsed and another worker runs the session's next job
        return None
    return job


def _steer(tx: WriteTx, claim: Claim, owner: str, state: TurnState) -> list[str]:
    if _ours(tx, claim, owner) is None:
        return []
    sid = claim.session_id
    pending = tx.all("SELECT * FROM session_inbox WHERE session_id=? AND status='pending'"
                     " ORDER BY seq", (sid,))
    if not pending:
        return []
    done = state.rounds - claim.focus_round
    last = next((m.content for m in reversed(state.messages) if m.role == "tool"), "")
    item = new_id("b")
    text = takeover.resume_text(claim.focus, done, last)
    tx.emit(NewEvent(entity_id=sid, actor=owner, role="system", payload=sev.SessionBacklogged(
        item_id=item, kind="resume", text=text,
        data={"job": claim.job_id, "turn": claim.turn_id, "task": claim.focus,
              "rounds_done": done, "round": state.rounds})))
    texts = []
    for m in pending:
        texts.append(m["text"])
        tx.emit(NewEvent(entity_id=sid, actor=m["sender"] or "operator", role="operator",
                         payload=sev.SessionMessage(
                             msg_id=new_id("m"), role="user", text=m["text"],
                             meta={"kind": "message", "inbound": m["msg_id"],
                                   "sender": m["sender"], "job": claim.job_id,
                                   "steered": True, "round": state.rounds})))
    tx.emit(NewEvent(entity_id=claim.job_id, actor=owner, role="system",
                     payload=sev.TurnJobSteered(session_id=sid, round=state.rounds,
                                                took=[m["msg_id"] for m in pending],
                                                resume_item=item)))
    return texts



def _finish(tx: WriteTx, claim: Claim, owner: str, result: TurnResult | None, error: str
            ) -> str:
    """Record the end of the job; "lost" when another worker owns it now (nothing written)."""
    if _ours(tx, claim, owner) is None:
        return "lost"
    sid = claim.session_id
    if result is None:  # no turn result: close the turn its claim started, if still open
        takeover.close_unrun_turn(tx, sid, claim.job_id, claim.turn_id, owner, error)
    session = tx.one("SELECT status, stop_requested, deliver, channel, parent_id FROM sessions"
                     " WHERE id=?", (sid,))  # the columns used (a wide row)
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
    ends = _leaf_ends(tx, session, sid, status, stopped)
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
                         else None, reply=reply, session_status=outcome if ends else None)))
    if ends:  # a child with nothing left to do ended with its job: announce it
        _announce_end(tx, sid, owner, status, text, error, result, outcome)
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
            _announce_end(tx, sid, owner, status, text, error, result, outcome)
    return status


def _leaf_ends(tx: WriteTx, session: dict[str, Any], sid: str, status: str, stopped: bool
               ) -> bool:
    """Whether this job's finish also ends its session, known before the finish is written
    so that one event says both: a child (done or failed, not stopped, nothing to deliver)
    with no message pending, no backlog waiting and no children of its own (so no announce
    can wake it). Anything else takes the general path below, which decides after."""
    if stopped or not session["parent_id"] or status not in ("done", "failed"):
        return False
    if session["deliver"] and session["channel"] != INTERNAL_CHANNEL:
        return False
    return tx.one(
        "SELECT 1 FROM session_inbox WHERE session_id=? AND status='pending' UNION ALL"
        " SELECT 1 FROM session_backlog WHERE session_id=? AND status='waiting' UNION ALL"
        " SELECT 1 FROM sessions WHERE parent_id=? LIMIT 1", (sid, sid, sid)) is None


def _announce_end(tx: WriteTx, sid: str, owner: str, status: str, text: str, error: str,
                  result: TurnResult | None, outcome: str) -> None:
    """The ended child's one announce to its parent, and the parent's join."""
    child = tx.one("SELECT * FROM sessions WHERE id=?", (sid,))
    assert child is not None
    stop_reason = result.stop_reason if result is not None else "error"
    summary = text if status == "done" else (error or (result.error if result
                                                      else "") or stop_reason)
    announce(tx, child, outcome, summary or "(no reply)", owner,
             artifacts=sorted(set(ARTIFACT.findall(text))),
             duration_s=tx.now - float(child["created_at"]))
    wake_parent(tx, child["parent_id"], owner)


def _pause(tx: WriteTx, claim: Claim, owner: str, result: TurnResult, redacted: str
           ) -> str:
    """The turn stopped at a confirm-tier call: the approval and the waiting job, in one
    commit ("lost" when the job is no longer ours; "stopped" when its session was)."""
    if _ours(tx, claim, owner) is None:
        return "lost"
    session = tx.one("SELECT stop_requested, status FROM sessions WHERE id=?",
                     (claim.session_id,))
    if session is None or session["stop_requested"]:
        return "stopped"
    last = next((m for m in reversed(result.messages) if m.role == "assistant"), None)
    gate.pause(tx, session_id=claim.session_id, job_id=claim.job_id, turn_id=claim.turn_id,
               agent=claim.spec.name, requester=claim.requester, messages=result.messages,
               pending=result.pending, rounds=result.rounds,
               reason=last.content if last is not None else "",
               policy=claim.spec.config.policy.approval, redacted_args=redacted,
               prompt_tokens=result.usage.prompt_tokens,
               completion_tokens=result.usage.completion_tokens, cost_usd=result.cost_usd)
    return "waiting"


def _renew(tx: WriteTx, claims: list[Claim], owner: str, ttl: float) -> list[str]:
    """Renew the worker's lease; the jobs it no longer owns (another worker took them over
    while the lease had expired)."""
    if not leases.acquire_in(tx, worker_lease(owner), owner, ttl):
        return [c.job_id for c in claims]
    return [c.job_id for c in claims if _ours(tx, c, owner) is None]


# --------------------------------------------------------------------------- the worker


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class SessionRunner:
    """Runs the store's TurnJobs (any process may run one; leases keep them apart)."""

    def __init__(self, store: Store, config: ClawtowerConfig | None = None, *,
                 registry: ToolRegistry | None = None, skills: SkillSet | None = None,
                 limits: SessionLimits | None = None, owner: str | None = None,
                 max_concurrent: int = 16, lease_ttl_s: float = 15.0,
                 on_text: TextSink | None = None, sessions: set[str] | None = None,
                 tools: bool = True) -> None:
        self.store = store
        self.config = config or config_from_data({}, BUILTIN)
        self.registry = registry if registry is not None or not tools else \
            ToolRegistry.from_project(store, self.config)
        self._own_registry = registry is None and tools
        self.skills = skills if skills is not None else load_skills()
        self.sessions = Sessions(store, limits)
        self.owner = owner or default_owner()
        self.max_concurrent = max_concurrent
        self.lease_ttl_s = lease_ttl_s
        self.on_text = on_text
        self.only = sessions  # restrict to these sessions (None: all)
        self.running: dict[str, tuple[Claim, asyncio.Task[None]]] = {}  # job id -> ...
        self.errors: list[str] = []
        self.finished = 0
        self._stop = asyncio.Event()
        self._stops_at = float("-inf")
        # expert specs (source `expert:<name>`): that expert's bound MCP servers
        self._experts: dict[str, tuple[str, ToolRegistry]] = {}
        self._stale: list[ToolRegistry] = []
        self._defaults = {SIMULATOR: SIM_MODELS[0], **{
            n: p.models[0] for n, p in self.config.providers.items() if p.models}}
        self.embedder = None  # memory.embeddings: hybrid recall (core/memory/hybrid.py)
        if self.config.memory.embeddings is not None:
            from ..memory.embeddings import embedder_for

            self.embedder = embedder_for(self.config)

    def stop(self) -> None:
        self._stop.set()

    def registry_for(self, spec: AgentSpec) -> ToolRegistry | None:
        """The registry a spec's turns use: the project's, or for an expert's spec (source
        `expert:<name>`, see core.experts.chat) one over that expert's bindings, kept while
        the bindings stay the same. A runner without tools gives none to anyone."""
        if self.registry is None or not spec.source.startswith("expert:"):
            return self.registry
        from ..experts.chat import servers_for

        name = spec.source.partition(":")[2]
        servers = servers_for(name)  # a ClawError fails the job with its message
        key = json.dumps({n: c.model_dump(mode="json") for n, c in servers.items()},
                         sort_keys=True)
        known = self._experts.get(name)
        if known is not None and known[0] == key:
            return known[1]
        if known is not None:
            self._stale.append(known[1])  # closed with the runner (a turn may still use it)
        registry = ToolRegistry(self.store, servers, builtins=False)
        self._experts[name] = (key, registry)
        return registry

    # ------------------------------------------------------------- claiming

    async def claim(self, *, expired: bool = False) -> list[Claim]:
        free = self.max_concurrent - len(self.running)
        if free <= 0:
            return []
        mine = set(self.running)
        claims = await self.store.execute(lambda tx: _claim(
            tx, self.owner, self.lease_ttl_s, free, mine, self._defaults, self.only, expired))
        for c in claims:
            task = asyncio.create_task(self._run(c), name=f"turnjob {c.job_id}")
            self.running[c.job_id] = (c, task)
            task.add_done_callback(self._done_callback(c.job_id))
        return claims

    def _done_callback(self, job_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self.running.pop(job_id, None)

        return done

    async def _claimable(self) -> bool:
        row = await self.store.fetchone("SELECT 1 FROM turn_jobs WHERE status='queued' LIMIT 1")
        return row is not None

    async def _tick(self, cadence: _Cadence, now: float) -> None:
        """One pass of a claim loop: claim into free slots (sweeping expired leases every
        ttl/3), renew our leases every ttl/3, and act on stop requests."""
        expired = now - cadence.expired >= self.lease_ttl_s / 3
        if expired:
            cadence.expired = now
            await self._sweep_approvals()
        if len(self.running) < self.max_concurrent and (
                expired or await self._claimable()):
            await self.claim(expired=expired)
        if now - cadence.renewed >= self.lease_ttl_s / 3:
            cadence.renewed = now
            await self._renew()
        await self._watch_stops()

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Claim and run jobs until `stop` (or `self.stop()`); then cancel what still runs
        (its jobs are claimed again by a worker after the lease expires)."""
        loop = asyncio.get_running_loop()
        await self._recover_acp()
        seq = await self.store.last_seq()
        cadence = _Cadence(expired=float("-inf"), renewed=loop.time())
        try:
            while not self._stop.is_set() and not (stop is not None and stop.is_set()):
                await self._tick(cadence, loop.time())
                seq = await self.store.wait_for_change(seq, 0.05 if self.running else 0.2)
        finally:
            await self.aclose()

    async def run_until_idle(self, timeout_s: float = 600.0,
                             sessions: set[str] | None = None) -> bool:
        """Run until no job is queued or running (for `sessions` and their descendants,
        or the whole store); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self._recover_acp()
        seq = await self.store.last_seq()
        cadence = _Cadence(expired=float("-inf"), renewed=loop.time())
        while True:
            now = loop.time()
            if now > deadline:
                return False
            await self._tick(cadence, now)
            if not self.running and await self.quiet(sessions):
                return True
            seq = await self.store.wait_for_change(seq, 0.05)

    async def _sweep_approvals(self) -> None:
        """Waiting tool calls past their policy's timeout: rejected or escalated."""
        try:
            await gate.sweep(self.store)
        except ClawError as exc:
            self.errors.append(f"approval timeouts: {exc}")

    async def _recover_acp(self) -> None:
        """ACP runs whose driving process died (kill -9): their harness groups killed, the
        runs settled, before their turn jobs are claimed again. The ACP SDK loads only when a
        run is left running (start-up: BENCHMARKS.md)."""
        try:
            if await self.store.fetchone(
                    "SELECT 1 FROM acp_runs WHERE status='running' LIMIT 1") is None:
                return
            from ..acp.bridge import recover as acp_recover

            await acp_recover(self.store, actor=self.owner)
        except ClawError as exc:
            self.errors.append(f"acp recovery: {exc}")

    async def quiet(self, sessions: set[str] | None = None) -> bool:
        """No job queued or running for `sessions` and their descendants (or anywhere)."""
        if sessions is None:
            row = await self.store.fetchone(
                "SELECT 1 FROM turn_jobs WHERE status IN ('queued','running') LIMIT 1")
            return row is None
        ids = ",".join("?" * len(sessions))
        row = await self.store.fetchone(
            "WITH RECURSIVE tree(id) AS (SELECT id FROM sessions WHERE id IN (" + ids + ")"
            " UNION SELECT s.id FROM sessions s JOIN tree t ON s.parent_id = t.id)"
            " SELECT 1 FROM turn_jobs WHERE status IN ('queued','running') AND session_id IN"
            " (SELECT id FROM tree) LIMIT 1", tuple(sessions))
        return row is None

    async def aclose(self) -> None:
        tasks = [t for _, t in list(self.running.values())]
        for c, _ in list(self.running.values()):
            c.lost = True
            c.cancel.cancel("worker stopping")
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):  # its jobs (if any) are free to take over now
            await leases.release(self.store, worker_lease(self.owner), self.owner)
        if self._own_registry and self.registry is not None:
            with contextlib.suppress(Exception):
                await self.registry.aclose()
        for reg in [*(r for _, r in self._experts.values()), *self._stale]:
            with contextlib.suppress(Exception):
                await reg.aclose()
        self._experts.clear()
        self._stale.clear()

    async def _renew(self) -> None:
        if not self.running:
            return
        claims = [c for c, _ in self.running.values()]
        lost = set(await self.store.execute(
            lambda tx: _renew(tx, claims, self.owner, self.lease_ttl_s)))
        for c in claims:
            if c.job_id in lost:
                c.lost = True
                c.cancel.cancel("lease lost")

    async def _watch_stops(self) -> None:
        now = asyncio.get_running_loop().time()
        if not self.running or now - self._stops_at < 0.05:
            return
        self._stops_at = now
        sids = {c.session_id: c for c, _ in self.running.values()}
        marks = ",".join("?" * len(sids))
        rows = await self.store.fetchall(
            f"SELECT id FROM sessions WHERE stop_requested=1 AND id IN ({marks})",
            tuple(sids))
        for r in rows:
            sids[r["id"]].cancel.cancel("session stopped")

    # ------------------------------------------------------------- one job

    def _messages(self, claim: Claim) -> list[ChatMessage]:
        spec = claim.spec
        system = spec.config.defaults.system_prompt or (
            f"You are {spec.name}, an agent working in a session. Answer the latest user"
            " message. A [Backlog] message lists work that was interrupted or queued:"
            " continue it.")
        choice = self.skills.for_policy(spec.config.policy.skills, spec.config.policy.tools)
        if choice.injected:
            system += "\n\n" + choice.prompt()
        if claim.announces:
            system += "\n\n" + announce_context(claim.announces)
        if claim.memories:  # ephemeral, like announces: never stored as a message
            system += "\n\n" + memory_context(claim.memories)
        return [ChatMessage(role="system", content=system),
                *(_render(m) for m in claim.history)]

    async def _run(self, claim: Claim) -> None:
        result: TurnResult | None = None
        error = ""
        records = TurnRecords(self.store)
        box: SessionToolBox | None = None
        try:
            if self.embedder is not None:  # the claim recalled by BM25; now, outside it, hybrid
                c = claim.spec.config
                bm25 = claim.memories
                claim.memories = await turn_recall(
                    self.store, self.embedder, self.config.memory, claim.spec.name,
                    c.policy.memory, c.context_policy.recall, claim.focus, claim.memories)
                claim.rerecalled = recalled_refs(claim.memories) != recalled_refs(bm25)
            if claim.provider == ACP_PROVIDER:  # the spec's harness, or the one named
                result = await self._acp_turn(claim)
            else:
                # a job taken over does not make its earlier attempts' calls again
                box = (TakeOverToolBox if claim.attempt > 1 else SessionToolBox)(self, claim)
                result = await self._model_turn(claim, records, box)
        except asyncio.CancelledError:
            if claim.lost:
                raise
            error = "cancelled"
        except ClawError as exc:
            error = str(exc)
        except Exception as exc:  # a bug below us: the job fails, the worker goes on
            error = f"{type(exc).__name__}: {exc}"
            self.errors.append(f"{claim.job_id}: {error}")
        if claim.lost:
            return  # another worker owns the job now; it answers
        if result is not None and result.stop_reason == "awaiting_approval":
            if await self._pause(claim, result, box):
                self.finished += 1
                return
            result = result.model_copy(update={"stop_reason": "cancelled"})  # stopped
        try:
            await self.store.execute(lambda tx: _finish(tx, claim, self.owner, result, error))
        except ClawError as exc:
            self.errors.append(f"{claim.job_id}: finish: {exc}")
        self.errors.extend(f"{claim.job_id}: turn record: {f}" for f in records.failures())
        self.finished += 1

    async def _acp_turn(self, claim: Claim) -> TurnResult:
        """The turn as an ACP `session/prompt` of the spec's harness (core.acp)."""
        own = claim.spec.config.defaults.acp  # a session override names another by its name
        acp = own if own is not None and harness_name(own) == claim.model else claim.model
        sink = self.on_text

        def on_text(text: str) -> None:
            if sink is not None:
                sink(claim.session_id, claim.turn_id, text)

        return await run_acp_turn(
            self.store, acp, self.config.path, session_id=claim.session_id,
            turn_id=claim.turn_id, agent=claim.spec.name, history=claim.history,
            focus=claim.focus, cancel=claim.cancel, on_text=on_text)

    async def _pause(self, claim: Claim, result: TurnResult, box: SessionToolBox | None
                     ) -> bool:
        """Record the wait for a confirm-tier call; False when the session was stopped."""
        call = result.pending[0]
        redacted = box.redact(call.name, call.arguments) if box is not None else call.arguments
        try:
            out = await self.store.execute(
                lambda tx: _pause(tx, claim, self.owner, result, redacted))
        except ClawError as exc:
            self.errors.append(f"{claim.job_id}: pause: {exc}")
            return True
        return out != "stopped"

    async def fenced_append(self, claim: Claim, events: list[NewEvent]) -> bool:
        """Append `events` only while the job is still this worker's (one commit)."""
        def command(tx: WriteTx) -> bool:
            if _ours(tx, claim, self.owner) is None:
                return False
            for e in events:
                tx.emit(e)
            return True

        return await self.store.execute(command)

    async def _model_turn(self, claim: Claim, records: TurnRecords,
                          box: SessionToolBox) -> TurnResult:
        provider = self.config.provider(claim.provider)
        spec = claim.spec
        d = spec.config.defaults
        price = Price(d.price.prompt, d.price.completion) if d.price is not None else None
        sid = claim.session_id

        async def steer(state: TurnState) -> list[ChatMessage]:
            if claim.cancel.cancelled:
                return []
            row = await self.store.fetchone(
                "SELECT 1 FROM session_inbox WHERE session_id=? AND status='pending'"
                " LIMIT 1", (sid,))
            if row is None:
                return []
            texts = await self.store.execute(
                lambda tx: _steer(tx, claim, self.owner, state))
            if texts:
                claim.focus = texts[-1]
                claim.focus_round = state.rounds
            return [ChatMessage(role="user", content=f"{STEER_NOTE}\n\n{t}")
                    for t in texts]

        def on_text(text: str) -> None:
            if self.on_text is not None:
                self.on_text(sid, claim.turn_id, text)

        r = claim.resume
        resume = TurnResume(pending=r.pending, decided=box.decided, rounds=r.rounds) \
            if r is not None else None
        return await run_turn(
            provider, model=claim.model,
            messages=[self._messages(claim)[0], *r.messages] if r is not None
            else self._messages(claim),
            tools=box, gate=TierGate(spec.config.policy.approval), resume=resume,
            budget=_budget(spec), start_recorded=True,  # the claim recorded the turn's start
            subject=sid, agent=spec.name, store=records, price=price, steer=steer,
            on_text=on_text, cancel=claim.cancel, temperature=d.temperature,
            max_tokens_per_call=d.max_output_tokens,
            first_tool_choice=d.first_tool_choice,
            metadata={"purpose": "session", "session": sid, "job": claim.job_id,
                      "labels": [x for x in (claim.label, spec.name) if x]},
            turn_id=claim.turn_id)


__all__ = ["SPAWN_MANY_TOOL", "SPAWN_TOOL", "STEER_NOTE", "Claim", "SessionRunner",
           "SessionToolBox",
           "announce_context", "worker_lease"]
