"""Approval and input gates: Lobster's envelopes, single-use tokens stored hashed, approval ids
as aliases, identity rules, schema-checked answers, and the one approvals list."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.approvals import Approvals
from clawtower.core.errors import ValidationError
from clawtower.core.workflows.service import Workflows

FLOW = """
args:
  who: {default: team}
steps:
  - id: prep
    run: echo x >> count; echo '{"count":2,"who":"${who}"}'
  - id: gate
    approval: "Apply ${who} changes?"
    stdin: $prep.json
  - id: after
    run: echo "done $gate.approved $gate.approvedBy"
    when: $gate.approved
"""

INPUT = """
steps:
  - id: review
    input:
      prompt: Title?
      responseSchema:
        type: object
        required: [title]
        properties: {title: {type: string}}
  - id: use
    run: echo "$review.response.title"
"""


@pytest.fixture
def wf(store: Any, tmp_path: Path) -> Workflows:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return Workflows(store, env=env, cwd=str(tmp_path), stderr=lambda s: None)


def write(tmp_path: Path, text: str, name: str = "wf.lobster") -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


async def paused(wf: Workflows, tmp_path: Path) -> dict[str, Any]:
    env = await wf.run(write(tmp_path, FLOW))
    assert env["status"] == "needs_approval", env
    return env


async def test_approval_envelope_like_lobster(wf: Workflows, tmp_path: Path, store: Any) -> None:
    env = await paused(wf, tmp_path)
    req = env["requiresApproval"]
    assert list(env) == ["protocolVersion", "ok", "status", "output", "requiresApproval",
                         "requiresInput"]
    assert {k: v for k, v in req.items() if k not in ("resumeToken", "approvalId")} == {
        "type": "approval_request", "prompt": "Apply ${who} changes?",  # not templated
        "items": [{"count": 2, "who": "team"}], "preview": '{"count":2,"who":"team"}'}
    assert len(req["approvalId"]) == 8
    pointer = json.loads(base64.urlsafe_b64decode(req["resumeToken"] + "=="))
    assert list(pointer) == ["protocolVersion", "v", "kind", "stateKey"]
    assert pointer["kind"] == "workflow-file"
    # workflow_resume_<run>_<secret>: the secret itself may contain "_" (base64url)
    secret = pointer["stateKey"].removeprefix("workflow_resume_").partition("_")[2]
    assert len(secret) == 32
    # the secret is nowhere in the store: only its hash
    rows = await store.fetchall("SELECT payload FROM events")
    assert not any(secret in r["payload"] for r in rows)
    pending = await Approvals(store).pending()
    assert [(a["id"], a["kind"], a["prompt"]) for a in pending] == [
        (req["approvalId"], "workflow_approval", "Apply ${who} changes?")]
    assert pending[0]["context"]["items"] == [{"count": 2, "who": "team"}]


async def test_resume_yes_continues_once_without_rerunning(wf: Workflows,
                                                           tmp_path: Path) -> None:
    token = (await paused(wf, tmp_path))["requiresApproval"]["resumeToken"]
    env = await wf.resume(token=token, approve=True, approved_by="bob")
    assert env["output"] == ["done true bob\n"]
    assert (tmp_path / "count").read_text() == "x\n"  # the first step ran once
    again = await wf.resume(token=token, approve=True)
    assert again == {"protocolVersion": 1, "ok": False, "error": {
        "type": "runtime_error", "message": "Workflow resume state not found"}}
    run = await wf.get((await wf.list())[0]["id"])
    assert [s["status"] for s in run["steps"]] == ["done", "done", "done"]


async def test_reject_cancels_and_id_alias(wf: Workflows, tmp_path: Path, store: Any) -> None:
    env = await paused(wf, tmp_path)
    aid = env["requiresApproval"]["approvalId"]
    assert await wf.resume(approval_id=aid, approve=False) == {
        "protocolVersion": 1, "ok": True, "status": "cancelled", "output": [],
        "requiresApproval": None, "requiresInput": None}
    assert (await Approvals(store).get(aid))["status"] == "rejected"
    gone = await wf.resume(approval_id=aid, approve=True)
    assert gone["error"] == {"type": "parse_error",
                             "message": f'Approval ID "{aid}" not found or expired'}
    assert (await wf.list())[0]["status"] == "cancelled"


async def test_cancel_then_cancel_again(wf: Workflows, tmp_path: Path) -> None:
    token = (await paused(wf, tmp_path))["requiresApproval"]["resumeToken"]
    assert (await wf.resume(token=token, cancel=True))["status"] == "cancelled"
    again = await wf.resume(token=token, cancel=True)
    assert again["error"]["message"] == "Resume state not found"


async def test_forged_and_malformed_tokens(wf: Workflows, tmp_path: Path) -> None:
    token = (await paused(wf, tmp_path))["requiresApproval"]["resumeToken"]
    pointer = json.loads(base64.urlsafe_b64decode(token + "=="))
    pointer["stateKey"] = pointer["stateKey"][:-4] + "AAAA"
    forged = base64.urlsafe_b64encode(json.dumps(pointer).encode()).decode().rstrip("=")
    assert (await wf.resume(token=forged, approve=True))["error"]["message"] == (
        "Workflow resume state not found")
    assert (await wf.resume(token="!!", approve=True))["error"] == {
        "type": "parse_error", "message": "Invalid token"}
    wrong_kind = await wf.resume(token=token, response={"a": 1})
    assert wrong_kind["error"] == {"type": "parse_error", "message": (
        "Workflow resume requires --approve yes|no for approval requests")}
    assert (await wf.resume(token=token, approve=True))["status"] == "ok"  # still usable


async def test_required_approver(wf: Workflows, tmp_path: Path) -> None:
    f = write(tmp_path, """
