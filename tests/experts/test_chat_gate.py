"""`expert chat` enforces the package's approval policy (openexperts "Approval Enforcement")
on the unmodified radiant fixture bound to a real stdio MCP server (tests/helpers/
sales_mcp_server.py, which logs every call it executes): the confirm-tier
crm.update_deal_stage waits in `clawtower approvals` and runs exactly once after
`clawtower approve`; the manual-tier email.send is a draft that is never executed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawtower.cli.main import main
from clawtower.core.experts import home

from .test_run import bind_radiant, calls

NAME = "radiant-sales-expert"
UPDATE = '#call crm.update_deal_stage {"deal_id": "d-9", "stage": "Closed Won"}'


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def test_radiant_confirm_waits_for_an_operator_and_runs_once(
        tmp_path: Path, radiant: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    pkg = home.install(str(radiant))
    assert pkg.name == NAME
    log = tmp_path / "calls.jsonl"
    bind_radiant(NAME, log)
    db = str(tmp_path / "db.sqlite")

    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", UPDATE)
    assert code == 0, err
    assert "waits for approval" in err and "crm.update_deal_stage" in err
    assert "answered" not in out
    assert [c["tool"] for c in calls(log)] == []  # nothing ran

    code, out, err = run(capsys, "approvals", "--db", db, "--json")
    [a] = json.loads(out)
    assert a["kind"] == "tool_call" and a["context"]["tool"] == "crm.update_deal_stage"
    assert json.loads(a["context"]["arguments"]) == {"deal_id": "d-9", "stage": "Closed Won"}
    assert a["context"]["agent"] == f"expert.{NAME}"
    code, out, err = run(capsys, "session", "show", a["subject"], "--db", db, "--json")
    assert json.loads(out)["status"] == "waiting"

    code, out, err = run(capsys, "approve", a["id"], "--db", db, "--by", "bob")
    assert code == 0, err
    assert f"{a['id']}: approved by bob" in out and "clawtower session run" in out
    code, out, err = run(capsys, "approve", a["id"], "--db", db, "--by", "bob")
    assert code != 0 and "already decided" in err and err.count("\n") == 1

    code, out, err = run(capsys, "session", "run", "--until-idle", "--db", db)
    assert code == 0, err
    assert [c["tool"] for c in calls(log)] == ["update_deal_stage"]  # exactly once
    code, out, err = run(capsys, "session", "show", a["subject"], "--db", db, "--json")
    s = json.loads(out)
    replies = [m["text"] for m in s["messages"] if m["role"] == "assistant"]
    assert replies == ['crm.update_deal_stage answered: { "success": true }'] or (
        len(replies) == 1 and replies[0].startswith("crm.update_deal_stage answered:")
        and "success" in replies[0])
    assert s["status"] == "idle"
    # a second worker pass runs nothing again
    code, out, err = run(capsys, "session", "run", "--until-idle", "--db", db)
    assert [c["tool"] for c in calls(log)] == ["update_deal_stage"]

    # manual tier: a draft, never executed, nothing to approve
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m",
                         '#call email.send {"to": "sarah@acme.example", "draft": "Hi"}')
    assert code == 0, err
    assert "email.send: drafted for an operator (manual tier)" in out
    code, out, err = run(capsys, "approvals", "--db", db, "--json")
    assert json.loads(out) == []
    assert [c["tool"] for c in calls(log)] == ["update_deal_stage"]
