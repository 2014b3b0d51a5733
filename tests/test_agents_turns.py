"""The turn loop (core/agents/turns.py) with the simulator and a fake ToolBox: tool rounds,
every budget, cancellation (handle and asyncio), steering, policy errors fed back, events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from clawtower.core import events as ev
from clawtower.core.agents.provider import (
    ChatMessage,
    ChatRequest,
    StreamEvent,
    ToolCall,
    ToolSpec,
    Usage,
)
from clawtower.core.agents.simulator import Simulator, script_from_data
from clawtower.core.agents.turns import CancelHandle, TurnBudget, TurnState, run_turn
from clawtower.core.agents.usage import Price, usage_by_agent, usage_for_subject
from clawtower.core.tools.types import ToolResult

USER = [ChatMessage(role="system", content="You add numbers."),
        ChatMessage(role="user", content="What is 1+2 and then +4?")]


class FakeTools:
    """`add` adds; `slow` blocks until released; `secret` is not allowed (policy error)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.slow_started = asyncio.Event()
        self.release = asyncio.Event()

    async def specs(self) -> list[ToolSpec]:
        return [ToolSpec(name="add", description="add a and b",
                         parameters={"type": "object", "properties": {
                             "a": {"type": "number"}, "b": {"type": "number"}}}),
                ToolSpec(name="slow", description="waits")]

    async def call(self, name: str, arguments: str) -> ToolResult:
        self.calls.append((name, arguments))
        if name == "secret":
            return ToolResult(content="error: tool 'secret' is not allowed for this agent",
                              is_error=True, error_kind="policy")
        try:
            args = json.loads(arguments)
        except ValueError:
            return ToolResult(content="error: arguments are not JSON", is_error=True,
                              error_kind="arguments")
        if name == "add":
            return ToolResult(content=str(args["a"] + args["b"]))
        if name == "slow":
            self.slow_started.set()
            await self.release.wait()
            return ToolResult(content="slow done")
        return ToolResult(content=f"error: unknown tool {name!r}", is_error=True,
                          error_kind="unknown")


def sim(turn: list[dict[str, Any]], label: str = "t") -> Simulator:
    return Simulator(script_from_data({"speed": 0, "scripts": {label: {"turn": turn}}}, "test"))


