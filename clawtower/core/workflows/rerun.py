"""Going back in a workflow run (issue 37): `rerun(W-1, STEP)` starts a new run that takes
the recorded outputs of W-1's steps before STEP as its own (`workflow.rerun`, read from
W-1's log, not from its projection) and runs from STEP on. Nothing before STEP runs again,
and no approval of W-1 authorizes what runs again: a gate from STEP on asks again, and when
an approval gate comes before STEP, the last one does not reuse W-1's decision either: it
asks again first (its request built anew from the reused outputs), and its approval lets
the run go on at STEP. Each such approvals item names the rerun (`rerun_note`).

Refused with nothing written (one line, a ValidationError): an unknown run or step, a run
still in flight (running: its driver may still write), a step before STEP without a
recorded output (the origin never got that far, or it failed and stopped there).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, ValidationError
from ..events import Payload
from ..store.interface import Store, WriteTx
from . import events as wev
from .conditions import check_workflow_conditions
from .cost import CostTracker, parse_limit
from .envelopes import _loads, error_envelope, file_digest
from .load import WorkflowError, is_approval_step, load_workflow
from .recorder import StoreRecorder
from .runner import Context, Outcome, Runner, last_completed_step, resolve_args

Rows = list[dict[str, Any]]


def recorded(rows: Rows) -> dict[str, wev.ReusedStep]:
    """The outputs a run's log records for its steps, by step id (the last word on each):
    finished, skipped, failed with a result its on_error let the run go on from, and a gate
    decided (approved, answered). A gate still waiting has no output."""
    out: dict[str, wev.ReusedStep] = {}
    for r in rows:
        kind, p = r["type"], json.loads(r["payload"])
        step, index = p.get("step_id"), int(p.get("index") or 0)
        if kind == "workflow.step_finished":
            out[step] = wev.ReusedStep(step_id=step, index=index, status="done",
                                       result=p["result"], branches=p.get("branches") or {})
        elif kind == "workflow.step_skipped" or (kind == "workflow.recovered"
                                                 and p.get("decision") == "skip"):
            out[step] = wev.ReusedStep(step_id=step, index=index, status="skipped",
                                       result={"id": step, "skipped": True})
        elif kind == "workflow.step_failed" and not p.get("retrying") \
                and p.get("policy") != "stop":
            out[step] = wev.ReusedStep(step_id=step, index=index, status="failed", result={
                "id": step, "error": True, "errorMessage": p.get("error", "")})
        elif kind == "workflow.resumed":
            prior = out.get(step)
            out[step] = wev.ReusedStep(step_id=step, index=prior.index if prior else index,
                                       status="done", result=p["result"])
        elif kind in ("workflow.step_started", "workflow.paused") and step in out:
            del out[step]  # started again (a retry): its earlier output is not the last word
    return out


def rerun_note(tx: WriteTx, run_id: str) -> dict[str, Any] | None:
    """{origin, from_step} when `run_id` is a rerun (a gate's approvals item says so)."""
    row = tx.one("SELECT payload FROM events WHERE entity='workflow' AND entity_id=? AND"
                 " type='workflow.rerun' LIMIT 1", (run_id,))
    if row is None:
        return None
    p = json.loads(row["payload"])
    return {"origin": p["origin"], "from_step": p["from_step"]}


class Reruns:
    """`rerun`, inherited by the service (which starts and drives runs)."""

    store: Store
    stderr: Callable[[str], None]

    if TYPE_CHECKING:  # the service's
        def _start(self, tx: WriteTx, path: Path, workflow: dict[str, Any],
                   args: dict[str, Any],
                   wrap: Callable[[wev.WorkflowStarted], Payload] | None = None) -> str: ...

        async def _drive(self, run_id: str, workflow: dict[str, Any], path: Path,
                         args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                         last: str | None, cwd: str | None = None) -> dict[str, Any]: ...

        async def _run_cwd(self, run_id: str) -> str | None: ...

        def _context(self, run_id: str, path: Path, cwd: str | None = None) -> Context: ...

        async def _pause(self, run_id: str, workflow: dict[str, Any], outcome: Outcome,
                         path: Path, recorder: StoreRecorder) -> dict[str, Any]: ...

        async def _end(self, run_id: str, payload: Payload) -> None: ...

    async def rerun(self, run_id: str, from_step: str, args: Mapping[str, Any] | None = None,
                    *, by: str = "operator") -> tuple[str, dict[str, Any]]:
        """A new run of `run_id`'s workflow from `from_step`, with its args (or `args`);
        returns the new run's id and its envelope (ok, needs_approval, ...)."""
        origin = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
        if origin is None:
            raise NotFound(f"workflow run {run_id!r}: no such run")
        path = Path(origin["file"])
        try:
            workflow = load_workflow(path)
        except WorkflowError as exc:
            raise ValidationError(f"workflow run {run_id}: {path}: {exc.message}") from None
        steps = workflow["steps"]
        ids = [str(s["id"]) for s in steps]
        if from_step not in ids:
            raise ValidationError(f"workflow run {run_id}: --from {from_step}: no such step"
                                  f" (its steps: {', '.join(ids)})")
        index = ids.index(from_step)
        gates = [i for i in range(index) if is_approval_step(steps[i].get("approval"))]
        gate = gates[-1] if gates else None  # asked again before the run goes on at STEP
        if origin["digest"] and file_digest(path) != origin["digest"]:
            self.stderr(f"clawtower: warning: {path} changed since run {run_id} started;"
                        " rerunning with the file as it is now\n")
        try:
            resolved = resolve_args(workflow.get("args"),
                                    _loads(origin["args"], {}) if args is None else args)
            check_workflow_conditions(workflow, index)
        except WorkflowError as exc:
            raise ValidationError(f"workflow run {run_id}: {exc.message}") from None

        def command(tx: WriteTx) -> tuple[str, list[wev.ReusedStep]]:
            run = tx.one("SELECT status, last_seq FROM workflow_runs WHERE id=?", (run_id,))
            assert run is not None
            if run["status"] == "running":
                raise Conflict(f"workflow run {run_id}: still in flight (running); rerun it"
                               " once it pauses or ends, or cancel it first")
            rows = tx.all("SELECT seq, type, payload FROM events WHERE entity='workflow' AND"
                          " entity_id=? ORDER BY seq", (run_id,))
            outputs = recorded(rows)
            missing = [i for n, i in enumerate(ids[:index]) if i not in outputs and n != gate]
            if missing:
                raise Conflict(f"workflow run {run_id}: --from {from_step}: step {missing[0]}"
                               " before it has no recorded output to reuse")
            reused = [outputs[i].model_copy(update={"index": n})
                      for n, i in enumerate(ids[:index]) if n != gate]
            at = int(rows[-1]["seq"]) if rows else 0
            new = self._start(tx, path, workflow, resolved, lambda started: wev.WorkflowRerun(
                origin=run_id, from_step=from_step, index=index, at_seq=at, by=by,
                started=started, reused=reused))
            return new, reused

        new, reused = await self.store.execute(command)
        results: dict[str, dict[str, Any]] = {}
        for r in reused:
            results.update(r.branches)
            results[r.step_id] = r.result
        cwd = await self._run_cwd(run_id)
        last = last_completed_step(steps[:gate if gate is not None else index], results)
        if gate is None:
            return new, await self._drive(new, workflow, path, resolved, results, index, last,
                                          cwd)
        return new, await self._ask_again(new, workflow, path, resolved, results, gate,
                                          index, last, cwd)

    async def _ask_again(self, run_id: str, workflow: dict[str, Any], path: Path,
                         args: dict[str, Any], results: dict[str, dict[str, Any]], gate: int,
                         index: int, last: str | None, cwd: str | None) -> dict[str, Any]:
        """Run the approval gate `gate` alone (its request from the reused outputs) and pause
        there; its approval resumes the run at `index` (STEP), not at the step after it."""
        ctx = self._context(run_id, path, cwd)
        recorder = ctx.recorder
        assert isinstance(recorder, StoreRecorder)
        alone = {**workflow, "steps": workflow["steps"][: gate + 1]}
        tracker = CostTracker(ctx.env, ctx.stderr, parse_limit(workflow.get("cost_limit")))
        try:
            outcome = await Runner(alone, path, args, ctx, tracker).run(results, gate, last)
        except WorkflowError as exc:
            await recorder.flush(lost_ok=True)
            await self._end(run_id, wev.WorkflowFailed(error=exc.message))
            return error_envelope("runtime_error", exc.message)
        assert outcome.pause is not None
        outcome = dataclasses.replace(outcome, pause=dataclasses.replace(
            outcome.pause, resume_at=index))
        return await self._pause(run_id, workflow, outcome, path, recorder)


__all__ = ["Reruns", "recorded", "rerun_note"]
