"""A real OpenClaw (npm openclaw@2026.9.6) against SmolLM2 (issue 26): its Gateway accepts
the config that `agents spec import --openclaw` imports; a session turn and a flow node are
answered by its agents through `openclaw acp` (the existing ACP bridge: events, text, the
store); `openclaw mcp serve` is an MCP tool source on the existing tool path (pinned
definitions, allow-lists); a Gateway that is down or refuses the token is a one-line reason.

One Gateway for the whole session (tests/helpers/openclaw_peer.py: its start-up is slow), all
tests on one xdist worker. Each real turn costs ~25-60 s on SmolLM2 (OpenClaw's system prompt
is ~2,000 tokens): there are two, sharing the Gateway session agent:main:main.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openclaw_peer import Gateway, openclaw_gateway

from clawtower.core.acp.bridge import probe, run_prompt
from clawtower.core.acp.config import harness_from_data
from clawtower.core.approvals import Approvals
from clawtower.core.flows.brains import PlanBrain
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.service import Flows
from clawtower.core.flows.turns import TurnBrain
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store
from clawtower.core.tools.config import McpServerConfig
from clawtower.core.tools.registry import ToolRegistry

pytestmark = [pytest.mark.xdist_group("openclaw"), pytest.mark.openclaw]
TURN_S = 240.0


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    with openclaw_gateway() as gw:
        yield gw


@pytest.fixture
def oc(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    """The Gateway; `openclaw acp` children keep their state in the test's folder (the
    harness passes OPENCLAW_STATE_DIR through), never in ~/.openclaw."""
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(gateway.client_state))
    return gateway


async def _import(oc: Gateway, path: Path, db: Path, capsys: pytest.CaptureFixture[str],
                  *extra: str) -> dict[str, Any]:
    """The CLI in this process (on a thread: it runs its own event loop)."""
    from clawtower.cli.main import main

    capsys.readouterr()
    code = await asyncio.to_thread(main, [
        "agents", "spec", "import", "--openclaw", str(path), "--db", str(db), "--gateway", oc.url,
        "--token-file", str(oc.token_file), "--openclaw-command", oc.command, "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def _children_of(oc: Gateway) -> list[int]:
    """Live processes started for this test run's clients (`openclaw acp`, `mcp serve`):
    they carry OPENCLAW_STATE_DIR=<client state>, the Gateway does not."""
    mark = f"OPENCLAW_STATE_DIR={oc.client_state}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark in (d / "environ").read_bytes().split(b"\0") and \
                    "Z" not in (d / "stat").read_text().rsplit(")", 1)[1][:3]:
                found.append(int(d.name))
        except OSError:
            continue
    return found


async def _none_left(oc: Gateway) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while _children_of(oc):
        assert loop.time() < deadline, f"OpenClaw clients left running: {_children_of(oc)}"
        await asyncio.sleep(0.1)


def _mcp_env(oc: Gateway) -> dict[str, str]:
    return {"OPENCLAW_STATE_DIR": str(oc.client_state), "OPENCLAW_NO_RESPAWN": "1"}


async def _specs(db: Path) -> dict[str, dict[str, Any]]:
    store = await open_store(str(db))
    try:
        return {s.name: s.as_json()["config"] for s in await Sessions(store).specs()}
    finally:
        await store.close()


async def test_import_of_the_config_the_gateway_runs_on(
        oc: Gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the JSON5 as written (comments, unquoted keys), which the Gateway started from
    first = await _import(oc, oc.original, tmp_path / "a.db", capsys)
    assert {a["name"]: a["status"] for a in first["agents"]} == {
        "main": "new", "helper": "new", "strict": "new"}
    helper = next(a for a in first["agents"] if a["name"] == "helper")
    assert "agents.entries.helper.thinkingDefault" in helper["unmapped"]
    assert "agents.entries.helper.tools.deny" in helper["unmapped"]
    assert any(u.startswith("agents.defaults.model ('local/smollm2'")
               for u in first["unmapped"])
    # the file the running Gateway has (it may have rewritten it): the same specs
    live = await _import(oc, oc.config, tmp_path / "b.db", capsys)
    assert {a["status"] for a in live["agents"]} == {"new"}
    assert (await _import(oc, oc.config, tmp_path / "b.db", capsys))["agents"][0]["status"] \
        == "unchanged"
    a, b = await _specs(tmp_path / "a.db"), await _specs(tmp_path / "b.db")
    assert a == b
    assert a["main"]["policy"]["subagents"] == ["helper"]
    assert a["helper"]["defaults"]["acp"]["cwd"] == f"{oc.workspace}/helper"
    assert a["main"]["defaults"]["acp"]["openclaw"]["agent"] == "main"


async def _session_turn(store: Store) -> tuple[str, dict[str, Any]]:
    sessions = Sessions(store)
    sid = await sessions.create(agent="main", title="openclaw")
    await sessions.send(sid, "Say hello to the team in one short sentence.")
    streamed: list[str] = []
    runner = SessionRunner(store, skills=SkillSet(), tools=False,
                           on_text=lambda s, t, text: streamed.append(text))
    assert await runner.run_until_idle(TURN_S, {sid})
    reply = (await sessions.transcript(sid))[-1]
    assert reply["role"] == "assistant", reply
    assert reply["text"].strip() and "".join(streamed) == reply["text"]
    run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?", (sid,))
    assert run is not None and run["status"] == "done", run
    return sid, run


async def test_a_session_turn_and_a_flow_node_answered_by_openclaw_agents(
        oc: Gateway, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    await _import(oc, oc.original, db, capsys)
    store = await open_store(str(db))
    try:
        sid, run = await _session_turn(store)
        kinds = {r["type"] for r in await store.fetchall(
            "SELECT type FROM events WHERE entity_id=?", (run["id"],))}
        assert {"acp.run_started", "acp.run_initialized", "acp.text",
                "acp.run_finished"} <= kinds
        # what the Gateway recorded, read back through `openclaw mcp serve` (MCP tool path)
        reply = (await Sessions(store).transcript(sid))[-1]["text"]
        server = McpServerConfig(name="openclaw", command=oc.command, pin="auto", args=[
            "mcp", "serve", "--url", oc.url, "--token-file", str(oc.token_file),
            "--claude-channel-mode", "off"], env=_mcp_env(oc))
        async with ToolRegistry(store, {"openclaw": server}) as reg:
            box = reg.toolbox(["openclaw.messages_read"], agent="main")
            assert [s.name for s in await box.specs()] == ["openclaw.messages_read"]
            r = await box.call("openclaw.messages_read",
                               json.dumps({"session_key": "agent:main:main"}))
            assert not r.is_error, r.content
            said = [m for m in r.structured["messages"] if m["role"] == "assistant"]
            content = said[-1]["content"] if said else []
            text = content if isinstance(content, str) else "".join(
                part.get("text", "") for part in content if isinstance(part, dict))
            assert reply.strip() and reply.strip() in text, (reply, content)
            refused = await box.call("openclaw.messages_send", "{}")  # not on the allow-list
            assert refused.error_kind == "policy"

        # a flow node on the same OpenClaw agent (its spec's defaults.acp)
        fid = await Flows(store).start("main", "Name one colour.")
        brain = TurnBrain(store, PlanBrain(), config=None)
        flow = await asyncio.wait_for(FlowEngine(store, brain).run_flow(fid, TURN_S), TURN_S)
        assert flow["status"] == "done", flow
        assert flow["result"].strip()
        job = await store.fetchone("SELECT * FROM turn_jobs WHERE session_id != ?", (sid,))
        assert job is not None and job["provider"] == "acp", job
        node_run = await store.fetchone("SELECT * FROM acp_runs WHERE subject=?",
                                        (job["session_id"],))
        assert node_run is not None and node_run["status"] == "done"
        # nothing of the harnesses or the MCP server outlives them (OpenClaw's CLI respawns
        # itself into a session of its own unless told not to: core/acp/openclaw.py)
        await _none_left(oc)
    finally:
        await store.close()


async def test_an_mcp_tool_call_through_openclaw_mcp_serve(oc: Gateway, store: Store) -> None:
    server = McpServerConfig(name="openclaw", command=oc.command, args=[
        "mcp", "serve", "--url", oc.url, "--token-file", str(oc.token_file),
        "--claude-channel-mode", "off"], env=_mcp_env(oc))
    async with ToolRegistry(store, {"openclaw": server}) as reg:
        box = reg.toolbox(["openclaw.conversations_list", "openclaw.permissions_*"],
                          agent="ops")
        assert await box.specs() == []  # pinned definitions: nothing callable before approval
        pending = await Approvals(store).pending()
        assert {"tool:openclaw.conversations_list", "tool:openclaw.messages_read"} <= {
            a["subject"] for a in pending}
        for a in pending:
            await Approvals(store).approve(a["id"], by="tester")
        assert sorted(s.name for s in await box.specs()) == [
            "openclaw.conversations_list", "openclaw.permissions_list_open",
            "openclaw.permissions_respond"]
        r = await box.call("openclaw.conversations_list", '{"limit": 5}')
        assert not r.is_error, r.content
        assert isinstance(r.structured["conversations"], list)
    await _none_left(oc)


async def test_a_gateway_down_refusing_the_token_or_failing_the_run_is_a_reason(
        oc: Gateway, store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "wrong.token"
    bad.write_text("not-the-token\n")
    refused = harness_from_data({"openclaw": {"url": oc.url, "token_file": str(bad),
                                              "command": oc.command}}, "oc-bad", "test")
    out = await run_prompt(store, refused, "hello", workspace=str(tmp_path))
    assert out.status == "failed" and "\n" not in out.error
    assert out.error.startswith("acp agent 'oc-bad' (OpenClaw agent 'main' at ws://")
    assert "refused the credentials" in out.error and "token mismatch" in out.error
    down = harness_from_data({"openclaw": {"url": "ws://127.0.0.1:9", "command": oc.command,
                                           "token_file": str(oc.token_file)}}, "oc-down", "t")
    out = await run_prompt(store, down, "hello", workspace=str(tmp_path))
    assert out.status == "failed" and "\n" not in out.error
    assert "the Gateway is not running" in out.error and "openclaw gateway run" in out.error
    probed = await probe(down)  # `clawtower acp agents` says the same
    assert not probed["reachable"] and "the Gateway is not running" in probed["error"]
    # the Gateway's model run fails (see `strict` in openclaw_peer.py): the bridge says
    # end_turn with nothing; the turn fails with a reason instead of an empty success
    strict = harness_from_data({"openclaw": {"url": oc.url, "agent": "strict",
                                             "token_file": str(oc.token_file),
                                             "command": oc.command}}, "oc-strict", "t")
    out = await run_prompt(store, strict, "hello", workspace=str(tmp_path))
    assert (out.status, out.stop_reason) == ("failed", "end_turn"), out
    assert "ended with no text and no tool call" in out.error and "openclaw logs" in out.error
    await _none_left(oc)
