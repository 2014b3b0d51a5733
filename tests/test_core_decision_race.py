"""Racing decisions through the core API: concurrent tasks on one store, and two stores (two
writer connections, as two processes have) on one file. Exactly one decision wins; the
other raises AlreadyDecided naming the winner's decision, decider and time, and exactly one
`approval.decided` event is written. Workflow gates and plain approvals alike."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.approvals import Approvals
from clawtower.core.errors import AlreadyDecided, Conflict
from clawtower.core.store import open_store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.workflows.service import Workflows

GATE = "steps:\n  - id: ship\n    approval: Ship it?\n"
ROUNDS = 20


async def _gate(store: Any, tmp_path: Path) -> str:
    (tmp_path / "gate.lobster").write_text(GATE)
    wf = Workflows(store, env={"PATH": os.environ.get("PATH", "/bin")}, cwd=str(tmp_path),
                   stderr=lambda s: None)
    env = await wf.run(str(tmp_path / "gate.lobster"))
    assert env["status"] == "needs_approval", env
    return str(env["requiresApproval"]["approvalId"])


async def _plain(store: Any) -> str:
    return str(await store.execute(lambda tx: c.request_approval(
        tx, kind="confirm", subject="X-1", title="confirm", prompt="ok?", context={},
        preview="", actor="agent", role=Role.APPROVER)))


async def _race(first: Any, second: Any, aid: str) -> tuple[str, AlreadyDecided]:
    """approve on `first`, reject on `second`, at once: (the winning decision, the loss)."""
    got = await asyncio.gather(Approvals(first).approve(aid, by="alice"),
                               Approvals(second).reject(aid, by="bob", reason="race"),
                               return_exceptions=True)
    wins = [g for g in got if isinstance(g, dict)]
    losses = [g for g in got if isinstance(g, BaseException)]
    assert len(wins) == 1 and len(losses) == 1, got
    loss = losses[0]
    assert isinstance(loss, AlreadyDecided), repr(loss)
    assert isinstance(loss, Conflict) and loss.exit_code == 2
    winner = "approved" if got[0] is wins[0] else "rejected"
    assert (loss.approval_id, loss.decision) == (aid, winner)
    assert loss.by == ("alice" if winner == "approved" else "bob")
    assert loss.at is not None
    assert str(loss).startswith(f"approval '{aid}': already decided: {winner} by {loss.by} at ")
    return winner, loss


async def _one_decision(store: Any, aid: str, winner: str) -> None:
    # a gate approved is decided inside the run's resume (issue 24.2): count both forms
    rows = await store.fetchall(
        "SELECT payload FROM events WHERE (type='approval.decided' AND entity_id=?) OR"
        " (type='workflow.resumed' AND json_extract(payload, '$.approval_id')=? AND"
        " json_extract(payload, '$.decided') IS NOT NULL)", (aid, aid))
    assert len(rows) == 1
    a = await Approvals(store).get(aid)
    assert a["status"] == winner


@pytest.mark.parametrize("kind", ["workflow gate", "plain approval"])
async def test_concurrent_tasks_on_one_store(store: Any, tmp_path: Path, kind: str) -> None:
    for _ in range(ROUNDS):
        aid = await (_gate(store, tmp_path) if kind == "workflow gate" else _plain(store))
        winner, _ = await _race(store, store, aid)
        await _one_decision(store, aid, winner)
    assert await store.verify_projections() == []


@pytest.mark.parametrize("kind", ["workflow gate", "plain approval"])
async def test_two_writers_on_one_file(store: Any, db_path: Path, tmp_path: Path,
                                       kind: str) -> None:
    other = await open_store(db_path)
    try:
        for _ in range(ROUNDS):
            aid = await (_gate(store, tmp_path) if kind == "workflow gate" else _plain(store))
            winner, _ = await _race(store, other, aid)
            await _one_decision(store, aid, winner)
            if kind == "workflow gate":
                run = await store.fetchone("SELECT status FROM workflow_runs WHERE"
                                           " approval_id=?", (aid,))
                assert run["status"] == ("ok" if winner == "approved" else "cancelled")
    finally:
        await other.close()
    assert await store.verify_projections() == []


async def test_a_late_decision_names_the_first(store: Any, tmp_path: Path) -> None:
    """Not a race: the second caller, long after, hears the same answer."""
    aid = await _gate(store, tmp_path)
    await Approvals(store).reject(aid, by="bob", reason="no")
    with pytest.raises(AlreadyDecided, match=rf"approval '{aid}': already decided: rejected by"
                                             r" bob at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"):
        await Approvals(store).approve(aid, by="alice")
    with pytest.raises(AlreadyDecided):
        await Workflows(store).respond(aid, {"x": 1}, by="alice")
