"""MCP servers over stdio (the fake SDK server): started on demand and reused, a crash is an
error naming the server and the next use restarts it, a hang is a timeout naming it, progress
is surfaced, shutdown is clean. Plus the `mcp_servers:` config."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from mcp_peers import calls_received, fake_config

from clawtower.core.errors import ValidationError
from clawtower.core.tools.config import McpServerConfig, load_mcp_servers, mcp_servers_from_data
from clawtower.core.tools.mcp import McpServer, McpServerError, ToolProgress
from clawtower.core.tools.registry import ToolRegistry


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def _until(cond: Any, what: str, limit_s: float = 20) -> None:
    for _ in range(int(limit_s / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_started_on_demand_reused_and_closed(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path))
    assert (server.starts, server.running) == (0, False)
    names = [t.name for t in await server.list_tools()]
    assert names == ["echo", "crash", "hang", "progress", "fail", "block"]
    first = await server.call_tool("echo", {"text": "a"})
    second = await server.call_tool("echo", {"text": "b"})
    assert (first.content, second.content) == ("a", "b")
    pid = first.structured["pid"]
    assert second.structured["pid"] == pid and server.starts == 1
    assert server.connect_seconds is not None
    await server.aclose()
    assert not server.running
    await _until(lambda: not _alive(pid), "the server process to end")


async def test_a_crash_mid_call_names_the_server_and_the_next_use_restarts(tmp_path: Path
                                                                          ) -> None:
    server = McpServer(fake_config(tmp_path))
    try:
        pid = (await server.call_tool("echo", {"text": "a"})).structured["pid"]
        with pytest.raises(McpServerError) as err:
            await server.call_tool("crash", {})
        assert err.value.kind == "crashed" and err.value.server == "fake"
        assert str(err.value).startswith("mcp server 'fake': tools/call crash: the server exited")
        assert "stderr: fake server: crashing on purpose" in str(err.value)
        assert str(err.value).endswith("it is restarted on next use")
        again = await server.call_tool("echo", {"text": "b"})
        assert again.content == "b" and again.structured["pid"] != pid
        assert server.starts == 2
    finally:
        await server.aclose()


async def test_a_server_that_died_while_idle_is_restarted_transparently(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path))
    try:
        pid = (await server.call_tool("echo", {"text": "a"})).structured["pid"]
        os.kill(pid, signal.SIGKILL)
        await _until(lambda: not server.running, "the connection to notice the exit")
        again = await server.call_tool("echo", {"text": "b"})
        assert again.content == "b" and again.structured["pid"] != pid
        assert server.starts == 2
    finally:
        await server.aclose()


async def test_a_hung_call_times_out_naming_the_server(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path, call_timeout_s=1))
    try:
        with pytest.raises(McpServerError) as err:
            await server.call_tool("hang", {})
        assert err.value.kind == "timeout"
        assert str(err.value) == "mcp server 'fake': tools/call hang: no answer within 1s"
        # the connection is still usable for other calls
        assert (await server.call_tool("echo", {"text": "ok"})).content == "ok"
        assert server.starts == 1
    finally:
        await server.aclose()


async def test_a_wedged_server_is_stopped_and_restarted(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path, call_timeout_s=1, list_timeout_s=1))
    try:
        pid = (await server.call_tool("echo", {"text": "a"})).structured["pid"]
        with pytest.raises(McpServerError) as err:
            await server.call_tool("block", {})
        assert err.value.kind == "timeout"
        assert str(err.value) == ("mcp server 'fake': tools/call block: no answer within 1s,"
                                  " and no answer to tools/list either: stopped; it is restarted"
                                  " on next use")
        await _until(lambda: not _alive(pid), "the wedged server to be stopped")
        again = await server.call_tool("echo", {"text": "b"})
        assert again.content == "b" and again.structured["pid"] != pid
    finally:
        await server.aclose()


async def test_a_hung_listing_times_out_naming_the_server(tmp_path: Path) -> None:
    flag = tmp_path / "hang-list"
    server = McpServer(fake_config(tmp_path, list_timeout_s=1,
                                   env={"FAKE_MCP_HANG_LIST": str(flag)}))
    try:
        assert len(await server.list_tools()) == 6
        flag.touch()
        with pytest.raises(McpServerError) as err:
            await server.list_tools()
        assert (err.value.kind, str(err.value)) == (
            "timeout", "mcp server 'fake': tools/list: no answer within 1s")
    finally:
        await server.aclose()


async def test_a_failing_progress_listener_does_not_break_the_call(tmp_path: Path) -> None:
    def broken(p: ToolProgress) -> None:
        raise RuntimeError("listener bug")

    server = McpServer(fake_config(tmp_path))
    try:
        r = await server.call_tool("progress", {"steps": 2}, progress=broken)
        assert (r.is_error, r.content) == (False, "done")
    finally:
        await server.aclose()


async def test_a_server_hung_from_the_start_times_out_connecting(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path, connect_timeout_s=1,
                                   env={"FAKE_MCP_HANG_START": "1"}))
    with pytest.raises(McpServerError) as err:
        await server.list_tools()
    assert err.value.kind == "timeout"
    assert str(err.value).startswith("mcp server 'fake': did not finish connecting within 1s")
    assert not server.running
    await server.aclose()


async def test_a_command_that_cannot_start(tmp_path: Path) -> None:
    server = McpServer(McpServerConfig(name="ghost", command=str(tmp_path / "no-such-server")))
    with pytest.raises(McpServerError) as err:
        await server.list_tools()
    assert err.value.kind == "start"
    assert str(err.value) == (f"mcp server 'ghost': cannot start"
                              f" '{tmp_path / 'no-such-server'}': No such file or directory")


async def test_a_server_that_exits_at_once_reports_its_stderr(tmp_path: Path) -> None:
    server = McpServer(McpServerConfig(
        name="quitter", command="python3", args=["-c", "import sys; sys.exit('no config found')"],
        connect_timeout_s=20))
    with pytest.raises(McpServerError) as err:
        await server.list_tools()
    assert err.value.kind == "start"
    assert "mcp server 'quitter': failed while connecting" in str(err.value)
    assert "stderr: no config found" in str(err.value)


async def test_unknown_tool_from_the_server(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path))
    try:
        with pytest.raises(McpServerError) as err:
            await server.call_tool("nope", {})
        assert (err.value.kind, str(err.value)) == (
            "unknown", "mcp server 'fake': tools/call nope: Unknown tool: nope")
    finally:
        await server.aclose()


async def test_progress_is_surfaced(tmp_path: Path) -> None:
    seen: list[ToolProgress] = []

    async def on_progress(p: ToolProgress) -> None:
        seen.append(p)

    async with ToolRegistry(None, {"fake": fake_config(tmp_path, pin="auto")},
                            on_progress=on_progress) as reg:
        r = await reg.call("fake.progress", '{"steps": 3}')
    assert (r.is_error, r.content) == (False, "done")
    assert seen == [ToolProgress("fake.progress", float(i), 3.0, f"step {i}") for i in (1, 2, 3)]


async def test_registry_results_for_server_faults(store: Any, tmp_path: Path) -> None:
    async with ToolRegistry(store, {"fake": fake_config(tmp_path, pin="auto",
                                                        call_timeout_s=1)}) as reg:
        box = reg.toolbox(["fake.*"])
        await box.specs()
        r = await box.call("fake.crash", "{}")
        assert (r.is_error, r.error_kind) == (True, "failed")
        assert r.content.startswith("mcp server 'fake': tools/call crash: the server exited")
        r = await box.call("fake.hang", "{}")
        assert (r.error_kind, r.content) == (
            "timeout", "mcp server 'fake': tools/call hang: no answer within 1s")
        assert (await box.call("fake.echo", '{"text": "still here"}')).content == "still here"
    assert calls_received(tmp_path) == ["crash", "hang", "echo"]


async def test_a_server_that_cannot_list_hides_only_its_tools(store: Any, tmp_path: Path
                                                             ) -> None:
    servers = {"fake": fake_config(tmp_path, pin="auto"),
               "ghost": McpServerConfig(name="ghost", command=str(tmp_path / "missing"))}
    async with ToolRegistry(store, servers) as reg:
        box = reg.toolbox(None)
        names = [s.name for s in await box.specs()]
        assert "fake.echo" in names and not any(n.startswith("ghost.") for n in names)
        assert list(box.errors) == ["ghost"]
        assert box.errors["ghost"].startswith("mcp server 'ghost': cannot start")
        r = await box.call("ghost.anything", "{}")
        assert (r.error_kind, r.content.startswith("mcp server 'ghost': cannot start")) == (
            "failed", True)


# ------------------------------------------------------------------------------ config


def test_config_from_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "s3cret-value")
    servers = mcp_servers_from_data({
        "git": {"command": "~/bin/mcp-server-git", "args": ["--repository", "/r"],
                "env": {"GIT_PAGER": "cat"}, "env_from": {"GITHUB_TOKEN": "MY_TOKEN"},
                "cwd": "~/r", "call_timeout_s": 5, "pin": "auto"},
        "off": {"command": "x", "enabled": False},
    }, "clawtower.yaml")
    assert list(servers) == ["git"]
    git = servers["git"]
    assert git.name == "git" and git.pin == "auto" and git.call_timeout_s == 5
    assert git.resolved_command() == os.path.expanduser("~/bin/mcp-server-git")
    assert git.resolved_env() == {"GIT_PAGER": "cat", "GITHUB_TOKEN": "s3cret-value"}
    assert mcp_servers_from_data({"a": {"command": "x", "env_from": ["MY_TOKEN"]}}, "f")[
        "a"].resolved_env() == {"MY_TOKEN": "s3cret-value"}


@pytest.mark.parametrize(("raw", "message"), [
    ([], "f.yaml: field 'mcp_servers': must be a mapping of name -> server"),
    ({"a.b": {"command": "x"}}, "f.yaml: field 'mcp_servers.a.b': a server name is letters"),
    ({"clock": {"command": "x"}}, "f.yaml: field 'mcp_servers.clock': the name is reserved"),
    ({"a": "x"}, "f.yaml: field 'mcp_servers.a': must be a mapping"),
    ({"a": {}}, "f.yaml: field 'mcp_servers.a.command': Field required"),
    ({"a": {"command": "x", "pin": "yes"}}, "f.yaml: field 'mcp_servers.a.pin': Input should be"),
    ({"a": {"command": "x", "call_timeout_s": 0}},
     "f.yaml: field 'mcp_servers.a.call_timeout_s': Input should be greater than 0"),
    ({"a": {"command": "x", "token": "abc"}}, "f.yaml: field 'mcp_servers.a.token': unknown field"),
    ({"a": {"command": "x", "env_from": {"T": "not a name"}}},
     "f.yaml: field 'mcp_servers.a.env_from': T: 'not a name' is not an"),
])
def test_config_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        mcp_servers_from_data(raw, "f.yaml")
    assert str(err.value).startswith(message), str(err.value)


async def test_a_missing_secret_variable_names_it_never_a_value(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.delenv("ABSENT_TOKEN", raising=False)
    cfg = fake_config(tmp_path, env_from={"TOKEN": "ABSENT_TOKEN"})
    async with ToolRegistry(None, {"fake": cfg}) as reg:
        r = await reg.call("fake.echo", '{"text": "x"}')
    assert (r.is_error, r.error_kind) == (True, "failed")
    assert r.content == ("mcp server 'fake': env_from.TOKEN: the variable ABSENT_TOKEN"
                         " is not set")


def test_load_reads_only_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    monkeypatch.delenv("CLAWTOWER_CONFIG", raising=False)
    assert load_mcp_servers() == {}  # no file: no servers
    (home / "clawtower.yaml").write_text(
        "providers: {local: {kind: whatever}}\nagents: {}\nfuture_key: [1]\n"
        "mcp_servers:\n  time: {command: mcp-server-time}\n")
    assert list(load_mcp_servers()) == ["time"]
    with pytest.raises(ValidationError, match="no such config file"):
        load_mcp_servers(tmp_path / "nope.yaml")


async def test_secret_values_never_come_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setenv("OUR_TOKEN", "tok-123456789")
    server = McpServer(fake_config(tmp_path, env_from={"FAKE_TOKEN": "OUR_TOKEN"}))
    try:
        r = await server.call_tool("echo", {"text": "$FAKE_TOKEN"})
        assert (r.content, r.structured["echo"]) == ("token=[secret OUR_TOKEN]",) * 2
        with pytest.raises(McpServerError) as err:
            await server.call_tool("crash", {})
        assert "my token is [secret OUR_TOKEN]" in str(err.value)
        assert "tok-123456789" not in str(err.value)
    finally:
        await server.aclose()


async def test_concurrent_first_uses_start_one_process(tmp_path: Path) -> None:
    server = McpServer(fake_config(tmp_path))
    try:
        results = await asyncio.gather(*(server.call_tool("echo", {"text": str(i)})
                                         for i in range(4)))
        assert [r.content for r in results] == ["0", "1", "2", "3"]
        assert len({r.structured["pid"] for r in results}) == 1 and server.starts == 1
    finally:
        await server.aclose()


async def test_the_server_runs_in_its_cwd(tmp_path: Path) -> None:
    work = tmp_path / "work dir"
    work.mkdir()
    server = McpServer(fake_config(tmp_path, cwd=str(work)))
    try:
        r = await server.call_tool("echo", {"text": "x"})
        assert Path(r.structured["cwd"]) == work
    finally:
        await server.aclose()
