"""The workflows API the fronts use (CLI, console): run, resume, decide, cancel, list, get.

Answers are Lobster's tool-mode envelopes (plain dicts, key order as Lobster prints them).
State lives in the store: every step result is an event, a paused run keeps only the hash of
its resume token, and resuming rebuilds the results from the projections, so any process can
continue a run another process paused (and died after).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import events as ev
from ..errors import ClawError, Conflict, NotFound, ValidationError
from ..events import NewEvent
from ..liveness import liveness, process_tag
from ..store.interface import Store, WriteTx
from ..tasks import commands as c
from ..tasks.permissions import Role
from .conditions import check_workflow_conditions
from .cost import CostLimitExceeded, CostLine, CostTracker, line_from, parse_limit, summarize
from .jsvalues import UNDEFINED, js_prefix, to_json
from .llm import CURRENT_RUN, config_llm
from .load import WorkflowError, is_input_step, load_workflow, resolve_workflow_file
from .pipeline import LlmCall, PipelineFailure, run_pipeline
from .runner import Context, Outcome, Runner, last_completed_step, resolve_args, write_stderr
from .tokens import decode_token, matches, new_token

GATE_KINDS = {"approval": "workflow_approval", "input": "workflow_input"}
NOT_FOUND = "Workflow resume state not found"


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


def _why_cancelled(decision: str, reason: str) -> str:
    """A cancelled run's reason: how its gate was decided, and the decider's words."""
    how = "rejected" if decision == "rejected" else "cancelled"
    return f"{how}: {reason.strip()}" if reason.strip() else how


class RunCancelled(Exception):
    """The run was cancelled from elsewhere (another process, the console) while it ran."""


def _live(tx: WriteTx, run_id: str) -> bool:
    row = tx.one("SELECT status FROM workflow_runs WHERE id=?", (run_id,))
    return row is not None and row["status"] not in ("cancelled", "ok", "failed")


class _StoreRecorder:
    """Every step's progress as an event of the run. Before each step starts, a cancel made
    by any process is honoured (a step already in flight finishes first)."""

    def __init__(self, store: Store, run_id: str, actor: str) -> None:
        self.store, self.run_id, self.actor = store, run_id, actor
        self.gate_output: ev.WorkflowStepFinished | None = None

    async def _emit(self, payload: ev.Payload) -> None:
        event = NewEvent(entity_id=self.run_id, actor=self.actor, role=Role.SYSTEM.value,
                         payload=payload)
        await self.store.execute(lambda tx: tx.emit(event))

    async def step_started(self, step_id: str, index: int, kind: str, attempt: int) -> None:
        row = await self.store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                        (self.run_id,))
        if row is not None and row["status"] == "cancelled":
            raise RunCancelled(self.run_id)
        # Not awaited: nothing depends on it being durable first (a step with no recorded
        # result runs again on resume), and it then shares the commit of the step's next
        # write (its result, or the gate's pause) instead of costing a commit of its own.
        event = NewEvent(entity_id=self.run_id, actor=self.actor, role=Role.SYSTEM.value,
                         payload=ev.WorkflowStepStarted(step_id=step_id, index=index,
                                                        kind=kind, attempt=attempt))
        self.store.submit(lambda tx: tx.emit(event))

    async def step_finished(self, step_id: str, index: int, result: dict[str, Any],
                            branches: dict[str, dict[str, Any]] | None, *,
                            durable: bool = True, cost: list[dict[str, Any]] | None = None
                            ) -> None:
        payload = ev.WorkflowStepFinished(step_id=step_id, index=index, result=result,
                                          branches=branches or {}, cost=cost or [])
        if durable:
            await self._emit(payload)
            return
        # An approval step: its output goes with the gate's pause, after approval.requested
        # (Workflows._pause), so the log reads in causal order.
        self.gate_output = payload

    async def step_skipped(self, step_id: str, index: int) -> None:
        await self._emit(ev.WorkflowStepSkipped(step_id=step_id, index=index))

    async def step_failed(self, step_id: str, index: int, message: str, policy: str,
                          retrying: bool, *, cost: list[dict[str, Any]] | None = None
                          ) -> None:
        await self._emit(ev.WorkflowStepFailed(step_id=step_id, index=index, error=message,
                                               policy=policy, retrying=retrying,
                                               cost=cost or []))


class Workflows:
    """Run and resume Lobster workflows against a store.

    `env` and `cwd` are what steps inherit (default: this process's); `llm` answers
    `llm.invoke` / `llm_task.invoke` pipeline stages; `actor` names who starts runs."""

    def __init__(self, store: Store, *, env: Mapping[str, str] | None = None,
                 cwd: str | None = None, llm: LlmCall | None = None,
                 stderr: Callable[[str], None] | None = None, actor: str = "operator") -> None:
        self.store = store
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
                  dry_run: bool = False) -> dict[str, Any]:
        """Start a run; answers ok, needs_approval, needs_input or an error envelope."""
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
        run_id = await self.store.execute(lambda tx: self._start(tx, path, workflow, resolved))
        return await self._drive(run_id, workflow, path, resolved, {}, 0, None)

    def _start(self, tx: WriteTx, path: Path, workflow: dict[str, Any],
               args: dict[str, Any]) -> str:
        row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM workflow_runs")
        run_id = f"W-{row['n'] if row else 1}"
        name = workflow.get("name")
        tx.emit(NewEvent(entity_id=run_id, actor=self.actor, role=Role.OPERATOR.value,
                         payload=ev.WorkflowStarted(
                             file=str(path), name=name if isinstance(name, str) else path.stem,
                             args=json.loads(to_json(args)),
                             steps=[str(s["id"]) for s in workflow["steps"]],
                             digest=file_digest(path), cost_limit=_limit_dict(workflow),
                             owner=process_tag())))
        return run_id

    def _context(self, run_id: str, path: Path) -> Context:
        return Context(env=self.env, cwd=self.cwd,
                       recorder=_StoreRecorder(self.store, run_id, "workflow"),
                       pipeline=self._pipeline, stderr=self.stderr,
                       active=frozenset({str(path.resolve())}))

    async def _pipeline(self, step_id: str, text: str, data: Any, env: dict[str, str],
                        cwd: str) -> dict[str, Any]:
        try:
            return await run_pipeline(step_id, text, data, env, cwd, self.llm)
        except PipelineFailure as exc:
            raise WorkflowError(str(exc)) from None
        except ClawError as exc:
            raise WorkflowError(f"Workflow step {step_id} pipeline failed: {exc}") from None

    async def _drive(self, run_id: str, workflow: dict[str, Any], path: Path,
                     args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                     last: str | None) -> dict[str, Any]:
        token = CURRENT_RUN.set(run_id)  # LLM stages record their usage on the run
        try:
            return await self._drive_run(run_id, workflow, path, args, results, start, last)
        finally:
            CURRENT_RUN.reset(token)

    async def _drive_run(self, run_id: str, workflow: dict[str, Any], path: Path,
                         args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                         last: str | None) -> dict[str, Any]:
        ctx = self._context(run_id, path)
        tracker = CostTracker(ctx.env, ctx.stderr, parse_limit(workflow.get("cost_limit")))
        if start > 0:  # a gate pauses a run, it does not reset its spend
            tracker.restore(await self._spend(run_id))
        runner = Runner(workflow, path, args, ctx, tracker)
        try:
            outcome = await runner.run(results, start, last)
        except RunCancelled:
            return ok_envelope("cancelled", [])
        except (WorkflowError, CostLimitExceeded) as exc:
            message = exc.message if isinstance(exc, WorkflowError) else str(exc)
            await self._end(run_id, ev.WorkflowFailed(error=message, kind="runtime_error"))
            return error_envelope("runtime_error", message)
        except asyncio.CancelledError:
            await asyncio.shield(self._end(run_id, ev.WorkflowFailed(
                error="interrupted", kind="runtime_error")))
            raise
        if outcome.pause is None:
            await self._end(run_id, ev.WorkflowFinished(output=outcome.output))
            return ok_envelope("ok", outcome.output)
        recorder = ctx.recorder
        gate_output = recorder.gate_output if isinstance(recorder, _StoreRecorder) else None
        return await self._pause(run_id, workflow, outcome, path, gate_output)

    async def _end(self, run_id: str, payload: ev.Payload) -> None:
        event = NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                         payload=payload)

        def command(tx: WriteTx) -> None:
            if _live(tx, run_id):  # a run cancelled meanwhile stays cancelled
                tx.emit(event)

        await self.store.execute(command)

    async def _pause(self, run_id: str, workflow: dict[str, Any], outcome: Outcome,
                     path: Path, gate_output: ev.WorkflowStepFinished | None = None
                     ) -> dict[str, Any]:
        pause = outcome.pause
        assert pause is not None
        token, token_hash = new_token(run_id)
        request = pause.request
        name = workflow.get("name") if isinstance(workflow.get("name"), str) else path.stem

        def command(tx: WriteTx) -> str:
            if not _live(tx, run_id):
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
                require_different_approver=bool(pause.identity.get("requireDifferentApprover")))
            tx.emit(NewEvent(entity_id=run_id, actor="workflow", role=Role.SYSTEM.value,
                             payload=ev.WorkflowPaused(
                                 step_id=pause.step_id, index=pause.index, gate=pause.kind,
                                 resume_at=pause.resume_at, approval_id=approval_id,
                                 token_hash=token_hash, request=json.loads(to_json(request)),
                                 identity=pause.identity,
                                 input_schema=pause.input_schema,
                                 subject=json.loads(to_json(pause.subject)),
                                 result=gate_output.result if gate_output else None,
                                 cost=gate_output.cost if gate_output else [])))
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
            gone = WorkflowError(f'Approval ID "{approval_id}" not found or expired',
                                 "parse_error")
            if a is None or a["kind"] not in GATE_KINDS.values() or a["status"] != "pending":
                raise gone
            run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?",
                                            (a["subject"],))
            if run is None or run["status"] != "paused" or run["approval_id"] != approval_id:
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
            raise WorkflowError(NOT_FOUND)
        return now

    def _decide(self, tx: WriteTx, run: dict[str, Any], decision: str, by: str | None,
                reason: str = "") -> None:
        a = tx.one("SELECT status FROM approvals WHERE id=?", (run["approval_id"],))
        if a is not None and a["status"] == "pending":
            tx.emit(NewEvent(entity_id=run["approval_id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value,
                             payload=ev.ApprovalDecided(decision=decision, reason=reason)))

    async def _consume(self, run: dict[str, Any], decision: str, by: str | None,
                       result: dict[str, Any], reason: str = "") -> None:
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            self._decide(tx, run, "approved" if decision == "approved" else "answered", by,
                         reason)
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=ev.WorkflowResumed(
                                 step_id=run["waiting_step"], decision=decision,
                                 by=(by or "").strip() or None,
                                 result=json.loads(to_json(result)), owner=process_tag())))

        await self.store.execute(command)

    async def _consume_cancel(self, run: dict[str, Any], by: str | None, decision: str,
                              reason: str = "") -> None:
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            self._decide(tx, run, decision, by, reason)
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=ev.WorkflowCancelled(
                                 reason=_why_cancelled(decision, reason),
                                 by=(by or "").strip() or None)))

        await self.store.execute(command)

    # ------------------------------------------------- the approvals list's side

    async def decide(self, approval_id: str, approve: bool, *, by: str,
                     reason: str = "") -> dict[str, Any]:
        """`clawtower approve/reject ID` on a gate: approving continues the run (in this
        process, until it ends or pauses again), rejecting cancels it."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        if a["status"] != "pending":
            who = f" by {a['decided_by']}" if a["decided_by"] else ""
            raise Conflict(f"approval {approval_id}: already {a['status']}{who}")
        if approve and a["kind"] == GATE_KINDS["input"]:
            raise ValidationError(f"approval {approval_id}: a workflow input gate needs an answer:"
                                  f" clawtower workflow resume --id {approval_id}"
                                  " --response-json JSON")
        if a["kind"] == GATE_KINDS["input"]:
            envelope = await self.resume(approval_id=approval_id, cancel=True, approved_by=by,
                                         reason=reason)
        else:
            envelope = await self.resume(approval_id=approval_id, approve=approve,
                                         approved_by=by, reason=reason)
        return await self._decided(approval_id, a, envelope, "approved" if approve else
                                   "rejected")

    async def respond(self, approval_id: str, response: Any, *, by: str) -> dict[str, Any]:
        """Answer an input gate with a JSON value (validated against its schema first)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        envelope = await self.resume(approval_id=approval_id, response=response, approved_by=by)
        return await self._decided(approval_id, a, envelope, "answered")

    async def _decided(self, approval_id: str, a: dict[str, Any], envelope: dict[str, Any],
                       decision: str) -> dict[str, Any]:
        now = await self.store.fetchone("SELECT status FROM approvals WHERE id=?",
                                        (approval_id,))
        if not envelope["ok"] and (now is None or now["status"] == "pending"):
            message = envelope["error"]["message"]
            if envelope["error"]["type"] == "parse_error":
                raise ValidationError(f"approval {approval_id}: {message}")
            raise ClawError(f"approval {approval_id}: {message}")
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
            raise ValidationError(f"approval {approval_id}: not a waiting workflow input gate")
        from .ajv import validate_response

        return validate_response(_loads(run["input_schema"]), response, run["waiting_step"])

    # -------------------------------------------------------------- manage

    async def cancel(self, run_id: str, *, by: str, reason: str = "") -> None:
        """Cancel a paused run (its gate is withdrawn) or one left running by a dead process."""
        def command(tx: WriteTx) -> None:
            run = tx.one("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
            if run is None:
                raise NotFound(f"workflow run {run_id}: no such run")
            if run["status"] not in ("paused", "running"):
                raise Conflict(f"workflow run {run_id}: already {run['status']}")
            if run["status"] == "paused":
                self._decide(tx, run, "withdrawn", by, reason)
            tx.emit(NewEvent(entity_id=run_id, actor=by, role=Role.OPERATOR.value,
                             payload=ev.WorkflowCancelled(reason=reason or "cancelled", by=by)))

        await self.store.execute(command)

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
            " 'workflow.resumed') ORDER BY seq", tuple(r["id"] for r in running))
        owners = {row["entity_id"]: row["owner"] for row in rows}
        for r in running:
            r["driver"] = liveness(owners.get(r["id"]))

    async def get(self, run_id: str) -> dict[str, Any]:
        """A run with every step (pending ones too) and the gate it waits at, if any."""
        run, steps = await self.store.fetch_many([
            ("SELECT r.*, 0 AS steps_done FROM workflow_runs r WHERE id=?", (run_id,)),
            ("SELECT * FROM workflow_steps WHERE run_id=? ORDER BY idx, seq", (run_id,)),
        ])
        if not run:
            raise NotFound(f"workflow run {run_id}: no such run")
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
