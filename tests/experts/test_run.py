"""Our acme package installs, compiles and runs end to end: tools through an MCP server
written with the official SDK, functions through the simulator, the manual
helpdesk.send_reply delivered as a draft and never executed, and the confirm-tier
helpdesk.set_priority pausing on an approval gate and running only after approval. The
unmodified openexperts radiant fixture (found at test time, see radiant.py) runs its
inbound-email-triage end to end the same way."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.experts import home, state
from clawtower.core.experts.bindings import check_bindings, load_bindings, write_binding
from clawtower.core.workflows.load import load_workflow
from clawtower.core.workflows.service import Workflows

from .conftest import ACME

SERVER = Path(__file__).resolve().parent.parent / "helpers" / "sales_mcp_server.py"


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


def bind_radiant(name: str, log: Path) -> None:
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


def bind_acme(name: str, log: Path) -> None:
    base: dict[str, Any] = {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
                            "env": {"SALES_MCP_CALLS": str(log)}}
    write_binding(name, "helpdesk", {**base, "operations": {
        "get_customer": {"tool": "lookup_customer", "inputs": {"email": "requester"}},
        "send_reply": {"inputs": {"body": "reply"}},
        "add_internal_note": {"inputs": {"note": "reasoning"}},
        "set_priority": {"inputs": {"reason": "reasoning"}}}})
    write_binding(name, "kb", {**base, "operations": {
        "search_articles": {"inputs": {"query": "subject"}}}})


async def test_acme_triage_runs_end_to_end(expert_home: Path, tmp_path: Path,
                                           store: Any) -> None:
    pkg = home.install(str(ACME))
    assert pkg.name == "acme-support-expert" and pkg.problems == []
    ws = home.workspace(pkg.name)
    assert (ws / "state" / "queue.md").read_text() == (ACME / "state" / "queue.md").read_text()
    log = tmp_path / "calls.jsonl"
    bind_acme(pkg.name, log)
    problems = await check_bindings(
        pkg.required_tools(), {"helpdesk": ["get_ticket", "get_customer", "list_overdue",
                                            "add_internal_note", "set_priority"],
                               "kb": ["search_articles", "get_article"]},
        load_bindings(home.bindings_path(pkg.name)))
    assert problems == []
    paths = home.compile_all(pkg.name)
    assert sorted(p.name for p in paths) == ["overdue-sweep.lobster", "ticket-triage.lobster"]
    triage = home.compiled_dir(pkg.name) / "ticket-triage.lobster"
    wf = load_workflow(triage)  # the runner's own loader accepts it
    assert [s["id"] for s in wf["steps"]] == [
        "scratchpad", "helpdesk_get_ticket", "kb_search_articles", "helpdesk_get_customer",
        "classify_ticket", "draft_reply", "helpdesk_send_reply", "helpdesk_add_internal_note",
        "step_9", "step_9_state", "finish"]
    env = await workflows(store, tmp_path).run(str(triage), {"ticket_id": "T-101"})
    assert env["ok"] and env["status"] == "ok", env
    done = calls(log)
    assert [c["tool"] for c in done] == ["get_ticket", "search_articles", "lookup_customer",
                                         "add_internal_note"]
    assert done[0]["args"] == {"ticket_id": "T-101"}
    assert done[1]["args"] == {"query": "Cannot log in after the SSO change"}
    assert done[2]["args"] == {"email": "dana@globex.example"}
    run = await workflows(store, tmp_path).get((await workflows(store, tmp_path).list())[0][
        "id"])
    steps = {s["id"]: s for s in run["steps"]}
    classify = steps["classify_ticket"]["result"]["json"]["output"]["data"]
    assert classify["category"] in ("billing", "bug", "how_to", "account_access",
                                    "feature_request", "other")
    assert classify["severity"] in ("sev1", "sev2", "sev3")
    assert done[3]["args"] == {"ticket_id": "T-101", "note": classify["reasoning"]}
    reply = steps["draft_reply"]["result"]["json"]["output"]["data"]["reply"]
    send = steps["helpdesk_send_reply"]["result"]["json"]
    assert send["draft"] is True  # manual: delivered as a draft, never executed
    assert send["input"] == {"body": reply, "ticket_id": "T-101"}
    assert "send_reply" not in [c["tool"] for c in done]
    assert not (ws / "scratch" / "ticket-T-101.md").exists()  # cleaned at completion
    # the state step's note is an event; the file is rebuilt from the events
    assert (ws / "state" / "queue.md").read_text() == (ACME / "state" / "queue.md").read_text()
    assert await state.sync(store, pkg, ws) == {"state/queue.md": 1, "state/shift-notes.md": 0}
    assert "UTC:" in (ws / "state" / "queue.md").read_text()
    outputs = env["output"][0]["outputs"]
    assert outputs["reply"] == reply and outputs["category"] == classify["category"]


@pytest.mark.parametrize("approve", [True, False])
async def test_acme_confirm_tier_pauses_until_approved(expert_home: Path, tmp_path: Path,
                                                       store: Any, approve: bool) -> None:
    pkg = home.install(str(ACME))
    log = tmp_path / "calls.jsonl"
    bind_acme(pkg.name, log)
    home.compile_all(pkg.name)
    sweep = home.compiled_dir(pkg.name) / "overdue-sweep.lobster"
    w = workflows(store, tmp_path)
    env = await w.run(str(sweep), {})
    assert env["status"] == "needs_approval", env
    req = env["requiresApproval"]
    assert "helpdesk.set_priority" in req["prompt"]
    assert "Waits 12h, then escalate." in req["prompt"]
    assert [c["tool"] for c in calls(log)] == ["list_overdue"]  # nothing past the gate
    run = await w.get((await w.list())[0]["id"])
    preview = next(s for s in run["steps"] if s["id"] == "confirm_helpdesk_set_priority")
    proposed = preview["result"]["json"]["input"]
    assert proposed["ticket_id"] == "T-311"
    assert proposed["priority"] in ("urgent", "high", "normal")
    urgency = next(s for s in run["steps"] if s["id"] == "assess_urgency")
    # the binding's inputs hint maps set_priority's reason to assess-urgency's reasoning
    assert proposed["reason"] == urgency["result"]["json"]["output"]["data"]["reasoning"]
    out = await w.decide(req["approvalId"], approve, by="ada")
    tools = [c["tool"] for c in calls(log)]
    if approve:
        assert out["run_status"] == "ok"
        assert tools == ["list_overdue", "set_priority", "add_internal_note"]
        assert calls(log)[1]["args"] == proposed  # what was approved is what ran
        await state.sync(store, pkg, home.workspace(pkg.name))
        notes = (home.workspace(pkg.name) / "state" / "shift-notes.md").read_text()
        assert "UTC:" in notes
    else:
        assert out["run_status"] == "cancelled"
        assert tools == ["list_overdue"]


async def test_radiant_triage_runs_end_to_end(expert_home: Path, tmp_path: Path,
                                              store: Any, radiant: Path) -> None:
    pkg = home.install(str(radiant))
    assert pkg.name == "radiant-sales-expert" and not pkg.errors
    ws = home.workspace(pkg.name)
    assert (ws / "state" / "pipeline.md").read_text() == (
        radiant / "state" / "pipeline.md").read_text()
    log = tmp_path / "calls.jsonl"
    bind_radiant(pkg.name, log)
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
    await state.sync(store, pkg, ws)  # the state step's note is an event; the file its view
    assert "UTC:" in (ws / "state" / "pipeline.md").read_text()
    outputs = env["output"][0]["outputs"]
    assert outputs["classify_email_intent"]["intent"] == classify["result"]["json"]["output"][
        "data"]["intent"]
    assert "classification" not in outputs  # no value of that name: not guessed
