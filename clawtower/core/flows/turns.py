"""Flow nodes as session turns: a node that executes runs ONE TurnJob in a session of its
agent, so the agent acts with its spec (tools, skills, MCP servers, allow-lists, approval
gate, budgets, ACP harness) exactly as in any session; decisions and syntheses stay with
the wrapped brain (llm-task calls of `ModelBrain`, or `PlanBrain` without a model).

Each executed node gets its own session (created by the flow: `created_by flow:F-n`, so
outside sends are refused, on the internal channel, titled `F-n <agent> <node>`): nodes of
one agent run in parallel, as they did before, and each node's transcript holds its task,
its tool calls and its reply. The session, its TASK message and its job are one commit,
and the job's id is derived from the task id: an engine re-running the node after a crash
finds the same job (queued, running, waiting for an approval, or finished) and takes its
reply instead of queueing another, so a node's turn runs once per flow (a job whose worker
died is taken over by the session machinery, as any TurnJob).

The engine waits for the job on the store's change channel: one watcher per brain reads,
after each commit, which of the awaited jobs ended (one query for all of them), and hands
each its row; no polling loop of its own.

What an executed node writes (issue 36: 4 events, was 8): the flow's TASK
(`flow.task_sent`); `session.created`, folding the TASK message, the job, the job's start
when this worker claims it there (`start`, with the turn's start: no `turnjob.started`;
a job left queued for want of a slot starts later in its own) and taking the task (it
shows as running from there: no `flow.task_taken`); `turnjob.finished`, folding the
turn's end (`turn`: no `turn.finished`), the reply and the session's end
(`session_status`: ok when the job is done, error otherwise; no `session.finished`); the
REPLY (`flow.replied`). A node session
that did not end with its job (one with sessions of its own, a job ended otherwise than by
its turn) is ended by `_close_session` after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from ..agents.config import SIMULATOR
from ..errors import ClawError
from ..events import NewEvent
from ..ids import new_id
from ..sessions import events as sev
from ..sessions.checks import INTERNAL_CHANNEL, _next_session_id
from ..sessions.flownodes import flow_node_job_id
from ..sessions.registry import spec_by_ref
from ..sessions.specs import AgentSpec
from ..store.interface import Store, WriteTx
from .brains import AgentFailed, Answer, Brain, Decision
from .service import WorkItem

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig
    from ..sessions.claims import Claim
    from ..sessions.runner import SessionRunner

ENDED = ("done", "failed", "cancelled")
JOB_COLUMNS = ("id, status, reply_msg_id, error, stop_reason, prompt_tokens, completion_tokens,"
               " (SELECT s.status FROM sessions s WHERE s.id=turn_jobs.session_id)"
               " AS session_status, (SELECT m.text FROM session_messages m WHERE"
               " m.session_id=turn_jobs.session_id AND m.msg_id=turn_jobs.reply_msg_id)"
               " AS reply")
OPEN_SESSION = ("idle", "queued", "running", "waiting")


def node_job_id(task_id: str) -> str:
    """The TurnJob of an executed node (derived from the task id: found again after a
    crash)."""
    return flow_node_job_id(task_id)


def owner_of(flow_id: str) -> str:
    return f"flow:{flow_id}"


def queue_node_turn(tx: WriteTx, item: WorkItem, job_id: str) -> str:
    """The node's session, its TASK message and its TurnJob, in one commit; the session
    of the job already queued for this node when there is one. Returns the session id."""
    return _queue_node(tx, item, job_id, None)[0]


def queue_and_claim(tx: WriteTx, item: WorkItem, job_id: str, runner: SessionRunner
                    ) -> tuple[str, Claim | None]:
    """`queue_node_turn`, and the job claimed by `runner` in the same commit when this
    command created it (issue 36: no claim command of its own, nothing read back; the
    runner `reserve`d a slot for it and `adopt`s what this returns)."""
    return _queue_node(tx, item, job_id, runner)


def _queue_node(tx: WriteTx, item: WorkItem, job_id: str, runner: SessionRunner | None
                ) -> tuple[str, Claim | None]:
    row = tx.one("SELECT session_id FROM turn_jobs WHERE id=?", (job_id,))
    if row is not None:
        return str(row["session_id"]), None
    spec = spec_by_ref(tx, item.agent)
    sid = _next_session_id(tx)
    by = owner_of(item.flow_id)
    provider, model = overrides(_executor(tx, item.flow_id), spec)
    # `taken`: this event also takes the flow task (it shows as running from here; no
    # `flow.task_taken`, issue 36); a node session logged before says nothing of it
    task = {"label": item.local_id, "prompt": item.instruction, "flow_task": item.task_id,
            "taken": True}
    created = sev.SessionCreated(
        title=f"{item.flow_id} {spec.name} {item.local_id}", agent_id=spec.agent_id,
        provider_override=provider, model_override=model,
        deliver=False, channel=INTERNAL_CHANNEL, trace_id=item.flow_id, task=task,
        created_by=by,  # with its first message and the job that takes it (issue 24.2)
        inbound=sev.SessionInbound(msg_id=new_id("m"), text=node_text(item), sender=by),
        job_id=job_id, job_reason="flow")
    creation = NewEvent(entity_id=sid, actor=by, role="agent", payload=created)
    if runner is None:
        tx.emit(creation)
        return sid, None
    return sid, runner.claim_fresh_in(tx, creation)  # emits it, its job's start folded in


_EXECUTORS = "flow-executor"  # a memo key entity no event has: a flow's executor is fixed


def _executor(tx: WriteTx, flow_id: str) -> str:
    """The flow's executor, read once per batch of commands: it is set when the flow starts
    and never changes (a rerun is a new flow), and every node of the batch asks for it."""
    def load() -> str:
        row = tx.one("SELECT executor FROM flows WHERE id=?", (flow_id,))
        return str(row["executor"] or "") if row else ""

    return tx.cached(_EXECUTORS, flow_id, load)


def overrides(executor: str, spec: AgentSpec) -> tuple[str | None, str | None]:
    """The node session's (provider, model) override for the flow's executor: a harness
    (`acp:NAME`: the session machinery runs the turn as an ACP prompt of NAME), the
    built-in turn loop on the spec's own model even when the spec names a harness
    (`builtin`), or none (the spec decides)."""
    if executor.startswith("acp:"):
        from ..acp.session import ACP_PROVIDER  # the ACP client only when a flow names it

        return ACP_PROVIDER, executor[4:]
    if executor == "builtin" and spec.config.defaults.acp is not None:
        return spec.config.defaults.provider or SIMULATOR, spec.config.defaults.model
    return None, None


def node_text(item: WorkItem) -> str:
    """The node's TASK as its turn gets it: the context first, the instruction last (what
    the model answers, and where a `#call` directive of the simulator is found)."""
    ctx = json.dumps(item.context, ensure_ascii=False) if item.context else ""
    return f"TASK {item.task_id}\n" + (f"CONTEXT: {ctx}\n\n" if ctx else "") + \
        item.instruction


def _close_session(tx: WriteTx, sid: str, by: str, ok: bool) -> None:
    """The node's session ends with its turn (it takes no more work): for a session the
    job's finish did not end already (a job that ended otherwise than by its turn's finish,
    e.g. cancelled at its claim, or a node session with sessions of its own)."""
    row = tx.one("SELECT status FROM sessions WHERE id=?", (sid,))
    if row is not None and row["status"] in OPEN_SESSION:
        tx.emit(NewEvent(entity_id=sid, actor=by, role="agent",
                         payload=sev.SessionFinished(status="ok" if ok else "error")))


class TurnBrain:
    """Executes nodes as TurnJobs; decides and synthesises with `decider`.

    `runner`: a session worker already running on this store (`serve`, the console), or
    None to run one here while the engine runs (limited to the sessions of its nodes)."""

    # `work` records the node's progress itself: the `session.created` that queues its turn
    # marks the task running (core/flows/projections.py), so the engine writes no
    # `flow.task_taken` once `work` is called (issue 36)
    records_progress = True

    def __init__(self, store: Store, decider: Brain, *, config: ClawtowerConfig | None = None,
                 runner: SessionRunner | None = None, lease_ttl_s: float = 15.0,
                 max_concurrent: int = 64) -> None:
        self.store = store
        self.decider = decider
        self.config = config
        self.runner = runner
        self.sessions: set[str] = set()  # the sessions our own worker runs
        self.lease_ttl_s = lease_ttl_s
        self.max_concurrent = max_concurrent
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}  # job id -> its end
        self._watcher: asyncio.Task[None] | None = None
        self._own: SessionRunner | None = None  # the worker `serving` runs when none was given

    # ------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While an engine runs: the change watcher, and our own session worker when none
        was given (one registration point for whatever runs flows)."""
        stop = asyncio.Event()
        own: asyncio.Task[None] | None = None
        if self.runner is None:
            from ..sessions.runner import SessionRunner

            worker = SessionRunner(self.store, self.config, sessions=self.sessions,
                                   lease_ttl_s=self.lease_ttl_s,
                                   max_concurrent=self.max_concurrent)
            self._own = worker
            own = asyncio.create_task(worker.run(stop), name="flow session worker")
        self._watcher = asyncio.create_task(self._watch(), name="flow turn watcher")
        try:
            yield
        finally:
            stop.set()
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
            if own is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await own
            self._own = None

    async def _watch(self) -> None:
        """After every commit, ONE read of the awaited jobs that have ended (not a read per
        waiting node): each ended job's waiter gets its row."""
        seq = await self.store.last_seq()
        while True:
            seq = await self.store.wait_for_change(seq, 1.0)
            if not self._waiting:
                continue
            ids = list(self._waiting)
            rows = await self.store.fetchall(
                f"SELECT {JOB_COLUMNS} FROM turn_jobs WHERE id IN (SELECT value FROM"
                " json_each(?)) AND status IN ('done', 'failed', 'cancelled')",
                (json.dumps(ids),))
            for r in rows:
                fut = self._waiting.pop(r["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(r)

    # ------------------------------------------------------------------ the brain

    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision:
        """A node whose turn was queued before a crash was decided already: it executes
        (a model asked again might decide otherwise while its turn runs on). A node whose
        TASK this engine's own command just sent has no turn yet: nothing is read."""
        if not item.dispatched_here and await self.store.fetchone(
                "SELECT 1 FROM turn_jobs WHERE id=?", (node_job_id(item.task_id),)) is not None:
            return Decision("execute")
        return await self.decider.decide(item, delegates)

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer:
        return await self.decider.synthesize(item, replies)

    async def work(self, item: WorkItem) -> Answer:
        jid = node_job_id(item.task_id)
        runner = self.runner or self._own
        claim: Claim | None = None
        if runner is not None and runner.reserve():  # its claim in the queueing commit
            try:
                sid, claim = await self.store.execute(
                    lambda tx: queue_and_claim(tx, item, jid, runner))
            finally:
                runner.adopt(claim)
        else:
            sid = await self.store.execute(lambda tx: queue_node_turn(tx, item, jid))
        self.sessions.add(sid)
        job = await self._ended(jid, started_here=claim is not None)
        ok = job["status"] == "done"
        if job["session_status"] in OPEN_SESSION:  # else it ended with the job (issue 36)
            by = owner_of(item.flow_id)
            self.store.submit(lambda tx: _close_session(tx, sid, by, ok))  # the next commit
        tokens = int(job["prompt_tokens"] or 0) + int(job["completion_tokens"] or 0)
        if not ok:
            raise AgentFailed(f"{sid}: turn {job['status']}: "
                              f"{job['error'] or job['stop_reason'] or 'no reply'}")
        return Answer(text=(job["reply"] or "").strip(), tokens=tokens)

    async def _ended(self, jid: str, started_here: bool = False) -> dict[str, Any]:
        """The job's row, with its reply, once it has ended (the watcher reads it after a
        commit; a job that ended before we started waiting is read here). `started_here`:
        our worker claimed it in the queueing commit and its turn has not run yet (its task
        runs after this await), so it cannot have ended before the waiter is registered
        and nothing is read."""
        if self._watcher is None:
            raise ClawError("flow turns: the brain is not serving (run it in an engine)")
        fut = self._waiting.get(jid)
        if fut is None:  # registered before the read: no end can fall between the two
            fut = self._waiting[jid] = asyncio.get_running_loop().create_future()
        try:
            if started_here:
                return await fut
            row = await self.store.fetchone(
                f"SELECT {JOB_COLUMNS} FROM turn_jobs WHERE id=?", (jid,))
            if row is not None and row["status"] in ENDED:
                return row
            return await fut
        finally:
            if self._waiting.get(jid) is fut:
                del self._waiting[jid]


__all__ = ["TurnBrain", "node_job_id", "owner_of", "queue_and_claim", "queue_node_turn"]
