"""The registry behind the turn loop: a configured agent (clawtower.yaml with agents and
mcp_servers) runs a simulated tool-calling turn against the fake MCP server; the allow-list
and pinning hold end to end, and the server never receives a refused call."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp_peers import FAKE, calls_received

from clawtower.core.agents.config import load_config
from clawtower.core.agents.provider import ChatMessage
from clawtower.core.agents.turns import run_agent_turn
from clawtower.core.approvals import Approvals
from clawtower.core.tools.registry import ToolRegistry


def _config(tmp: Path) -> Path:
    path = tmp / "clawtower.yaml"
    path.write_text(json.dumps({
        "mcp_servers": {"fake": {
            "command": sys.executable, "args": [str(FAKE)],
            "env": {"FAKE_MCP_CALLS_FILE": str(tmp / "calls.txt"),
                    "FAKE_MCP_DESC_FILE": str(tmp / "desc.txt")}}},
        "agents": {"ada": {"tools": ["fake.echo", "clock.*"]}},
        "scripts": {"ada": {"turn": [
            {"tool_calls": [{"name": "fake.echo", "arguments": {"text": "hello"}},
                            {"name": "fake.crash", "arguments": {}},
                            {"name": "clock.now", "arguments": {"timezone": 7}}]},
            {"text": "done"}]}},
        "speed": 0,
    }))
    return path


async def test_a_turn_through_the_registry(store: Any, tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path))
    msgs = [ChatMessage(role="user", content="Echo hello")]
    async with ToolRegistry.from_project(store, cfg) as registry:
        first = await run_agent_turn(cfg, "ada", msgs, registry=registry, store=store,
                                     subject="s-1")
        echo, crash, clock = (t.result for t in first.tools)
        assert echo.error_kind == "unpinned"  # first sight: a pin approval was requested
        (pending,) = [a for a in await Approvals(store).pending()
                      if a["subject"] == "tool:fake.echo"]
        await Approvals(store).approve(pending["id"], by="alice")
        second = await run_agent_turn(cfg, "ada", msgs, registry=registry, store=store,
                                      subject="s-1")
    assert second.completed and second.text == "done"
    echo, crash, clock = (t.result for t in second.tools)
    assert (echo.is_error, echo.content) == (False, "hello")
    assert (crash.error_kind, clock.error_kind) == ("policy", "arguments")
    assert calls_received(tmp_path) == ["echo"]  # fake.crash never reached the server
    rows = await store.fetchall("SELECT name, error_kind FROM turn_tools WHERE turn_id=?"
                                " ORDER BY round, call_id", (second.turn_id,))
    assert [(r["name"], r["error_kind"]) for r in rows] == [
        ("fake.echo", None), ("fake.crash", "policy"), ("clock.now", "arguments")]
