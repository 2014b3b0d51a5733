"""The expert tests' MCP server (tests/helpers/sales_mcp_server.py) answers as the SDK's
low-level server answered the SDK's `Client`. It is written without the SDK (whose import is
~1.3 s of CPU, in ~100 server starts a run), so what it says is checked here against replies
recorded from the SDK's server (mcp 2.3.0) for the same requests, and through the SDK's own
client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client, StdioServerParameters
from sales_mcp_server import __file__ as SALES

FIXTURES = Path(__file__).parent / "fixtures"


def _by_id(lines: list[str]) -> dict[Any, dict[str, Any]]:
    return {m["id"]: m for m in map(json.loads, lines)}


def test_it_answers_every_recorded_request_as_the_sdks_server_did() -> None:
    requests = (FIXTURES / "sales_mcp_requests.jsonl").read_text(encoding="utf-8")
    recorded = (FIXTURES / "sales_mcp_sdk_replies.jsonl").read_text(encoding="utf-8")
    out = subprocess.run([sys.executable, SALES], input=requests, capture_output=True,
                         text=True, timeout=60, check=True)
    assert _by_id(out.stdout.splitlines()) == _by_id(recorded.splitlines())
    # a notification and a line that is not JSON are answered by nothing, as by the SDK's
    assert len(out.stdout.splitlines()) == len(recorded.splitlines()) == 8


async def test_the_sdks_client_lists_and_calls_through_it(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    params = StdioServerParameters(command=sys.executable, args=[SALES],
                                   env={**os.environ, "SALES_MCP_CALLS": str(calls)})
    async with Client(params) as session:  # as core/tools/mcp.py connects
        listed = await session.list_tools()
        assert "find_contact" in {t.name for t in listed.tools}
        ok = await session.call_tool("find_contact", {"email": "sarah@acme.example"})
        assert not ok.is_error and ok.structured_content is not None
        assert ok.structured_content["email"] == "sarah@acme.example"
        missing = await session.call_tool("get_deal", {})
        assert missing.is_error
        assert isinstance(missing.content[0], types.TextContent)
        assert missing.content[0].text == "missing arguments: contact_id"
    assert [json.loads(line)["tool"] for line in calls.read_text().splitlines()] == [
        "find_contact", "get_deal"]


def test_a_slow_first_list_does_not_hold_the_requests_behind_it() -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    env = {**os.environ, "SALES_MCP_LIST_DELAY": "3"}
    proc = subprocess.Popen([sys.executable, SALES], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for rid, method, extra in [(1, "tools/list", {}), (2, "tools/list", {}),
                                   (3, "tools/call", {"name": "list_overdue"})]:
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                         "params": {**extra, "_meta": meta}}) + "\n")
        proc.stdin.flush()
        started = time.monotonic()
        order = [json.loads(proc.stdout.readline())["id"] for _ in range(3)]
        assert order == [2, 3, 1]  # the first list alone waited
        assert time.monotonic() - started >= 2.9
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0  # stdin's end ends it, the timer's thread too
