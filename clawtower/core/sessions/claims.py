"""The session worker's store commands, each one `BEGIN IMMEDIATE` transaction: claim a
TurnJob (drain the backlog, take pending messages and announces, recall memories, record
`turnjob.started`), steer at a safe boundary, finish (reply, backlog, announce, wake the
parent), pause at an approval gate, renew the worker's lease. The worker that runs them
(the claim loop, the turn itself, harnesses) is `core/sessions/runner.py`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import leases
from ..acp.session import ACP_PROVIDER, harness_name
from ..agents.config import SIMULATOR
from ..agents.provider import ChatMessage
from ..agents.turns import (
    CancelHandle,
    TurnBudget,
    TurnResult,
    TurnState,
)
from ..events import NewEvent, StoredEvent
from ..liveness import holder_gone, process_tag
from ..memory.bm25 import recall_sync
from ..memory.policy import recall_namespaces
from ..memory.service import memory_context, recalled_refs
from ..store.interface import WriteTx
from . import events as sev
from . import gate, takeover
from .reads import announce_context
from .service import (
    new_id,
    spec_by_ref,
)
from .specs import AgentSpec

if TYPE_CHECKING:
    from .skills import SkillSet

STEER_NOTE = ("[Steer] The user sent a new message while you were working. Answer it now;"
              " your interrupted task is saved in the backlog and continues after your"
              " answer.")
TextSink = Callable[[str, str, str], None]  # (session id, turn id, text delta)


def worker_lease(owner: str) -> str:
    """The lease a worker holds while it runs jobs: its running jobs are its own while the
    lease lives, and anybody's to take over once it has expired (the worker died)."""
    return f"worker:{owner}"


def _running_beside(session: str, job: str) -> str:
    """SQL: another job of `session` runs under a live worker's lease (the one `?`: now).
    A session has at most one active TurnJob, across processes: the check and the claim
    (or the fence) are one commit."""
    return ("EXISTS(SELECT 1 FROM turn_jobs o JOIN leases ol ON ol.name = 'worker:' ||"
            f" o.owner WHERE o.session_id={session} AND o.status='running' AND o.id<>{job}"
            " AND ol.released=0 AND ol.expires_at > ?)")


_BUSY = f"SELECT {_running_beside('?', '?')} AS busy"


def _busy(tx: WriteTx, job: dict[str, Any]) -> bool:
    row = tx.one(_BUSY, (job["session_id"], job["id"], tx.now))
    return bool(row and row["busy"])


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
    focus_round: int = 0  # the turn's round at which `focus` became its task
    focus_prior: int = 0  # tool rounds done on `focus` by the jobs before (a resumed task)
    cancel: CancelHandle = field(default_factory=CancelHandle)
    lost: bool = False
    resume: gate.Resume | None = None  # a job queued again after its tool call was decided
    requester: str = "operator"  # who sent what this job answers (an approval names them)
    label: str = ""  # the session's task label (a flow node's id): a simulator script key
    memories: list[dict[str, Any]] = field(default_factory=list)  # recalled for this turn
    rerecalled: bool = False  # hybrid recall replaced the claim's BM25 memories


@dataclass(frozen=True)
class Fresh:
    """A session created in this same command with its one message and the job that takes
    it (a flow node's, core/flows/turns.py): what the claim would read back (the session's
    row, its inbox, an empty backlog, no announces, no transcript) is known, so the claim
    in that command reads none of it (issue 36)."""

    session: dict[str, Any]  # id, status, agent_id, provider_override, model_override, task
    inbound: dict[str, Any]  # the inbox row's msg_id, text, sender

    @classmethod
    def created(cls, sid: str, p: sev.SessionCreated) -> Fresh:
        """What `p` (its `session.created`, with its message and job) made of `sid`."""
        assert p.inbound is not None and p.job_id is not None
        return cls({"id": sid, "status": "queued", "agent_id": p.agent_id,
                    "provider_override": p.provider_override,
                    "model_override": p.model_override, "task": json.dumps(p.task)},
                   p.inbound.model_dump())


# --------------------------------------------------------------------------- commands


def _render(m: dict[str, Any]) -> ChatMessage:
    meta = m["meta"]
    if m["role"] == "assistant":
        return ChatMessage(role="assistant", content=m["text"])
    if meta.get("steered"):
        return ChatMessage(role="user", content=f"{STEER_NOTE}\n\n{m['text']}")
    return ChatMessage(role="user", content=m["text"])  # user, [Backlog], announce lines


