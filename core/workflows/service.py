"""The workflows API the fronts use (CLI, console): run, resume, decide, cancel, list, get.

Answers are Lobster's tool-mode envelopes (plain dicts, key order as Lobster prints them).
State lives in the store: every step result is an event, a paused run keeps only the hash of
its resume token, and resuming rebuilds the results from the projections, so any process can
continue a run another process paused (and died after).

A running run is held by its driver through a lease (`workflow:W-N`, renewed while it runs,
released when it pauses or ends). A step's start is committed before its process starts. When
the driver dies, another process adopts the run (`adopt`: `clawtower workflow recover`, or
an engine's sweep) once the lease expired or its holder's process is gone: it kills what is
left of the interrupted step's process group and continues at that step, re-running it only
when it is safe to repeat (see `repeatable`); otherwise the run waits for the operator, who
retries, skips or cancels the step (`recover`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import events as ev
from .. import leases
from ..errors import AlreadyDecided, ClawError, Conflict, NotFound, StorageFault, ValidationError
from ..events import NewEvent
from ..liveness import end_group, holder_gone, liveness, process_tag, unheld
from ..store.faults import storage_fault
from ..store.interface import Store, WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from . import events as wev
from .conditions import check_workflow_conditions
from .cost import CostLimitExceeded, CostLine, CostTracker, line_from, parse_limit, summarize
from .jsvalues import UNDEFINED, js_prefix, to_json
from .llm import CURRENT_RUN, config_llm
from .load import WorkflowError, is_input_step, load_workflow, resolve_workflow_file
from .pipeline import LlmCall, PipelineFailure, run_pipeline
from .recorder import (
    SAFE_KINDS,
    HandedOver,
    LeaseLost,
    RunCancelled,
    StoreRecorder,
    lease_name,
)
from .runner import (
    Context,
    Outcome,
    Runner,
    last_completed_step,
    resolve_args,
    step_kind,
    write_stderr,
)
from .tokens import decode_token, matches, new_token

GATE_KINDS = {"approval": "workflow_approval", "input": "workflow_input"}
NOT_FOUND = "Workflow resume state not found"
REPEAT_KEY = "x-idempotent"  # a step marked `x-idempotent: true` may run again after a crash
LEASE_TTL_S = 10.0


# driver tasks cancelled because another process adopted their run (they write nothing more)
_ADOPTED_AWAY: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = weakref.WeakKeyDictionary()


def repeatable(step: dict[str, Any]) -> bool:
    """Whether a step that had started when its driver died may simply run again: gates and
    steps that do nothing themselves, or a step the file marks `x-idempotent: true`."""
    return step_kind(step) in SAFE_KINDS or step.get(REPEAT_KEY) is True


def ok_envelope(status: str, output: list[Any], requires_approval: Any = None,
                requires_input: Any = None) -> dict[str, Any]:
    return {"protocolVersion": 1, "ok": True, "status": status, "output": output,
            "requiresApproval": requires_approval, "requiresInput": requires_input}


def error_envelope(kind: str, message: str) -> dict[str, Any]:
    return {"protocolVersion": 1, "ok": False, "error": {"type": kind, "message": message}}


def exit_code(envelope: Mapping[str, Any]) -> int:
    """Lobster's: 0 ok/paused/cancelled, 2 parse_error, 1 any other error."""
    if envelope.get("ok"):
        return 0
    return 2 if envelope.get("error", {}).get("type") == "parse_error" else 1


def render(envelope: Mapping[str, Any]) -> str:
    """The envelope exactly as Lobster prints it (JSON.stringify(envelope, null, 2))."""
    return to_json(envelope, indent=2)