TWO_ROUNDS = [
    {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
    {"text": "partial", "tool_calls": [{"name": "add", "arguments": {"a": 3, "b": 4}}]},
    {"text": "The answer is 7."},
]


async def turn_events(store: Any, turn_id: str) -> list[str]:
    return [e.type for e in await store.events_after(0, entity_id=turn_id)]


async def test_multi_round_tool_use_records_events_and_usage(store: Any) -> None:
    tools = FakeTools()
    deltas: list[str] = []
    result = await run_turn(sim(TWO_ROUNDS), model="sim-standard", messages=USER, tools=tools,
                            subject="task-1", agent="builder", store=store,
                            price=Price(prompt_per_mtok=1000, completion_per_mtok=2000),
                            on_text=deltas.append, metadata={"labels": ["t"]})
    assert result.stop_reason == "completed" and result.completed
    assert result.text == "The answer is 7."
    assert "".join(deltas) == "partialThe answer is 7."
    assert result.rounds == 2 and result.model_calls == 3
    assert [c[0] for c in tools.calls] == ["add", "add"]
    assert [r.result.content for r in result.tools] == ["3", "7"]
    # the tool results were fed back with their call ids
    tool_msgs = [m for m in result.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tool_msgs] == [("call_0_0", "3"),
                                                                 ("call_1_0", "7")]
    assert await turn_events(store, result.turn_id) == [
        "turn.started", "turn.tool_called", "turn.tool_result", "turn.tool_called",
        "turn.tool_result", "turn.finished"]
    # one usage event per model call, on the subject, with its cost; the final call's is
    # folded into `turn.finished` (issue 24.2), projected into the same sums
    usage_events = [e for e in await store.events_after(0, entity_id="task-1")]
    assert [e.type for e in usage_events] == ["agent.usage"] * 2
    fin = [e for e in await store.events_after(0, entity_id=result.turn_id)][-1]
    assert isinstance(fin.payload, ev.TurnFinished) and fin.payload.usage is not None
    assert fin.payload.usage_subject == "task-1" and fin.payload.usage.agent == "builder"
    total = await usage_for_subject(store, "task-1")
    assert total.calls == 3 and total.tokens == result.usage.total > 0
    expected = (result.usage.prompt_tokens * 1000 + result.usage.completion_tokens * 2000) / 1e6
    assert total.cost_usd == pytest.approx(expected) and result.cost_usd == pytest.approx(expected)
    assert (await usage_by_agent(store))["builder"].calls == 3
    row = await store.fetchone("SELECT * FROM turns WHERE id=?", (result.turn_id,))
    assert row is not None and row["status"] == "completed" and row["rounds"] == 2
    assert row["tool_calls"] == 2 and row["subject"] == "task-1"
    tools_rows = await store.fetchall("SELECT * FROM turn_tools WHERE turn_id=? ORDER BY round",
                                      (result.turn_id,))
    assert [(r["name"], r["status"], r["result"]) for r in tools_rows] == [
        ("add", "ok", "3"), ("add", "ok", "7")]
    assert await store.verify_projections() == []


async def test_answer_without_tools_is_one_call() -> None:
    result = await run_turn(sim([{"text": "hello"}]), model="m", messages=USER,
                            metadata={"labels": ["t"]})
    assert (result.stop_reason, result.text, result.model_calls, result.rounds) == (
        "completed", "hello", 1, 0)


async def test_tool_rounds_budget_stops_without_running_the_extra_calls(store: Any) -> None:
    tools = FakeTools()
    loop_forever = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}]
    result = await run_turn(sim(loop_forever), model="m", messages=USER, tools=tools,
                            budget=TurnBudget(max_tool_rounds=3), store=store,
                            metadata={"labels": ["t"]})
    assert result.stop_reason == "max_tool_rounds"
    assert result.rounds == 3 and len(tools.calls) == 3 and result.model_calls == 4
    row = await store.fetchone("SELECT status, stop_reason FROM turns WHERE id=?",
                               (result.turn_id,))
    assert row == {"status": "stopped", "stop_reason": "max_tool_rounds"}


async def test_token_budget_stops_and_caps_each_call() -> None:
    seen: list[int | None] = []

    class Counting(Simulator):
        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            seen.append(request.max_tokens)
            async for e in super().stream(request):
                yield e

    loop_forever = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}]
    base = sim(loop_forever)
    provider = Counting(base.script)
    result = await run_turn(provider, model="m", messages=USER, tools=FakeTools(),
                            budget=TurnBudget(max_tool_rounds=100, max_tokens=120),
                            metadata={"labels": ["t"]})
    assert result.stop_reason == "max_tokens"
    assert result.usage.total >= 120 and result.rounds < 100
    assert seen[0] == 120 and all(cap is not None and cap <= 120 for cap in seen)
    assert seen == sorted(seen, reverse=True)  # what is left shrinks


async def test_wall_clock_budget_ends_a_hanging_tool(store: Any) -> None:
    tools = FakeTools()  # `slow` never returns unless released
    result = await run_turn(sim([{"tool_calls": [{"name": "slow", "arguments": {}}]},
                                 {"text": "never"}]),
                            model="m", messages=USER, tools=tools, store=store,
                            budget=TurnBudget(max_wall_s=0.2), metadata={"labels": ["t"]})
    assert result.stop_reason == "max_wall_clock"
    assert tools.slow_started.is_set() and result.text == ""
    assert (await turn_events(store, result.turn_id))[-1] == "turn.finished"


async def test_wall_clock_budget_ends_a_hanging_model() -> None:
    class Hangs:
        name = "hangs"

        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            yield StreamEvent(kind="text", text="thinking")
            await asyncio.Event().wait()

    result = await run_turn(Hangs(), model="m", messages=USER,
                            budget=TurnBudget(max_wall_s=0.2))
    assert result.stop_reason == "max_wall_clock"


