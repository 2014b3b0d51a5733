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

The service is split by concern: envelopes.py (the answers), reads.py (list, get, cost),
adoption.py (adopt, recover) and decisions.py (how a gate is decided); `Workflows`
inherits the last three, so its API is the one it always was.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .. import events as ev
from .. import leases
from ..errors import ClawError, StorageFault, ValidationError
from ..events import NewEvent
from ..liveness import process_tag
from ..store.faults import storage_fault
from ..store.interface import Store, WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from . import events as wev
from .adoption import Adoption
from .conditions import check_workflow_conditions
from .cost import CostLimitExceeded, CostTracker, parse_limit
from .decisions import NOT_FOUND, Decisions, GateDecided
from .envelopes import (
    _loads,
    _lost,
    error_envelope,
    exit_code,
    file_digest,
    normalize_args,
    ok_envelope,
    render,
)
from .jsvalues import UNDEFINED, copy_plain, js_plain, js_prefix, to_json
from .kinds import GATE_KINDS
from .llm import CURRENT_RUN, config_llm
from .load import WorkflowError, is_input_step, load_workflow_shared, resolve_workflow_file
from .pipeline import LlmCall, PipelineFailure, run_pipeline
from .recorder import (
    HandedOver,
    LeaseLost,
    RunCancelled,
    StoreRecorder,
    lease_name,
)
from .rerun import Reruns, rerun_note
from .runner import (
    Context,
    Outcome,
    Runner,
    last_completed_step,
    resolve_args,
    write_stderr,
)
from .tokens import new_token

LEASE_TTL_S = 10.0


# driver tasks cancelled because another process adopted their run (they write nothing more)
_ADOPTED_AWAY: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = weakref.WeakKeyDictionary()


def _live(tx: WriteTx, run_id: str) -> bool:
    row = tx.one("SELECT status FROM workflow_runs WHERE id=?", (run_id,))
    return row is not None and row["status"] not in ("cancelled", "ok", "failed")