def normalize_args(value: Any) -> dict[str, Any]:
    """What `Object.entries` makes of a parsed --args-json value."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, str):
        return {str(i): ch for i, ch in enumerate(value)}
    return {}


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _loads(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


class GateDecided(WorkflowError):
    """The gate a resume was aimed at is no longer waiting. Lobster's message (the envelope
    of `workflow resume` stays Lobster's); `approval` is the gate's approvals row, read in
    the same transaction, so `decide` can tell the loser who decided what and when."""

    def __init__(self, message: str, approval: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.approval = approval if approval and approval["status"] != "pending" else None


def _why_cancelled(decision: str, reason: str) -> str:
    """A cancelled run's reason: how its gate was decided, and the decider's words."""
    how = "rejected" if decision == "rejected" else "cancelled"
    return f"{how}: {reason.strip()}" if reason.strip() else how


def _live(tx: WriteTx, run_id: str) -> bool:
    row = tx.one("SELECT status FROM workflow_runs WHERE id=?", (run_id,))
    return row is not None and row["status"] not in ("cancelled", "ok", "failed")


class Workflows:
    """Run and resume Lobster workflows against a store.

    `env` and `cwd` are what steps inherit (default: this process's); `llm` answers
    `llm.invoke` / `llm_task.invoke` pipeline stages; `actor` names who starts runs."""

    def __init__(self, store: Store, *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, llm: LlmCall | None = None,
                 stderr: Callable[[str], None] | None = None, actor: str = "operator",
                 lease_ttl_s: float = LEASE_TTL_S) -> None:
        self.store = store
        # who holds the leases of the runs this instance drives: the process, and which
        # instance in it (a console's engine and its own runs are different drivers)
        self.owner = f"{process_tag()}#{uuid.uuid4().hex[:6]}"
        self.lease_ttl_s = lease_ttl_s
        self._handing_over = False  # see hand_over
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd or os.getcwd()
        # LLM stages answer through the configured agents (the simulator with no config) and
        # record their usage on the run, whoever drives it (CLI, console, an approval)
        self.llm = llm if llm is not None else config_llm(
            os.environ.get("CLAWTOWER_WORKFLOW_AGENT"), store=store)
        self.stderr = stderr or write_stderr
        self.actor = actor

    # ------------------------------------------------------------------ run

    async def run(self, file: str, args: Mapping[str, Any] | None = None, *,
                  dry_run: bool = False,
                  on_start: Callable[[WriteTx, str], None] | None = None) -> dict[str, Any]:
        """Start a run; answers ok, needs_approval, needs_input or an error envelope.
        `on_start(tx, run_id)` joins the transaction that records the start (a caller links
        its own record to the run in the same commit)."""
        try:
            path = resolve_workflow_file(file, self.cwd)
        except WorkflowError as exc:
            return error_envelope(exc.kind, exc.message)
        try:
            workflow = load_workflow(path)
            resolved = resolve_args(workflow.get("args"), args)
            if dry_run:
                self.stderr(_dry(workflow, resolved, {}, 0))
                return ok_envelope("ok", [])
            check_workflow_conditions(workflow)
        except WorkflowError as exc:
            return error_envelope("runtime_error", exc.message)

        def start(tx: WriteTx) -> str:
            run_id = self._start(tx, path, workflow, resolved)
            if on_start is not None:
                on_start(tx, run_id)
            return run_id

        run_id = await self.store.execute(start)
        try:
            return await self._drive(run_id, workflow, path, resolved, {}, 0, None)
        except StorageFault as exc:  # the run is not failed: say where it is kept
            raise exc.keeping(f"run {run_id} is kept: an engine adopts it, or `clawtower"
                              f" workflow recover {run_id}` continues it") from None

    async def enqueue(self, file: str, args: Mapping[str, Any] | None = None) -> str:
        """Start a run without driving it here: its lease is left free, so an engine on the
        store (any process or machine sharing it) adopts it and drives it. Returns its id."""
        try:
            path = resolve_workflow_file(file, self.cwd)
            workflow = load_workflow(path)
            resolved = resolve_args(workflow.get("args"), args)
            check_workflow_conditions(workflow)
        except WorkflowError as exc:
            raise ValidationError(f"{file}: {exc.message}") from None

        def command(tx: WriteTx) -> str:
            run_id = self._start(tx, path, workflow, resolved)
            leases._release(tx, lease_name(run_id), self.owner)
            return run_id

        return await self.store.execute(command)

    def _start(self, tx: WriteTx, path: Path, workflow: dict[str, Any],
               args: dict[str, Any]) -> str:
        row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM workflow_runs")
        run_id = f"W-{row['n'] if row else 1}"
        name = workflow.get("name")
        tx.emit(NewEvent(entity_id=run_id, actor=self.actor, role=Role.OPERATOR.value,
                         payload=wev.WorkflowStarted(
                             file=str(path), name=name if isinstance(name, str) else path.stem,
                             args=json.loads(to_json(args)),
                             steps=[str(s["id"]) for s in workflow["steps"]],
                             digest=file_digest(path), cost_limit=_limit_dict(workflow),
                             owner=process_tag(), cwd=self.cwd)))
        leases._acquire(tx, lease_name(run_id), self.owner, self.lease_ttl_s)
        return run_id

    def hand_over(self) -> None:
        """This process is stopping: each run this service drives stops at its next step
        boundary and is left, its lease released, for any engine on the store to drive on.
        A run cancelled before then (its step still running) is left the same way, its step
        interrupted, as after a kill -9: nothing is recorded failed."""
        self._handing_over = True

    def _context(self, run_id: str, path: Path, cwd: str | None = None) -> Context:
        recorder = StoreRecorder(self.store, run_id, "workflow", self.owner, self.lease_ttl_s,
                                  handing_over=lambda: self._handing_over)
        return Context(env=self.env, cwd=cwd or self.cwd, recorder=recorder,
                       pipeline=self._pipeline, stderr=self.stderr,
                       active=frozenset({str(path.resolve())}), spawned=recorder.spawned)

    async def _pipeline(self, step_id: str, text: str, data: Any, env: dict[str, str],
                        cwd: str, on_spawn: Callable[[int], None] | None = None
                        ) -> dict[str, Any]:
        try:
            return await run_pipeline(step_id, text, data, env, cwd, self.llm,
                                      on_spawn=on_spawn)
        except PipelineFailure as exc:
            raise WorkflowError(str(exc)) from None
        except ClawError as exc:
            if storage_fault(exc) is not None:
                raise  # the storage failed, not the step: the run stays resumable
            raise WorkflowError(f"Workflow step {step_id} pipeline failed: {exc}") from None

    async def _drive(self, run_id: str, workflow: dict[str, Any], path: Path,
                     args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                     last: str | None, cwd: str | None = None) -> dict[str, Any]:
        token = CURRENT_RUN.set(run_id)  # LLM stages record their usage on the run
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(run_id, lost, asyncio.current_task()))
        try:
            return await self._drive_run(run_id, workflow, path, args, results, start, last,
                                         cwd)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if lost.is_set() and task is not None and task.uncancel() == 0:
                return _lost(run_id)  # adopted elsewhere: its new driver writes from now on
            raise
        finally:
            renewer.cancel()
            CURRENT_RUN.reset(token)

    async def _renew(self, run_id: str, lost: asyncio.Event,
                     driver: asyncio.Task[Any] | None) -> None:
        """Keep the run's lease while driving it; losing it (another process adopted the run
        after this one stalled past the TTL) stops this driver without a write."""
        name = lease_name(run_id)
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                ok = await self.store.execute(
                    lambda tx: leases._acquire(tx, name, self.owner, self.lease_ttl_s))
            except StorageFault:
                continue  # the storage failed, not the run: renew at the next turn
            if not ok:
                lost.set()
                if driver is not None:
                    _ADOPTED_AWAY[driver] = run_id
                    driver.cancel()
                return

    async def _drive_run(self, run_id: str, workflow: dict[str, Any], path: Path,
                         args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                         last: str | None, cwd: str | None) -> dict[str, Any]:
        ctx = self._context(run_id, path, cwd)
        tracker = CostTracker(ctx.env, ctx.stderr, parse_limit(workflow.get("cost_limit")))
        if start > 0:  # a gate pauses a run, it does not reset its spend
            tracker.restore(await self._spend(run_id))
        runner = Runner(workflow, path, args, ctx, tracker)
        recorder = ctx.recorder
        assert isinstance(recorder, StoreRecorder)
        try:
            outcome = await runner.run(results, start, last)
            if outcome.pause is None:
                await recorder.flush()  # the last step's result, kept for the next write
        except LeaseLost:
            return _lost(run_id)
        except HandedOver:
            await leases.release(self.store, lease_name(run_id), self.owner)
            return ok_envelope("handed_over", [])
        except RunCancelled:
            await leases.release(self.store, lease_name(run_id), self.owner)
            return ok_envelope("cancelled", [])
        except (WorkflowError, CostLimitExceeded) as exc:
            message = exc.message if isinstance(exc, WorkflowError) else str(exc)
            await recorder.flush(lost_ok=True)
            await self._end(run_id, wev.WorkflowFailed(error=message, kind="runtime_error"))
            return error_envelope("runtime_error", message)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and _ADOPTED_AWAY.get(task) == run_id:
                raise  # adopted elsewhere: not this driver's to end
            await asyncio.shield(recorder.flush(lost_ok=True))
            if self._handing_over:  # left for another engine, as a kill -9 would leave it
                await asyncio.shield(leases.release(self.store, lease_name(run_id),
                                                    self.owner))
                raise
            await asyncio.shield(self._end(run_id, wev.WorkflowFailed(
                error="interrupted", kind="runtime_error")))
            raise
        if outcome.pause is None:
            await self._end(run_id, wev.WorkflowFinished(output=outcome.output))
            return ok_envelope("ok", outcome.output)
        return await self._pause(run_id, workflow, outcome, path, recorder)

    async def _end(self, run_id: str, payload: ev.Payload) -> None:
        event = NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                         payload=payload)

        def command(tx: WriteTx) -> None:
            if _live(tx, run_id):  # a run cancelled meanwhile stays cancelled
                tx.emit(event)
            leases._release(tx, lease_name(run_id), self.owner)

        await self.store.execute(command)

    async def _pause(self, run_id: str, workflow: dict[str, Any], outcome: Outcome,
                     path: Path, recorder: StoreRecorder) -> dict[str, Any]:
        """One event: the gate's start, its output, its approvals item, the lease let go."""
        pause = outcome.pause
        assert pause is not None
        token, token_hash = new_token(run_id)
        request = pause.request
        name = workflow.get("name") if isinstance(workflow.get("name"), str) else path.stem

        gate_output, started, held = recorder.gate_output, recorder.gate_start, recorder.held

        def command(tx: WriteTx) -> str:
            if held is not None:  # a guard: a gate's start writes any result kept before it
                tx.emit(NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                                 payload=held))
            folded: list[NewEvent] = []
            leases._release(tx, lease_name(run_id), self.owner, into=folded)  # nobody drives it
            if not _live(tx, run_id):
                for event in folded:
                    tx.emit(event)
                return ""
            requester = str(pause.identity.get("initiatedBy") or "workflow")
            if pause.kind == "approval":
                context = {"run": run_id, "step": pause.step_id, "items": request.get("items"),
                           "request": request}
                preview = str(request.get("preview") or "")
                prompt = str(request.get("prompt"))
            else:
                context = {"run": run_id, "step": pause.step_id, "request": request,
                           "responseSchema": request.get("responseSchema"),
                           "defaults": request.get("defaults"), "subject": request.get("subject")}
                preview = js_prefix(to_json(request.get("subject")), 2000)
                prompt = str(request.get("prompt"))
            approval_id = c.request_approval(
                tx, kind=GATE_KINDS[pause.kind], subject=run_id,
                title=f"{run_id} {name}: {pause.step_id}", prompt=prompt,
                context=json.loads(to_json(context)), preview=preview, actor=requester,
                role=Role.APPROVER,
                required_approver=pause.identity.get("requiredApprover"),
                require_different_approver=bool(pause.identity.get("requireDifferentApprover")),
                into=folded)
            asked = [e for e in folded if isinstance(e.payload, ev.ApprovalRequested)]
            released = [e.payload for e in folded if isinstance(e.payload, ev.LeaseReleased)]
            tx.emit(NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                             payload=wev.WorkflowPaused(
                                 step_id=pause.step_id, index=pause.index, gate=pause.kind,
                                 resume_at=pause.resume_at, approval_id=approval_id,
                                 token_hash=token_hash, request=json.loads(to_json(request)),
                                 identity=pause.identity,
                                 input_schema=pause.input_schema,
                                 subject=json.loads(to_json(pause.subject)),
                                 result=gate_output.result if gate_output else None,
                                 cost=gate_output.cost if gate_output else [],
                                 started=started, released=released[0] if released else None,
                                 asked=asked[0].payload if asked else None,
                                 asked_by=asked[0].actor if asked else "",
                                 asked_role=asked[0].role if asked else "")))
            return approval_id

        approval_id = await self.store.execute(command)
        if not approval_id:
            return ok_envelope("cancelled", [])
        if pause.kind == "approval":
            return ok_envelope("needs_approval", [], {**request, "resumeToken": token,
                                                      "approvalId": approval_id})
        return ok_envelope("needs_input", [], None, {**request, "resumeToken": token})

    # --------------------------------------------------------------- resume

    async def _locate(self, token: str | None, approval_id: str | None,
                      missing: str) -> dict[str, Any]:
        """The paused run a token or approval id names (WorkflowError otherwise)."""
        if approval_id:
            a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
            gone = GateDecided(f'Approval ID "{approval_id}" not found or expired', a)
            gone.kind = "parse_error"
            if a is None or a["kind"] not in GATE_KINDS.values() or a["status"] != "pending":
                raise gone
            run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?",
                                            (a["subject"],))
            if run is None or run["status"] != "paused" or run["approval_id"] != approval_id:
                # decided between the two reads: the decision was committed with the run's
                # new status, so reading the approval again finds it
                gone = GateDecided(gone.message, await self.store.fetchone(
                    "SELECT * FROM approvals WHERE id=?", (approval_id,)))
                gone.kind = "parse_error"
                raise gone
            return run
        if not token:
            raise WorkflowError("resume requires token or approvalId", "parse_error")
        ref = decode_token(token)
        if ref is None:
            raise WorkflowError(missing)
        run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?", (ref.run_id,))
        if run is None or run["status"] != "paused" or not matches(ref.secret,
                                                                   run["token_hash"]):
            raise WorkflowError(missing)
        return run

    async def resume(self, *, token: str | None = None, approval_id: str | None = None,
                     approve: bool | None = None, response: Any = UNDEFINED,
                     cancel: bool = False, approved_by: str | None = None,
                     reason: str = "") -> dict[str, Any]:
        """Lobster's `resume`: continue, cancel or answer a paused run; an envelope back.

        `approved_by` is the approver's name (Lobster reads LOBSTER_APPROVAL_APPROVED_BY);
        `reason` is recorded with the decision (and a rejection's on the cancelled run)."""
        try:
            return await self._resume(token, approval_id, approve, response, cancel,
                                      approved_by, reason)
        except WorkflowError as exc:
            return error_envelope(exc.kind, exc.message)

    async def _resume(self, token: str | None, approval_id: str | None, approve: bool | None,
                      response: Any, cancel: bool, approved_by: str | None,
                      reason: str = "") -> dict[str, Any]:
        run = await self._locate(token, approval_id,
                                 "Resume state not found" if cancel else NOT_FOUND)
        run_id, gate, step_id = run["id"], run["gate"], run["waiting_step"]
        if gate == "approval":
            if response is not UNDEFINED or (not cancel and approve is None):
                raise WorkflowError("Workflow resume requires --approve yes|no for approval"
                                    " requests", "parse_error")
            if cancel or approve is False:
                await self._consume_cancel(run, approved_by, "rejected" if not cancel
                                           else "withdrawn", reason)
                return ok_envelope("cancelled", [])
        if gate == "input" and cancel:
            await self._consume_cancel(run, approved_by, "withdrawn", reason)
            return ok_envelope("cancelled", [])
        path = Path(run["file"])
        workflow = load_workflow(path)
        if run["digest"] and file_digest(path) != run["digest"]:
            self.stderr(f"clawtower: warning: {path} changed since run {run_id} started;"
                        " resuming with the file as it is now (as Lobster does)\n")
        args = resolve_args(workflow.get("args"), _loads(run["args"], {}))
        results = await self._results(run_id)
        previous = dict(results.get(step_id) or {"id": step_id})
        if gate == "approval":
            why = _identity_problem(step_id, _loads(run["identity"], {}), approved_by)
            if why:
                raise WorkflowError(why, "parse_error")
            previous["approved"] = True
            if (approved_by or "").strip():
                previous["approvedBy"] = (approved_by or "").strip()
            decision = "approved"
        else:
            if approve is not None or response is UNDEFINED:
                raise WorkflowError("Workflow resume requires --response-json for input"
                                    " requests", "parse_error")
            step = next((s for s in workflow["steps"] if s["id"] == step_id), None)
            if step is None or not is_input_step(step.get("input")):
                raise WorkflowError(f"Invalid input step in resume state: {step_id}")
            schema = _loads(run["input_schema"])
            if schema is None:
                schema = step["input"].get("responseSchema")
            from .ajv import validate_response  # jsonschema: only when a gate is answered

            why = validate_response(schema, response, step_id)
            if why:
                raise WorkflowError(why, "parse_error")
            previous["subject"] = _loads(run["subject"])
            previous["response"] = response
            previous.pop("skipped", None)
            decision = "answered"
        start = int(run["resume_at"])
        check_workflow_conditions(workflow, start)
        await self._consume(run, decision, approved_by, previous, reason)
        results[step_id] = previous
        last = step_id if gate == "input" else last_completed_step(workflow["steps"], results)
        return await self._drive(run_id, workflow, path, args, results, start, last)

    async def _spend(self, run_id: str) -> list[CostLine]:
        """What a run has spent: the lines its step events carry (billed output items, and
        the calls of clawtower's LLM stages at their agents' price)."""
        # only the cost field: step payloads also carry the (possibly large) results
        rows = await self.store.fetchall(
            "SELECT json_extract(payload, '$.cost') AS cost FROM events WHERE"
            " entity='workflow' AND entity_id=? AND type IN ('workflow.paused',"
            " 'workflow.step_finished', 'workflow.step_failed')"
            " AND json_array_length(payload, '$.cost') > 0"
            " ORDER BY seq", (run_id,))
        lines: list[CostLine] = []
        for row in rows:
            raw = json.loads(row["cost"])
            lines.extend(line_from(x) for x in raw if isinstance(x, dict))
        return lines

    async def _results(self, run_id: str) -> dict[str, dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT step_id, result FROM workflow_steps WHERE run_id=? AND result IS NOT NULL"
            " ORDER BY seq", (run_id,))
        return {r["step_id"]: json.loads(r["result"]) for r in rows}

    def _claim(self, tx: WriteTx, run: dict[str, Any]) -> dict[str, Any]:
        """Inside the write: the run is still paused at the same gate (a token works once)."""
        now = tx.one("SELECT * FROM workflow_runs WHERE id=?", (run["id"],))
        if (now is None or now["status"] != "paused" or now["token_hash"] != run["token_hash"]
                or now["approval_id"] != run["approval_id"]):
            raise GateDecided(NOT_FOUND, tx.one("SELECT * FROM approvals WHERE id=?",
                                                (run["approval_id"],)))
        return now

    def _decide(self, tx: WriteTx, run: dict[str, Any], decision: str, by: str | None,
                reason: str = "", fold: bool = False) -> ev.ApprovalDecided | None:
        """The gate's approvals item decided; `fold`: returned for the run's resume to
        carry (one event, issue 24.2) rather than emitted."""
        a = tx.one("SELECT status FROM approvals WHERE id=?", (run["approval_id"],))
        if a is None or a["status"] != "pending":
            return None
        payload = ev.ApprovalDecided(decision=decision, reason=reason)
        if not fold:
            tx.emit(NewEvent(entity_id=run["approval_id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=payload))
        return payload

    async def _consume(self, run: dict[str, Any], decision: str, by: str | None,
                       result: dict[str, Any], reason: str = "") -> None:
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            decided = self._decide(tx, run, "approved" if decision == "approved"
                                   else "answered", by, reason, fold=True)
            lease: list[NewEvent] = []
            leases._acquire(tx, lease_name(run["id"]), self.owner, self.lease_ttl_s,
                            holder_gone=holder_gone, into=lease)
            taken = lease[0].payload if lease else None  # a take-over keeps its own event
            if not isinstance(taken, ev.LeaseAcquired) or taken.took_over_from is not None:
                taken = None
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=wev.WorkflowResumed(
                                 step_id=run["waiting_step"], decision=decision,
                                 by=(by or "").strip() or None,
                                 result=json.loads(to_json(result)), owner=process_tag(),
                                 approval_id=run["approval_id"] if decided else None,
                                 decided=decided, lease=taken)))
            for event in lease if taken is None else ():
                tx.emit(event)

        await self.store.execute(command)

    async def _consume_cancel(self, run: dict[str, Any], by: str | None, decision: str,
                              reason: str = "") -> None:
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            self._decide(tx, run, decision, by, reason)
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=wev.WorkflowCancelled(
                                 reason=_why_cancelled(decision, reason),
                                 by=(by or "").strip() or None)))

        await self.store.execute(command)

    # ------------------------------------------------- the approvals list's side

    async def decide(self, approval_id: str, approve: bool, *, by: str,
                     reason: str = "") -> dict[str, Any]:
        """`clawtower approve/reject ID` on a gate: approving continues the run (in this
        process, until it ends or pauses again), rejecting cancels it.

        Exactly one of two racing decisions wins: the gate is claimed inside the write that
        records the decision, and the loser gets AlreadyDecided (who, what, when)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        if a["status"] != "pending":
            raise AlreadyDecided.from_row(a)
        if approve and a["kind"] == GATE_KINDS["input"]:
            raise ValidationError(f"approval {approval_id!r}: a workflow input gate needs an"
                                  f" answer: clawtower workflow resume --id {approval_id}"
                                  " --response-json JSON")
        cancel = a["kind"] == GATE_KINDS["input"]
        envelope = await self._resume_or_lose(approval_id, None if cancel else approve,
                                              UNDEFINED, cancel, by, reason)
        return await self._decided(approval_id, a, envelope, "approved" if approve else
                                   "rejected")

    async def _resume_or_lose(self, approval_id: str, approve: bool | None, response: Any,
                              cancel: bool, by: str, reason: str = "") -> dict[str, Any]:
        """`resume` for the approvals list: a gate someone else decided meanwhile raises
        AlreadyDecided rather than answer Lobster's "not found" envelope."""
        try:
            return await self._resume(None, approval_id, approve, response, cancel, by,
                                      reason)
        except GateDecided as exc:
            if exc.approval is not None:
                raise AlreadyDecided.from_row(exc.approval) from None
            return error_envelope(exc.kind, exc.message)
        except WorkflowError as exc:
            return error_envelope(exc.kind, exc.message)

    async def respond(self, approval_id: str, response: Any, *, by: str) -> dict[str, Any]:
        """Answer an input gate with a JSON value (validated against its schema first)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        if a["status"] != "pending":
            raise AlreadyDecided.from_row(a)
        envelope = await self._resume_or_lose(approval_id, None, response, False, by)
        return await self._decided(approval_id, a, envelope, "answered")

    async def _decided(self, approval_id: str, a: dict[str, Any], envelope: dict[str, Any],
                       decision: str) -> dict[str, Any]:
        now = await self.store.fetchone("SELECT status FROM approvals WHERE id=?",
                                        (approval_id,))
        if not envelope["ok"] and (now is None or now["status"] == "pending"):
            message = envelope["error"]["message"]
            if envelope["error"]["type"] == "parse_error":
                raise ValidationError(f"approval {approval_id!r}: {message}")
            raise ClawError(f"approval {approval_id!r}: {message}")
        run = await self.store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                        (a["subject"],))
        return {"approval": approval_id, "decision": decision, "subject": a["subject"],
                "kind": a["kind"], "run_status": run["status"] if run else None,
                "envelope": envelope}

    async def check_response(self, approval_id: str, response: Any) -> str | None:
        """Why a response would be refused by an input gate's schema (None: it is fine)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?",
                                        (a["subject"],))
        if run is None or run["gate"] != "input":
            raise ValidationError(f"approval {approval_id!r}: not a waiting workflow input gate")
        from .ajv import validate_response

        return validate_response(_loads(run["input_schema"]), response, run["waiting_step"])

    # -------------------------------------------------------------- manage

    async def cancel(self, run_id: str, *, by: str, reason: str = "") -> None:
        """Cancel a paused run (its gate is withdrawn) or one left running by a dead process."""
        def command(tx: WriteTx) -> None:
            run = tx.one("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
            if run is None:
                raise NotFound(f"workflow run {run_id!r}: no such run")
            if run["status"] not in ("paused", "running"):
                raise Conflict(f"workflow run {run_id!r}: already {run['status']}")
            if run["status"] == "paused":
                self._decide(tx, run, "withdrawn", by, reason)
            tx.emit(NewEvent(entity_id=run_id, actor=by, role=Role.OPERATOR.value,
                             payload=wev.WorkflowCancelled(reason=reason or "cancelled", by=by)))

        await self.store.execute(command)

    # ------------------------------------------------------------ adoption

    async def adoptable(self) -> list[str]:
        """Running runs nobody drives: their lease expired or was released, or its holder's
        process is gone from this host (a run from before leases: its driver is gone)."""
        rows = await self.store.fetchall(
            "SELECT r.id, l.owner, l.expires_at, l.released, l.name IS NOT NULL AS leased"
            " FROM workflow_runs r LEFT JOIN leases l ON l.name = 'workflow:' || r.id"
            " WHERE r.status='running' ORDER BY r.num")
        if not rows:
            return []
        runs = [{"id": r["id"], "status": "running"} for r in rows]
        await self._drivers(runs)
        driver = {r["id"]: r["driver"] for r in runs}
        now = time.time()  # a first sieve: the lease's own check decides, in `adopt`
        out = []
        for r in rows:
            if not r["leased"]:
                if driver[r["id"]] == "gone":
                    out.append(r["id"])
                continue
            if unheld(str(r["owner"]), r["released"], r["expires_at"], now):
                out.append(r["id"])
        return out

    async def adopt(self, run_id: str) -> dict[str, Any]:
        """Drive on a run whose driver died, from the exact step it reached: a step that had
        started runs again only when `repeatable`, else the run waits for the operator with
        the reason (`recover` then retries, skips or cancels it). Conflict while a live
        driver holds the run's lease."""
        run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
        if run is None:
            raise NotFound(f"workflow run {run_id!r}: no such run")
        if run["status"] != "running":
            if run["status"] == "paused" and run["gate"] == "interrupted":
                raise Conflict(f"workflow run {run_id!r}: waits for the operator ({run['error']});"
                               " choose --retry, --skip or --cancel")
            raise Conflict(f"workflow run {run_id!r}: {run['status']}, nothing to adopt")
        path = Path(run["file"])
        try:
            workflow = load_workflow(path)
            check_workflow_conditions(workflow)
        except WorkflowError as exc:
            return error_envelope("runtime_error", f"workflow run {run_id}: {exc.message}")
        if run["digest"] and file_digest(path) != run["digest"]:
            self.stderr(f"clawtower: warning: {path} changed since run {run_id} started;"
                        " adopting it with the file as it is now\n")
        steps = await self.store.fetchall(
            "SELECT step_id, status, result, error FROM workflow_steps WHERE run_id=? AND"
            " parent IS NULL", (run_id,))
        rests = await self.store.fetchall(
            "SELECT json_extract(payload, '$.step_id') AS step_id FROM events WHERE"
            " entity='workflow' AND entity_id=? AND type='workflow.step_failed' AND"
            " json_extract(payload, '$.policy')='skip_rest' AND"
            " json_extract(payload, '$.retrying')=0", (run_id,))
        plan = _plan(workflow["steps"], {s["step_id"]: s for s in steps},
                     {r["step_id"] for r in rests})
        name = lease_name(run_id)

        def take(tx: WriteTx) -> str | None:
            now = tx.one("SELECT status FROM workflow_runs WHERE id=?", (run_id,))
            if now is None or now["status"] != "running":
                raise Conflict(f"workflow run {run_id!r}: no longer running")
            held = leases.holder(tx, name)
            if not leases._acquire(tx, name, self.owner, self.lease_ttl_s,
                                   holder_gone=holder_gone):
                assert held is not None
                raise Conflict(f"workflow run {run_id!r}: driven by {held['owner']} (lease until"
                               f" {held['expires_at']:.0f}); it is adopted once that process"
                               " is gone or its lease expires")
            return None if held is None else str(held["owner"])

        previous = await self.store.execute(take)
        if previous is None:
            row = await self.store.fetchone(
                "SELECT json_extract(payload, '$.took_over_from') AS prev FROM events WHERE"
                " entity='lease' AND entity_id=? ORDER BY seq DESC LIMIT 1", (name,))
            previous = row["prev"] if row else None
        if plan.step_id is not None:  # whatever is left of its processes ends first
            spawned = await self.store.fetchall(
                "SELECT json_extract(payload, '$.process') AS process FROM events WHERE"
                " entity='workflow' AND entity_id=? AND type='workflow.step_spawned' AND"
                " json_extract(payload, '$.step_id')=?", (run_id, plan.step_id))
            for p in spawned:
                if not await asyncio.to_thread(end_group, str(p["process"])):
                    await leases.release(self.store, name, self.owner)
                    raise ClawError(f"workflow run {run_id!r}: step {plan.step_id}'s process"
                                    f" group {p['process']} did not end; try again")
        if plan.fail is not None:
            await self._end(run_id, wev.WorkflowFailed(error=plan.fail, kind="runtime_error"))
            return error_envelope("runtime_error", plan.fail)
        if plan.step_id is not None and not plan.rerun:
            return await self._interrupt(run_id, plan)
        args = resolve_args(workflow.get("args"), _loads(run["args"], {}))
        results = await self._results(run_id)
        await self.store.execute(lambda tx: tx.emit(NewEvent(
            entity_id=run_id, actor=self.actor, role=Role.SYSTEM.value,
            payload=wev.WorkflowAdopted(owner=self.owner, previous_owner=previous,
                                       index=plan.index, step_id=plan.step_id,
                                       rerun=plan.rerun))))
        return await self._drive(run_id, workflow, path, args, results, plan.index,
                                 last_completed_step(workflow["steps"], results),
                                 await self._run_cwd(run_id))

    async def _run_cwd(self, run_id: str) -> str | None:
        row = await self.store.fetchone(
            "SELECT json_extract(payload, '$.cwd') AS cwd FROM events WHERE entity='workflow'"
            " AND entity_id=? AND type='workflow.started' ORDER BY seq LIMIT 1", (run_id,))
        return str(row["cwd"]) if row and row["cwd"] else None

    async def _interrupt(self, run_id: str, plan: _Plan) -> dict[str, Any]:
        assert plan.step_id is not None
        reason = (f"step {plan.step_id} was interrupted when the process driving the run died;"
                  f" it may have had its effect and is not marked `{REPEAT_KEY}: true`:"
                  f" retry, skip or cancel it (clawtower workflow recover {run_id}"
                  " --retry|--skip|--cancel)")
        step_id = plan.step_id

        def command(tx: WriteTx) -> None:
            tx.emit(NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                             payload=wev.WorkflowInterrupted(step_id=step_id, index=plan.index,
                                                            reason=reason)))
            leases._release(tx, lease_name(run_id), self.owner)

        await self.store.execute(command)
        return operator_envelope(run_id, step_id, reason)

    async def recover(self, run_id: str, decision: str | None = None, *, by: str,
                      reason: str = "") -> dict[str, Any]:
        """`clawtower workflow recover ID`: adopt a run whose driver died (no decision), or
        settle a step interrupted by that death: retry it, skip it, or cancel the run."""
        if decision is None:
            return await self.adopt(run_id)
        if decision == "cancel":
            await self.cancel(run_id, by=by, reason=reason)
            return ok_envelope("cancelled", [])
        if decision not in ("retry", "skip"):
            raise ValidationError(f"workflow recover {run_id}: the decision must be retry, skip"
                                  f" or cancel, not {decision!r}")
        run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
        if run is None:
            raise NotFound(f"workflow run {run_id!r}: no such run")
        if run["status"] != "paused" or run["gate"] != "interrupted":
            hint = (f"; `clawtower workflow recover {run_id}` adopts it"
                    if run["status"] == "running" else "")
            raise Conflict(f"workflow run {run_id!r}: {run['status']}, no interrupted step waits"
                           f" for a decision{hint}")
        path = Path(run["file"])
        try:
            workflow = load_workflow(path)
        except WorkflowError as exc:
            return error_envelope("runtime_error", f"workflow run {run_id}: {exc.message}")
        step_id, index = str(run["waiting_step"]), int(run["resume_at"])
        who = by.strip() or self.actor

        def command(tx: WriteTx) -> None:
            now = tx.one("SELECT status, gate, waiting_step FROM workflow_runs WHERE id=?",
                         (run_id,))
            if (now is None or now["status"] != "paused" or now["gate"] != "interrupted"
                    or now["waiting_step"] != step_id):
                raise Conflict(f"workflow run {run_id!r}: already settled by someone else")
            if not leases._acquire(tx, lease_name(run_id), self.owner, self.lease_ttl_s,
                                   holder_gone=holder_gone):
                raise Conflict(f"workflow run {run_id!r}: another process is settling it")
            tx.emit(NewEvent(entity_id=run_id, actor=who, role=Role.OPERATOR.value,
                             payload=wev.WorkflowRecovered(step_id=step_id, index=index,
                                                          decision=decision, by=who,
                                                          owner=self.owner)))

        await self.store.execute(command)
        args = resolve_args(workflow.get("args"), _loads(run["args"], {}))
        results = await self._results(run_id)
        start = index + 1 if decision == "skip" else index
        return await self._drive(run_id, workflow, path, args, results, start,
                                 last_completed_step(workflow["steps"], results),
                                 await self._run_cwd(run_id))

    async def list(self, limit: int = 500) -> list[dict[str, Any]]:
        """Runs, newest first. A `running` one says whether its process is still there
        (`driver`: alive | gone | unknown, see core/liveness.py)."""
        rows = await self.store.fetchall(
            "SELECT r.*, (SELECT count(*) FROM workflow_steps s WHERE s.run_id=r.id AND"
            " s.parent IS NULL AND s.status IN ('done', 'skipped', 'failed')) AS steps_done"
            " FROM workflow_runs r ORDER BY num DESC LIMIT ?", (limit,))
        runs = [_run(r) for r in rows]
        await self._drivers(runs)
        return runs

    async def _drivers(self, runs: Sequence[dict[str, Any]]) -> None:
        running = [r for r in runs if r["status"] == "running"]
        for r in runs:
            r["driver"] = None
        if not running:
            return
        marks = ",".join("?" * len(running))
        rows = await self.store.fetchall(
            "SELECT entity_id, json_extract(payload, '$.owner') AS owner FROM events WHERE"
            f" entity='workflow' AND entity_id IN ({marks}) AND type IN ('workflow.started',"
            " 'workflow.resumed', 'workflow.adopted', 'workflow.recovered') ORDER BY seq",
            tuple(r["id"] for r in running))
        owners = {row["entity_id"]: row["owner"] for row in rows}
        for r in running:
            r["driver"] = liveness(str(owners.get(r["id"]) or "").partition("#")[0])

    async def get(self, run_id: str) -> dict[str, Any]:
        """A run with every step (pending ones too) and the gate it waits at, if any."""
        run, steps = await self.store.fetch_many([
            ("SELECT r.*, 0 AS steps_done FROM workflow_runs r WHERE id=?", (run_id,)),
            ("SELECT * FROM workflow_steps WHERE run_id=? ORDER BY idx, seq", (run_id,)),
        ])
        if not run:
            raise NotFound(f"workflow run {run_id!r}: no such run")
        out = _run(run[0])
        await self._drivers([out])
        by_id = {s["step_id"]: s for s in steps}
        # a step that never started: pending while the run may still reach it; once the run
        # ended cancelled or failed, it never will
        never = "cancelled" if out["status"] in ("cancelled", "failed") else "pending"
        listed: list[dict[str, Any]] = []
        for idx, sid in enumerate(out["step_ids"]):
            row = by_id.get(sid)
            item = _step(row) if row else {"id": sid, "index": idx, "kind": "", "status":
                                            never, "attempts": 0, "result": None,
                                            "error": None, "started_at": None, "ended_at": None}
            item["branches"] = [_step(s) for s in steps if s["parent"] == sid]
            listed.append(item)
        out["steps"] = listed
        out["steps_done"] = sum(1 for s in listed if s["status"] in ("done", "skipped", "failed"))
        r0 = run[0]
        out["gate"] = None if r0["status"] != "paused" else {
            "kind": r0["gate"], "step": r0["waiting_step"], "approval_id": r0["approval_id"],
            "request": _loads(r0["request"]), "identity": _loads(r0["identity"], {})}
        out["cost"] = await self.cost(run_id)
        return out

    async def cost(self, run_id: str) -> dict[str, Any]:
        """A run's spend so far (tokens, US dollars, each billed line) and its cost_limit."""
        started = await self.store.fetchone(
            "SELECT json_extract(payload, '$.cost_limit') AS cost_limit FROM events WHERE"
            " entity='workflow' AND entity_id=? AND type='workflow.started' ORDER BY seq"
            " LIMIT 1", (run_id,))
        raw = json.loads(started["cost_limit"]) if started and started["cost_limit"] else None
        limit = parse_limit(raw) if isinstance(raw, dict) else None
        return summarize(await self._spend(run_id), limit)