steps:
  - id: build
    run: echo built
    approval: {prompt: "Deploy?", initiated_by: alice, required_approver: bob,
               require_different_approver: true}
  - id: deploy
    run: echo "$build.approvedBy $build.initiatedBy"
""")
    env = await wf.run(f)
    req = env["requiresApproval"]
    assert (req["initiatedBy"], req["requiredApprover"], req["requireDifferentApprover"]) == (
        "alice", "bob", True)
    assert req["items"] == [] and req["preview"] == "built"
    token = req["resumeToken"]
    nobody = await wf.resume(token=token, approve=True)
    assert nobody["error"] == {"type": "parse_error", "message": (
        "Workflow step build approval requires approver identity;"
        " set LOBSTER_APPROVAL_APPROVED_BY")}
    carol = await wf.resume(token=token, approve=True, approved_by="carol")
    assert carol["error"]["message"] == (
        "Workflow step build approval requires approver 'bob', got 'carol'")
    assert (await wf.resume(token=token, approve=True, approved_by="bob"))["output"] == [
        "bob alice\n"]


async def test_input_gate(wf: Workflows, tmp_path: Path, store: Any) -> None:
    env = await wf.run(write(tmp_path, INPUT))
    assert env["status"] == "needs_input"
    req = env["requiresInput"]
    assert list(req) == ["type", "prompt", "responseSchema", "subject", "resumeToken",
                         "approvalId"]  # the last is clawtower's (deviation 12)
    assert req["subject"] is None
    pending = await Approvals(store).pending()
    assert pending[0]["kind"] == "workflow_input" and pending[0]["id"] == req["approvalId"]
    bad = await wf.resume(token=req["resumeToken"], response={})
    assert bad["error"] == {"type": "parse_error", "message": (
        "Workflow input step review response failed schema validation at /: must have required"
        " property 'title'")}
    assert await wf.check_response(pending[0]["id"], {"title": 3}) == (
        "Workflow input step review response failed schema validation at /title: must be"
        " string")
    wrong = await wf.resume(token=req["resumeToken"], approve=True)
    assert wrong["error"]["message"] == (
        "Workflow resume requires --response-json for input requests")
    good = await wf.resume(token=req["resumeToken"], response={"title": "T"})
    assert good["output"] == ["T\n"]


async def test_clawtower_approve_and_reject_decide_gates(wf: Workflows, tmp_path: Path,
                                                         store: Any) -> None:
    aid = (await paused(wf, tmp_path))["requiresApproval"]["approvalId"]
    decided = await Approvals(store).approve(aid, by="ops")
    assert decided["decision"] == "approved" and decided["run_status"] == "ok"
    assert decided["envelope"]["output"] == ["done true ops\n"]
    aid2 = (await paused(wf, tmp_path))["requiresApproval"]["approvalId"]
    rejected = await Approvals(store).reject(aid2, by="ops", reason="no")
    assert rejected["run_status"] == "cancelled"
    env = await wf.run(write(tmp_path, INPUT, "in.lobster"))
    aid3 = env["requiresInput"]["resumeToken"] and (await Approvals(store).pending())[0]["id"]
    with pytest.raises(ValidationError, match="needs an answer"):
        await Approvals(store).approve(aid3, by="ops")
    with pytest.raises(ValidationError, match="must have required property 'title'"):
        await wf.respond(aid3, {}, by="ops")
    answered = await wf.respond(aid3, {"title": "ok"}, by="ops")
    assert answered["envelope"]["output"] == ["ok\n"]
    assert (await Approvals(store).get(aid3))["status"] == "answered"
    assert await store.verify_projections() == []


async def test_cancel_a_paused_run(wf: Workflows, tmp_path: Path, store: Any) -> None:
    env = await paused(wf, tmp_path)
    run_id = (await wf.list())[0]["id"]
    await wf.cancel(run_id, by="ops")
    assert (await wf.get(run_id))["status"] == "cancelled"
    assert (await Approvals(store).get(env["requiresApproval"]["approvalId"]))["status"] == (
        "withdrawn")
    assert (await wf.resume(token=env["requiresApproval"]["resumeToken"], approve=True))[
        "error"]["message"] == "Workflow resume state not found"


async def test_resume_rereads_the_file_and_warns_when_it_changed(store: Any,
                                                                 tmp_path: Path) -> None:
    errs: list[str] = []
    wf = Workflows(store, env={"PATH": os.environ.get("PATH", "/bin")}, cwd=str(tmp_path),
                   stderr=errs.append)
    f = write(tmp_path, "steps:\n  - id: g\n    approval: ok?\n  - id: a\n    run: echo old\n")
    token = (await wf.run(f))["requiresApproval"]["resumeToken"]
    write(tmp_path, "steps:\n  - id: g\n    approval: ok?\n  - id: a\n    run: echo new\n")
    assert (await wf.resume(token=token, approve=True))["output"] == ["new\n"]
    assert any("changed since run W-1 started" in e for e in errs)


async def test_a_rejected_gate_tells_the_truth(wf: Workflows, tmp_path: Path,
                                               store: Any) -> None:
    """After a reject: later steps say they never ran, the reason is on the run, and the log
    says the gate in one event (issue 24.2): its start, its approvals item and its pause,
    projected in that order, and nothing said of its step being done while it waits."""
    aid = (await paused(wf, tmp_path))["requiresApproval"]["approvalId"]
    run_id = (await wf.list())[0]["id"]
    log = await store.events_after(0, 1000)
    types = [(e.type, getattr(e.payload, "step_id", None)) for e in log]
    assert ("workflow.step_finished", "gate") not in types  # not "done" while it waits
    assert ("approval.requested", None) not in types and types[-1] == ("workflow.paused", "gate")
    pause = log[-1].payload
    assert pause.started is not None and pause.started.step_id == "gate"
    assert pause.asked is not None and pause.approval_id == aid and pause.asked_role == "approver"
    await Approvals(store).reject(aid, by="ops", reason="not this week")
    run = await wf.get(run_id)
    assert (run["status"], run["error"]) == ("cancelled", "rejected: not this week")
    assert [(s["id"], s["status"]) for s in run["steps"]] == [
        ("prep", "done"), ("gate", "cancelled"), ("after", "cancelled")]
    assert (await Approvals(store).get(aid))["reason"] == "not this week"
    assert await store.verify_projections() == []


async def test_an_approved_gate_resumes_with_the_output_recorded_at_its_pause(
        wf: Workflows, tmp_path: Path, store: Any) -> None:
    """The gate's step output now travels with its pause: resuming still sees it."""
    env = await paused(wf, tmp_path)
    run_id = (await wf.list())[0]["id"]
    waiting = next(s for s in (await wf.get(run_id))["steps"] if s["id"] == "gate")
    assert waiting["status"] == "waiting"
    assert waiting["result"]["json"] == {"count": 2, "who": "team"}
    out = await wf.resume(token=env["requiresApproval"]["resumeToken"], approve=True,
                          approved_by="ops")
    assert out["output"] == ["done true ops\n"]
    gate = next(s for s in (await wf.get(run_id))["steps"] if s["id"] == "gate")
    assert gate["status"] == "done" and gate["result"]["approved"] is True
    assert await store.verify_projections() == []


