"""Adoption and recovery of runs whose driver died: which runs nobody drives, driving one on
from the step it reached, and the operator's retry, skip or cancel of a step interrupted by
that death. Apart from the service because it is the crash path, not the ordinary one; the
service inherits it as `Adoption`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import leases
from ..errors import ClawError, Conflict, NotFound, ValidationError
from ..events import NewEvent
from ..liveness import end_group, holder_gone, unheld
from ..store.interface import WriteTx
from ..tasks.permissions import Role
from . import events as wev
from .conditions import check_workflow_conditions
from .envelopes import _loads, error_envelope, file_digest, ok_envelope, operator_envelope
from .load import WorkflowError, load_workflow
from .reads import Reads
from .recorder import SAFE_KINDS, lease_name
from .runner import last_completed_step, resolve_args, step_kind

REPEAT_KEY = "x-idempotent"  # a step marked `x-idempotent: true` may run again after a crash


def repeatable(step: dict[str, Any]) -> bool:
    """Whether a step that had started when its driver died may simply run again: gates and
    steps that do nothing themselves, or a step the file marks `x-idempotent: true`."""
    return step_kind(step) in SAFE_KINDS or step.get(REPEAT_KEY) is True


class Adoption(Reads):
    """Adopt, and recover, runs a dead process left; the service drives them on."""

    owner: str
    lease_ttl_s: float
    actor: str
    stderr: Callable[[str], None]

    if TYPE_CHECKING:  # the service's, which drives and cancels runs
        async def _drive(self, run_id: str, workflow: dict[str, Any], path: Path,
                         args: dict[str, Any], results: dict[str, dict[str, Any]], start: int,
                         last: str | None, cwd: str | None = None) -> dict[str, Any]: ...

        async def _end(self, run_id: str, payload: ev.Payload) -> None: ...

        async def cancel(self, run_id: str, *, by: str, reason: str = "") -> None: ...

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
            "SELECT coalesce(json_extract(payload, '$.cwd'), json_extract(payload,"
            " '$.started.cwd')) AS cwd FROM events WHERE entity='workflow' AND entity_id=? AND"
            " type IN ('workflow.started', 'workflow.rerun') ORDER BY seq LIMIT 1", (run_id,))
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
