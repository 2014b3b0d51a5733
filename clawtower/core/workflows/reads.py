"""The read side of the workflows API: runs listed, one run with its steps and gate, and
what a run has spent. Apart from the service because it only reads the projections; the
service (and adoption) inherit it as `Reads`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import NotFound
from ..liveness import liveness
from ..store.interface import Store
from .envelopes import _loads

# the cost module (and the workflow loader's YAML parser it reaches) loads with the first
# spend asked for: `workflow list` reads the runs' projection alone (issue 39)
if TYPE_CHECKING:
    from .cost import CostLine


class Reads:
    """Reads of runs, steps and spend from the store's projections and events."""

    store: Store

    async def _spend(self, run_id: str) -> list[CostLine]:
        """What a run has spent: the lines its step events carry (billed output items, and
        the calls of clawtower's LLM stages at their agents' price)."""
        return _spend_lines(await self.store.fetchall(_SPEND_SQL, (run_id,)))

    async def _results(self, run_id: str) -> dict[str, dict[str, Any]]:
        return _results_of(await self.store.fetchall(_RESULTS_SQL, (run_id,)))

    async def _paused_run(self, run_id: str) -> tuple[dict[str, Any] | None,
                                                       dict[str, dict[str, Any]]]:
        """A run's row and its step results, from one snapshot in one read: what a resume
        needs (issue 36: one read, not two, on the gate's round trip)."""
        run, results = await self.store.fetch_many([
            ("SELECT * FROM workflow_runs WHERE id=?", (run_id,)), (_RESULTS_SQL, (run_id,))])
        return (run[0] if run else None), _results_of(results)

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
            "SELECT entity_id, coalesce(json_extract(payload, '$.owner'),"
            " json_extract(payload, '$.started.owner')) AS owner FROM events WHERE"
            f" entity='workflow' AND entity_id IN ({marks}) AND type IN ('workflow.started',"
            " 'workflow.rerun',"
            " 'workflow.resumed', 'workflow.adopted', 'workflow.recovered') ORDER BY seq",
            tuple(r["id"] for r in running))
        owners = {row["entity_id"]: row["owner"] for row in rows}
        for r in running:
            r["driver"] = liveness(str(owners.get(r["id"]) or "").partition("#")[0])

    async def get(self, run_id: str) -> dict[str, Any]:
        """A run with every step (pending ones too) and the gate it waits at, if any."""
        run, steps, rerun = await self.store.fetch_many([
            ("SELECT r.*, 0 AS steps_done FROM workflow_runs r WHERE id=?", (run_id,)),
            ("SELECT * FROM workflow_steps WHERE run_id=? ORDER BY idx, seq", (run_id,)),
            ("SELECT coalesce(nullif(json_extract(payload, '$.by'), ''), actor) AS actor,"
             " json_extract(payload, '$.origin') AS origin, json_extract(payload,"
             " '$.from_step') AS from_step, json_extract(payload, '$.reused') AS reused FROM events"
             " WHERE entity='workflow' AND entity_id=? AND type='workflow.rerun'", (run_id,)),
        ])
        if not run:
            raise NotFound(f"workflow run {run_id!r}: no such run")
        out = _run(run[0])
        await self._drivers([out])
        by_id = {s["step_id"]: s for s in steps}
        # a step that never started: pending while the run may still reach it; once the run
        # ended cancelled or failed, it never will
        never = "cancelled" if out["status"] in ("cancelled", "failed") else "pending"
        reused = {r["step_id"] for r in json.loads(rerun[0]["reused"] or "[]")} if rerun \
            else set()
        listed: list[dict[str, Any]] = []
        for idx, sid in enumerate(out["step_ids"]):
            row = by_id.get(sid)
            item = _step(row) if row else {"id": sid, "index": idx, "kind": "", "status":
                                            never, "attempts": 0, "result": None,
                                            "error": None, "started_at": None, "ended_at": None}
            item["branches"] = [_step(s) for s in steps if s["parent"] == sid]
            item["reused"] = sid in reused  # the origin's recorded output, not run again
            listed.append(item)
        out["steps"] = listed
        out["rerun_of"] = {"run": rerun[0]["origin"], "from_step": rerun[0]["from_step"],
                           "by": rerun[0]["actor"]} if rerun else None
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
            "SELECT coalesce(json_extract(payload, '$.cost_limit'), json_extract(payload,"
            " '$.started.cost_limit')) AS cost_limit FROM events WHERE entity='workflow' AND"
            " entity_id=? AND type IN ('workflow.started', 'workflow.rerun') ORDER BY seq"
            " LIMIT 1", (run_id,))
        from .cost import parse_limit, summarize

        raw = json.loads(started["cost_limit"]) if started and started["cost_limit"] else None
        limit = parse_limit(raw) if isinstance(raw, dict) else None
        return summarize(await self._spend(run_id), limit)


# only the cost field: step payloads also carry the (possibly large) results
_SPEND_SQL = ("SELECT json_extract(payload, '$.cost') AS cost FROM events WHERE"
              " entity='workflow' AND entity_id=? AND type IN ('workflow.paused',"
              " 'workflow.step_finished', 'workflow.step_failed')"
              " AND json_array_length(payload, '$.cost') > 0"
              " ORDER BY seq")
_RESULTS_SQL = ("SELECT step_id, result FROM workflow_steps WHERE run_id=? AND result IS NOT"
                " NULL ORDER BY seq")


def _spend_lines(rows: Sequence[dict[str, Any]]) -> list[CostLine]:
    lines: list[CostLine] = []
    if not rows:
        return lines
    from .cost import line_from

    for row in rows:
        raw = json.loads(row["cost"])
        lines.extend(line_from(x) for x in raw if isinstance(x, dict))
    return lines


def _results_of(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["step_id"]: json.loads(r["result"]) for r in rows}


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
