"""One approvals list for every kind of pending decision.

Tasks' side effects, workflow gates, input requests, tool pins, ACP permission requests and
sessions' confirm-tier tool calls (`tool_call`) share the same table with their own `kind`.
Deciding is one typed command: exactly once, by a named operator, checked against
`required_approver` / `require_different_approver`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .errors import NotFound, ValidationError

if TYPE_CHECKING:
    from .workflows.service import Workflows
from .store.interface import Store, WriteTx


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

    async def approve(self, approval_id: str, *, by: str, reason: str = "",
                      always: bool = False) -> dict[str, Any]:
        return await self._decide(approval_id, True, by, reason, always)

    async def reject(self, approval_id: str, *, by: str, reason: str = "",
                     always: bool = False) -> dict[str, Any]:
        return await self._decide(approval_id, False, by, reason, always)

    async def _decide(self, approval_id: str, approve: bool, by: str, reason: str,
                      always: bool) -> dict[str, Any]:
        """Workflow gates are decided by resuming their run (approve continues it, reject
        cancels it); an ACP harness's permission request by answering it with one of its
        options (`always`: remembered for its workspace and harness). The approval's kind is
        read in the deciding command itself: one write, no read before it (the round trip)."""
        from .acp.events import PERMISSION_KIND
        from .acp.permissions import decide as acp_decide
        from .sessions.gate import KIND as TOOL_CALL_KIND
        from .sessions.gate import decide as decide_tool_call
        from .tasks import commands as c
        from .tasks.permissions import Role
        from .workflows.kinds import GATE_KINDS

        gates = frozenset(GATE_KINDS.values())

        def decide(tx: WriteTx) -> dict[str, Any] | None:
            row = tx.one(c.DECISION_COLUMNS, (approval_id,))
            kind = row["kind"] if row is not None else None
            if kind in gates:
                return None  # decided by resuming its run, below
            if kind == PERMISSION_KIND:
                return acp_decide(tx, approval_id, by=by, allow=approve, always=always,
                                  reason=reason)
            if always:
                raise ValidationError(f"approval {approval_id!r}: --always applies to ACP"
                                      " permission requests only")
            if kind == TOOL_CALL_KIND:  # a session's turn waits for it: decided and resumed
                return decide_tool_call(tx, approval_id, approve, by, reason, Role.OPERATOR)
            out = c.decide_approval(tx, approval_id, approve, by, reason, Role.OPERATOR, row)
            if out and kind == c.SIDE_EFFECT_KIND:
                # the task's phase follows its decision in the same commit, by the
                # orchestrator's own rule (approved: ready_to_resume; rejected: failed): no
                # second commit, no window where the decision shows and the task still waits,
                # and no engine needs to run for it (issue 36). Effects stay the engine's.
                c.resume_decided(tx, out["subject"], Role.ORCHESTRATOR.value,
                                 Role.ORCHESTRATOR)
            return out

        out = await self.store.execute(decide)
        if out is None:
            return await self._workflows().decide(approval_id, approve, by=by, reason=reason)
        return out

    def _workflows(self) -> Workflows:
        from .workflows.service import Workflows

        return Workflows(self.store, actor="operator")
