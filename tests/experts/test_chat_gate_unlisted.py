"""Issue 34 on the unmodified radiant fixture, through `clawtower expert chat` (a session
turn: SessionToolBox), against real stdio MCP servers that log every call they execute:

1. a bound server whose FIRST start exits 1 (tests/helpers/flaky_mcp_server.py) is not
   listed at the turn's start; the confirm-tier crm.update_deal_stage still waits for an
   operator and the manual-tier email.send is still only drafted;
2. a binding that maps two operations onto one server tool (`create_note:
   update_deal_stage`) gives that tool the strictest of their tiers (confirm, not the auto
   of create_note), and `expert bind` and `expert validate` warn naming both."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from flaky_mcp_server import __file__ as FLAKY

from clawtower.core.experts import home
from clawtower.core.experts.bindings import write_binding

from .test_chat_gate import NAME, run
from .test_run import SERVER, calls

UPDATE = '#call crm.update_deal_stage {"deal_id": "d-7", "stage": "Closed Lost"}'
SEND = '#call email.send {"to": "sarah@acme.example", "body": "Hi"}'


def _flaky(tmp: Path, tool: str, log: Path) -> dict[str, Any]:
    return {"type": "mcp", "command": sys.executable, "args": [FLAKY],
            "env": {"FLAKY_MARKER": str(tmp / f"{tool}.marker"), "FLAKY_MODE": "fail-first",
                    "SALES_MCP_CALLS": str(log)}}


def _install(tmp: Path, radiant: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp / "home"))
    assert home.install(str(radiant)).name == NAME
    return tmp / "calls.jsonl"


def test_a_server_whose_first_start_fails_gates_confirm_and_manual(
        tmp_path: Path, radiant: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    log = _install(tmp_path, radiant, monkeypatch)
    for tool in ("crm", "email", "calendar"):
        write_binding(NAME, tool, _flaky(tmp_path, tool, log))
    db = str(tmp_path / "db.sqlite")
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", UPDATE)
    assert code == 0, err
    assert "waits for approval" in err and "crm.update_deal_stage" in err
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", SEND)
    assert code == 0, err
    assert "email.send: drafted for an operator (manual tier)" in out
    assert calls(log) == []  # 0 executions: nothing ran unasked, send never
    code, out, err = run(capsys, "approvals", "--db", db, "--json")
    assert [a["context"]["tool"] for a in json.loads(out)] == ["crm.update_deal_stage"]


def test_two_operations_on_one_tool_take_the_strictest_tier(
        tmp_path: Path, radiant: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    log = _install(tmp_path, radiant, monkeypatch)
    base: dict[str, Any] = {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
                            "env": {"SALES_MCP_CALLS": str(log)}}
    for tool in ("email", "calendar"):
        write_binding(NAME, tool, dict(base))
    code, out, err = run(capsys, "expert", "bind", NAME, "crm", "--mcp", sys.executable,
                         "--arg", str(SERVER), "--op", "create_note=update_deal_stage")
    assert code == 0, err
    warning = ("crm.update_deal_stage (confirm) and crm.create_note (auto) both run"
               " crm.update_deal_stage; its tier is confirm (the strictest)")
    assert warning in err
    code, out, err = run(capsys, "expert", "validate", NAME)
    assert warning in out
    # the server's log is its own env: bind it again with the log, the same mapping
    write_binding(NAME, "crm", {**base, "operations": {"create_note": "update_deal_stage"}})
    db = str(tmp_path / "db.sqlite")
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", UPDATE)
    assert code == 0, err
    assert "waits for approval" in err and "crm.update_deal_stage" in err
    assert calls(log) == []
