"""The unmodified radiant fixture installs, compiles and runs inbound-email-triage end to end:
tools through an MCP server written with the official SDK, functions through the simulator,
the manual email.send delivered as a draft and never executed; a confirm-tier operation
pauses on an approval gate and runs only after approval."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from core.experts import home
from core.experts.bindings import check_bindings, load_bindings, write_binding
from core.workflows.load import load_workflow
from core.workflows.service import Workflows

from .conftest import FIXTURE

SERVER = Path(__file__).resolve().parent.parent / "helpers" / "sales_mcp_server.py"


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


def bind_all(name: str, log: Path) -> None:
    base: dict[str, Any] = {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
                            "env": {"SALES_MCP_CALLS": str(log)}}
    write_binding(name, "crm", {**base, "operations": {
        "get_contact": {"tool": "find_contact", "inputs": {"email": "from"}},
        "create_note": {"inputs": {"body": "reasoning"}}}})
    write_binding(name, "email", {**base, "operations": {
        "send": {"inputs": {"to": "from", "body": "draft"}}}})
    write_binding(name, "calendar", dict(base))


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def workflows(store: Any, tmp_path: Path) -> Workflows:
    return Workflows(store, env=dict(os.environ), cwd=str(tmp_path), stderr=lambda s: None)


async def test_fixture_triage_runs_end_to_end(expert_home: Path, tmp_path: Path,
                                              store: Any) -> None:
    pkg = home.install(str(FIXTURE))
    assert pkg.name == "radiant-sales-expert" and not pkg.errors
    ws = home.workspace(pkg.name)
    assert (ws / "state" / "pipeline.md").read_text() == (
        FIXTURE / "state" / "pipeline.md").read_text()
    log = tmp_path / "calls.jsonl"
    bind_all(pkg.name, log)
    problems = await check_bindings(pkg.required_tools(), {"crm": ["get_contact", "get_deal"],
                                                           "email": ["get_email"]},
                                    load_bindings(home.bindings_path(pkg.name)))
    assert problems == []
    paths = home.compile_all(pkg.name)
    assert sorted(p.name for p in paths) == ["inbound-email-triage.lobster",
                                             "scan-for-opportunities.lobster"]
    triage = home.compiled_dir(pkg.name) / "inbound-email-triage.lobster"
    wf = load_workflow(triage)  # the runner's own loader accepts it
    ids = [s["id"] for s in wf["steps"]]
    assert ids == ["scratchpad", "email_get_email", "crm_get_contact", "crm_get_deal",
                   "classify_email_intent", "determine_next_action", "compose_response",
                   "email_send", "crm_create_note", "step_10", "step_10_state", "finish"]
    env = await workflows(store, tmp_path).run(str(triage), {"message_id": "m-42"})
    assert env["ok"] and env["status"] == "ok", env
    done = calls(log)
    assert [c["tool"] for c in done] == ["get_email", "find_contact", "get_deal",
                                         "create_note"]
    assert done[0]["args"] == {"message_id": "m-42"}
    assert done[1]["args"] == {"email": "sarah@acme.example"}
    assert done[2]["args"] == {"contact_id": "c-17"}
    runs = await workflows(store, tmp_path).list()
    run = await workflows(store, tmp_path).get(runs[0]["id"])
    send = next(s for s in run["steps"] if s["id"] == "email_send")
    assert send["result"]["json"]["draft"] is True
    assert send["result"]["json"]["input"]["to"] == "sarah@acme.example"
    classify = next(s for s in run["steps"] if s["id"] == "classify_email_intent")
    assert classify["result"]["json"]["output"]["data"]["intent"] in (
        "objection", "question", "buying_signal", "churn_risk", "scheduling", "other")
    assert not (ws / "scratch" / "triage-m-42.md").exists()  # cleaned at completion
    assert "UTC:" in (ws / "state" / "pipeline.md").read_text()  # the state step wrote
    outputs = env["output"][0]["outputs"]
    assert outputs["classify_email_intent"]["intent"] == classify["result"]["json"]["output"][
        "data"]["intent"]
    assert "classification" not in outputs  # no value of that name: not guessed


@pytest.mark.parametrize("approve", [True, False])
async def test_confirm_tier_pauses_until_approved(expert_home: Path, tmp_path: Path,
                                                  store: Any, approve: bool) -> None:
    pkg_dir = tmp_path / "src"
    shutil.copytree(FIXTURE, pkg_dir)
    manifest = pkg_dir / "expert.yaml"
    manifest.write_text(manifest.read_text().replace("crm.create_note: auto",
                                                     "crm.create_note: confirm"))
    pkg = home.install(str(pkg_dir))
    log = tmp_path / "calls.jsonl"
    bind_all(pkg.name, log)
    home.compile_all(pkg.name)
    triage = home.compiled_dir(pkg.name) / "inbound-email-triage.lobster"
    w = workflows(store, tmp_path)
    env = await w.run(str(triage), {"message_id": "m-7"})
    assert env["status"] == "needs_approval", env
    req = env["requiresApproval"]
    assert "crm.create_note" in req["prompt"] and "Waits 24h, then escalate." in req["prompt"]
    assert "create_note" not in [c["tool"] for c in calls(log)]
    scratch = home.workspace(pkg.name) / "scratch" / "triage-m-7.md"
    assert "- [x] Fetch the inbound email" in scratch.read_text()  # kept while paused
    out = await w.decide(req["approvalId"], approve, by="ada")
    if approve:
        assert out["run_status"] == "ok"
        assert [c["tool"] for c in calls(log)][-1] == "create_note"
    else:
        assert out["run_status"] == "cancelled"
        assert "create_note" not in [c["tool"] for c in calls(log)]