async def test_cancel_handle_mid_tool_keeps_what_was_recorded(store: Any) -> None:
    tools = FakeTools()
    handle = CancelHandle()
    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
              {"tool_calls": [{"name": "slow", "arguments": {}}]},
              {"text": "never"}]
    running = asyncio.create_task(run_turn(
        sim(script), model="m", messages=USER, tools=tools, store=store, subject="task-9",
        cancel=handle, metadata={"labels": ["t"]}))
    await asyncio.wait_for(tools.slow_started.wait(), 10)
    handle.cancel("operator stop")
    result = await asyncio.wait_for(running, 10)
    assert result.stop_reason == "cancelled" and result.error == "operator stop"
    assert result.rounds == 2 and [r.result.content for r in result.tools] == ["3"]
    types = await turn_events(store, result.turn_id)
    assert types == ["turn.started", "turn.tool_called", "turn.tool_result",
                     "turn.tool_called", "turn.finished"]
    row = await store.fetchone("SELECT status FROM turns WHERE id=?", (result.turn_id,))
    assert row == {"status": "cancelled"}
    # the two finished model calls were recorded on the subject
    assert (await usage_for_subject(store, "task-9")).calls == 2
    assert await store.verify_projections() == []


async def test_cancel_handle_before_start_and_between_rounds() -> None:
    handle = CancelHandle()
    handle.cancel()
    result = await run_turn(sim([{"text": "x"}]), model="m", messages=USER, cancel=handle,
                            metadata={"labels": ["t"]})
    assert result.stop_reason == "cancelled" and result.model_calls == 0

    handle2 = CancelHandle()

    async def steer(state: TurnState) -> list[ChatMessage]:
        handle2.cancel("from the hook")  # cancelled at a boundary: no call in flight
        return []

    loop_forever = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}]
    result = await run_turn(sim(loop_forever), model="m", messages=USER, tools=FakeTools(),
                            cancel=handle2, steer=steer, metadata={"labels": ["t"]})
    assert result.stop_reason == "cancelled" and result.rounds == 1


async def test_asyncio_cancellation_records_the_turn_and_propagates(store: Any) -> None:
    tools = FakeTools()
    running = asyncio.create_task(run_turn(
        sim([{"tool_calls": [{"name": "slow", "arguments": {}}]}]), model="m", messages=USER,
        tools=tools, store=store, turn_id="turn-x", metadata={"labels": ["t"]}))
    await asyncio.wait_for(tools.slow_started.wait(), 10)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    row = await store.fetchone("SELECT status, stop_reason FROM turns WHERE id='turn-x'")
    assert row == {"status": "cancelled", "stop_reason": "cancelled"}


async def test_steering_hook_injects_before_the_next_model_call(store: Any) -> None:
    seen: list[list[ChatMessage]] = []

    class Recording(Simulator):
        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            seen.append(list(request.messages))
            async for e in super().stream(request):
                yield e

    states: list[TurnState] = []

    async def steer(state: TurnState) -> list[ChatMessage]:
        states.append(state)
        if state.rounds == 1:
            return [ChatMessage(role="user", content="Actually, stop adding and say hi.")]
        return []

    provider = Recording(sim(TWO_ROUNDS).script)
    result = await run_turn(provider, model="m", messages=USER, tools=FakeTools(), steer=steer,
                            store=store, metadata={"labels": ["t"]})
    assert result.completed
    assert [s.rounds for s in states] == [1, 2]  # called after every tool round
    assert states[0].tool_calls == 1 and states[0].model_calls == 1
    second_call = seen[1]
    assert second_call[-1].content == "Actually, stop adding and say hi."
    assert second_call[-2].role == "tool"  # injected after the round's results
    assert "turn.steered" in await turn_events(store, result.turn_id)


async def test_disallowed_and_malformed_tool_calls_are_fed_back() -> None:
    seen: list[list[ChatMessage]] = []

    class Recording(Simulator):
        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            seen.append(list(request.messages))
            async for e in super().stream(request):
                yield e

    script = [{"tool_calls": [{"name": "secret", "arguments": {}},
                              {"name": "add", "arguments": "{not json"}]},
              {"text": "I may not use that."}]
    tools = FakeTools()
    result = await run_turn(Recording(sim(script).script), model="m", messages=USER,
                            tools=tools, metadata={"labels": ["t"]})
    assert result.completed and result.text == "I may not use that."
    kinds = [(r.call.name, r.result.is_error, r.result.error_kind) for r in result.tools]
    assert kinds == [("secret", True, "policy"), ("add", True, "arguments")]
    fed_back = [m.content for m in seen[1] if m.role == "tool"]
    assert fed_back == ["error: tool 'secret' is not allowed for this agent",
                        "error: arguments are not JSON"]