async def test_two_resumes_of_one_gate_one_wins_and_only_it_runs_the_next_step(
        wf: Workflows, tmp_path: Path, store: Any) -> None:
    """A resume's claim of its gate is written with the run's next write (issue 36), not
    before: two resumes racing with one token both reach that write, one commits, the other
    is refused and writes nothing, and the step after the gate runs once."""
    flow = write(tmp_path, "steps:\n  - id: gate\n    approval: go?\n"
                 "  - id: after\n    run: echo ran >> after\n")
    token = (await wf.run(flow))["requiresApproval"]["resumeToken"]
    before = await store.last_seq()
    a, b = await asyncio.gather(wf.resume(token=token, approve=True, approved_by="a"),
                                wf.resume(token=token, approve=True, approved_by="b"))
    assert sorted([a["ok"], b["ok"]]) == [False, True]
    lost = a if not a["ok"] else b
    assert lost["error"]["message"] == "Workflow resume state not found"
    assert (tmp_path / "after").read_text() == "ran\n"
    types = [e.type for e in await store.events_after(before, 1000)]
    assert types.count("workflow.resumed") == 1 and "workflow.finished" in types
    assert await store.verify_projections() == []


async def test_a_gate_after_a_gate_is_one_commit(wf: Workflows, tmp_path: Path,
                                                 store: Any) -> None:
    """Resume -> the next gate persisted: the claim, the decision, the next gate's start,
    its approvals item, the pause and the lease let go, in one commit."""
    flow = write(tmp_path, "steps:\n  - id: g1\n    approval: one?\n"
                 "  - id: g2\n    approval: two?\n  - id: g3\n    approval: three?\n")
    token = (await wf.run(flow))["requiresApproval"]["resumeToken"]
    for gate in ("g2", "g3"):
        batches = store.batches
        env = await wf.resume(token=token, approve=True)
        assert store.batches - batches == 1
        token = env["requiresApproval"]["resumeToken"]
        row = await store.fetchone("SELECT status, waiting_step FROM workflow_runs")
        assert row == {"status": "paused", "waiting_step": gate}
    assert (await wf.resume(token=token, approve=True))["status"] == "ok"


async def test_a_resume_cancelled_before_its_first_write_leaves_the_gate_waiting(
        wf: Workflows, tmp_path: Path, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of a resume is written before the run's next write: cancelled before it, the
    run still waits at its gate and the same token resumes it afterwards."""
    from clawtower.core.workflows import runner

    token = (await paused(wf, tmp_path))["requiresApproval"]["resumeToken"]
    before = await store.last_seq()
    entered, hold = asyncio.Event(), asyncio.Event()
    original = runner.Runner.run

    async def held(self: Any, *args: Any) -> Any:
        entered.set()
        await hold.wait()
        return await original(self, *args)

    monkeypatch.setattr(runner.Runner, "run", held)
    task = asyncio.create_task(wf.resume(token=token, approve=True))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await store.last_seq() == before
    row = await store.fetchone("SELECT status, waiting_step FROM workflow_runs")
    assert row == {"status": "paused", "waiting_step": "gate"}
    monkeypatch.setattr(runner.Runner, "run", original)
    env = await wf.resume(token=token, approve=True, approved_by="bob")
    assert env["output"] == ["done true bob\n"]
