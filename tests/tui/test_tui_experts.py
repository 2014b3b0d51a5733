"""Mode 6: installed experts with their validation status and bindings, their runs, and the
confirm gate a compiled run waits at, approved from mode 2 (the run then completes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from textual.widgets import Static
from tui_helpers import SIZE, shown, until

from core import open_store
from core.experts import home
from core.experts.bindings import write_binding
from core.workflows.service import Workflows
from tui.app import ClawtowerApp
from tui.modals import ConfirmScreen
from tui.screens.experts import ExpertsScreen
from tui.views import ApprovalList

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "tests" / "fixtures" / "acme-support-expert"
SERVER = ROOT / "tests" / "helpers" / "sales_mcp_server.py"
GATE = """spec: "1.0"
name: gate-expert
version: "2.1.0"
description: Writes a CRM note after approval
requires:
  tools: [crm]
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


async def test_experts_mode_shows_status_bindings_runs_and_confirms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    home.install(str(ACME))
    pkg = tmp_path / "gate"
    gate_files = {k: v for k, v in FILES.items() if k != "README.md"}  # one warning
    for rel, text in {**gate_files, "expert.yaml": GATE}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    home.install(str(pkg))
    log = tmp_path / "calls.jsonl"
    write_binding("gate-expert", "crm", {"type": "mcp", "command": sys.executable,
                                         "args": [str(SERVER)],
                                         "env": {"SALES_MCP_CALLS": str(log)}})
    home.compile_all("gate-expert")
    db = str(tmp_path / "store.db")
    store = await open_store(db)
    try:
        env = await Workflows(store, env=dict(os.environ), cwd=str(tmp_path),
                              stderr=lambda s: None).run(
            str(home.compiled_dir("gate-expert") / "note.lobster"),
            {"contact_id": "c-1", "body": "hi"})
    finally:
        await store.close()
    assert env["status"] == "needs_approval"
    approval = env["requiresApproval"]["approvalId"]
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("6")
        await until(pilot, lambda: isinstance(app.screen, ExpertsScreen)
                    and approval in shown(app.screen.query_one("#experts-body", Static)))
        body = shown(app.screen.query_one("#experts-body", Static))
        assert "acme-support-expert" in body and "0.1.0" in body
        assert "helpdesk → unbound" in body and "kb → unbound" in body
        assert "gate-expert" in body and "2.1.0" in body and "crm → mcp crm" in body
        assert "valid, 1 warnings" in body  # gate-expert's missing README.md
        assert "gate-expert/note" in body and "paused" in body
        assert "confirm_crm_create_note" in body
        # the confirm is decided in mode 2 like any approval: the run then completes
        await pilot.press("2")
        await until(pilot, lambda: approval in app.screen.query_one(ApprovalList))
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: approval not in app.model.approvals and any(
            r["name"] == "gate-expert/note" and r["status"] == "ok"
            for r in app.model.workflows), timeout=60)
        await pilot.press("6")
        await until(pilot, lambda: isinstance(app.screen, ExpertsScreen))
        await until(pilot, lambda: "none" in shown(app.screen.query_one("#experts-body",
                                                                        Static)))
    assert [json.loads(x)["tool"] for x in log.read_text().splitlines()] == ["create_note"]
