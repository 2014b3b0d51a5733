"""`clawtower workflow run|resume|list|show|cancel|graph` and approve/reject on gates: Lobster's
envelopes and exit codes (0 ok/paused/cancelled, 1 runtime error, 2 parse error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import Run

FLOW = """
name: ship
args:
  who: {default: team}
steps:
  - id: prep
    run: echo '{"who":"${who}"}'
  - id: gate
    approval: "Ship for ${who}?"
    stdin: $prep.json
  - id: after
    run: echo "shipped $gate.approved"
"""


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOBSTER_APPROVAL_APPROVED_BY", raising=False)
    p = tmp_path / "ship.lobster"
    p.write_text(FLOW)
    return p


def test_run_resume_and_reuse(run: Run, db: Path, flow: Path) -> None:
    r = run("workflow", "run", "--file", flow, "--args-json", '{"who":"ops"}', "--db", db)
    assert r.code == 0
    assert r.out.startswith('{\n  "protocolVersion": 1,\n  "ok": true,\n  "status": '
                            '"needs_approval"')
    req = r.json()["requiresApproval"]
    assert req["items"] == [{"who": "ops"}]
    token = req["resumeToken"]
    done = run("workflow", "resume", "--token", token, "--approve", "yes", "--db", db)
    assert done.code == 0
    assert done.json()["output"] == ["shipped true\n"]
    again = run("workflow", "resume", "--token", token, "--approve", "yes", "--db", db)
    assert again.code == 1
    assert again.json() == {"protocolVersion": 1, "ok": False, "error": {
        "type": "runtime_error", "message": "Workflow resume state not found"}}
    listed = run("workflow", "list", "--json", "--db", db).json()
    assert [(x["name"], x["status"]) for x in listed] == [("ship", "ok")]
    shown = run("workflow", "show", listed[0]["id"], "--db", db)
    assert shown.code == 0 and "done      after" in shown.out


def test_resume_argument_errors_are_parse_errors(run: Run, db: Path) -> None:
    cases = [
        ([], "resume requires --token or --id"),
        (["--id", "abcd1234"], "resume requires --approve yes|no, --response-json, or --cancel"),
        (["--id", "abcd1234", "--approve", "maybe"], "resume --approve must be yes or no"),
        (["--id", "abcd1234", "--approve", "yes", "--cancel"],
         "resume accepts only one of --approve, --response-json, or --cancel"),
        (["--id", "abcd1234", "--response-json", "{"], "resume --response-json must be valid JSON"),
        (["--id", "abcd1234", "--approve", "yes"], 'Approval ID "abcd1234" not found or expired'),
    ]
    for argv, message in cases:
        r = run("workflow", "resume", *argv, "--db", db)
        assert r.code == 2, (argv, r.out)
        assert r.json()["error"] == {"type": "parse_error", "message": message}


def test_bad_files(run: Run, db: Path, tmp_path: Path) -> None:
    missing = run("workflow", "run", "--file", tmp_path / "nope.lobster", "--db", db)
    assert missing.code == 2 and missing.json()["error"]["type"] == "parse_error"
    dup = tmp_path / "dup.lobster"
    dup.write_text("steps:\n  - {id: a, run: echo}\n  - {id: a, run: echo}\n")
    r = run("workflow", "run", "--file", dup, "--db", db)
    assert r.code == 1
    assert r.json()["error"] == {"type": "runtime_error",
                                 "message": "Duplicate workflow step id: a"}
    bad_args = run("workflow", "run", "--file", dup, "--args-json", "{", "--db", db)
    assert bad_args.code == 2
    assert bad_args.json()["error"]["message"] == "run --args-json must be valid JSON"


def test_approve_and_reject_decide_gates(run: Run, db: Path, flow: Path) -> None:
    aid = run("workflow", "run", "--file", flow, "--db", db).json()["requiresApproval"][
        "approvalId"]
    pending = run("approvals", "--json", "--db", db).json()
    assert [(a["id"], a["kind"]) for a in pending] == [(aid, "workflow_approval")]
    r = run("approve", aid, "--by", "ops", "--db", db)
    assert r.code == 0, r.err
    assert f"{aid}: approved by ops" in r.out
    runs = run("workflow", "list", "--json", "--db", db).json()
    assert runs[0]["status"] == "ok"
    aid2 = run("workflow", "run", "--file", flow, "--db", db).json()["requiresApproval"][
        "approvalId"]
    assert run("reject", aid2, "--db", db).code == 0
    runs = run("workflow", "list", "--json", "--db", db).json()
    assert runs[0]["status"] == "cancelled"
    assert run("approve", aid2, "--db", db).code == 2  # already decided


def test_dry_run_and_graph(run: Run, db: Path, flow: Path) -> None:
    r = run("workflow", "run", "--dry-run", "--file", flow, "--db", db)
    assert r.code == 0 and r.json()["output"] == []
    assert "[DRY RUN] Would execute 3 steps:" in r.err
    g = run("workflow", "graph", "--file", flow)
    assert g.code == 0
    assert g.out.startswith('flowchart TD\n  prep["prep\\nrun: echo')
    assert "  gate{" in g.out and "  prep -->|stdin| gate" in g.out
    assert run("workflow", "graph", "--file", flow, "--format", "svg").code == 2


def test_cancel_and_show_unknown(run: Run, db: Path, flow: Path) -> None:
    run("workflow", "run", "--file", flow, "--db", db)
    run_id = run("workflow", "list", "--json", "--db", db).json()[0]["id"]
    assert run("workflow", "cancel", run_id, "--db", db).code == 0
    assert json.loads(run("workflow", "show", run_id, "--json", "--db", db).out)["status"] == (
        "cancelled")
    missing = run("workflow", "show", "W-99", "--db", db)
    assert missing.code == 2 and "W-99" in missing.err