async def test_a_raising_toolbox_and_no_toolbox_are_error_results() -> None:
    class Broken(FakeTools):
        async def call(self, name: str, arguments: str) -> ToolResult:
            raise RuntimeError("disk on fire")

    script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, {"text": "ok"}]
    result = await run_turn(sim(script), model="m", messages=USER, tools=Broken(),
                            metadata={"labels": ["t"]})
    assert result.completed
    assert result.tools[0].result.error_kind == "failed"
    assert "disk on fire" in result.tools[0].result.content
    result = await run_turn(sim(script), model="m", messages=USER, metadata={"labels": ["t"]})
    assert result.completed and result.tools[0].result.error_kind == "unknown"


async def test_tool_names_reach_the_model_in_the_providers_alphabet() -> None:
    """OpenAI and Anthropic accept only [A-Za-z0-9_-]{1,64}: `time.now` is sent as a safe
    name, forced by that name, and the model's call by it reaches the real tool."""
    import re

    seen: list[ChatRequest] = []

    class Strict:
        name = "strict"

        async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
            seen.append(request)
            for t in request.tools:
                assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", t.name), t.name
            if len(seen) == 1:
                [spec] = request.tools
                assert request.tool_choice == spec.name
                yield StreamEvent(kind="tool_call", tool_call=ToolCall(
                    id="c1", name=spec.name, arguments="{}"))
            else:
                assert request.messages[-2].tool_calls[0].name == request.tools[0].name
                yield StreamEvent(kind="text", text="it is noon")
            yield StreamEvent(kind="usage", usage=Usage(prompt_tokens=3, completion_tokens=2))
            yield StreamEvent(kind="done", finish_reason="stop")

    class Clock:
        def __init__(self) -> None:
            self.called: list[str] = []

        async def specs(self) -> list[ToolSpec]:
            return [ToolSpec(name="time.now", description="the time")]

        async def call(self, name: str, arguments: str) -> ToolResult:
            self.called.append(name)
            return ToolResult(content="12:00")

    clock = Clock()
    result = await run_turn(Strict(), model="m", messages=USER, tools=clock,
                            first_tool_choice="time.now")
    assert result.completed and result.text == "it is noon"
    assert clock.called == ["time.now"]
    assert result.tools[0].call.name == "time.now"


async def test_provider_error_is_a_stop_reason(store: Any) -> None:
    provider = Simulator(script_from_data(
        {"speed": 0, "scripts": {"t": {"turn": [{"error": "HTTP 500"}]}}}, "test"))
    result = await run_turn(provider, model="m", messages=USER, store=store,
                            metadata={"labels": ["t"]})
    assert result.stop_reason == "error" and "HTTP 500" in result.error
    row = await store.fetchone("SELECT status, error FROM turns WHERE id=?", (result.turn_id,))
    assert row is not None and row["status"] == "failed" and "HTTP 500" in row["error"]


async def test_usage_without_price_costs_nothing(store: Any) -> None:
    await run_turn(sim([{"text": "hi"}]), model="m", messages=USER, store=store,
                   subject="meeting-1", agent="ada", metadata={"labels": ["t"]})
    total = await usage_for_subject(store, "meeting-1")
    assert total.calls == 1 and total.cost_usd == 0.0
    assert total.tokens == Usage(prompt_tokens=total.prompt_tokens,
                                 completion_tokens=total.completion_tokens).total


# -- a configured agent with the real tool registry (built-in tools, allow-list) --------------

CONFIG = """
speed: 0
agents:
  counter:
    role: executor
    system: You count words.
    tools: [text.*]
    budgets: {max_tool_rounds: 2, max_tokens: 5000, max_wall_s: 30}
    price: {prompt: 2.0, completion: 4.0}
scripts:
  counter:
    turn:
      - tool_calls:
          - {name: text.count, arguments: {text: "one two three"}}
          - {name: clock.now, arguments: {}}
      - {text: "three words"}
"""