def turn_messages(claim: Claim, skills: SkillSet) -> list[ChatMessage]:
    """What a claimed job's turn is prompted with: the system prompt (the spec's, or ours,
    with the injected skills, the announces it took and the recalled memories, ephemeral:
    never stored as messages) and the history its claim read."""
    spec = claim.spec
    system = spec.config.defaults.system_prompt or (
        f"You are {spec.name}, an agent working in a session. Answer the latest user"
        " message. A [Backlog] message lists work that was interrupted or queued:"
        " continue it.")
    choice = skills.for_policy(spec.config.policy.skills, spec.config.policy.tools)
    if choice.injected:
        system += "\n\n" + choice.prompt()
    if claim.announces:
        system += "\n\n" + announce_context(claim.announces)
    if claim.memories:
        system += "\n\n" + memory_context(claim.memories)
    return [ChatMessage(role="system", content=system), *(_render(m) for m in claim.history)]


def _history(tx: WriteTx, sid: str, n: int, last: sev.SessionMessage | None = None,
             announced_before: int | None = None, empty: bool = False
             ) -> list[dict[str, Any]]:
    """The transcript's last `n` messages, oldest first; `last` is one not written yet (it
    rides in the start event); with `announced_before`, announce lines logged from that seq
    on are left out (a take-over's re-run: they came after the turn it re-runs began).
    `empty`: the session has no stored message yet (a `Fresh` one): nothing is read."""
    if n <= 0:
        return []
    stored = 0 if empty else n if last is None else n - 1
    rows = tx.all("SELECT * FROM session_messages WHERE session_id=? AND (role<>'announce'"
                  " OR seq < ?) ORDER BY seq DESC LIMIT ?",
                  (sid, 1 << 62 if announced_before is None else announced_before, stored)
                  ) if stored else []
    out = [{"seq": r["seq"], "msg_id": r["msg_id"], "role": r["role"], "text": r["text"],
            "meta": json.loads(r["meta"])} for r in reversed(rows)]
    if last is not None:
        out.append({"seq": 0, "msg_id": last.msg_id, "role": last.role, "text": last.text,
                    "meta": last.meta})
    return out


def _budget(spec: AgentSpec) -> TurnBudget:
    b = spec.config.context_policy.budgets
    return TurnBudget(max_tool_rounds=b.max_tool_rounds, max_tokens=b.max_tokens,
                      max_wall_s=b.max_wall_s)