class Workflows(Decisions, Adoption, Reruns):
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
            workflow, digest = load_workflow_shared(path)
            resolved = resolve_args(workflow.get("args"), args)
            if dry_run:
                self.stderr(_dry(workflow, resolved, {}, 0))
                return ok_envelope("ok", [])
            check_workflow_conditions(workflow)
        except WorkflowError as exc:
            return error_envelope("runtime_error", exc.message)

        def start(tx: WriteTx) -> str:
            run_id = self._start(tx, path, workflow, resolved, digest=digest)
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
            workflow, digest = load_workflow_shared(path)
            resolved = resolve_args(workflow.get("args"), args)
            check_workflow_conditions(workflow)
        except WorkflowError as exc:
            raise ValidationError(f"{file}: {exc.message}") from None

        def command(tx: WriteTx) -> str:
            run_id = self._start(tx, path, workflow, resolved, digest=digest)
            leases._release(tx, lease_name(run_id), self.owner)
            return run_id

        return await self.store.execute(command)

    def _start(self, tx: WriteTx, path: Path, workflow: dict[str, Any],
               args: dict[str, Any],
               wrap: Callable[[wev.WorkflowStarted], ev.Payload] | None = None,
               digest: str | None = None) -> str:
        """The run's start (`wrap` folds it into another event: a rerun's) and its lease.
        `digest`: the sha256 of the file as `workflow` was loaded from it (else read now)."""
        row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM workflow_runs")
        run_id = f"W-{row['n'] if row else 1}"
        name = workflow.get("name")
        started = wev.WorkflowStarted(
            file=str(path), name=name if isinstance(name, str) else path.stem,
            args=js_plain(args), steps=[str(s["id"]) for s in workflow["steps"]],
            digest=file_digest(path) if digest is None else digest,
            cost_limit=_limit_dict(workflow), owner=process_tag(), cwd=self.cwd)
        tx.emit(NewEvent(entity_id=run_id, actor=self.actor, role=Role.OPERATOR.value,
                         payload=started if wrap is None else wrap(started)))
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
                       spawned=recorder.spawned)  # `active`: runner._sub_workflow

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
                     last: str | None, cwd: str | None = None,
                     opening: Callable[[WriteTx], None] | None = None) -> dict[str, Any]:
        """Drive the run on from step `start`. `opening`: a resume's claim of its gate,
        written first by the run's next write (StoreRecorder.opening)."""
        token = CURRENT_RUN.set(run_id)  # LLM stages record their usage on the run
        ctx = self._context(run_id, path, cwd)
        recorder = ctx.recorder
        assert isinstance(recorder, StoreRecorder)
        recorder.opening = opening
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(run_id, lost, asyncio.current_task(),
                                                  recorder))
        try:
            return await self._drive_run(run_id, workflow, path, args, results, start, last,
                                         ctx, recorder)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if lost.is_set() and task is not None and task.uncancel() == 0:
                return _lost(run_id)  # adopted elsewhere: its new driver writes from now on
            raise
        finally:
            renewer.cancel()
            CURRENT_RUN.reset(token)

    async def _renew(self, run_id: str, lost: asyncio.Event,
                     driver: asyncio.Task[Any] | None, recorder: StoreRecorder) -> None:
        """Keep the run's lease while driving it; losing it (another process adopted the run
        after this one stalled past the TTL) stops this driver without a write. Until a
        resume's claim is committed the run is not this driver's: there is nothing to keep."""
        name = lease_name(run_id)
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            if recorder.opening is not None:
                continue
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
                         last: str | None, ctx: Context, recorder: StoreRecorder
                         ) -> dict[str, Any]:
        tracker = CostTracker(ctx.env, ctx.stderr, parse_limit(workflow.get("cost_limit")))
        if start > 0 and tracker.limit is not None:
            # a gate pauses a run, it does not reset its spend; what was spent counts only
            # against a cost_limit (the tracker's lines serve its check alone), so a run
            # without one skips the read of its step events (issue 36)
            tracker.restore(await self._spend(run_id))
        runner = Runner(workflow, path, args, ctx, tracker)
        try:
            outcome = await runner.run(results, start, last)
            if outcome.pause is None:
                await recorder.flush()  # the last step's result, kept for the next write
        except GateDecided:
            raise  # the resume's claim lost its gate: nothing of this resume was written
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
            if recorder.opening is not None:
                raise  # cancelled before its claim was written: the run waits at its gate
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
            rerun = rerun_note(tx, run_id)  # a rerun's gate asks again, and says why
            again = f" (rerun of {rerun['origin']} from {rerun['from_step']})" if rerun else ""
            if pause.kind == "approval":
                context = {"run": run_id, "step": pause.step_id, "items": request.get("items"),
                           "request": request, **({"rerun_of": rerun} if rerun else {})}
                preview = str(request.get("preview") or "")
                prompt = str(request.get("prompt"))
            else:
                context = {"run": run_id, "step": pause.step_id, "request": request,
                           "responseSchema": request.get("responseSchema"),
                           "defaults": request.get("defaults"), "subject": request.get("subject"),
                           **({"rerun_of": rerun} if rerun else {})}
                preview = js_prefix(to_json(request.get("subject")), 2000)
                prompt = str(request.get("prompt"))
            approval_id = c.request_approval(
                tx, kind=GATE_KINDS[pause.kind], subject=run_id,
                title=f"{run_id} {name}: {pause.step_id}{again}", prompt=prompt,
                context=js_plain(context), preview=preview, actor=requester,
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
                                 token_hash=token_hash, request=js_plain(request),
                                 identity=pause.identity,
                                 input_schema=pause.input_schema,
                                 subject=js_plain(pause.subject),
                                 result=gate_output.result if gate_output else None,
                                 cost=gate_output.cost if gate_output else [],
                                 started=started, released=released[0] if released else None,
                                 asked=asked[0].payload if asked else None,
                                 asked_by=asked[0].actor if asked else "",
                                 asked_role=asked[0].role if asked else "")))
            return approval_id

        # with a resume's claim of the gate before, if any (one commit for both)
        approval_id = await recorder.write(command)
        if not approval_id:
            return ok_envelope("cancelled", [])
        request = copy_plain(request)  # the caller's own (it may hold the parse's values)
        if pause.kind == "approval":
            return ok_envelope("needs_approval", [], {**request, "resumeToken": token,
                                                      "approvalId": approval_id})
        return ok_envelope("needs_input", [], None, {**request, "resumeToken": token,
                                                    "approvalId": approval_id})

    # --------------------------------------------------------------- resume

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
        run, results = await self._locate(
            token, approval_id, "Resume state not found" if cancel else NOT_FOUND)
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
        workflow, digest = load_workflow_shared(path)
        if run["digest"] and digest != run["digest"]:
            self.stderr(f"clawtower: warning: {path} changed since run {run_id} started;"
                        " resuming with the file as it is now (as Lobster does)\n")
        args = resolve_args(workflow.get("args"), _loads(run["args"], {}))
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
        claim = self._consume(run, decision, approved_by, previous, reason)
        results[step_id] = previous
        last = step_id if gate == "input" else last_completed_step(workflow["steps"], results)
        return await self._drive(run_id, workflow, path, args, results, start, last,
                                 opening=claim)


def _limit_dict(workflow: Mapping[str, Any]) -> dict[str, Any] | None:
    limit = parse_limit(workflow.get("cost_limit"))
    return None if limit is None else {"max_usd": limit[0], "action": limit[1]}


def _identity_problem(step_id: str, identity: dict[str, Any], by: str | None) -> str | None:
    from .gates import enforce_identity

    return enforce_identity(step_id, identity, by)


def _dry(workflow: dict[str, Any], args: dict[str, Any], results: dict[str, Any],
         start: int) -> str:
    from .dryrun import dry_run  # only for --dry-run

    return dry_run(workflow["steps"], args, results, start)


__all__ = ["GATE_KINDS", "Workflows", "error_envelope", "exit_code", "normalize_args",
           "ok_envelope", "render"]
