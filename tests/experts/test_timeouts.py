"""policy.approval.timeout / on_timeout on a compiled confirm gate: escalate records one
escalation and keeps the gate open (a late approval still runs the step); reject cancels."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.experts import home
from clawtower.core.experts.timeouts import sweep
from clawtower.core.workflows.service import Workflows
from tests.helpers.gate_expert import install_gate_expert

POLICY = """policy:
  approval:
    default: confirm
    timeout: 1h
    on_timeout: {on_timeout}
"""


async def paused_run(tmp_path: Path, store: Any, on_timeout: str,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[Workflows, str, Path]:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    log = install_gate_expert(tmp_path, policy=POLICY.format(on_timeout=on_timeout))
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
