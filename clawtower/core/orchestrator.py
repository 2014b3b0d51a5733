"""The orchestrator loop: read stored state, dispatch one actor, store the result, decide.

It is the only actor that moves phases. Every decision reads typed records (attempt
status, review verdicts, approval status) from the store; agent text is parsed into those
records by the executor/reviewer workers, through their own roles' permissions.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from . import leases
from .agents.completion import complete
from .agents.provider import ChatMessage, ChatRequest, ProviderError
from .agents.registry import AgentSet
from .clock import Clock, SystemClock
from .effects import EffectSink, MemorySink
from .errors import ClawError
from .store.faults import storage_fault
from .store.interface import Command, Store, WriteTx
from .store.view import StoreView
from .tasks import commands as c
from .tasks.permissions import Role
from .tasks.phases import MAX_ATTEMPTS, Phase
from .tasks.scan import ACTIONABLE_SQL, ACTIVE, CHANGED_SQL
from .tasks.service import Tasks

log = logging.getLogger("clawtower.orchestrator")
T = TypeVar("T")

ORCH = "orchestrator"


def task_lease(task_id: str) -> str:
    """The lease an engine holds on a task while it drives it (`task:T-N`)."""
    return f"task:{task_id}"


class ExecReport(BaseModel):
    model_config = ConfigDict(extra="ignore")
    status: str = Field(pattern="^(succeeded|failed)$")
    reason: str = ""
    summary: str = ""
    artifacts: list[dict[str, str]] = Field(default_factory=list)
    heartbeats: int = Field(default=1, ge=0, le=20)


class SpecVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")
    verdict: str = Field(pattern="^(approved|changes_requested|blocked)$")
    findings: list[Any] = Field(default_factory=list)


class QualityVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")
    recommendation: str = Field(pattern="^(approve|rework)$")
    risk: str = Field(default="low", pattern="^(low|medium|high)$")
    maintainability: str = ""
    test_gaps: list[str] = Field(default_factory=list)
    findings: list[Any] = Field(default_factory=list)


SYSTEM_PROMPTS = {
    "execute": "You are the executor. Work only against the declared inputs and outputs. "
               "Answer with JSON: {status, reason, summary, artifacts[]}.",
    "spec_review": "You are the spec reviewer. Is this spec unambiguous and testable? "
                   "Answer with JSON: {verdict: approved|changes_requested|blocked, findings[]}.",
    "spec_gate": "You are the spec reviewer. Does the artifact satisfy the spec? "
                 "Answer with JSON: {verdict, findings[] referencing files or artifacts}.",
    "quality_gate": "You are the quality reviewer. Is the implementation maintainable and safe? "
                    "Answer with JSON: {recommendation: approve|rework, risk, maintainability, "
                    "test_gaps[], findings[]}.",
}

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?|\n?```\s*$")


class AgentOutputError(ClawError):
    pass


class TaskLost(ClawError):
    """Another engine claimed this task after our lease lapsed: we write nothing more to it."""


#: (task lease, owner) of the task the current drive works on: its writes are fenced
_CLAIM: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "clawtower_task_fence", default=None)


def _fenced(command: Command[T], name: str, owner: str) -> Command[T]:
    def run(tx: WriteTx) -> T:
        # the lease is ours until another owner acquires it (an expired lease nobody took
        # is still ours): checked in the write's own transaction, so a stalled engine whose
        # task moved on can never commit a step of it
        row = tx.one("SELECT owner, released FROM leases WHERE name=?", (name,))
        if row is None or row["owner"] != owner or row["released"]:
            raise TaskLost(f"{name}: claimed by {row['owner'] if row else 'nobody'}")
        return command(tx)
    return run


class _FencedStore(StoreView):
    """The store as a drive sees it: every write of a claimed task checks the claim."""

    def wrap(self, command: Command[T]) -> Command[T]:
        fence = _CLAIM.get()
        return command if fence is None else _fenced(command, *fence)


def parse_json_reply(text: str, model: type[BaseModel]) -> Any:
    """Strip code fences, parse JSON, validate against the purpose's schema."""
    body = _FENCE.sub("", text.strip())
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise AgentOutputError(f"agent returned invalid JSON ({exc.msg})") from None
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise AgentOutputError(f"agent JSON did not match schema: {exc.errors()[0]['msg']}") \
            from None