def operator_envelope(run_id: str, step_id: str, reason: str) -> dict[str, Any]:
    """A run that waits for the operator after a crash (clawtower's own status: Lobster has
    no adoption)."""
    return {"protocolVersion": 1, "ok": True, "status": "needs_operator", "output": [],
            "requiresApproval": None, "requiresInput": None,
            "requiresOperator": {"type": "interrupted_step", "runId": run_id,
                                 "stepId": step_id, "reason": reason,
                                 "choices": ["retry", "skip", "cancel"]}}


@dataclass
class _Plan:
    """Where an adopted run goes on: step `index`; `step_id` had started (an interrupted
    step), `rerun` when it may run again; `fail` when it had already failed the run."""

    index: int
    step_id: str | None = None
    rerun: bool = False
    fail: str | None = None


def _plan(steps: Sequence[dict[str, Any]], rows: Mapping[str, Mapping[str, Any]],
          skip_rest: set[str]) -> _Plan:
    for idx, step in enumerate(steps):
        sid = str(step["id"])
        row = rows.get(sid)
        if row is None:
            return _Plan(idx)
        status = row["status"]
        if status in ("done", "skipped"):
            continue
        if status == "failed":
            if row["result"] is None:  # on_error stop: the run had failed
                return _Plan(idx, fail=str(row["error"] or f"step {sid} failed"))
            if sid in skip_rest:
                return _Plan(len(steps))
            continue
        # running / retrying / waiting / interrupted: it started and has no result
        return _Plan(idx, sid, rerun=status == "retrying" or repeatable(step))
    return _Plan(len(steps))


