"""One approvals list for every kind of pending decision.

Tasks' side effects now; workflow gates, input requests, tool permissions and expert confirm
steps join the same table with their own `kind`. Deciding is one typed command: exactly
once, by a named operator, checked against `required_approver` / `require_different_approver`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import NotFound

if TYPE_CHECKING:
    from .workflows.service import Workflows
from .store.interface import Store
from .tasks import commands as c
from .tasks.permissions import Role


def decode_approval(row: dict[str, Any]) -> dict[str, Any]:
    """An approvals row as the API returns it: context parsed, flags as bools."""
    out = dict(row)
    out["context"] = json.loads(out["context"]) if isinstance(out["context"], str) else {}
    out["require_different"] = bool(out["require_different"])
    return out


class Approvals:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def pending(self) -> list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT * FROM approvals WHERE status='pending' ORDER BY seq")
        return [decode_approval(r) for r in rows]

    async def all(self, limit: int = 1000) -> list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT * FROM approvals ORDER BY seq DESC LIMIT ?", (limit,))
        return [decode_approval(r) for r in rows]

    async def get(self, approval_id: str) -> dict[str, Any]:
        row = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if row is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        return decode_approval(row)

    async def approve(self, approval_id: str, *, by: str, reason: str = "") -> dict[str, Any]:
        if await self._is_workflow_gate(approval_id):
            return await self._workflows().decide(approval_id, True, by=by, reason=reason)
        return await self.store.execute(
            lambda tx: c.decide_approval(tx, approval_id, True, by, reason, Role.OPERATOR))

    async def reject(self, approval_id: str, *, by: str, reason: str = "") -> dict[str, Any]:
        if await self._is_workflow_gate(approval_id):
            return await self._workflows().decide(approval_id, False, by=by, reason=reason)
        return await self.store.execute(
            lambda tx: c.decide_approval(tx, approval_id, False, by, reason, Role.OPERATOR))

    async def _is_workflow_gate(self, approval_id: str) -> bool:
        """Workflow gates are decided by resuming their run (approve continues it, reject
        cancels it), not by a bare decision."""
        from .workflows.service import GATE_KINDS

        row = await self.store.fetchone("SELECT kind FROM approvals WHERE id=?", (approval_id,))
        return row is not None and row["kind"] in GATE_KINDS.values()

    def _workflows(self) -> Workflows:
        from .workflows.service import Workflows

        return Workflows(self.store, actor="operator")
