"""The async task API every front uses (CLI, console, orchestrator, tests)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..approvals import decode_approval
from ..store.interface import Store
from .permissions import Role
from .phases import Phase

# The write commands (and the payload models they emit) load with the first write: a read
# (`task list`) touches tables only (start-up: BENCHMARKS.md).
if TYPE_CHECKING:
    from . import operator as op
    from .spec import TaskSpec

_JSON_COLUMNS = ("spec", "spec_problems", "circuit", "findings", "details", "checkpoint",
                 "output", "context")


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for k in _JSON_COLUMNS:
        if k in out and isinstance(out[k], str):
            out[k] = json.loads(out[k])
    return out


class Tasks:
    """Task protocol operations over a store. Every write is one typed command."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # writes ---------------------------------------------------------------

    async def create(self, spec: TaskSpec, *, actor: str = "operator",
                     role: Role = Role.OPERATOR, source: str | None = None) -> str:
        from . import commands as c

        result = await self.store.execute(lambda tx: c.create_task(tx, spec, actor, role, source))
        assert result is not None
        return result

    async def update_spec(self, task_id: str, spec: TaskSpec, *, actor: str = "operator",
                          role: Role = Role.OPERATOR) -> list[str]:
        from . import commands as c

        return await self.store.execute(lambda tx: c.update_spec(tx, task_id, spec, actor, role))

    async def transition(self, task_id: str, to: Phase | str, reason: str, *,
                         actor: str = "orchestrator", role: Role = Role.ORCHESTRATOR,
                         model: str = "default", escalation_model: str | None = None,
                         backoff_scale: float = 1.0) -> dict[str, Any]:
        from . import commands as c

        dst = Phase(to)
        return await self.store.execute(lambda tx: c.transition(
            tx, task_id, dst, reason, actor, role, model=model,
            escalation_model=escalation_model, backoff_scale=backoff_scale))

    async def command(self, task_id: str, command: op.Command | str, *, by: str,
                      choice: Phase | str | None = None, reason: str = "") -> dict[str, Any]:
        """An operator's unblock/retry/cancel, executed by the orchestrator (tasks/operator.py).
        Returns {task, from, to, attempt, command, by}."""
        from . import operator as op

        cmd = op.parse_command(str(command))
        dst = op.parse_choice(str(choice)) if choice is not None else None
        return await self.store.execute(lambda tx: op.command_task(
            tx, task_id, cmd, by=by, choice=dst, reason=reason))

    async def review(self, task_id: str, *, role: Role, reviewer: str, verdict: str,
                     findings: list[dict[str, Any]] | None = None,
                     details: dict[str, Any] | None = None, kind: str | None = None) -> int:
        from . import commands as c

        return await self.store.execute(lambda tx: c.append_review(
            tx, task_id, role, reviewer, verdict, findings or [], details, kind))

    async def heartbeat(self, task_id: str, attempt: int, *, actor: str,
                        role: Role = Role.EXECUTOR, note: str = "") -> None:
        from . import commands as c

        await self.store.execute(lambda tx: c.heartbeat(tx, task_id, attempt, actor, role, note))

    async def checkpoint(self, task_id: str, attempt: int, data: dict[str, Any], *, actor: str,
                         role: Role = Role.EXECUTOR) -> None:
        from . import commands as c

        await self.store.execute(lambda tx: c.checkpoint(tx, task_id, attempt, data, actor, role))

    async def artifact(self, task_id: str, attempt: int, name: str, uri: str, *, actor: str,
                       role: Role = Role.EXECUTOR, digest: str = "", summary: str = "") -> None:
        from . import commands as c

        await self.store.execute(lambda tx: c.record_artifact(
            tx, task_id, attempt, name, uri, actor, role, digest, summary))

    async def plan_effect(self, task_id: str, attempt: int, kind: str, description: str, *,
                          actor: str, role: Role = Role.EXECUTOR, target: str = "") -> str | None:
        from . import commands as c

        return await self.store.execute(lambda tx: c.plan_side_effect(
            tx, task_id, attempt, kind, description, actor, role, target))

    async def finish_attempt(self, task_id: str, attempt: int, *, ok: bool, reason: str = "",
                             actor: str, role: Role = Role.EXECUTOR,
                             output: dict[str, Any] | None = None,
                             status: str | None = None) -> None:
        from . import commands as c

        await self.store.execute(lambda tx: c.finish_attempt(
            tx, task_id, attempt, ok, reason, actor, role, output, status))

    # reads ----------------------------------------------------------------

    async def list(self, phase: Phase | str | None = None, limit: int = 100_000
                   ) -> list[dict[str, Any]]:
        cols = ("id, num, title, phase, attempts, spec_ok, phase_reason, created_at, updated_at,"
                " last_seq")
        if phase is None:
            rows = await self.store.fetchall(
                f"SELECT {cols} FROM tasks ORDER BY num LIMIT ?", (limit,))
        else:
            rows = await self.store.fetchall(
                f"SELECT {cols} FROM tasks WHERE phase=? ORDER BY num LIMIT ?",
                (Phase(phase).value, limit))
        return rows

    async def counts(self) -> dict[str, int]:
        rows = await self.store.fetchall("SELECT phase, count(*) AS n FROM tasks GROUP BY phase")
        return {r["phase"]: r["n"] for r in rows}

    async def get(self, task_id: str) -> dict[str, Any]:
        from ..errors import NotFound

        # One reader call and one snapshot for the row and all its records (ten separate
        # awaits cost ~0.7 ms per read on the orchestrator's hot path, and could mix states).
        by_task = (task_id,)
        (rows, history, reviews, attempts, retries, artifacts, effects, approvals, usage,
         refusals) = await self.store.fetch_many([
            ("SELECT * FROM tasks WHERE id=?", by_task),
            ("SELECT seq, from_phase, to_phase, actor, role, reason, attempt, at"
             " FROM phase_history WHERE task_id=? ORDER BY seq", by_task),
            ("SELECT * FROM reviews WHERE task_id=? ORDER BY seq", by_task),
            ("SELECT * FROM attempts WHERE task_id=? ORDER BY n", by_task),
            ("SELECT * FROM retries WHERE task_id=? ORDER BY seq", by_task),
            ("SELECT * FROM artifacts WHERE task_id=? ORDER BY seq", by_task),
            ("SELECT * FROM side_effects WHERE task_id=? ORDER BY planned_at, effect_id",
             by_task),
            ("SELECT * FROM approvals WHERE subject=? ORDER BY seq", by_task),
            ("SELECT * FROM usage WHERE subject=? ORDER BY agent", by_task),
            ("SELECT * FROM refusals WHERE target=? ORDER BY seq", by_task),
        ])
        if not rows:
            raise NotFound(f"task {task_id!r}: no such task")
        task = _decode(rows[0])
        task["history"] = history
        task["reviews"] = [_decode(r) for r in reviews]
        task["attempt_records"] = [_decode(r) for r in attempts]
        task["retries"] = retries
        task["artifacts"] = artifacts
        task["side_effects"] = effects
        task["approvals"] = [decode_approval(r) for r in approvals]
        task["usage"] = usage
        task["refusals"] = refusals
        return task