async def test_configured_agent_with_the_tool_registry(store: Any, tmp_path: Any) -> None:
    from clawtower.core.agents.config import load_config
    from clawtower.core.agents.turns import run_agent_turn
    from clawtower.core.tools.registry import ToolRegistry

    path = tmp_path / "clawtower.yaml"
    path.write_text(CONFIG)
    cfg = load_config(path)
    seen: list[ChatRequest] = []
    sim_provider = cfg.provider("simulator")
    original = sim_provider.stream

    def spy(request: ChatRequest) -> AsyncIterator[StreamEvent]:
        seen.append(request)
        return original(request)

    sim_provider.stream = spy  # type: ignore[method-assign]
    async with ToolRegistry(store) as registry:
        result = await run_agent_turn(cfg, "counter", [ChatMessage(role="user", content="Count")],
                                      registry=registry, store=store, subject="task-3")
    assert result.completed and result.text == "three words"
    # the model saw only its allowed tools, and its system prompt first
    # the model sees the provider-safe name of text.count (see core/tools/names.py)
    assert {t.name for t in seen[0].tools} == {"text__count"}
    assert seen[0].messages[0].content == "You count words."
    ok, refused = result.tools
    assert json.loads(ok.result.content) == {"characters": 13, "words": 3, "lines": 1}
    assert refused.result.is_error and refused.result.error_kind == "policy"
    assert "not allowed for counter" in refused.result.content
    assert any("not allowed" in m.content for m in seen[1].messages if m.role == "tool")
    # the refusal is recorded; usage and cost land on the subject
    refusals = await store.fetchall("SELECT actor, target FROM refusals")
    assert refusals == [{"actor": "counter", "target": "clock.now"}]
    total = await usage_for_subject(store, "task-3")
    assert total.calls == 2 and total.cost_usd == pytest.approx(
        (total.prompt_tokens * 2.0 + total.completion_tokens * 4.0) / 1e6)
    row = await store.fetchone("SELECT * FROM turns WHERE id=?", (result.turn_id,))
    assert row is not None and row["model_calls"] == 2 and row["tool_calls"] == 2


# -- the real SmolLM2 server ------------------------------------------------------------------

async def test_real_smollm2_turn_with_a_forced_tool(store: Any, llama: str) -> None:
    """llama-cpp-python (chatml-function-calling) with a forced first tool call: the tool runs,
    its result goes back, and the turn ends within its budget with usage recorded."""
    from clawtower.core.agents.openai import OpenAIProvider

    class Weather:
        def __init__(self) -> None:
            self.calls: list[str] = []

        async def specs(self) -> list[ToolSpec]:
            return [ToolSpec(name="get_weather", description="Weather for a city",
                             parameters={"type": "object", "required": ["city"],
                                         "properties": {"city": {"type": "string"}}})]

        async def call(self, name: str, arguments: str) -> ToolResult:
            self.calls.append(arguments)
            return ToolResult(content="sunny, 21 C")

    tools = Weather()
    deltas: list[str] = []
    base = llama
    provider = OpenAIProvider("smollm2", base, timeout_s=60, retries=1)
    result = await run_turn(
        provider, model="smollm2", tools=tools, store=store, subject="task-real",
        messages=[ChatMessage(role="user", content="What is the weather in Oslo?")],
        first_tool_choice="get_weather", max_tokens_per_call=48, temperature=0.0,
        budget=TurnBudget(max_tool_rounds=1, max_wall_s=120), on_text=deltas.append)
    assert result.stop_reason in ("completed", "max_tool_rounds"), result.error
    assert result.rounds == 1 and len(tools.calls) == 1
    assert isinstance(json.loads(tools.calls[0]), dict)
    assert any(m.role == "tool" and m.content == "sunny, 21 C" for m in result.messages)
    total = await usage_for_subject(store, "task-real")
    assert total.calls == result.model_calls >= 2 and total.tokens > 0
    row = await store.fetchone("SELECT status FROM turns WHERE id=?", (result.turn_id,))
    assert row is not None and row["status"] in ("completed", "stopped")
