"""Turn-loop overhead per tool round, with the simulator (speed 0), beside a bare loop.

One turn = R tool rounds (the model asks for `add`, the tool answers) and a final answer,
so R + 1 model calls and R tool calls. Three ways, interleaved turn by turn in one run:

  bare        a plain loop: `Simulator.stream` consumed by hand, the tool awaited directly,
              the messages list grown: the floor (same simulator, same tool, same messages)
  turn        `run_turn(store=None)`: budgets, cancellation checks, steering hook slot,
              streamed deltas, usage totals, ToolBox indirection; nothing recorded
  turn+store  `run_turn(store=...)`: also every event (turn.started, tool_called,
              tool_result per call, finished, one agent.usage per model call) appended to a
              real SQLite store (synchronous NORMAL) and projected

Reported: median µs per tool round ((turn time) / R), the extra µs per round over bare, and
the paired ratio to bare. Then the steer latency of `bench_sessions.py` (a session's tool
loop under its worker, `send` -> injected at the next boundary, synchronous FULL; target
p50 <= 3 ms, issue 36): a change to the turn runs this benchmark, and the steer is where a
round's extra awaited step shows (`--cycles`, 0 to skip).

    .venv/bin/python benchmarks/bench_turn_loop.py [--quick] [--reps N] [--rounds R]
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import _common as cm

from clawtower.core.agents.provider import ChatMessage, ChatRequest, ToolCall, ToolSpec
from clawtower.core.agents.simulator import Simulator, script_from_data
from clawtower.core.agents.turns import TurnBudget, run_turn
from clawtower.core.store import open_store
from clawtower.core.tools.types import ToolResult

USER = [ChatMessage(role="system", content="You add numbers."),
        ChatMessage(role="user", content="Add one, again and again.")]
SPECS = [ToolSpec(name="add", description="add a and b",
                  parameters={"type": "object", "properties": {"a": {"type": "number"},
                                                               "b": {"type": "number"}}})]


class Tools:
    async def specs(self) -> list[ToolSpec]:
        return SPECS

    async def call(self, name: str, arguments: str) -> ToolResult:
        args = json.loads(arguments)
        return ToolResult(content=str(args["a"] + args["b"]))


def simulator(rounds: int) -> Simulator:
    steps: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "add", "arguments": {"a": i, "b": 1}}]} for i in range(rounds)]
    steps.append({"text": "done"})
    return Simulator(script_from_data({"speed": 0, "scripts": {"b": {"turn": steps}}}, "bench"))


async def bare(sim: Simulator, tools: Tools, rounds: int) -> float:
    t0 = time.perf_counter()
    messages = list(USER)
    specs = await tools.specs()
    for i in range(rounds + 1):
        req = ChatRequest(model="m", messages=list(messages), tools=specs,
                          metadata={"purpose": "turn", "labels": ["b"], "round": i})
        parts: list[str] = []
        calls: list[ToolCall] = []
        async for e in sim.stream(req):
            if e.kind == "text":
                parts.append(e.text)
            elif e.kind == "tool_call" and e.tool_call is not None:
                calls.append(e.tool_call)
        messages.append(ChatMessage(role="assistant", content="".join(parts), tool_calls=calls))
        for c in calls:
            r = await tools.call(c.name, c.arguments)
            messages.append(ChatMessage(role="tool", tool_call_id=c.id, content=r.content))
    assert messages[-1].content == "done"
    return time.perf_counter() - t0


async def turn(sim: Simulator, tools: Tools, rounds: int, store: Any = None) -> float:
    t0 = time.perf_counter()
    result = await run_turn(sim, model="m", messages=USER, tools=tools, store=store,
                            subject="bench", agent="bench",
                            budget=TurnBudget(max_tool_rounds=rounds + 1, max_wall_s=60),
                            metadata={"labels": ["b"]})
    assert result.completed and result.rounds == rounds, result.stop_reason
    return time.perf_counter() - t0


async def main_async(args: Any, work: Path) -> dict[str, Any]:
    reps = cm.reps_of(args)
    rounds = args.rounds or (5 if args.quick else 20)
    sim, tools = simulator(rounds), Tools()
    store = await open_store(work / "turns.db")
    times: dict[str, list[float]] = {"bare": [], "turn": [], "turn+store": []}
    try:
        for _ in range(3):  # warm-up
            await bare(sim, tools, rounds)
            await turn(sim, tools, rounds)
            await turn(sim, tools, rounds, store)
        for i in range(reps):
            order = [("bare", None), ("turn", None), ("turn+store", store)]
            if i % 2:
                order.reverse()
            for name, st in order:
                t = await (bare(sim, tools, rounds) if name == "bare"
                           else turn(sim, tools, rounds, st))
                times[name].append(t)
        events = await store.last_seq()
    finally:
        await store.close()
    base = times["bare"]
    rows = []
    out: dict[str, Any] = {"rounds": rounds, "reps": reps, "events_recorded": events}
    for name, ts in times.items():
        ratios = [t / b for t, b in zip(ts, base, strict=True)]
        per_round = cm.median(ts) / rounds * 1e6
        extra = (cm.median(ts) - cm.median(base)) / rounds * 1e6
        rows.append([name, cm.fmt_num(cm.median(ts) * 1e3), cm.fmt_num(per_round),
                     cm.fmt_num(extra) if name != "bare" else "-",
                     f"{cm.median(ratios):.2f} ({cm.spread(ratios)})"])
        out[name] = {"turn_ms": cm.median(ts) * 1e3, "us_per_round": per_round,
                     "extra_us_per_round": extra, "ratio": cm.median(ratios)}
    cm.print_table(f"{rounds} tool rounds per turn, simulator at speed 0, {reps} paired turns",
                   ["way", "turn ms", "µs per round", "extra µs/round vs bare",
                    "÷ bare (range)"], rows)
    cycles = 0 if args.cycles == 0 else args.cycles or (30 if args.quick else 200)
    if cycles:
        from bench_sessions import TARGET_STEER_P50_MS, steer_latency

        lat = await steer_latency(work / "steer.db", cycles, "FULL")
        p50 = cm.percentile(lat, 50)
        out["steer_ms"] = {"p50": p50, "p90": cm.percentile(lat, 90), "cycles": cycles}
        cm.print_table(f"Steer latency: send -> injected at the next boundary ({cycles} cycles,"
                       " FULL), ms", ["p50", "p90", "max", "target"],
                       [[cm.fmt_num(p50), cm.fmt_num(cm.percentile(lat, 90)),
                         cm.fmt_num(max(lat)),
                         f"p50 <= {TARGET_STEER_P50_MS}: "
                         f"{'met' if p50 <= TARGET_STEER_P50_MS else 'NOT met'}"]])
    return out


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=30)
    p.add_argument("--rounds", type=int, default=None, help="tool rounds per turn (20)")
    p.add_argument("--cycles", type=int, default=None,
                   help="steer cycles (200; 30 with --quick; 0: no steer)")
    args = p.parse_args()
    info = cm.machine_info()
    with cm.work_dir(args) as work:
        info = cm.machine_info(work)
        cm.print_machine(info)
        results = asyncio.run(main_async(args, work))
    cm.write_json(args.json, {"machine": info, **results})


if __name__ == "__main__":
    main()
