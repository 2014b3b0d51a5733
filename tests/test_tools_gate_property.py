"""Issue 34, the rule as a property: no tool runs without a tier decision recorded before it.

Hypothesis draws tool names (built in, a real stdio MCP server's, unknown ones, names on an
unknown server, spawn and memory tools), server behaviours (answers at once, first start
fails, first list slow, never starts; definitions pinned or waiting, a pin approved mid-turn)
and approval policies. Every executor is audited at the moment it would run:

- the turn loop over the registry's tool box (builtin and MCP tools): a wrapper checks, when
  a call reaches the tool box, that `turn.tool_called` with tier `auto` (or `confirm`, for a
  call an operator approved) is already committed for it; the server's own log counts what
  it executed, never more than the decisions that allowed it;
- a session's turn (SessionToolBox: builtin, spawn and memory tools): the same check on
  `SessionToolBox.call`, confirm-tier calls approved or rejected by an operator.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from flaky_mcp_server import __file__ as FLAKY
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clawtower.core.agents.provider import ChatMessage, ToolCall
from clawtower.core.agents.simulator import Simulator, script_from_data
from clawtower.core.agents.turns import TurnResume, TurnState, run_turn
from clawtower.core.approvals import Approvals
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.toolbox import SessionToolBox
from clawtower.core.store import open_store
from clawtower.core.tools.approval import TierGate, ToolApprovalPolicy
from clawtower.core.tools.config import McpServerConfig
from clawtower.core.tools.registry import ToolRegistry
from clawtower.core.tools.types import ToolResult
from tests.helpers.session_helpers import run_idle, spec

TIER = st.sampled_from(["auto", "confirm", "manual"])
MCP_NAMES = ["crm.create_note", "crm.update_deal_stage", "crm.send", "crm.no_such_op"]
NAMES = st.sampled_from([*MCP_NAMES, "clock.now", "text.count", "nope", "other.tool",
                         "spawn_subagent", "memory_store"])
ARGS = {"crm.create_note": {"contact_id": "c", "body": "b"},
        "crm.update_deal_stage": {"deal_id": "d", "stage": "s"},
        "crm.send": {"to": "t", "body": "b"}, "clock.now": {"timezone": "UTC"},
        "text.count": {"text": "a b"}, "spawn_subagent": {"task": "say hi"},
        "memory_store": {"text": "remember this"}}
BEHAVIOUR = st.sampled_from(["plain", "fail-first", "slow-first", "never"])
PROPERTY = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


async def decisions(store: Any) -> list[dict[str, Any]]:
    rows = await store.fetchall("SELECT payload FROM events WHERE type='turn.tool_called'"
                                " ORDER BY seq")
    return [json.loads(r["payload"]) for r in rows]


class Audited:
    """A tool box that checks, as a call reaches it, that a decision allowing it is
    committed already (one decision per execution)."""

    def __init__(self, inner: Any, store: Any) -> None:
        self.inner, self.store = inner, store
        self.ran: Counter[str] = Counter()
        self.approved = False
        self.via_approval: set[str] = set()
        self.violations: list[str] = []

    async def specs(self) -> Any:
        return await self.inner.specs()

    async def resolve(self, name: str) -> str | ToolResult:
        resolved: str | ToolResult = await self.inner.resolve(name)
        return resolved

    async def call(self, name: str, arguments: str) -> ToolResult:
        allowing = ("auto", "confirm") if self.approved else ("auto",)
        ok = [d for d in await decisions(self.store)
              if d["name"] == name and d.get("tier") in allowing]
        self.ran[name] += 1
        if self.approved:
            self.via_approval.add(name)
        if len(ok) < self.ran[name]:
            self.violations.append(f"{name} reached the tool box undecided")
        result: ToolResult = await self.inner.call(name, arguments)
        return result


def _server(tmp: Path, behaviour: str, pin: str) -> McpServerConfig:
    cmd = [FLAKY] if behaviour != "never" else ["-c", "import sys; sys.exit(1)"]
    return McpServerConfig(name="crm", command=sys.executable, args=cmd, pin=pin,  # type: ignore[arg-type]
                           list_timeout_s=1, connect_timeout_s=20, call_timeout_s=20,
                           env={"FLAKY_MARKER": str(tmp / "marker"), "FLAKY_DELAY": "2",
                                "FLAKY_MODE": behaviour, "SALES_MCP_CALLS": str(tmp / "log")})


def _executed(tmp: Path) -> Counter[str]:
    p = tmp / "log"
    return Counter(f"crm.{json.loads(x)['tool']}" for x in p.read_text().splitlines()) \
        if p.exists() else Counter()


async def _registry_case(tmp: Path, behaviour: str, pin: str, approve_mid: bool,
                         tiers: dict[str, str], default: str,
                         rounds: list[list[str]], allow: list[str]) -> None:
    store = await open_store(str(tmp / "db.sqlite"))
    turn = [{"tool_calls": [{"name": n, "arguments": ARGS.get(n, {})} for n in calls]}
            for calls in rounds] + [{"text": "done"}]
    sim = Simulator(script_from_data({"speed": 0, "scripts": {"p": {"turn": turn}}}, "t"))
    gate = TierGate(ToolApprovalPolicy.model_validate({"default": default, "tools": tiers}))
    approvals = Approvals(store)

    async def steer(state: TurnState) -> list[ChatMessage]:
        if approve_mid:
            for a in await approvals.pending():
                if a["kind"] == "tool_pin":
                    await approvals.approve(a["id"], by="alice")
        return []

    try:
        async with ToolRegistry(store, {"crm": _server(tmp, behaviour, pin)}) as registry:
            box = Audited(registry.toolbox(allow, agent="p"), store)
            kw: dict[str, Any] = {"model": "m", "tools": box, "store": store, "gate": gate,
                                  "steer": steer, "metadata": {"labels": ["p"]}}
            result = await run_turn(sim, messages=[ChatMessage(role="user", content="go")],
                                    **kw)
            for _ in range(4):  # an operator approves each confirm-tier call
                if result.stop_reason != "awaiting_approval":
                    break

                async def decided(call: ToolCall) -> ToolResult:
                    box.approved = True
                    try:
                        return await box.call(call.name, call.arguments)
                    finally:
                        box.approved = False

                result = await run_turn(
                    sim, messages=result.messages, turn_id=result.turn_id,
                    start_recorded=True, **kw,
                    resume=TurnResume(pending=result.pending, decided=decided,
                                      rounds=result.rounds))
        assert box.violations == []
        allowed = Counter(d["name"] for d in await decisions(store)
                          if d.get("tier") in ("auto", "confirm"))
        for name, n in _executed(tmp).items():  # the server's own count
            assert n <= allowed[name], (name, n, allowed[name])
            assert name in box.ran
            # and, whatever was recorded: only the policy's auto tools ran unasked
            assert gate.tier(name) == "auto" or name in box.via_approval, name
        for d in await decisions(store):
            assert d["tier"] in ("auto", "confirm", "manual", "refused"), d
    finally:
        await store.close()


@PROPERTY
@given(behaviour=BEHAVIOUR, pin=st.sampled_from(["auto", "manual"]), approve_mid=st.booleans(),
       tiers=st.dictionaries(st.sampled_from([*MCP_NAMES, "clock.now", "crm.*", "*"]), TIER,
                             max_size=4),
       default=TIER, rounds=st.lists(st.lists(NAMES, min_size=1, max_size=3), min_size=1,
                                     max_size=2),
       allow=st.sampled_from([["crm.*", "clock.*"], ["crm.update_deal_stage"], ["*"]]))
def test_no_registry_call_runs_without_a_prior_tier_decision(
        behaviour: str, pin: str, approve_mid: bool, tiers: dict[str, str], default: str,
        rounds: list[list[str]], allow: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_registry_case(Path(tmp), behaviour, pin, approve_mid, tiers, default,
                                   rounds, allow))


async def _session_case(tmp: Path, calls: list[str], tiers: dict[str, str], default: str,
                        approve: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(str(tmp / "db.sqlite"))
    violations: list[str] = []
    ran: Counter[str] = Counter()
    real = SessionToolBox.call

    async def audited(self: SessionToolBox, name: str, arguments: str) -> ToolResult:
        ds = [d for d in await decisions(store) if d["name"] == name]
        intents = await store.fetchall("SELECT 1 FROM events WHERE type='toolcall.intent'")
        ran[name] += 1
        auto = sum(d.get("tier") == "auto" for d in ds)
        confirmed = min(sum(d.get("tier") == "confirm" for d in ds), len(intents))
        if auto + confirmed < ran[name]:
            violations.append(f"{name} reached the session's tool box undecided")
        return await real(self, name, arguments)

    monkeypatch.setattr(SessionToolBox, "call", audited)
    try:
        sessions = Sessions(store)
        await spec(sessions, "clerk", policy={
            "tools": ["clock.*", "text.count", "spawn_subagent", "memory_store"],
            "subagents": ["*"], "memory": ["*"],
            "approval": {"default": default, "tools": tiers}})
        sid = await sessions.create(agent="clerk", by="alice")
        for i, name in enumerate(calls):
            await sessions.send(sid, f"#call {name} {json.dumps(ARGS.get(name, {}))}",
                                sender="alice")
            await run_idle(store, sid)
            for a in await Approvals(store).pending():
                if a["kind"] == "tool_call":
                    decide = Approvals(store).approve if approve[i % len(approve)] \
                        else Approvals(store).reject
                    await decide(a["id"], by="bob")
                    await run_idle(store, sid)
        assert violations == []
    finally:
        monkeypatch.undo()
        await store.close()


@PROPERTY
@given(calls=st.lists(st.sampled_from(["clock.now", "text.count", "spawn_subagent",
                                       "memory_store", "nope", "memory_forget"]),
                      min_size=1, max_size=3),
       tiers=st.dictionaries(st.sampled_from(["clock.now", "spawn_subagent", "memory_*",
                                              "text.count"]), TIER, max_size=3),
       default=TIER, approve=st.lists(st.booleans(), min_size=1, max_size=3))
def test_no_session_call_runs_without_a_prior_tier_decision(
        calls: list[str], tiers: dict[str, str], default: str, approve: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_session_case(Path(tmp), calls, tiers, default, approve, monkeypatch))


async def _acp_case(tmp: Path, rule: str, operator: str, kind: str) -> None:
    """A harness's permission request (the harness runs its own tools; our answer is the
    gate): an `allow` goes back only with a decision committed before it."""
    from acp.schema import AllowedOutcome, PermissionOption, ToolCallUpdate

    from clawtower.core.acp import events as aev
    from clawtower.core.acp.client import BridgeClient
    from clawtower.core.events import NewEvent

    store = await open_store(str(tmp / "db.sqlite"))
    try:
        ws = str(tmp.resolve())
        if rule:
            await store.append([NewEvent(entity_id="rule-1", actor="ops", role="operator",
                                         payload=aev.AcpRuleSet(workspace=ws, harness="h",
                                                                tool_kind="edit",
                                                                decision=rule))])
        client = BridgeClient(store, run_id="R-1", harness="h", workspace=ws, actor="h",
                              permission_timeout_s=1.0)
        options = [PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                   PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
        asking = asyncio.create_task(client.request_permission(
            "s-1", ToolCallUpdate(tool_call_id="c-1", kind=kind, title="edit it"), options))
        if operator:
            for _ in range(200):
                pending = [a for a in await Approvals(store).pending()
                           if a["kind"] == "acp_permission"]
                if pending or asking.done():
                    break
                await asyncio.sleep(0.01)
            for a in pending:
                decide = Approvals(store).approve if operator == "approve" \
                    else Approvals(store).reject
                await decide(a["id"], by="ops")
        answer = await asyncio.wait_for(asking, 30)
        decided = await store.fetchall("SELECT payload FROM events WHERE"
                                       " type='approval.decided'")
        approved = [json.loads(r["payload"]) for r in decided
                    if json.loads(r["payload"])["decision"] == "approved"]
        granted = isinstance(answer.outcome, AllowedOutcome) \
            and answer.outcome.option_id == "allow"
        # an allow goes back only with its approval recorded first (by a rule or an operator)
        assert len(approved) == (1 if granted else 0), (answer, approved)
        ruled = rule if kind == "edit" else ""  # the rule is for edits only
        assert granted == (ruled == "allow" or (not ruled and operator == "approve"))
    finally:
        await store.close()


@PROPERTY
@given(rule=st.sampled_from(["", "allow", "reject"]),
       operator=st.sampled_from(["", "approve", "reject"]),
       kind=st.sampled_from(["edit", "execute"]))
def test_no_acp_permission_is_granted_without_a_recorded_decision(
        rule: str, operator: str, kind: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_acp_case(Path(tmp), rule, operator, kind))
