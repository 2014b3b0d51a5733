"""The trigger worker: claims queued invocations (lane order, exactly once), runs each as
its expert's process, and applies the execution policy (timeout, retry with backoff,
on_failure), delivery (format, SLA) and, for runs paused at a gate, their later outcome.

Any number of workers (in any number of processes) share one store: claims are commands
with leases, so each invocation runs once and each lane runs one at a time. A worker killed
mid-run loses nothing: its leases expire (or its process is seen gone) and another worker
takes the item over; if the run had started, it follows that run instead of starting again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

from ..clock import Clock, SystemClock
from ..errors import ClawError, Conflict
from ..liveness import process_tag
from ..store.faults import storage_fault
from ..store.interface import Store, WriteTx
from . import queue as q
from .catalog import Catalog
from .spec import TriggerSpec

RUN_ENDED = ("ok", "failed", "cancelled")


class Executor(Protocol):
    """Runs one invocation; `on_start(tx, run_id)` must be called inside the commit that
    starts its workflow run (it links the invocation to the run)."""

    def __call__(self, item: dict[str, Any], spec: TriggerSpec,
                 on_start: Callable[[WriteTx, str], None],
                 env: dict[str, str]) -> Awaitable[dict[str, Any]]: ...


def expert_executor(store: Store, by: str = q.ACTOR, actor: str = "operator") -> Executor:
    """The real executor: the process runs exactly as `clawtower expert run` runs it (its
    workflow run started by `actor`)."""
    from ..experts.run import run_process

    async def run(item: dict[str, Any], spec: TriggerSpec,
                  on_start: Callable[[WriteTx, str], None],
                  env: dict[str, str]) -> dict[str, Any]:
        if spec.session == "main":  # the event goes to the expert's main session
            from .mainsession import enqueue

            return await enqueue(store, spec, item, by)
        inputs = item["inputs"] if isinstance(item["inputs"], dict) else {}
        return await run_process(store, spec.expert, spec.process, inputs, by=by,
                                 env=env, on_start=on_start, actor=actor)

    return run


def classify(envelope: dict[str, Any]) -> tuple[str, Any]:
    """ok | paused | failed, with the output or the error text."""
    if envelope.get("ok"):
        status = envelope.get("status")
        if status == "ok":
            return "ok", envelope.get("output")
        if isinstance(status, str) and status.startswith("needs_"):
            return "paused", None  # an approval, an input, or the operator (an interrupted
            # step that may have had its effect is never re-run on its own)
        return "failed", f"run {status}"
    err = envelope.get("error")
    msg = err.get("message") if isinstance(err, dict) else None
    return "failed", str(msg or "run failed")


def deliver(spec: TriggerSpec, output: Any) -> dict[str, Any]:
    """The process output as `delivery.format` asks, addressed to `delivery.channel`."""
    fmt = spec.delivery.format
    out: dict[str, Any] = {"format": fmt, "channel": spec.delivery.channel}
    if fmt in ("structured", "both"):
        out["structured"] = output
    if fmt in ("narrative", "both"):
        out["narrative"] = narrative(spec, output)
    return out


def narrative(spec: TriggerSpec, output: Any) -> str:
    head = f"{spec.expert}: {spec.process} (trigger {spec.name}) finished"
    items = output if isinstance(output, list) else [output]
    lines: list[str] = []
    for it in items[-5:]:
        if isinstance(it, dict):
            lines.extend(f"{k}: {json.dumps(v)[:200]}" for k, v in list(it.items())[:10])
        elif it is not None:
            lines.append(str(it)[:500])
    return head + (".\n" + "\n".join(lines) if lines else ".")


class Worker:
    """Claims and runs invocations until `stop` is set. `capacity` bounds the runs in
    flight in this worker; `executor` defaults to running the expert's process."""

    def __init__(self, store: Store, *, catalog: Catalog | None = None,
                 executor: Executor | None = None, capacity: int = 8,
                 lease_ttl_s: float = q.LEASE_TTL_S, poll_s: float = 0.25,
                 approval_sweep_s: float = 30.0, clock: Clock | None = None,
                 drain_s: float = 20.0) -> None:
        self.store = store
        self.drain_s = drain_s
        self.clock = clock or SystemClock()  # the store's clock (SLA: received_at is its time)
        self.catalog = catalog or Catalog()
        self.executor = executor or expert_executor(store)
        self.capacity = capacity
        self.ttl = lease_ttl_s
        self.poll_s = poll_s
        self.approval_sweep_s = approval_sweep_s
        self.owner = f"{process_tag()}#t{uuid.uuid4().hex[:6]}"
        self.running: dict[str, asyncio.Task[None]] = {}
        self.errors: list[str] = []

    async def run(self, stop: asyncio.Event) -> None:
        renew_at = sweep_at = check_at = orphans_at = 0.0
        seq = await self.store.last_seq()
        claimed_seq = -1  # the log position the last claim saw
        due_at: float | None = None  # the next retry that comes due (store time)
        while not stop.is_set():
            now = time.monotonic()
            free = self.capacity - len(self.running)
            # a claim is a write: only when something could have become runnable (a new
            # event, a retry coming due, a lease that may have lapsed), not on every tick
            if free > 0 and (seq > claimed_seq or now >= orphans_at or (
                    due_at is not None and self.clock.now() >= due_at)):
                claimed_seq, orphans_at = seq, now + self.ttl / 3
                try:
                    items = await self.store.execute(
                        partial(q.claim_in, owner=self.owner, limit=free, ttl=self.ttl))
                    row = await self.store.fetchone(
                        "SELECT min(not_before) AS t FROM trigger_items WHERE status='retry'")
                    due_at = float(row["t"]) if row and row["t"] is not None else None
                except ClawError as exc:
                    self._note(f"claim failed: {exc}")
                    items = []
                for it in items:
                    if it["id"] not in self.running:  # its lease lapsed while it ran here
                        self.running[it["id"]] = asyncio.create_task(self._run_item(it))
            if now >= renew_at and self.running:
                await self._renew()
                renew_at = now + self.ttl / 3
            if now >= check_at:
                await self._settle_paused()
                check_at = now + 1.0
            if now >= sweep_at:
                await self._sweep_approvals()
                sweep_at = now + self.approval_sweep_s
            done = [k for k, t in self.running.items() if t.done()]
            for k in done:
                t = self.running.pop(k)
                if not t.cancelled() and t.exception() is not None:
                    # the item stays claimed; its lease lapses and a worker recovers it
                    self._note(f"{k}: {type(t.exception()).__name__}: {t.exception()}")
            if done:
                continue
            waiter = asyncio.ensure_future(self.store.wait_for_change(seq, self.poll_s))
            stopper = asyncio.ensure_future(stop.wait())
            tasks = [waiter, stopper, *self.running.values()]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if waiter.done():
                seq = max(seq, waiter.result())
            else:
                waiter.cancel()
        # a clean stop: nothing new is claimed; runs in flight may finish within `drain_s`
        # (their leases kept); what is left is cancelled, its run ends as interrupted, and
        # the next worker recovers the item and applies its execution policy
        deadline = time.monotonic() + self.drain_s
        while self.running and time.monotonic() < deadline:
            await self._renew()
            await asyncio.wait(list(self.running.values()), return_when=asyncio.FIRST_COMPLETED,
                               timeout=min(self.ttl / 3, max(0.0, deadline - time.monotonic())))
            for k in [k for k, t in self.running.items() if t.done()]:
                self.running.pop(k)
        for t in self.running.values():
            t.cancel()
        for t in self.running.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.running.clear()

    def _note(self, msg: str) -> None:
        self.errors.append(msg)
        del self.errors[:-50]

    async def _renew(self) -> None:
        ids = list(self.running)
        lost = await self.store.execute(lambda tx: q.renew_in(tx, ids, self.owner, self.ttl))
        for i in lost:
            t = self.running.get(i)
            if t is not None:
                t.cancel()

    async def _sweep_approvals(self) -> None:
        from ..experts.timeouts import sweep

        try:
            await sweep(self.store)
        except ClawError as exc:
            self._note(f"approval timeouts: {exc}")

    # ------------------------------------------------------------ one invocation

    async def _run_item(self, item: dict[str, Any]) -> None:
        item = q.decode_row(item)
        spec = self.catalog.get(item["expert"], item["trigger"])
        attempt = int(item["attempt"])
        if spec is None:
            await self._failed(item, None, attempt, f"trigger {item['expert']}/"
                               f"{item['trigger']} is no longer installed", None, final=True)
            return
        run_id: list[str] = [item["run_id"]] if item.get("run_id") else []

        def on_start(tx: WriteTx, rid: str) -> None:
            run_id.append(rid)
            q.link_in(tx, item["id"], rid, attempt, self.owner)

        try:
            if item.get("recovered") and run_id:
                envelope = await self._follow_run(run_id[0], spec.execution.idempotent)
            else:
                env = await self._attempt_env(item, spec)
                async with asyncio.timeout(spec.execution.timeout_s):
                    envelope = await self.executor(item, spec, on_start, env)
        except TimeoutError:
            await self._failed(item, spec, attempt, f"timed out after"
                               f" {spec.execution.timeout_s:g}s (execution.timeout)",
                               run_id[-1] if run_id else None)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an executor's own failure is the attempt's failure
            if storage_fault(exc) is not None:
                # the storage failed, not the attempt: nothing recorded; the item stays
                # claimed, its lease lapses and a worker recovers it (following its run)
                raise
            await self._failed(item, spec, attempt, f"{type(exc).__name__}: {exc}",
                               run_id[-1] if run_id else None)
            return
        await self._outcome(item, spec, attempt, envelope, run_id[-1] if run_id else None)

    async def _outcome(self, item: dict[str, Any], spec: TriggerSpec, attempt: int,
                       envelope: dict[str, Any], rid: str | None,
                       from_pause: bool = False) -> None:
        kind, value = classify(envelope)
        if kind == "paused" and rid is not None:
            await self.store.execute(
                lambda tx: q.pause_in(tx, item["id"], rid, attempt, self.owner))
        elif kind == "ok":
            elapsed = self.clock.now() - float(item["received_at"])
            d = spec.delivery
            breach = (d.sla, d.sla_breach) if d.sla_s is not None and elapsed > d.sla_s \
                else None
            delivery = deliver(spec, value)
            await self.store.execute(lambda tx: q.finish_in(
                tx, item["id"], attempt, self.owner, run_id=rid, output=value,
                delivery=delivery, elapsed_s=elapsed, sla_breach=breach,
                from_pause=from_pause))
        else:
            await self._failed(item, spec, attempt, str(value), rid, from_pause=from_pause)

    async def _failed(self, item: dict[str, Any], spec: TriggerSpec | None, attempt: int,
                      error: str, rid: str | None, *, final: bool = False,
                      from_pause: bool = False) -> None:
        log = await self._execution_log(rid, attempt, error)
        delay: float | None = None
        action = "escalate"
        if spec is not None:
            ex = spec.execution
            action = ex.on_failure
            if not final and attempt < ex.max_attempts:
                delay = ex.delay_before(attempt)
        await self.store.execute(lambda tx: q.fail_in(
            tx, item["id"], attempt, self.owner, error=error, run_id=rid, retry_delay=delay,
            action=action, execution_log=log, from_pause=from_pause))

    async def _execution_log(self, rid: str | None, attempt: int, error: str
                             ) -> dict[str, Any]:
        """What the framework knows of the failed attempt: which steps completed, which
        failed, the error (spec: `resume_from_execution_log`)."""
        steps: list[dict[str, Any]] = []
        if rid is not None:
            rows = await self.store.fetchall(
                "SELECT step_id, status, error FROM workflow_steps WHERE run_id=? AND"
                " parent IS NULL ORDER BY idx", (rid,))
            steps = [{"step": r["step_id"], "status": r["status"],
                      **({"error": r["error"]} if r["error"] else {})} for r in rows]
        return {"attempt": attempt, "run_id": rid, "error": error[:500], "steps": steps}

    async def _attempt_env(self, item: dict[str, Any], spec: TriggerSpec) -> dict[str, str]:
        """What the steps of this attempt see: the invocation, and on a retry with
        `resume_from_execution_log` the previous attempts' execution log."""
        env = {"EXPERT_TRIGGER": spec.name, "EXPERT_INVOCATION": str(item["id"]),
               "EXPERT_ATTEMPT": str(item["attempt"])}
        if spec.execution.resume_from_execution_log and int(item["attempt"]) > 1:
            rows = await self.store.fetchall(
                "SELECT json_extract(payload, '$.execution_log') AS log FROM events WHERE"
                " entity='trigger' AND entity_id=? AND type='trigger.failed' ORDER BY seq",
                (item["id"],))
            env["EXPERT_EXECUTION_LOG"] = json.dumps([json.loads(r["log"]) for r in rows
                                                      if r["log"]])
        return env

    async def _follow_run(self, run_id: str, idempotent: bool = False) -> dict[str, Any]:
        """A recovered item whose run had started: adopt the run if nobody drives it,
        else wait for it to end or pause. Never starts it again. A step the dead driver
        was inside waits for the operator, unless the process is `idempotent: true` (the
        package says re-running is safe): then that step is retried at once."""
        from ..workflows.service import Workflows

        while True:
            row = await self.store.fetchone(
                "SELECT status, output, error, gate FROM workflow_runs WHERE id=?", (run_id,))
            if row is None:
                return {"ok": False, "error": {"message": f"run {run_id} is missing"}}
            if row["status"] == "ok":
                return {"ok": True, "status": "ok",
                        "output": json.loads(row["output"]) if row["output"] else []}
            if row["status"] in ("failed", "cancelled"):
                return {"ok": False, "error": {"message": row["error"] or row["status"]}}
            wf = Workflows(self.store, actor=q.ACTOR)
            if row["status"] == "paused" and row["gate"] == "interrupted" and idempotent:
                try:
                    return await wf.recover(run_id, "retry", by=q.ACTOR,
                                            reason="execution.idempotent: true")
                except Conflict:
                    pass
            elif row["status"] == "paused":
                return {"ok": True, "status": "needs_approval"}
            if run_id in await wf.adoptable():
                try:
                    envelope = await wf.adopt(run_id)
                except Conflict:
                    envelope = None
                if envelope is not None and not (
                        idempotent and envelope.get("status") == "needs_operator"):
                    return envelope
            await asyncio.sleep(self.poll_s * 4)

    async def _settle_paused(self) -> None:
        """Invocations whose run paused at a gate: once the run ends (approved and finished,
        rejected, timed out), record the outcome and apply the policy (any worker; once)."""
        rows = await self.store.fetchall(
            "SELECT t.*, r.status AS run_status, r.output AS run_output, r.error AS run_error"
            " FROM trigger_items t JOIN workflow_runs r ON r.id = t.run_id WHERE"
            " t.status='paused' AND r.status IN ('ok', 'failed', 'cancelled')")
        for r in rows:
            item = q.decode_row(r)
            spec = self.catalog.get(item["expert"], item["trigger"])
            attempt = int(item["attempt"])
            if r["run_status"] == "ok":
                env: dict[str, Any] = {"ok": True, "status": "ok", "output": json.loads(
                    r["run_output"]) if r["run_output"] else []}
            else:
                env = {"ok": False, "error": {"message": r["run_error"] or
                                              f"run {r['run_status']}"}}
            if spec is None:
                await self._failed(item, None, attempt, "trigger no longer installed",
                                   r["run_id"], final=True, from_pause=True)
            else:
                await self._outcome(item, spec, attempt, env, r["run_id"], from_pause=True)
