"""The governed turn: a spec's approval tiers in a session (core/tools/approval.py, the turn's
gate in core/agents/turns.py, the durable wait in core/sessions/gate.py), on the simulator.

confirm -> an approval in the one list and a waiting job (no worker holds it); approve ->
the call runs once and the turn goes on; reject -> the model is told; manual -> a draft,
never run; stop while waiting -> the approval is withdrawn and a late decision refused;
timeouts reject or escalate; bad policies are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.approvals import Approvals
from clawtower.core.errors import AlreadyDecided, PermissionDenied, ValidationError
from clawtower.core.sessions import gate
from clawtower.core.sessions.service import SessionLimits, Sessions
from clawtower.core.sessions.specs import parse_config
from clawtower.core.store import open_store
from clawtower.core.tools.approval import ToolApprovalPolicy
from tests.helpers.session_helpers import event_types, run_idle, runner, spec

CONFIRM = {"policy": {"tools": ["clock.now", "text.count"],
                      "approval": {"default": "auto", "tools": {"clock.*": "confirm"}}}}


async def tool_results(store: Any, name: str) -> list[dict[str, Any]]:
    return [e for e in await event_types(store, "turn.tool_result")
            if e["payload"]["name"] == name]


async def setup(tmp_path: Path, config: dict[str, Any] = CONFIRM) -> tuple[Any, Sessions, str]:
    store = await open_store(str(tmp_path / "db.sqlite"))
    sessions = Sessions(store)
    await spec(sessions, "clerk", **config)
    sid = await sessions.create(agent="clerk", by="alice")
    return store, sessions, sid


async def test_confirm_waits_then_runs_once_when_approved(tmp_path: Path) -> None:
    store, sessions, sid = await setup(tmp_path)
    try:
        await sessions.send(sid, '#call clock.now {"timezone": "UTC"}', sender="alice")
        await run_idle(store, sid)
        s = await sessions.get(sid)
        assert s["status"] == "waiting"
        pending = await Approvals(store).pending()
        assert [a["kind"] for a in pending] == ["tool_call"]
        a = pending[0]
        assert a["subject"] == sid and a["context"]["tool"] == "clock.now"
        assert json.loads(a["context"]["arguments"]) == {"timezone": "UTC"}
        assert a["context"]["agent"] == "clerk" and a["requested_by"] == "alice"
        assert await tool_results(store, "clock.now") == []  # not run while it waits
        job = await store.fetchone("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
        assert job is not None and job["status"] == "waiting"
        # a message sent while it waits queues no second job and is not lost
        sent = await sessions.send(sid, "also: thanks", sender="alice")
        assert sent["job"] is None

        out = await Approvals(store).approve(a["id"], by="bob", reason="fine")
        assert out["decision"] == "approved" and out["session"] == sid
        with pytest.raises(AlreadyDecided):
            await Approvals(store).reject(a["id"], by="carol")
        await run_idle(store, sid)
        results = await tool_results(store, "clock.now")
        assert len(results) == 1 and not results[0]["payload"]["is_error"]
        assert len(await event_types(store, "toolcall.intent")) == 1
        assert len(await event_types(store, "toolcall.done")) == 1
        s = await sessions.get(sid)
        # the message sent while waiting steered the turn at the boundary after the call
        # (the call's result is in the conversation); the interrupted task went to the
        # backlog and was taken up after the answer, as at any boundary
        replies = [m["text"] for m in s["messages"] if m["role"] == "assistant"]
        assert replies[0] == 'clerk: got it: "also: thanks"'
        assert replies[1].startswith("clerk: handled the backlog: - Resume the interrupted"
                                     " task: #call clock.now")
        assert s["status"] == "idle"
        assert await store.verify_projections() == []  # every projection replays the same
    finally:
        await store.close()


async def test_reject_tells_the_model_and_never_runs(tmp_path: Path) -> None:
    store, sessions, sid = await setup(tmp_path)
    try:
        await sessions.send(sid, "#call clock.now {}")
        r, _ = runner(store)
        try:
            assert await r.run_until_idle(30, {sid})
            [a] = await Approvals(store).pending()
            await Approvals(store).reject(a["id"], by="bob", reason="not now")
            assert await r.run_until_idle(30, {sid})
        finally:
            await r.aclose()
        [res] = await tool_results(store, "clock.now")
        assert res["payload"]["is_error"] and res["payload"]["error_kind"] == "policy"
        assert "rejected by bob: not now" in res["payload"]["content"]
        assert await event_types(store, "toolcall.intent") == []
        replies = [m["text"] for m in (await sessions.get(sid))["messages"]
                   if m["role"] == "assistant"]
        assert "rejected by bob" in replies[-1]
    finally:
        await store.close()


async def test_manual_is_a_draft_never_run(tmp_path: Path) -> None:
    config = {"policy": {"tools": ["clock.now"],
                         "approval": {"default": "manual"}}}
    store, sessions, sid = await setup(tmp_path, config)
    try:
        await sessions.send(sid, "#call clock.now {}")
        await run_idle(store, sid)
        assert await Approvals(store).pending() == []
        [draft] = await event_types(store, "turn.tool_drafted")
        assert draft["payload"]["name"] == "clock.now"
        [res] = await tool_results(store, "clock.now")
        assert res["payload"]["error_kind"] == "draft"
        assert "NOT executed" in res["payload"]["content"]
        tools = await store.fetchall("SELECT * FROM turn_tools WHERE name='clock.now'")
        assert [t["error_kind"] for t in tools] == ["draft"]
    finally:
        await store.close()


async def test_stop_while_waiting_withdraws_and_refuses_a_late_decision(tmp_path: Path
                                                                        ) -> None:
    store, sessions, sid = await setup(tmp_path)
    try:
        await sessions.send(sid, "#call clock.now {}")
        await run_idle(store, sid)
        [a] = await Approvals(store).pending()
        await sessions.stop(sid, by="alice")
        assert await Approvals(store).pending() == []
        with pytest.raises(AlreadyDecided, match="withdrawn"):
            await Approvals(store).approve(a["id"], by="bob")
        job = await store.fetchone("SELECT * FROM turn_jobs WHERE session_id=?", (sid,))
        assert job is not None and job["status"] == "cancelled"
        assert await tool_results(store, "clock.now") == []
    finally:
        await store.close()


async def test_required_and_different_approver(tmp_path: Path) -> None:
    config = {"policy": {"tools": ["clock.now"], "approval": {
        "default": "confirm", "required_approver": "bob"}}}
    store, sessions, sid = await setup(tmp_path, config)
    try:
        await sessions.send(sid, "#call clock.now {}", sender="alice")
        await run_idle(store, sid)
        [a] = await Approvals(store).pending()
        with pytest.raises(PermissionDenied, match="only bob"):
            await Approvals(store).approve(a["id"], by="alice")
        assert (await Approvals(store).get(a["id"]))["status"] == "pending"
        job = await store.fetchone("SELECT status FROM turn_jobs WHERE session_id=?", (sid,))
        assert job is not None and job["status"] == "waiting"
        await Approvals(store).approve(a["id"], by="bob")
    finally:
        await store.close()


async def test_timeout_rejects_or_escalates(tmp_path: Path) -> None:
    config = {"policy": {"tools": ["clock.now"], "approval": {
        "default": "confirm", "timeout_s": 60}}}
    store, sessions, sid = await setup(tmp_path, config)
    try:
        await sessions.send(sid, "#call clock.now {}")
        r, _ = runner(store)
        try:
            assert await r.run_until_idle(30, {sid})
            [a] = await Approvals(store).pending()
            assert await gate.sweep(store, now=a["requested_at"] + 30) == []
            done = await gate.sweep(store, now=a["requested_at"] + 61)
            assert done == [{"approval": a["id"], "action": "reject"}]
            assert await r.run_until_idle(30, {sid})
        finally:
            await r.aclose()
        [res] = await tool_results(store, "clock.now")
        assert "no decision within 60 s" in res["payload"]["content"]
        decided = await Approvals(store).get(a["id"])
        assert decided["status"] == "rejected" and decided["decided_by"] == gate.POLICY_ACTOR
    finally:
        await store.close()
    config["policy"]["approval"]["on_timeout"] = "escalate"  # type: ignore[index]
    store, sessions, sid = await setup(tmp_path / "esc", config)
    try:
        await sessions.send(sid, "#call clock.now {}")
        await run_idle(store, sid)
        [a] = await Approvals(store).pending()
        for _ in range(2):
            await gate.sweep(store, now=a["requested_at"] + 61)
        assert len(await event_types(store, "toolcall.escalated")) == 1
        assert (await Approvals(store).get(a["id"]))["status"] == "pending"
    finally:
        await store.close()


def test_bad_policies_are_one_line_errors() -> None:
    with pytest.raises(ValidationError, match=r"policy\.approval\.tools\.x"):
        parse_config({"policy": {"approval": {"tools": {"x": "sometimes"}}}}, "spec clerk")
    with pytest.raises(ValidationError, match=r"policy\.approval\.default"):
        parse_config({"policy": {"approval": {"default": "always"}}}, "spec clerk")
    p = ToolApprovalPolicy(default="auto", tools={"crm.*": "confirm", "crm.read": "auto",
                                                  "crm.update_*": "manual", "nope.*": "auto"})
    assert p.tier("crm.read") == "auto"  # exact beats glob
    assert p.tier("crm.update_deal") == "manual"  # longer glob beats shorter
    assert p.tier("crm.delete") == "confirm" and p.tier("other") == "auto"
    assert p.unmatched(["crm.read", "crm.update_deal"]) == ["nope.*"]


async def test_oversized_arguments_are_refused_before_any_tier(tmp_path: Path) -> None:
    store, _sessions, sid = await setup(tmp_path)
    try:
        big = json.dumps({"timezone": "x" * (300 * 1024)})
        roomy = Sessions(store, SessionLimits(max_message_chars=400_000))
        await roomy.send(sid, f"#call clock.now {big}")
        await run_idle(store, sid)
        assert await Approvals(store).pending() == []
        [res] = await tool_results(store, "clock.now")
        assert res["payload"]["error_kind"] == "arguments"
        assert "over the limit" in res["payload"]["content"]
    finally:
        await store.close()


def test_cli_spec_set_warns_of_a_rule_that_matches_nothing_and_refuses_a_bad_tier(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.cli.main import main

    good = tmp_path / "spec.yaml"
    good.write_text("policy:\n  tools: [clock.now]\n  approval:\n    tools:\n"
                    "      'clock.*': confirm\n      'crm.update_*': confirm\n")
    db = str(tmp_path / "db.sqlite")
    assert main(["agents", "spec", "set", "clerk", "--file", str(good), "--db", db]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning: agent spec clerk:" in err
    assert "policy.approval.tools.'crm.update_*' matches no tool" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  approval:\n    default: sometimes\n")
    assert main(["agents", "spec", "set", "clerk", "--file", str(bad), "--db", db]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and out.err.count("\n") == 1
    assert "bad.yaml: field 'policy.approval.default'" in out.err


async def test_a_configured_agent_s_tiers_hold_outside_sessions_too(tmp_path: Path) -> None:
    """`run_agent_turn` (`llm ask --tools`) has no durable layer: a confirm-tier call ends the
    turn awaiting approval, unrun; an agent imported as a spec keeps its tiers."""
    from clawtower.core.agents.config import config_from_data
    from clawtower.core.agents.provider import ChatMessage, StreamEvent, ToolCall
    from clawtower.core.agents.turns import run_agent_turn
    from clawtower.core.sessions.specs import from_agent_config
    from clawtower.core.tools.registry import ToolRegistry

    class OneCall:
        """A model that asks for clock.now once, then answers."""

        name = "simulator"

        async def stream(self, request: Any) -> Any:
            if any(m.role == "tool" for m in request.messages):
                yield StreamEvent(kind="text", text="done")
            else:
                yield StreamEvent(kind="tool_call", tool_call=ToolCall(
                    id="c1", name=request.tools[0].name, arguments="{}"))

    cfg = config_from_data({"speed": 0, "agents": {"ada": {
        "tools": ["clock.now"], "approval": {"tools": {"clock.now": "confirm"}}}}}, "test")
    cfg._built["simulator"] = OneCall()
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        async with ToolRegistry(store) as registry:
            result = await run_agent_turn(cfg, "ada", [ChatMessage(
                role="user", content="#call clock.now {}")], registry=registry, store=store)
        assert result.stop_reason == "awaiting_approval"
        assert [c.name for c in result.pending] == ["clock.now"] and result.tools == []
        spec = from_agent_config(cfg, "ada")
        assert spec.policy.approval is not None
        assert spec.policy.approval.tier("clock.now") == "confirm"
    finally:
        await store.close()


async def test_the_checkpoint_keeps_no_system_prompt_the_resumed_turn_renders_it(
        tmp_path: Path) -> None:
    """The system prompt holds ephemeral blocks (announces, recalled memories) that are never
    stored: a waiting turn's checkpoint leaves it out and the resumed turn renders it."""
    store, sessions, sid = await setup(tmp_path)
    try:
        await sessions.send(sid, "#call clock.now {}")
        await run_idle(store, sid)
        [waiting] = await event_types(store, "turnjob.waiting")
        roles = [m["role"] for m in waiting["payload"]["checkpoint"]["messages"]]
        assert "system" not in roles and roles[0] == "user"
        [a] = await Approvals(store).pending()
        await Approvals(store).approve(a["id"], by="bob")
        r, rec = runner(store)
        try:
            assert await r.run_until_idle(30, {sid})
        finally:
            await r.aclose()
        first = rec.requests[0].messages
        assert first[0].role == "system" and "clerk" in first[0].content
        assert [m.role for m in first[1:]] == ["user", "assistant", "tool"]
    finally:
        await store.close()
