"""Integration tests against the real MCP servers: mcp-server-time, mcp-server-git and
server-everything (installed by scripts/install-peers.sh mcp; missing ones skip with the
reason). Listing, calling, errors (incl. unknown tool), progress, pinning, env passing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_peers import git_config, make_git_repo, peer_config

from clawtower.core.approvals import Approvals
from clawtower.core.tools.mcp import McpServer, McpServerError, ToolProgress
from clawtower.core.tools.registry import ToolRegistry


async def _approve_all(store: Any) -> None:
    for a in await Approvals(store).pending():
        await Approvals(store).approve(a["id"], by="tester")


async def test_time_list_pin_and_call(store: Any) -> None:
    async with ToolRegistry(store, {"time": peer_config("time")}) as reg:
        box = reg.toolbox(["time.*"], agent="ada")
        assert await box.specs() == []  # first sight: nothing callable yet
        assert sorted(t.name for t in box.hidden) == ["time.convert_time",
                                                      "time.get_current_time"]
        pending = await Approvals(store).pending()
        assert sorted(a["subject"] for a in pending) == ["tool:time.convert_time",
                                                         "tool:time.get_current_time"]
        r = await box.call("time.get_current_time", '{"timezone": "UTC"}')
        assert r.error_kind == "unpinned"
        await _approve_all(store)
        specs = {s.name: s for s in await box.specs()}
        assert sorted(specs) == ["time.convert_time", "time.get_current_time"]
        assert specs["time.get_current_time"].parameters["required"] == ["timezone"]
        r = await box.call("time.get_current_time", '{"timezone": "UTC"}')
        assert not r.is_error
        assert r.structured["timezone"] == "UTC" and r.structured["datetime"].endswith("+00:00")
        assert json.loads(r.content)["timezone"] == "UTC"
        r = await box.call("time.convert_time", json.dumps(
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}))
        assert not r.is_error and r.structured["target"]["datetime"].endswith("T21:00:00+09:00")
        # the tool's own error is a result naming the problem
        r = await box.call("time.get_current_time", '{"timezone": "Mars/Olympus"}')
        assert (r.is_error, r.error_kind) == (True, "failed") and "Mars/Olympus" in r.content
        # caught before the server: schema, JSON, unknown
        r = await box.call("time.get_current_time", "{}")
        assert r.error_kind == "arguments" and "'timezone' is a required property" in r.content
        r = await box.call("time.get_current_time", "UTC")
        assert r.error_kind == "arguments"
        r = await box.call("time.no_such_tool", "{}")
        assert r.error_kind == "unknown" and "convert_time, get_current_time" in r.content
        assert reg.servers["time"].starts == 1


async def test_time_unknown_tool_from_the_server_itself() -> None:
    server = McpServer(peer_config("time"))
    try:
        with pytest.raises(McpServerError) as err:
            await server.call_tool("no_such_tool", {})
        assert err.value.kind == "unknown"
        assert str(err.value) == ("mcp server 'time': tools/call no_such_tool:"
                                  " Unknown tool: no_such_tool")
    finally:
        await server.aclose()


async def test_everything_progress_and_tools(store: Any) -> None:
    seen: list[ToolProgress] = []
    cfg = peer_config("everything", pin="auto")
    async with ToolRegistry(store, {"everything": cfg}, on_progress=seen.append) as reg:
        box = reg.toolbox(["everything.*"])
        names = {s.name for s in await box.specs()}
        assert {"everything.echo", "everything.get-sum",
                "everything.trigger-long-running-operation"} <= names
        r = await box.call("everything.trigger-long-running-operation",
                           '{"duration": 0.3, "steps": 3}')
        assert not r.is_error and "Long running operation completed" in r.content
        assert [(p.tool, p.progress, p.total) for p in seen] == [
            ("everything.trigger-long-running-operation", float(i), 3.0) for i in (1, 2, 3)]
        r = await box.call("everything.get-sum", '{"a": 2, "b": 40}')
        assert not r.is_error and "42" in r.content
        r = await box.call("everything.get-sum", '{"a": "two", "b": 40}')
        assert r.error_kind == "arguments" and "a: 'two' is not of type 'number'" in r.content
        r = await box.call("everything.echo", '{"message": "hello"}')
        assert r.content == "Echo: hello"


async def test_everything_gets_only_the_declared_environment(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    monkeypatch.setenv("CT_TEST_SECRET", "value-from-our-env")
    monkeypatch.setenv("CT_NOT_PASSED", "must-not-leak")
    cfg = peer_config("everything", env={"PLAIN": "literal"},
                      env_from={"THE_TOKEN": "CT_TEST_SECRET"})
    server = McpServer(cfg)
    try:
        r = await server.call_tool("get-env", {})
    finally:
        await server.aclose()
    env = json.loads(r.content)
    # the child got the value; what comes back names the variable instead of quoting it
    assert env["PLAIN"] == "literal" and env["THE_TOKEN"] == "[secret CT_TEST_SECRET]"
    assert "value-from-our-env" not in r.content
    assert "CT_NOT_PASSED" not in env and "CT_TEST_SECRET" not in env


async def test_git_status_on_a_temp_repo(store: Any, tmp_path: Path) -> None:
    repo = make_git_repo(tmp_path / "repo")
    async with ToolRegistry(store, {"git": git_config(repo)}) as reg:
        listing = await reg.list_tools()
        assert listing.errors == {}
        git_tools = [t.name for t in listing.tools if t.source == "mcp:git"]
        assert {"git.git_status", "git.git_log", "git.git_diff_unstaged"} <= set(git_tools)
        await _approve_all(store)
        box = reg.toolbox(["git.git_status", "git.git_log"], agent="ada")
        assert sorted(s.name for s in await box.specs()) == ["git.git_log", "git.git_status"]
        r = await box.call("git.git_status", json.dumps({"repo_path": str(repo)}))
        assert not r.is_error, r.content
        assert "new.txt" in r.content and "main" in r.content
        r = await box.call("git.git_log", json.dumps({"repo_path": str(repo)}))
        assert not r.is_error and "first" in r.content
        r = await box.call("git.git_commit", json.dumps({"repo_path": str(repo),
                                                         "message": "x"}))
        assert r.error_kind == "policy"  # not in ada's allow-list: never sent
