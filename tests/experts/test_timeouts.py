"""policy.approval.timeout / on_timeout on a compiled confirm gate: escalate records one
escalation and keeps the gate open (a late approval still runs the step); reject cancels."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from core.experts import home
from core.experts.bindings import write_binding
from core.experts.timeouts import sweep
from core.workflows.service import Workflows

SERVER = Path(__file__).resolve().parent.parent / "helpers" / "sales_mcp_server.py"
MANIFEST = """spec: "1.0"
name: gate-expert
version: "1.0.0"
description: Writes a CRM note after approval
requires:
  tools: [crm]
policy:
  approval:
    default: confirm
    timeout: 1h
    on_timeout: {on_timeout}
components:
  orchestrator: orchestrator.md
  persona: [persona/identity.md]
  functions: [functions/noop.md]
  processes: [processes/note.md]
  tools: [tools/crm.yaml]
"""
FILES = {
    "README.md": "# Gate\n", "orchestrator.md": "Write notes.\n",
    "persona/identity.md": "You write notes.\n",
    "functions/noop.md": "---\nname: noop\ndescription: Nothing\n---\nDo nothing.\n",
    "processes/note.md": "---\nname: note\ndescription: One note\ninputs:\n  - name: contact_id\n"
                         "    type: string\n  - name: body\n    type: string\ntools: [crm]\n"
                         "---\n- [ ] Write it with `crm.create_note`.\n",
    "tools/crm.yaml": "name: crm\ndescription: CRM\noperations:\n  - name: create_note\n"
                      "    description: A note\n    input:\n      type: object\n"
                      "      properties:\n        contact_id: {type: string}\n"
                      "        body: {type: string}\n",
}


async def paused_run(tmp_path: Path, store: Any, on_timeout: str,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Workflows, str, Path]:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    pkg = tmp_path / "gate"
    for rel, text in {**FILES, "expert.yaml": MANIFEST.format(on_timeout=on_timeout)}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    home.install(str(pkg))
    log = tmp_path / "calls.jsonl"
    write_binding("gate-expert", "crm", {"type": "mcp", "command": sys.executable,
                                         "args": [str(SERVER)],
                                         "env": {"SALES_MCP_CALLS": str(log)}})
    home.compile_all("gate-expert")
    wf = Workflows(store, env=dict(os.environ), cwd=str(tmp_path), stderr=lambda s: None)
    env = await wf.run(str(home.compiled_dir("gate-expert") / "note.lobster"),
                       {"contact_id": "c-1", "body": "hello"})
    assert env["status"] == "needs_approval", env
    return wf, env["requiresApproval"]["approvalId"], log


async def test_escalate_keeps_the_gate_open(tmp_path: Path, store: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    wf, approval, log = await paused_run(tmp_path, store, "escalate", monkeypatch)
    a = await store.fetchone("SELECT requested_at FROM approvals WHERE id=?", (approval,))
    assert await sweep(store, wf, now=a["requested_at"] + 3000) == []  # not yet
    done = await sweep(store, wf, now=a["requested_at"] + 3601)
    assert done == [{"approval": approval, "run": "W-1", "action": "escalate"}]
    assert await sweep(store, wf, now=a["requested_at"] + 9000) == []  # once only
    ev = await store.fetchone("SELECT payload FROM events WHERE type=?",
                              ("expert.approval_escalated",))
    assert json.loads(ev["payload"])["expert"] == "gate-expert"
    assert not log.exists()
    out = await wf.decide(approval, True, by="ada")  # a late approval still counts
    assert out["run_status"] == "ok"
    assert [json.loads(x)["tool"] for x in log.read_text().splitlines()] == ["create_note"]


async def test_reject_cancels_the_run(tmp_path: Path, store: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    wf, approval, log = await paused_run(tmp_path, store, "reject", monkeypatch)
    a = await store.fetchone("SELECT requested_at FROM approvals WHERE id=?", (approval,))
    done = await sweep(store, wf, now=a["requested_at"] + 3601)
    assert done == [{"approval": approval, "run": "W-1", "action": "reject"}]
    row = await store.fetchone("SELECT status, decided_by FROM approvals WHERE id=?",
                               (approval,))
    assert row["status"] == "rejected" and row["decided_by"] == "expert-policy"
    run = await store.fetchone("SELECT status FROM workflow_runs WHERE id='W-1'")
    assert run["status"] == "cancelled"
    assert not log.exists()
