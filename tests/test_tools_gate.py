"""Issue 34.1: the tier of a call is decided where the concrete tool is about to run, from
the policy, never from which tools were listed at the turn's start. A configured agent
(clawtower.yaml `mcp_servers:` and `agents:`) runs simulated turns against real stdio MCP
servers (tests/helpers/flaky_mcp_server.py around the sales server, which logs every call it
executes): one whose first start fails, one slow to list, one whose pin is approved between
two rounds of a turn. A confirm-tier call waits, a manual-tier call is drafted, neither runs;
every call has its tier recorded on `turn.tool_called` before anything runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from flaky_mcp_server import __file__ as FLAKY

from clawtower.core.agents.config import load_config
from clawtower.core.agents.provider import ChatMessage
from clawtower.core.agents.turns import TurnState, run_agent_turn, run_turn
from clawtower.core.approvals import Approvals
from clawtower.core.tools.approval import TierGate, ToolApprovalPolicy
from clawtower.core.tools.registry import ToolRegistry

UPDATE = {"name": "crm.update_deal_stage", "arguments": {"deal_id": "d-7",
                                                         "stage": "Closed Lost"}}
SEND = {"name": "crm.send", "arguments": {"to": "sarah@acme.example", "body": "Hi"}}
NOTE = {"name": "crm.create_note", "arguments": {"contact_id": "c-1", "body": "n"}}
APPROVAL = {"default": "confirm", "tools": {"crm.create_note": "auto",
                                           "crm.update_deal_stage": "confirm",
                                           "crm.send": "manual"}}
MSGS = [ChatMessage(role="user", content="Close the deal")]


def _server(tmp: Path, mode: str, **kw: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [FLAKY], "pin": "auto",
            "env": {"FLAKY_MARKER": str(tmp / f"{mode}.marker"), "FLAKY_MODE": mode,
                    "FLAKY_DELAY": "4", "SALES_MCP_CALLS": str(tmp / "calls.jsonl")}, **kw}


def _config(tmp: Path, server: dict[str, Any], turn: list[dict[str, Any]]) -> Path:
    path = tmp / "clawtower.yaml"
    path.write_text(json.dumps({
        "mcp_servers": {"crm": server},
        "agents": {"ada": {"tools": ["crm.*"], "approval": APPROVAL}},
        "scripts": {"ada": {"turn": turn}}, "speed": 0}))
    return path


def executed(tmp: Path) -> list[str]:
    p = tmp / "calls.jsonl"
    return [json.loads(x)["tool"] for x in p.read_text().splitlines()] if p.exists() else []


async def tiers(store: Any, turn_id: str) -> list[tuple[str, str]]:
    rows = await store.fetchall("SELECT payload FROM events WHERE entity_id=? AND"
                                " type='turn.tool_called' ORDER BY seq", (turn_id,))
    return [(json.loads(r["payload"])["name"], json.loads(r["payload"])["tier"])
            for r in rows]


async def _turn(store: Any, tmp: Path, server: dict[str, Any],
                turn: list[dict[str, Any]]) -> Any:
    cfg = load_config(_config(tmp, server, turn))
    async with ToolRegistry.from_project(store, cfg) as registry:
        return await run_agent_turn(cfg, "ada", MSGS, registry=registry, store=store,
                                    subject="s-1")


async def test_a_server_whose_first_start_fails_still_gates_confirm(
        store: Any, tmp_path: Path) -> None:
    result = await _turn(store, tmp_path, _server(tmp_path, "fail-first"),
                         [{"tool_calls": [UPDATE]}, {"text": "done"}])
    assert result.stop_reason == "awaiting_approval"
    assert [c.name for c in result.pending] == ["crm.update_deal_stage"]
    assert executed(tmp_path) == []  # the server ran nothing unasked
    assert await tiers(store, result.turn_id) == [("crm.update_deal_stage", "confirm")]


async def test_a_server_whose_first_start_fails_still_drafts_manual(
        store: Any, tmp_path: Path) -> None:
    result = await _turn(store, tmp_path, _server(tmp_path, "fail-first"),
                         [{"tool_calls": [SEND, NOTE]}, {"text": "done"}])
    assert result.completed
    send, note = (t.result for t in result.tools)
    assert send.error_kind == "draft" and "NOT executed" in send.content
    assert not note.is_error
    assert executed(tmp_path) == ["create_note"]  # the auto one only; never send
    assert await tiers(store, result.turn_id) == [("crm.send", "manual"),
                                                  ("crm.create_note", "auto")]


async def test_a_server_slow_to_list_still_gates_confirm(store: Any, tmp_path: Path) -> None:
    server = _server(tmp_path, "slow-first", list_timeout_s=1)
    result = await _turn(store, tmp_path, server, [{"tool_calls": [UPDATE]}, {"text": "done"}])
    assert result.stop_reason == "awaiting_approval"
    assert executed(tmp_path) == []
    assert await tiers(store, result.turn_id) == [("crm.update_deal_stage", "confirm")]


async def test_a_pin_approved_mid_turn_changes_no_tier(store: Any, tmp_path: Path) -> None:
    """The definitions wait for a pin at the turn's start (nothing offered); between the two
    rounds an operator approves crm.update_deal_stage's pin: its call still waits."""
    cfg = load_config(_config(tmp_path, {**_server(tmp_path, "plain"), "pin": "manual"},
                              [{"tool_calls": [NOTE]}, {"tool_calls": [UPDATE]},
                               {"text": "done"}]))
    approvals = Approvals(store)

    async def approve_pin(state: TurnState) -> list[ChatMessage]:
        for a in await approvals.pending():
            if a["subject"] == "tool:crm.update_deal_stage":
                await approvals.approve(a["id"], by="alice")
        return []

    async with ToolRegistry.from_project(store, cfg) as registry:
        box = registry.toolbox(["crm.*"], agent="ada")
        assert await box.specs() == []  # all pending: none offered
        result = await run_turn(cfg.provider(cfg.agent("ada").provider), model="m",
                                messages=MSGS, tools=box, store=store, subject="s-1",
                                gate=TierGate(ToolApprovalPolicy.model_validate(APPROVAL)),
                                steer=approve_pin, metadata={"labels": ["ada"]}, agent="ada")
    assert result.stop_reason == "awaiting_approval"
    assert [c.name for c in result.pending] == ["crm.update_deal_stage"]
    assert result.tools[0].result.error_kind == "unpinned"  # create_note: still unpinned
    assert executed(tmp_path) == []
    assert await tiers(store, result.turn_id) == [("crm.create_note", "auto"),
                                                  ("crm.update_deal_stage", "confirm")]