def _finding(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {"ref": value.get("ref"), "text": str(value.get("text", ""))}
    return c.parse_finding(str(value))


Executor = Callable[[dict[str, Any], dict[str, Any], str], Awaitable[None]]


class Orchestrator:
    def __init__(self, store: Store, agents: AgentSet, *, clock: Clock | None = None,
                 effects: EffectSink | None = None, concurrency: int = 16,
                 agent_timeout_s: float = 120.0, executor: Executor | None = None,
                 owner: str | None = None, lease_ttl_s: float = 10.0) -> None:
        """`owner`: claim each task with a lease (`task:T-N`) before driving it, so engines
        sharing a store divide the tasks and a dead engine's tasks move to a live one when
        their leases expire. None: drive every actionable task (one orchestrator per store).
        `executor`: an external executor of the implementation step (core.acp.task.AcpExecutor:
        a coding harness over ACP); None: the executor agent of `agents`."""
        self.store: Store = _FencedStore(store) if owner is not None else store
        self.executor = executor
        self.owner = owner
        self.lease_ttl_s = lease_ttl_s
        self._renewer: asyncio.Task[None] | None = None
        self.lost: list[str] = []  # tasks whose lease another engine took while we drove them
        self.tasks = Tasks(self.store)
        self.agents = agents
        self.clock = clock or SystemClock()
        self.effects = effects or MemorySink()
        self.concurrency = concurrency
        self.agent_timeout_s = agent_timeout_s
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self.errors: list[str] = []  # the most recent driving errors, newest last
        # per-task backoff after a driving error, so a persistent fault (a misconfigured
        # agent, an unreachable provider) is retried slowly instead of spinning
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}

    # ------------------------------------------------------------------ loop

    async def actionable(self) -> list[dict[str, Any]]:
        """Tasks with something to do that needs no human."""
        # Runs on every wake-up: `phase IN (active)` lets it use tasks_by_phase instead of
        # scanning every finished task, and the latest approval is one index probe.
        return await self.store.fetchall(ACTIONABLE_SQL)

    async def tick(self, since: int | None = None) -> int:
        """Start driving every actionable task not already in flight; with `since`, only
        among the tasks the log touched after that seq (a wake-up by a change: `run`)."""
        now = asyncio.get_running_loop().time()
        room = self.concurrency - len(self._inflight)
        if room <= 0:
            return 0
        rows = await (self.actionable() if since is None
                      else self.store.fetchall(CHANGED_SQL, (since,)))
        phases = {row["id"]: row["phase"] for row in rows}
        free = [row["id"] for row in rows
                if row["id"] not in self._inflight and self._retry_at.get(row["id"], 0.0) <= now]
        if self.owner is None:
            ids = free[:room]
        elif free:
            ids = await self._claim(free, room)
        else:
            ids = []
        for tid in ids:
            if tid not in self._inflight:
                self._inflight[tid] = asyncio.create_task(
                    self._drive_guarded(tid, phases.get(tid)))
        if ids and self.owner is not None and (self._renewer is None or self._renewer.done()):
            self._renewer = asyncio.create_task(self._renew(), name="orchestrator-renew")
        return len(ids)

    # ------------------------------------------------------------------ claims

    async def _claim(self, free: list[str], room: int) -> list[str]:
        """Take up to `room` of the free tasks in one commit; those another engine holds
        are skipped (a first sieve on the replica spares the write when all are held)."""
        assert self.owner is not None
        owner, ttl = self.owner, self.lease_ttl_s
        # the latest plausible "now": a sieve may let a held task through (the claim refuses
        # it), never hold back one whose lease has lapsed
        now = max(self.clock.now(), time.time())
        held = {r["name"] for r in await self.store.fetchall(
            "SELECT name FROM leases WHERE name LIKE 'task:%' AND released=0 AND owner!=?"
            " AND expires_at > ?", (owner, now))}
        names = [task_lease(t) for t in free if task_lease(t) not in held]
        if not names:
            return []

        def claim(tx: WriteTx) -> list[str]:
            # a task another engine finished since our read is not claimed (nor driven)
            live = [n for n in names if (row := tx.one(
                "SELECT phase FROM tasks WHERE id=?", (n.partition(":")[2],))) is not None
                and row["phase"] in ACTIVE]
            return leases.claim_many(tx, live, owner, ttl, room)

        taken = await self.store.execute(claim)
        return [n.partition(":")[2] for n in taken]

    async def _renew(self) -> None:
        """Renew the leases of the tasks in flight every TTL/3 (one commit); a task whose
        lease was taken meanwhile (this engine stalled past the TTL) stops being driven."""
        assert self.owner is not None
        owner, ttl = self.owner, self.lease_ttl_s
        while self._inflight:
            await asyncio.sleep(ttl / 3)
            names = [task_lease(t) for t in self._inflight]
            if not names:
                continue
            try:
                lost = await self.store.execute(
                    partial(leases.renew_many, names=names, owner=owner, ttl=ttl))
            except Exception as exc:  # e.g. the server is away: try again next round
                self.errors = [*self.errors[-99:], f"renewing task leases: {exc}"]
                continue
            for name in lost:
                tid = name.partition(":")[2]
                self.lost.append(tid)
                driver = self._inflight.get(tid)
                if driver is not None:
                    driver.cancel()

    async def _release(self, task_id: str) -> None:
        if self.owner is None:
            return
        owner = self.owner
        name = task_lease(task_id)
        with contextlib.suppress(Exception):  # unreleased, it simply expires
            await self.store.execute(lambda tx: leases.release_many(tx, [name], owner))

    async def _drive_guarded(self, task_id: str, phase: str | None = None) -> None:
        try:
            await self.drive(task_id, phase)
            self._failures.pop(task_id, None)
            self._retry_at.pop(task_id, None)
            await self._release(task_id)
        except asyncio.CancelledError:
            raise
        except TaskLost:  # another engine drives it now: not an error of ours
            self.lost.append(task_id)
        except Exception as exc:  # a fault (or a bug) must not kill the loop; surface it
            if storage_fault(exc) is not None:
                # the storage failed, not the task: no failure counted (never "stuck"), its
                # claim left as it is; driven again after a pause
                self._retry_at[task_id] = asyncio.get_running_loop().time() + 1.0
                return
            msg = str(exc) if isinstance(exc, ClawError) else f"{type(exc).__name__}: {exc}"
            self.errors = [*self.errors[-99:], f"{task_id}: {msg}"]
            if isinstance(exc, ClawError):
                log.warning("driving %s: %s", task_id, msg)
            else:
                log.exception("driving %s", task_id)
            n = self._failures.get(task_id, 0) + 1
            self._failures[task_id] = n
            self._retry_at[task_id] = (asyncio.get_running_loop().time()
                                       + min(30.0, 0.05 * 2 ** (n - 1)))
            await self._release(task_id)
        finally:
            self._inflight.pop(task_id, None)

    async def run(self, stop: asyncio.Event, *, poll_s: float = 0.5) -> None:
        """Tick at every change of the log, at every driver's end and every `poll_s`. A
        change alone scans only the tasks it touched (CHANGED_SQL); the whole scan runs at
        least every `poll_s` (what no event announces: a retry's time come, room freed)."""
        loop = asyncio.get_running_loop()
        seq = await self.store.last_seq()
        since: int | None = None  # None: the whole scan (the first one sets `full_at`)
        while not stop.is_set():
            if since is None:
                full_at = loop.time()
            await self.tick(since)
            waiter = asyncio.ensure_future(self.store.wait_for_change(seq, poll_s))
            stopper = asyncio.ensure_future(stop.wait())
            drivers = list(self._inflight.values())
            done, _ = await asyncio.wait([waiter, stopper, *drivers],
                                         return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            before = seq
            if waiter.done():
                seq = waiter.result()
            else:
                waiter.cancel()
            now = loop.time()
            changed_only = (seq > before and not any(d in done for d in drivers)
                            and now - full_at < poll_s
                            and not any(t <= now for t in self._retry_at.values()))
            since = before if changed_only else None
        await self.cancel_inflight()

    async def cancel_inflight(self) -> None:
        """Stop driving; the claims of the tasks stopped are released, so another engine
        takes them at once instead of after the TTL."""
        stopped = list(self._inflight)
        for t in list(self._inflight.values()):
            t.cancel()
        for t in list(self._inflight.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._inflight.clear()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        if self.owner is not None and stopped:
            owner = self.owner
            names = [task_lease(t) for t in stopped if t not in self.lost]
            with contextlib.suppress(Exception):
                await self.store.execute(lambda tx: leases.release_many(tx, names, owner))

    STUCK_AFTER = 5  # consecutive driving errors after which run_until_idle gives up on a task

    async def state(self) -> str:
        """"busy" (a task in flight, or one that needs no human and has not failed
        `STUCK_AFTER` times in a row), "stuck" (every remaining task keeps failing) or
        "idle" (nothing can happen without a human)."""
        return "busy" if self._inflight else self._state(await self.actionable())

    def _state(self, waiting: list[dict[str, Any]]) -> str:
        if not waiting:
            return "idle"
        if all(self._failures.get(r["id"], 0) >= self.STUCK_AFTER for r in waiting):
            return "stuck"
        return "busy"

    async def run_until_idle(self, timeout_s: float = 300.0) -> bool:
        """Drive until nothing can happen without a human. True if idle; False on timeout
        or when every remaining task keeps failing (see `errors`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            await self.tick()
            if not self._inflight:
                waiting = await self.actionable()
                state = self._state(waiting)
                if state != "busy":  # every remaining task keeps failing: say so, don't spin
                    return state == "idle"
                now = loop.time()
                nxt = min((self._retry_at.get(r["id"], now) for r in waiting), default=now)
                if self.owner is not None:  # the rest may be another engine's: wait for news
                    await self.store.wait_for_change(await self.store.last_seq(),
                                                     min(max(0.25, nxt - now), 1.0))
                else:
                    await asyncio.sleep(min(max(0.01, nxt - now), 1.0))
                continue
            await asyncio.wait(list(self._inflight.values()),
                               return_when=asyncio.FIRST_COMPLETED)
        return False

    # ------------------------------------------------------------------ one step

    async def drive(self, task_id: str, phase: str | None = None) -> None:
        """Take the next step of one task; loops until it needs a human or finishes.
        `phase`: the phase `actionable()` read; a decided approval is then acted on in one
        command, without reading the whole task first (the approval round trip)."""
        token = _CLAIM.set(None if self.owner is None else (task_lease(task_id), self.owner))
        try:
            for _ in range(64):
                if phase == Phase.AWAITING_APPROVAL:
                    moved = await self._resume(task_id)
                else:
                    task = await self.tasks.get(task_id)
                    moved = await self._step(task, Phase(task["phase"]))
                phase = None
                if not moved:
                    return
        finally:
            _CLAIM.reset(token)

    async def _move(self, task: dict[str, Any], to: Phase, reason: str) -> None:
        model = "default"
        escalation = None
        if to == Phase.EXECUTING:
            _, agent = self.agents.for_role("executor")
            model, escalation = agent.model, agent.escalation_model
        await self.tasks.transition(task["id"], to, reason, actor=ORCH, role=Role.ORCHESTRATOR,
                                    model=model, escalation_model=escalation,
                                    backoff_scale=self.agents.time_scale())

    async def _step(self, task: dict[str, Any], phase: Phase) -> bool:
        if phase == Phase.SPEC_DRAFT:
            if not task["spec_ok"]:
                return False
            if any(r["stage"] == "spec_review" and r["verdict"] != "approved"
                   and r["spec_version"] == task["spec_version"] for r in task["reviews"]):
                return False  # the reviewer asked for changes: wait for a new spec version
            await self._move(task, Phase.SPEC_REVIEW, "spec complete: submitted for review")
            return True
        if phase == Phase.SPEC_REVIEW:
            review = self._latest(task, "spec_review", task["spec_version"], by_version=True)
            if review is None:
                await self._review(task, "spec_review")
                return True
            if review["verdict"] == "approved":
                await self._move(task, Phase.EXECUTION_READY, "spec review approved the spec")
            else:
                await self._move(task, Phase.SPEC_DRAFT,
                                 f"spec review: {review['verdict']}: {_summary(review)}")
            return True
        if phase == Phase.EXECUTION_READY:
            if _used(task) >= MAX_ATTEMPTS:
                await self._move(task, Phase.CIRCUIT_OPEN,
                                 f"attempt budget exhausted ({_used(task)}/{MAX_ATTEMPTS})")
            else:
                await self._move(task, Phase.EXECUTING, f"starting attempt {task['attempts'] + 1}")
            return True
        if phase == Phase.EXECUTING:
            attempt = task["attempt_records"][-1] if task["attempt_records"] else None
            if attempt is None:
                return False
            if attempt["status"] == "running":
                await self._execute(task, attempt)
                return True
            if attempt["status"] == "succeeded":
                await self._move(task, Phase.SPEC_GATE, f"attempt {attempt['n']} succeeded")
            elif _used(task) < MAX_ATTEMPTS:
                await self._move(task, Phase.RETRYING,
                                 f"attempt {attempt['n']} failed: {attempt['reason']}")
            else:
                await self._move(task, Phase.CIRCUIT_OPEN,
                                 f"attempt {attempt['n']} failed and the budget is spent")
            return True
        if phase == Phase.RETRYING:
            wait = (task["retry_not_before"] or 0) - self.clock.now()
            if wait > 0:
                await self.clock.sleep(wait)
            await self._move(task, Phase.EXECUTING,
                             f"retry: attempt {task['attempts'] + 1}"
                             + (" (escalated)" if task["retry_escalate"] else ""))
            return True
        if phase in (Phase.SPEC_GATE, Phase.QUALITY_GATE):
            review = self._latest(task, phase.value, task["attempts"])
            if review is None:
                await self._review(task, phase.value)
                return True
            if phase == Phase.SPEC_GATE:
                if review["verdict"] == "approved":
                    await self._move(task, Phase.QUALITY_GATE, "spec review approved the artifact")
                elif review["verdict"] == "blocked":
                    await self._move(task, Phase.CIRCUIT_OPEN,
                                     f"spec review blocked: {_summary(review)}")
                else:
                    await self._rework(task, f"spec review requested changes: {_summary(review)}")
                return True
            if review["verdict"] == "approve":
                pending = [e for e in task["side_effects"] if e["status"] != "done"]
                if pending:
                    await self._move(task, Phase.AWAITING_APPROVAL,
                                     f"{len(pending)} side effect(s) need an operator's approval")
                else:
                    await self._move(task, Phase.COMPLETED, "quality review approved")
            else:
                await self._rework(task, f"quality review recommends rework: {_summary(review)}")
            return True
        if phase == Phase.AWAITING_APPROVAL:
            return await self._resume(task["id"])
        if phase == Phase.READY_TO_RESUME:
            await self._perform_effects(task)
            await self._move(task, Phase.COMPLETED, "approved side effects performed")
            return True
        return False

    async def _resume(self, task_id: str) -> bool:
        """Act on the task's latest approval decision (tasks.commands.resume_decided)."""
        return await self.store.execute(partial(
            c.resume_decided, task_id=task_id, actor=ORCH, role=Role.ORCHESTRATOR))

    async def _rework(self, task: dict[str, Any], reason: str) -> None:
        if _used(task) >= MAX_ATTEMPTS:
            await self._move(task, Phase.CIRCUIT_OPEN, f"{reason}; attempt budget spent")
        else:
            await self._move(task, Phase.EXECUTION_READY, reason)

    @staticmethod
    def _latest(task: dict[str, Any], stage: str, key: int,
                by_version: bool = False) -> dict[str, Any] | None:
        last_entry = max((h["seq"] for h in task["history"] if h["to_phase"] == stage), default=0)
        for r in reversed(task["reviews"]):
            if r["stage"] != stage or r["seq"] < last_entry:
                continue
            if (r["spec_version"] if by_version else r["attempt"]) == key:
                return dict(r)
        return None

    # ------------------------------------------------------------------ actors

    async def _call(self, role: str, purpose: str, task: dict[str, Any], round_: int,
                    extra: dict[str, Any] | None = None) -> tuple[str, str, str]:
        name, agent = self.agents.for_role(role)
        attempt = task["attempts"]
        model = agent.model
        if purpose == "execute" and task["attempt_records"]:
            model = task["attempt_records"][-1]["model"]
        provider = self.agents.provider(agent)
        user = json.dumps({"task": task["id"], "title": task["title"], "spec": task["spec"],
                           "attempt": attempt, "artifacts": [a["uri"] for a in task["artifacts"]],
                           **(extra or {})}, sort_keys=True)
        request = ChatRequest(
            model=model, messages=[ChatMessage(role="system", content=SYSTEM_PROMPTS[purpose]),
                                   ChatMessage(role="user", content=user)],
            metadata={"task": task["id"], "title": task["title"], "purpose": purpose,
                      "round": round_, "attempt": attempt,
                      "labels": task["spec"].get("labels", []), "agent": name},
            max_tokens=agent.max_output_tokens, timeout_s=self.agent_timeout_s)
        async with asyncio.timeout(self.agent_timeout_s):
            result = await complete(provider, request)
        await self.store.execute(lambda tx: c.record_usage(
            tx, task["id"], name, model, purpose, result.usage.prompt_tokens,
            result.usage.completion_tokens))
        return name, model, result.text

    async def _review(self, task: dict[str, Any], stage: str) -> None:
        role = "quality_reviewer" if stage == "quality_gate" else "spec_reviewer"
        round_ = sum(1 for r in task["reviews"] if r["stage"] == stage)
        name, _model, text = await self._call(role, stage, task, round_)
        if stage == "quality_gate":
            try:
                q = parse_json_reply(text, QualityVerdict)
            except AgentOutputError as exc:
                q = QualityVerdict(recommendation="rework", findings=[f"reviewer output: {exc}"])
            await self.tasks.review(
                task["id"], role=Role.QUALITY_REVIEWER, reviewer=name, verdict=q.recommendation,
                findings=[_finding(f) for f in q.findings] or (
                    [] if q.recommendation == "approve" else [{"ref": None, "text": "rework"}]),
                details={"risk": q.risk, "maintainability": q.maintainability,
                         "test_gaps": q.test_gaps})
        else:
            try:
                s = parse_json_reply(text, SpecVerdict)
            except AgentOutputError as exc:
                s = SpecVerdict(verdict="changes_requested", findings=[f"reviewer output: {exc}"])
            findings = [_finding(f) for f in s.findings]
            if s.verdict != "approved" and not findings:
                findings = [{"ref": None, "text": "no findings given"}]
            await self.tasks.review(task["id"], role=Role.SPEC_REVIEWER, reviewer=name,
                                    verdict=s.verdict, findings=findings)

    async def _execute(self, task: dict[str, Any], attempt: dict[str, Any]) -> None:
        """The executor worker: calls the executor agent and records its work as executor."""
        tid, n = task["id"], attempt["n"]
        name, agent = self.agents.for_role("executor")
        # the task's own choice wins; else the executor agent's in clawtower.yaml
        chosen = task["spec"].get("executor") or agent.executor
        if chosen and chosen.startswith("acp:"):
            from .acp.config import harness
            from .acp.task import AcpExecutor

            try:
                runner: Executor = AcpExecutor(self.store, harness(chosen[4:]))
            except ClawError as exc:  # an unknown harness fails the attempt: retry rules
                await self.tasks.finish_attempt(tid, n, ok=False, reason=str(exc), actor=name)
                return
            await runner(task, attempt, name)
            return
        if self.executor is not None and chosen != "builtin":
            await self.executor(task, attempt, name)
            return
        t = self.tasks
        resume = attempt.get("checkpoint")
        await t.heartbeat(tid, n, actor=name, note="started" if not resume else "resumed")
        try:
            _, model, text = await self._call("executor", "execute", task, n - 1,
                                              {"resume_from": resume})
            report = parse_json_reply(text, ExecReport)
        except (ProviderError, AgentOutputError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            await t.finish_attempt(tid, n, ok=False, reason=reason, actor=name)
            return
        for i in range(report.heartbeats):
            await t.checkpoint(tid, n, {"step": i + 1, "of": report.heartbeats}, actor=name)
        if report.status == "succeeded":
            for a in report.artifacts:
                await t.artifact(tid, n, a.get("name", "artifact"), a.get("uri", ""),
                                 actor=name, summary=a.get("summary", ""))
            planned = {(e["kind"], e["description"], e["target"]) for e in task["side_effects"]}
            for eff in task["spec"].get("side_effects", []):
                key = (eff["kind"], eff["description"], eff.get("target", ""))
                if key not in planned:
                    await t.plan_effect(tid, n, eff["kind"], eff["description"], actor=name,
                                        target=eff.get("target", ""))
        await t.finish_attempt(tid, n, ok=report.status == "succeeded",
                               reason=report.reason, actor=name,
                               output={"summary": report.summary, "model": model})

    async def _perform_effects(self, task: dict[str, Any]) -> None:
        """intent committed -> effect performed with its key -> done committed."""
        tid = task["id"]
        for e in task["side_effects"]:
            if e["status"] == "done":
                continue
            eid = e["effect_id"]
            key = await self.store.execute(partial(c.effect_intent, task_id=tid, effect_id=eid,
                                                   actor=ORCH, role=Role.ORCHESTRATOR))
            result = await self.effects.perform(e["kind"], e["target"], e["description"], key)
            await self.store.execute(partial(c.effect_done, task_id=tid, effect_id=eid,
                                             result=result, actor=ORCH, role=Role.ORCHESTRATOR))


def _used(task: dict[str, Any]) -> int:
    """Attempts spent of the current budget (a circuit unblock starts a fresh one)."""
    base = 0
    for h in task["history"]:
        if h["from_phase"] == Phase.CIRCUIT_OPEN:
            base = int(h["attempt"])
    return int(task["attempts"]) - base


def _summary(review: dict[str, Any]) -> str:
    texts = [f.get("text", "") for f in review.get("findings", []) if isinstance(f, dict)]
    return "; ".join(t for t in texts if t)[:200] or review["verdict"]