def _start(tx: WriteTx, job: dict[str, Any], owner: str, defaults: dict[str, str],
           fresh: Fresh | None = None,
           emit_start: Callable[[sev.TurnJobStarted], StoredEvent] | None = None
           ) -> Claim | None:
    """Claim `job`: its start recorded (`turnjob.started`, or by `emit_start`: folded into
    the event that creates a `fresh` session), its claim prepared for the worker."""
    sid = job["session_id"]
    session = fresh.session if fresh is not None else tx.one(
        "SELECT status, agent_id, provider_override, model_override, task"
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
    resumed: list[dict[str, Any]] = []  # the `resume` items drained: their task goes on
    backlog_msg: str | None = None
    resume = gate.load_resume(tx, job["id"]) if job["reason"] == "resume" else None
    steer_round: int | None = None  # a take-over with messages waiting: they steer
    rounds = takeover.close_dead_turn(tx, job, owner) if attempt > 1 else None
    # A take-over re-runs the job's turn on the inputs its first attempt took: announces
    # that came in since (their lines, their context) wake the session after it, by the
    # join. Taken now, a re-run parent would answer them, its spawns left undone.
    rerun = attempt > 1 and resume is None
    rerun_start = takeover.first_start(tx, sid, job["id"]) if rerun else None
    if rerun:  # the dead attempt's turn closes, its task waits
        task, prior = takeover.job_task(tx, job)
        if task and tx.one("SELECT 1 FROM session_inbox WHERE session_id=? AND"
                           " status='pending' LIMIT 1", (sid,)) is not None:
            steer_round = rounds or 0
            takeover.backlog_interrupted(tx, job, owner, prior + steer_round, task)
    if resume is not None:  # messages sent meanwhile are taken at the next safe boundary
        pass
    elif attempt == 1:
        waiting = [] if fresh is not None else tx.all(
            "SELECT * FROM session_backlog WHERE session_id=? AND status='waiting' ORDER BY"
            " seq", (sid,))
        resumed = [b for b in waiting if b["kind"] == "resume"]
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
    pending = [] if resume is not None else [fresh.inbound] if fresh is not None else tx.all(
        "SELECT * FROM session_inbox WHERE session_id=? AND status='pending' ORDER BY seq",
        (sid,))
    folded = None  # the one message with no backlog before it: it rides in the start event
    for m in pending:
        took.append(m["msg_id"])
        requester = requester or m["sender"] or "operator"
        msg = sev.SessionMessage(
            msg_id=new_id("m"), role="user", text=m["text"],
            meta={"kind": "message", "inbound": m["msg_id"], "sender": m["sender"],
                  "job": job["id"], **({} if steer_round is None else
                                        {"steered": True, "round": steer_round})})
        if backlog_msg is None and len(pending) == 1:
            folded = msg
        else:
            tx.emit(NewEvent(entity_id=sid, actor=m["sender"] or "operator", role="operator",
                             payload=msg))
    announces = []
    if spec.config.context_policy.announces and fresh is None:
        announces = [dict(r) for r in tx.all(
            "SELECT * FROM session_announces WHERE parent_id=? AND consumed_by IS NULL"
            " ORDER BY seq", (sid,))]
        if rerun:  # only those the dead attempt took (see `rerun` above)
            before = json.loads(job["took"] or "{}")
            offered = set(before.get("announces", [])) if isinstance(before, dict) else set()
            announces = [a for a in announces if a["msg_id"] in offered]
    turn_id = new_id("turn")
    history = _history(tx, sid, spec.config.context_policy.history_messages, folded,
                       rerun_start, empty=fresh is not None)
    mine = [h for h in history if h["role"] == "user" and h["meta"].get("job") == job["id"]]
    steered = [h for h in mine if h["meta"].get("steered")]
    focus_msgs = steered[-1:] if steered else mine
    focus = "\n".join(h["text"] for h in focus_msgs) or (history[-1]["text"] if history
                                                          else "")
    focus_prior = 0  # tool rounds done on `focus` before this job
    if resumed and not steered:  # the task a resume item names: continued, not nested in
        # the [Backlog] wording again at the next steer (as takeover.job_task does)
        task, focus_prior = takeover.resumed_task(resumed[-1])
        focus = task or focus
    memories = recall_sync(tx, recall_namespaces(
        spec.config.context_policy.recall, spec.config.policy.memory, spec.name), focus,
        k=spec.config.context_policy.recall.top_k, now=tx.now,
        min_score=spec.config.context_policy.recall.min_score,
        token_budget=spec.config.context_policy.recall.token_budget)
    # the model turn starts with the claim (one event); a harness's turn records its own
    turn = None if provider == ACP_PROVIDER else ev.TurnStarted(
        subject=sid, agent=spec.name, model=model, budget=_budget(spec).as_json())
    start = sev.TurnJobStarted(
        session_id=sid, owner=owner, attempt=attempt, turn_id=turn_id, agent_id=spec.agent_id,
        provider=provider, model=model, took=took, drained=drained, backlog_msg_id=backlog_msg,
        announces=[a["msg_id"] for a in announces], recalled=recalled_refs(memories),
        turn=turn, message=folded)
    started = emit_start(start) if emit_start is not None else tx.emit(
        NewEvent(entity_id=job["id"], actor=owner, role="system", payload=start))
    if folded is not None and history and history[-1]["msg_id"] == folded.msg_id:
        history[-1]["seq"] = started.seq  # logged with the start: its seq
    if not requester:
        requester = next((h["meta"].get("sender") or "operator" for h in reversed(mine)),
                         "operator")
    return Claim(job_id=job["id"], session_id=sid, attempt=attempt, turn_id=turn_id,
                 spec=spec, provider=provider, model=model, history=history,
                 announces=announces, focus=focus, focus_prior=focus_prior,
                 started_at=tx.now, resume=resume,
                 requester=requester, memories=memories,
                 label=str(json.loads(session["task"] or "{}").get("label") or ""))


def _gone_workers(tx: WriteTx, owner: str) -> list[str]:
    """Workers whose lease is live but whose process is known gone from this host (killed):
    their running jobs are taken over now, not once the lease lapses (a job claimed in the
    commit that queued it waits for no TTL after a kill -9). Another host's are unknown."""
    rows = tx.all("SELECT owner FROM leases WHERE name LIKE 'worker:%' AND released=0 AND"
                  " expires_at > ? AND owner <> ?", (tx.now, owner))
    # only owners named as `default_owner` names them now (`host:pid:start#n`): before, the
    # third part was random, and a live worker of that release would read as gone
    return [r["owner"] for r in rows if "#" in str(r["owner"]) and holder_gone(str(r["owner"]))]


def _claim(tx: WriteTx, owner: str, ttl: float, n: int, mine: set[str],
           defaults: dict[str, str], only: set[str] | None, expired: bool) -> list[Claim]:
    """Up to `n` jobs: queued ones, and (with `expired`) running ones whose worker's lease
    has expired (it died) or that are this worker's but no task of it runs them. Each
    only if no other job of its session runs under a live worker; all under this worker's
    lease (taken or renewed once), in this one commit."""
    rows = tx.all("SELECT * FROM turn_jobs WHERE status='queued' ORDER BY queued_seq"
                  " LIMIT ?", (n * 4 + 16,))
    if expired:
        gone = json.dumps(_gone_workers(tx, owner))
        rows += tx.all(
            "SELECT j.* FROM turn_jobs j LEFT JOIN leases l ON l.name = 'worker:' ||"
            " j.owner WHERE j.status='running' AND (l.name IS NULL OR l.released=1"
            " OR l.expires_at <= ? OR j.owner = ? OR j.owner IN (SELECT value FROM"
            " json_each(?))) ORDER BY j.queued_seq LIMIT ?",
            (tx.now, owner, gone, n + len(mine) + 16))
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


_LEASED = "worker-lease"  # a memo key entity no event has: this batch took our lease


def claim_fresh(tx: WriteTx, creation: NewEvent, owner: str, ttl: float,
                defaults: dict[str, str]) -> Claim | None:
    """Emit `creation` (a `session.created` with the session's one message and the job that
    takes it) with that job's claim folded in (`start`): the job never shows as queued to
    another worker, and the session, its message, its job and the job's start are one event
    (issue 36: a flow node's turn, a spawned child's). The claim is not a command of its own
    and reads nothing `creation` wrote (`Fresh`). This worker's lease is taken or renewed
    once per batch of commands; without it, `creation` is emitted as it is (the job stays
    queued for any worker) and None returned."""
    def lease() -> bool:
        return leases.acquire_in(tx, worker_lease(owner), owner, ttl)

    created = creation.payload
    assert isinstance(created, sev.SessionCreated)
    if not tx.cached(_LEASED, owner, lease):
        tx.emit(creation)
        return None
    sid = creation.entity_id
    job = {"id": created.job_id, "session_id": sid, "attempt": 0,
           "reason": created.job_reason, "took": None}

    def emit_start(start: sev.TurnJobStarted) -> StoredEvent:
        return tx.emit(NewEvent(entity_id=sid, actor=creation.actor, role=creation.role,
                                idem_key=creation.idem_key,
                                payload=created.model_copy(update={"start": start})))

    claim = _start(tx, job, owner, defaults, Fresh.created(sid, created), emit_start)
    assert claim is not None  # a fresh session is never stopped: its start was emitted
    return claim


_OURS = ("SELECT j.status, j.owner, j.attempt, l.owner AS lease_owner, l.released,"
         f" {_running_beside('j.session_id', 'j.id')} AS busy"
         " FROM turn_jobs j LEFT JOIN leases l ON l.name=? WHERE j.id=?")


def _ours(tx: WriteTx, claim: Claim, owner: str) -> bool:
    """Whether the job is still this worker's: running, its owner and attempt ours, under
    our unreleased lease, and no other job of its session running under a live lease (ours
    lapsed and another worker took the session's next job). One statement: it runs at
    every finish, steer and renewal."""
    row = tx.one(_OURS, (tx.now, worker_lease(owner), claim.job_id))
    return row is not None and row["status"] == "running" and row["owner"] == owner \
        and int(row["attempt"]) == claim.attempt and row["lease_owner"] == owner \
        and not row["released"] and not row["busy"]


def _steer(tx: WriteTx, claim: Claim, owner: str, state: TurnState) -> list[str]:
    if not _ours(tx, claim, owner):
        return []
    sid = claim.session_id
    pending = tx.all("SELECT * FROM session_inbox WHERE session_id=? AND status='pending'"
                     " ORDER BY seq", (sid,))
    if not pending:
        return []
    done = claim.focus_prior + state.rounds - claim.focus_round
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



def _pause(tx: WriteTx, claim: Claim, owner: str, result: TurnResult, redacted: str,
           end: NewEvent | None = None) -> str:
    """The turn stopped at a confirm-tier call: its end (`end`, held by the worker), the
    approval and the waiting job, in one commit ("lost" when the job is no longer ours;
    "stopped" when its session was: nothing written, the finish folds `end`)."""
    if not _ours(tx, claim, owner):
        return "lost"
    session = tx.one("SELECT stop_requested, status FROM sessions WHERE id=?",
                     (claim.session_id,))
    if session is None or session["stop_requested"]:
        return "stopped"
    if end is not None:  # the turn's end, `awaiting_approval`: its own event, as before
        tx.emit(end)
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
    return [c.job_id for c in claims if not _ours(tx, c, owner)]


# --------------------------------------------------------------------------- the worker


def default_owner() -> str:
    """`host:pid:start#n`: unique per worker, and tells whether its process is gone."""
    return f"{process_tag()}#{uuid.uuid4().hex[:6]}"
