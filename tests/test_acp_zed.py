"""The ACP bridge against Zed's real example agent (npm @zed-industries/agent-client-protocol
0.4.5, run by tsx): its one turn streams text, a `read` tool call, an `edit` tool call and a
`session/request_permission` with options allow_once ("allow") / reject_once ("reject").
Skips when the peer is not installed (scripts/install-peers.sh acp)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from acp_peers import zed_harness

from clawtower.core.acp.bridge import AcpTurn, RunOutcome, request_cancel
from clawtower.core.acp.permissions import decide, revoke_rule
from clawtower.core.approvals import Approvals
from clawtower.core.errors import AlreadyDecided
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store

WAIT_S = 120.0  # a turn takes ~5 s on a quiet machine; bounded generously for a loaded one


@pytest.fixture
async def acp_store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(str(tmp_path / "acp.db"))
    yield s
    await s.close()


async def pending_permission(store: Store, run_id: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while loop.time() < deadline:
        row = await store.fetchone("SELECT * FROM acp_permissions WHERE run_id=? AND"
                                   " status='pending'", (run_id,))
        if row is not None:
            return row
        await store.wait_for_change(await store.last_seq(), 0.2)
    raise AssertionError("no permission request within the bound")


async def tool_calls(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    rows = await store.fetchall("SELECT * FROM acp_tool_calls WHERE run_id=?", (run_id,))
    return {r["call_id"]: r for r in rows}


async def start(store: Store, workspace: Path, **kw: Any
                ) -> tuple[AcpTurn, asyncio.Task[RunOutcome]]:
    turn = AcpTurn(store, zed_harness(**kw), "Improve the config", workspace=str(workspace))
    return turn, asyncio.create_task(turn.run())


async def test_allow_lands_the_edit(acp_store: Store, tmp_path: Path) -> None:
    streamed: list[str] = []
    turn = AcpTurn(acp_store, zed_harness(), "Improve the config", workspace=str(tmp_path),
                   on_text=streamed.append)
    task = asyncio.create_task(turn.run())
    perm = await pending_permission(acp_store, turn.run_id)
    assert perm["tool_kind"] == "edit" and perm["harness"] == "zed-example"
    assert {o["option_id"]: o["kind"] for o in json.loads(perm["options"])} == {
        "allow": "allow_once", "reject": "reject_once"}
    # it is in the one approvals list, with the tool call and the options to show
    pending = await Approvals(acp_store).pending()
    assert [a["id"] for a in pending] == [perm["approval_id"]]
    assert pending[0]["kind"] == "acp_permission"
    assert "allow_once" in pending[0]["preview"]
    # approving through the one approvals API sends the harness "allow"
    await Approvals(acp_store).approve(perm["approval_id"], by="ops")
    out = await asyncio.wait_for(task, WAIT_S)
    assert out.status == "done" and out.stop_reason == "end_turn", out
    assert streamed and "".join(streamed) == out.text
    calls = await tool_calls(acp_store, turn.run_id)
    assert calls["call_1"]["kind"] == "read" and calls["call_1"]["status"] == "completed"
    assert calls["call_2"]["kind"] == "edit" and calls["call_2"]["status"] == "completed"
    row = await acp_store.fetchone("SELECT * FROM acp_permissions WHERE approval_id=?",
                                   (perm["approval_id"],))
    assert row is not None
    assert (row["outcome"], row["option_id"], row["answered_by"], row["source"]) == (
        "selected", "allow", "ops", "operator")
    run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE id=?", (turn.run_id,))
    assert run is not None and run["protocol_version"] == 1 and run["status"] == "done"
    assert "successfully updated" in run["text"]
    assert await acp_store.verify_projections() == []  # all of it rebuilds from the log


async def test_reject_skips_the_edit(acp_store: Store, tmp_path: Path) -> None:
    turn, task = await start(acp_store, tmp_path)
    perm = await pending_permission(acp_store, turn.run_id)
    await Approvals(acp_store).reject(perm["approval_id"], by="ops", reason="not today")
    out = await asyncio.wait_for(task, WAIT_S)
    assert out.status == "done", out
    calls = await tool_calls(acp_store, turn.run_id)
    assert calls["call_2"]["status"] == "pending"  # never completed: skipped
    assert "skip the configuration update" in out.text and "successfully" not in out.text
    row = await acp_store.fetchone("SELECT option_id FROM acp_permissions WHERE approval_id=?",
                                   (perm["approval_id"],))
    assert row is not None and row["option_id"] == "reject"
    with pytest.raises(AlreadyDecided):  # exactly once
        await Approvals(acp_store).approve(perm["approval_id"], by="ops")


async def test_cancel_while_a_permission_waits(acp_store: Store, tmp_path: Path) -> None:
    turn, task = await start(acp_store, tmp_path)
    perm = await pending_permission(acp_store, turn.run_id)
    await acp_store.execute(lambda tx: request_cancel(tx, turn.run_id, "ops"))
    out = await asyncio.wait_for(task, WAIT_S)
    assert out.status == "cancelled" and out.stop_reason == "cancelled", out
    row = await acp_store.fetchone("SELECT * FROM acp_permissions WHERE approval_id=?",
                                   (perm["approval_id"],))
    assert row is not None and row["outcome"] == "cancelled" and row["source"] == "cancel"
    a = await Approvals(acp_store).get(perm["approval_id"])
    assert a["status"] == "cancelled"
    assert not await Approvals(acp_store).pending()


async def test_unanswered_times_out_as_cancelled(acp_store: Store, tmp_path: Path) -> None:
    turn, task = await start(acp_store, tmp_path, permission_timeout_s=1.0)
    out = await asyncio.wait_for(task, WAIT_S)
    # the example agent ends its turn normally when told `cancelled`, the edit not done
    assert out.status == "done" and out.stop_reason == "end_turn", out
    assert (await tool_calls(acp_store, turn.run_id))["call_2"]["status"] != "completed"
    assert "successfully updated" not in out.text
    row = await acp_store.fetchone("SELECT * FROM acp_permissions WHERE run_id=?",
                                   (turn.run_id,))
    assert row is not None and (row["outcome"], row["source"]) == ("cancelled", "timeout")


async def test_always_is_remembered_and_revocable(acp_store: Store, tmp_path: Path) -> None:
    turn, task = await start(acp_store, tmp_path)
    perm = await pending_permission(acp_store, turn.run_id)
    r = await acp_store.execute(lambda tx: decide(tx, perm["approval_id"], by="ops",
                                                  allow=True, always=True))
    # the harness offers no allow_always: allow_once goes back, our rule remembers
    assert r["option_id"] == "allow" and r["rule_id"]
    assert (await asyncio.wait_for(task, WAIT_S)).status == "done"
    rules = await acp_store.fetchall("SELECT * FROM acp_rules WHERE active=1")
    assert [(x["harness"], x["tool_kind"], x["decision"], x["created_by"]) for x in rules] == [
        ("zed-example", "edit", "allow", "ops")]
    # next time in the same workspace: answered by the rule, nobody asked
    again, task2 = await start(acp_store, tmp_path)
    out = await asyncio.wait_for(task2, WAIT_S)
    assert out.status == "done" and out.permissions == 1
    row = await acp_store.fetchone("SELECT * FROM acp_permissions WHERE run_id=?",
                                   (again.run_id,))
    assert row is not None
    assert (row["source"], row["option_id"], row["rule_id"]) == ("rule", "allow", r["rule_id"])
    assert row["answered_by"] == f"rule:{r['rule_id']}"
    assert not await Approvals(acp_store).pending()
    # another workspace is not covered by the rule
    other = tmp_path / "other"
    other.mkdir()
    third, task3 = await start(acp_store, other)
    perm3 = await pending_permission(acp_store, third.run_id)
    await Approvals(acp_store).reject(perm3["approval_id"], by="ops")
    await asyncio.wait_for(task3, WAIT_S)
    # revoked: asked again
    await acp_store.execute(lambda tx: revoke_rule(tx, r["rule_id"], "ops", "too broad"))
    fourth, task4 = await start(acp_store, tmp_path)
    perm4 = await pending_permission(acp_store, fourth.run_id)
    assert perm4["status"] == "pending"
    await Approvals(acp_store).approve(perm4["approval_id"], by="ops")
    assert (await asyncio.wait_for(task4, WAIT_S)).status == "done"


async def test_the_harness_group_is_gone_after_the_turn(acp_store: Store,
                                                        tmp_path: Path) -> None:
    from clawtower.core import liveness

    turn, task = await start(acp_store, tmp_path)
    perm = await pending_permission(acp_store, turn.run_id)
    run = await acp_store.fetchone("SELECT grp FROM acp_runs WHERE id=?", (turn.run_id,))
    assert run is not None and run["grp"]
    pgid = int(run["grp"].split(":")[1])
    assert liveness._group_members(pgid)  # tsx and the node it starts
    await Approvals(acp_store).approve(perm["approval_id"], by="ops")
    await asyncio.wait_for(task, WAIT_S)
    assert not liveness._group_members(pgid)


async def test_a_turn_past_its_timeout_fails_with_the_reason(acp_store: Store,
                                                             tmp_path: Path) -> None:
    from clawtower.core import liveness

    turn, task = await start(acp_store, tmp_path, turn_timeout_s=1.0)
    out = await asyncio.wait_for(task, WAIT_S)
    assert (out.status, out.stop_reason) == ("failed", "timeout"), out
    assert "session/prompt: no answer within 1s" in out.error
    run = await acp_store.fetchone("SELECT grp FROM acp_runs WHERE id=?", (turn.run_id,))
    assert run is not None and not liveness._group_members(int(run["grp"].split(":")[1]))
