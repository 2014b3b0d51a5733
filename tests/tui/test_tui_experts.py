"""Mode 6: installed experts with their validation status and bindings, their runs, and the
confirm gate a compiled run waits at, approved from mode 2 (the run then completes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from textual.widgets import Static
from tui_helpers import SIZE, shown, until

from clawtower.core import open_store
from clawtower.core.experts import home
from clawtower.core.workflows.service import Workflows
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.modals import ConfirmScreen
from clawtower.tui.screens.experts import ExpertsScreen
from clawtower.tui.views import ApprovalList
from tests.helpers.gate_expert import install_gate_expert

ROOT = Path(__file__).resolve().parents[2]
ACME = ROOT / "tests" / "fixtures" / "acme-support-expert"


async def test_experts_mode_shows_status_bindings_runs_and_confirms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    home.install(str(ACME))
    log = install_gate_expert(tmp_path, version="2.1.0", readme=False)  # one warning
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
