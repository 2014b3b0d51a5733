"""The session worker: claims queued TurnJobs and runs each as ONE turn of
`core.agents.turns.run_turn`. At most one TurnJob per session is active, across processes:
a worker runs its jobs under ONE lease of its own (`worker:<owner>`, renewed while it
runs), and a job is claimed only if no other job of its session runs under a live
worker's lease, checked in the claiming commit. A batch of claims takes or renews that
lease once (not a lease per job: two events per child less in a fan-out).

A job's life, each step one store command:

1. claim: take (or renew) the worker's lease, drain the session's backlog into ONE
   `[Backlog]` user message, take its pending messages as user messages, note the
   unconsumed announces, record `turnjob.started` (a job claimed in the command that
   created its session: in that `session.created`; a job whose worker died is claimed
   again once that worker's lease expired: attempt + 1, same inputs, they are already in
   the transcript);
2. the turn runs; at every safe boundary (after a tool round) the steering hook looks for
   pending messages: if there are any, it saves a resume token for the interrupted task in
   the backlog and injects them (`turnjob.steered`);
3. finish: `turnjob.finished`, folding the turn's end and the reply; messages that found
   no boundary go to the backlog, a non-empty backlog queues the next job, a finished
   child announces to its parent (once per run_id), a parent whose children are all done
   is woken, external delivery if wanted and the channel is not internal. A worker that lost the job
   meanwhile (its lease expired and another worker took the job over) writes nothing: the
   job's new owner answers, never both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from .. import leases
from ..acp.session import ACP_PROVIDER, harness_name, run_acp_turn
from ..agents.config import BUILTIN, SIMULATOR, ClawtowerConfig, config_from_data
from ..agents.provider import ChatMessage
from ..agents.turns import (
    TurnResult,
    TurnResume,
    TurnState,
    run_turn,
)
from ..agents.usage import Price
from ..aio import unless_set
from ..errors import ClawError
from ..events import NewEvent
from ..memory.service import recalled_refs, turn_recall
from ..store.faults import storage_fault
from ..store.interface import Store, WriteTx
from ..tools.approval import TierGate
from ..tools.registry import ToolRegistry
from . import gate
from .claims import (  # the store commands; re-exported for tests and benchmarks
    STEER_NOTE,
    Claim,
    TextSink,
    _budget,
    _claim,
    _ours,
    _pause,
    _renew,
    _steer,
    claim_fresh,
    default_owner,
    turn_messages,
    worker_lease,
)
from .finish import _finish
from .reads import announce_context
from .records import TurnRecords
from .rerun import TakeOverToolBox
from .service import (
    SessionLimits,
    Sessions,
)
from .skills import SkillSet, load_skills
from .specs import SIM_MODELS, AgentSpec
from .toolbox import SPAWN_MANY_TOOL, SPAWN_TOOL, SessionToolBox


@dataclass
class _Cadence:
    """When a claim loop last swept expired leases and last renewed its own (loop time)."""

    expired: float
    renewed: float


_PENDING = "SELECT 1 FROM session_inbox WHERE session_id=? AND status='pending' LIMIT 1"


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
        self._reserved = 0  # slots held for claims in flight (`reserve`)
        self._closing = False
        self.errors: list[str] = []
        self.finished = 0
        self._stop = asyncio.Event()
        self._ended = asyncio.Event()  # a job's task ended: a slot is free, or the worker idle
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
        free = self.max_concurrent - len(self.running) - self._reserved
        if free <= 0:
            return []
        mine = set(self.running)
        claims = await self.store.execute(lambda tx: _claim(
            tx, self.owner, self.lease_ttl_s, free, mine, self._defaults, self.only, expired))
        for c in claims:
            self._launch(c)
        return claims

    def _launch(self, c: Claim) -> None:
        task = asyncio.create_task(self._run(c), name=f"turnjob {c.job_id}")
        self.running[c.job_id] = (c, task)
        task.add_done_callback(self._done_callback(c.job_id))

    # A job claimed in the command that queues it (a flow node's, core/flows/turns.py):
    # `reserve` a slot on the loop, `claim_fresh_in` inside the command (writer thread:
    # reads only what never changes), `adopt` the claim once the command has returned
    # (or None: the slot is given back). A claim committed but never adopted (its caller
    # was cancelled) is this worker's job with no task: the expired sweep takes it over.

    def reserve(self) -> bool:
        if self._closing or len(self.running) + self._reserved >= self.max_concurrent:
            return False
        self._reserved += 1
        return True

    def claim_fresh_in(self, tx: WriteTx, creation: NewEvent) -> Claim | None:
        """Emit `creation` with its job claimed by this worker (`claims.claim_fresh`)."""
        return claim_fresh(tx, creation, self.owner, self.lease_ttl_s, self._defaults)

    def adopt(self, claim: Claim | None) -> None:
        self._reserved -= 1
        if claim is not None and not self._closing:  # closing: taken over, as its others
            self._launch(claim)

    def _done_callback(self, job_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(_task: asyncio.Task[None]) -> None:
            self.running.pop(job_id, None)
            self._ended.set()

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
            await self._recover_acp()  # a driver that died while this worker runs, too
        if len(self.running) + self._reserved < self.max_concurrent and (
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
                seq = await self._next(seq, 0.05 if self.running else 0.2)
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
            seq = await self._next(seq, 0.05)

    async def _next(self, seq: int, timeout: float) -> int:
        """The store's newest seq once it passes `seq`; sooner when a job's task ends (its
        last commit may wake the loop before the task is gone from `running`), or `timeout`."""
        got = await unless_set(self._ended, self.store.wait_for_change(seq, timeout))
        self._ended.clear()
        return seq if got is None else got

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
        self._closing = True  # no claim in a queueing commit from here on
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
                records.write_end(claim.turn_id)
                raise
            error = "cancelled"
        except Exception as exc:
            if storage_fault(exc) is not None:
                # the storage failed, not the turn: the job is left running and ours, with
                # no task here, so a later sweep takes it over (attempt + 1, its recorded
                # tool results reused), as after a crash
                return
            error = str(exc) if isinstance(exc, ClawError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, ClawError):  # a bug below us: the job fails, we go on
                self.errors.append(f"{claim.job_id}: {error}")
        if claim.lost:  # another worker owns the job now; it answers
            records.write_end(claim.turn_id)
            return
        end = records.end  # the turn's end, held: folded into the job's (issue 36)
        if result is not None and result.stop_reason == "awaiting_approval":
            if await self._pause(claim, result, box, records):
                self.finished += 1
                return
            result = result.model_copy(update={"stop_reason": "cancelled"})  # stopped
        try:
            if await self.store.execute(lambda tx: _finish(
                    tx, claim, self.owner, result, error, end)) != "lost":
                records.end = None
        except ClawError as exc:
            self.errors.append(f"{claim.job_id}: finish: {exc}")
        records.write_end(claim.turn_id)  # not folded: on its own if the turn is open
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

    async def _pause(self, claim: Claim, result: TurnResult, box: SessionToolBox | None,
                     records: TurnRecords) -> bool:
        """Record the wait for a confirm-tier call, with the turn's end (held by `records`);
        False when the session was stopped (the finish folds the end then)."""
        call = result.pending[0]
        redacted = box.redact(call.name, call.arguments) if box is not None else call.arguments
        end = records.end
        try:
            out = await self.store.execute(
                lambda tx: _pause(tx, claim, self.owner, result, redacted, end))
        except ClawError as exc:
            self.errors.append(f"{claim.job_id}: pause: {exc}")
            records.write_end(claim.turn_id)
            return True
        if out == "waiting":
            records.end = None
        elif out == "lost":
            records.write_end(claim.turn_id)
        return out != "stopped"

    async def fenced_append(self, claim: Claim, events: list[NewEvent]) -> bool:
        """Append `events` only while the job is still this worker's (one commit)."""
        def command(tx: WriteTx) -> bool:
            if not _ours(tx, claim, self.owner):
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

        async def steer_at(last: list[NewEvent], state: TurnState,
                           steered: Callable[[list[ChatMessage]], NewEvent]
                           ) -> list[ChatMessage]:
            """The round's last result and the steer, one commit (issue 36): a message
            sent during the round is taken by the commit that ends it, its `turn.steered`
            beside it; the turn does not wait for a second commit, nor read first."""
            cancelled = claim.cancel.cancelled

            def command(tx: WriteTx) -> tuple[list[str], list[ChatMessage]]:
                for e in last:
                    tx.emit(e)
                if cancelled or tx.one(_PENDING, (sid,)) is None:
                    return [], []
                texts = _steer(tx, claim, self.owner, state)
                msgs = [ChatMessage(role="user", content=f"{STEER_NOTE}\n\n{t}")
                        for t in texts]
                if msgs:
                    tx.emit(steered(msgs))
                return texts, msgs

            texts, msgs = await self.store.execute(command)
            if texts:
                claim.focus = texts[-1]
                claim.focus_round, claim.focus_prior = state.rounds, 0
            return msgs

        def on_text(text: str) -> None:
            if self.on_text is not None:
                self.on_text(sid, claim.turn_id, text)

        r = claim.resume
        resume = TurnResume(pending=r.pending, decided=box.decided, rounds=r.rounds) \
            if r is not None else None
        return await run_turn(
            provider, model=claim.model,
            messages=[turn_messages(claim, self.skills)[0], *r.messages] if r is not None
            else turn_messages(claim, self.skills),
            tools=box, gate=TierGate(spec.config.policy.approval), resume=resume,
            budget=_budget(spec), start_recorded=True,  # the claim recorded the turn's start
            subject=sid, agent=spec.name, store=records, price=price, steer_at=steer_at,
            on_text=on_text, cancel=claim.cancel, temperature=d.temperature,
            max_tokens_per_call=d.max_output_tokens,
            first_tool_choice=d.first_tool_choice,
            metadata={"purpose": "session", "session": sid, "job": claim.job_id,
                      "labels": [x for x in (claim.label, spec.name) if x]},
            turn_id=claim.turn_id)


__all__ = ["SPAWN_MANY_TOOL", "SPAWN_TOOL", "STEER_NOTE", "Claim", "SessionRunner",
           "SessionToolBox",
           "announce_context", "worker_lease"]