def _lost(run_id: str) -> dict[str, Any]:
    return error_envelope("runtime_error", f"workflow run {run_id}: another process adopted it"
                          " (this one stalled past its lease); it drives the run from here")


def _limit_dict(workflow: Mapping[str, Any]) -> dict[str, Any] | None:
    limit = parse_limit(workflow.get("cost_limit"))
    return None if limit is None else {"max_usd": limit[0], "action": limit[1]}


def _run(r: dict[str, Any]) -> dict[str, Any]:
    steps = json.loads(r["steps"])
    return {
        "id": r["id"], "name": r["name"], "file": r["file"], "status": r["status"],
        "args": json.loads(r["args"]), "step_ids": steps, "steps_total": len(steps),
        "steps_done": r["steps_done"], "waiting_step": r["waiting_step"],
        "gate_kind": r["gate"] if r["status"] == "paused" else None,
        "approval_id": r["approval_id"] if r["status"] == "paused" else None,
        "output": _loads(r["output"]), "error": r["error"], "started_by": r["started_by"],
        "started_at": r["started_at"], "ended_at": r["ended_at"],
        "updated_at": r["updated_at"], "last_seq": r["last_seq"],
    }


def _step(s: dict[str, Any]) -> dict[str, Any]:
    return {"id": s["step_id"], "index": s["idx"], "kind": s["kind"], "status": s["status"],
            "attempts": s["attempts"], "result": _loads(s["result"]), "error": s["error"],
            "started_at": s["started_at"], "ended_at": s["ended_at"]}


def _identity_problem(step_id: str, identity: dict[str, Any], by: str | None) -> str | None:
    from .gates import enforce_identity

    return enforce_identity(step_id, identity, by)


def _dry(workflow: dict[str, Any], args: dict[str, Any], results: dict[str, Any],
         start: int) -> str:
    from .dryrun import dry_run  # only for --dry-run

    return dry_run(workflow["steps"], args, results, start)


__all__ = ["Workflows", "error_envelope", "exit_code", "normalize_args", "ok_envelope", "render"]