async def test_an_unknown_name_is_refused_with_an_event(store: Any, tmp_path: Path) -> None:
    result = await _turn(store, tmp_path, _server(tmp_path, "plain"),
                         [{"tool_calls": [{"name": "crm.no_such_op", "arguments": {}},
                                          {"name": "nope", "arguments": {}}]},
                          {"text": "done"}])
    assert result.completed
    unknown, outside = (t.result for t in result.tools)
    assert unknown.error_kind == "policy" and "no approval tier can be decided" in \
        unknown.content
    assert outside.error_kind == "policy" and "not in its tool allow-list" in outside.content
    assert await tiers(store, result.turn_id) == [("crm.no_such_op", "refused"),
                                                  ("nope", "refused")]
    rows = await store.fetchall("SELECT entity_id FROM events WHERE type='permission.refused'"
                                " ORDER BY seq")
    assert [r["entity_id"] for r in rows] == ["tool:crm.no_such_op", "tool:nope"]
    assert executed(tmp_path) == []


async def test_a_session_spec_over_mcp_servers_gates_an_unlisted_server(
        store: Any, tmp_path: Path) -> None:
    """The same through a session (SessionToolBox): a plain spec whose tools come from
    `mcp_servers:` and whose server's first start fails."""
    from clawtower.core.sessions.service import Sessions
    from clawtower.core.tools.config import McpServerConfig
    from tests.helpers.session_helpers import run_idle, spec

    server = _server(tmp_path, "fail-first")
    registry = ToolRegistry(store, {"crm": McpServerConfig(name="crm", **server)})
    sessions = Sessions(store)
    await spec(sessions, "clerk", policy={"tools": ["crm.*"], "approval": APPROVAL})
    for text in ('#call crm.update_deal_stage {"deal_id": "d-7", "stage": "Closed Lost"}',
                 '#call crm.send {"to": "sarah@acme.example", "body": "Hi"}'):
        sid = await sessions.create(agent="clerk", by="alice")  # one session each
        await sessions.send(sid, text, sender="alice")
        await run_idle(store, sid, registry=registry)
    pending = await Approvals(store).pending()
    assert [a["context"]["tool"] for a in pending] == ["crm.update_deal_stage"]
    drafted = await store.fetchall("SELECT payload FROM events WHERE type='turn.tool_drafted'")
    assert [json.loads(r["payload"])["name"] for r in drafted] == ["crm.send"]
    assert executed(tmp_path) == []
    await registry.aclose()
