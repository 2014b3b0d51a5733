"""A real session turn: SmolLM2-135M on the llama-cpp-python server (OpenAI-compatible) and
the real mcp-server-time behind the spec's tool allow-list (both installed by
scripts/install-peers.sh; missing peers skip with the reason)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_peers import TIME, require
from procs import child_env

from clawtower.core.agents.config import config_from_data
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store


async def smol_asks_the_time(store: Any, llama: str, policy: dict[str, Any]
                             ) -> tuple[Any, Sessions, str]:
    """A session of SmolLM2 (on the llama server) with the real mcp-server-time behind
    `policy`, sent a question that makes it call the tool: (config, sessions, session id)."""
    cfg = config_from_data({
        "providers": {"local": {"kind": "openai", "base_url": llama, "models": ["smollm2"],
                                "timeout_s": 120}},
        "mcp_servers": {"time": {"command": str(TIME), "pin": "auto"}}}, "peers-test")
    sessions = Sessions(store)
    await sessions.set_spec("smol", AgentSpecConfig.model_validate({
        "defaults": {"provider": "local", "model": "smollm2", "temperature": 0.0,
                     "max_output_tokens": 48,
                     "first_tool_choice": "time.get_current_time"},
        "policy": policy,
        "context_policy": {"budgets": {"max_tool_rounds": 1, "max_wall_s": 180}}}))
    sid = await sessions.create(agent="smol")
    await sessions.send(sid, "What time is it in UTC right now?")
    return cfg, sessions, sid


async def test_real_session_turn_with_smollm2_and_mcp_time(store: Any, llama: str) -> None:
    require("time")
    cfg, sessions, sid = await smol_asks_the_time(
        store, llama, {"tools": ["time.get_current_time"]})
    runner = SessionRunner(store, cfg, skills=SkillSet())
    try:
        assert await runner.run_until_idle(300), runner.errors
    finally:
        await runner.aclose()
    s = await sessions.get(sid)
    job = s["jobs"][0]
    assert job["status"] == "done", job
    assert job["stop_reason"] in ("completed", "max_tool_rounds")
    assert (job["provider"], job["model"]) == ("local", "smollm2")
    tools = await store.fetchall("SELECT name, status, result FROM turn_tools")
    assert tools and tools[0]["name"] == "time.get_current_time"
    assert tools[0]["status"] == "ok", tools
    assert "datetime" in json.loads(tools[0]["result"])  # the real server answered
    assert [m["role"] for m in s["messages"]] == ["user", "assistant"]
    assert s["tokens"] > 0 and s["turns"] == 1
    assert await store.verify_projections() == []


async def test_confirm_tier_call_on_smollm2_waits_and_runs_once_after_cli_approval(
        tmp_path: Path, llama: str) -> None:
    """The governed turn on real parts: SmolLM2 asks for the real mcp-server-time tool, which
    the spec makes confirm-tier; the turn waits (no worker holds it), `clawtower approve`
    in another process decides it, and a new worker runs the call exactly once."""
    require("time")
    db = tmp_path / "db.sqlite"
    store = await open_store(str(db))
    try:
        cfg, sessions, sid = await smol_asks_the_time(store, llama, {
            "tools": ["time.get_current_time"],
            "approval": {"default": "auto", "tools": {"time.*": "confirm"}}})
        runner = SessionRunner(store, cfg, skills=SkillSet())
        try:
            assert await runner.run_until_idle(300), runner.errors
        finally:
            await runner.aclose()
        assert (await sessions.get(sid))["status"] == "waiting"
        assert await store.fetchall("SELECT * FROM turn_tools WHERE status='ok'") == []
        [a] = await store.fetchall("SELECT * FROM approvals WHERE status='pending'")
        assert a["kind"] == "tool_call"
        out = subprocess.run(
            [sys.executable, "-c", "import sys; from clawtower.cli.main import main;"
             " sys.exit(main(sys.argv[1:]))", "approve", a["id"], "--db", str(db),
             "--by", "bob"], capture_output=True, text=True, env=child_env(),
            timeout=120)
        assert out.returncode == 0, out.stderr
        runner = SessionRunner(store, cfg, skills=SkillSet())
        try:
            assert await runner.run_until_idle(300), runner.errors
        finally:
            await runner.aclose()
        tools = await store.fetchall("SELECT name, status, result FROM turn_tools"
                                     " WHERE status='ok'")
        assert [t["name"] for t in tools] == ["time.get_current_time"]  # exactly once
        assert "datetime" in json.loads(tools[0]["result"])  # the real server answered
        done = await store.fetchall("SELECT * FROM events WHERE type='toolcall.done'")
        assert len(done) == 1
        s = await sessions.get(sid)
        assert [j["status"] for j in s["jobs"]] == ["done"]
        assert await store.verify_projections() == []
    finally:
        await store.close()
