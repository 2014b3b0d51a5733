"""Going back (issue 37): a session fork, and a flow rerun of one leaf.

1. Fork of a session with 200 turns at its turn 100: from the command (`Sessions.fork`) to
   the new session readable (`Sessions.get`), p50 over `--reps` forks. Target: <= 50 ms.
   The 200 turns are real turns on the simulator (speed 0), run once before timing.
2. A flow rerun of one leaf in a 1,000-node flow (the root splits into 20 coordinators of
   49 leaves each; a brain with no model decides, works and synthesises): the events the
   rerun command writes, and the events of the whole rerun flow once it ended, beside the
   origin's. Target: O(rerun nodes), not O(flow).

    .venv/bin/python benchmarks/bench_going_back.py [--quick] [--reps N]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from typing import Any

from _common import parser

from clawtower.core.agents.config import config_from_data
from clawtower.core.flows.brains import Answer, Decision
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.plan import FlowLimits
from clawtower.core.flows.rerun import rerun_flow
from clawtower.core.flows.service import Flows, WorkItem
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig
from clawtower.core.store import open_store


class PlanBrain:
    def __init__(self, plans: dict[str, list[dict[str, Any]]]) -> None:
        self.plans = plans
        self.calls = 0

    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision:
        self.calls += 1
        plan = self.plans.get(item.local_id)
        return Decision("decompose", plan) if plan else Decision("execute")

    async def work(self, item: WorkItem) -> Answer:
        self.calls += 1
        return Answer(f"{item.local_id} done", tokens=1)

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer:
        self.calls += 1
        return Answer(f"{item.local_id}: {len(replies)} replies", tokens=1)


async def fork_bench(folder: str, turns: int, reps: int) -> dict[str, float]:
    store = await open_store(f"{folder}/fork.db")
    try:
        sessions = Sessions(store)
        await sessions.set_spec("clerk", AgentSpecConfig.model_validate({}))
        sid = await sessions.create(agent="clerk")
        runner = SessionRunner(store, config_from_data({"speed": 0}, "bench"), tools=False)
        try:
            for i in range(turns):
                await sessions.send(sid, f"message {i}")
                assert await runner.run_until_idle(60, {sid})
        finally:
            await runner.aclose()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            out = await sessions.fork(sid, turns // 2)
            await sessions.get(out["session"])
            times.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await sessions.history(sid)
        history = (time.perf_counter() - t) * 1000
        return {"fork_p50_ms": statistics.median(times), "fork_max_ms": max(times),
                "history_ms": history}
    finally:
        await store.close()


async def flow_bench(folder: str, coordinators: int, leaves: int) -> dict[str, float]:
    store = await open_store(f"{folder}/flow.db")
    try:
        sessions = Sessions(store)
        for name, subs in (("A", ["B", "W"]), ("B", ["W"]), ("W", [])):
            await sessions.set_spec(name, AgentSpecConfig.model_validate(
                {"policy": {"subagents": subs}}))
        plans = {"root": [{"id": f"c{i}", "agent": "B", "instruction": f"c{i}"}
                          for i in range(coordinators)]}
        for i in range(coordinators):
            plans[f"c{i}"] = [{"id": f"c{i}.{j}", "agent": "W", "instruction": "leaf"}
                              for j in range(leaves)]
        flows = Flows(store, FlowLimits(max_width=max(coordinators, leaves)))
        fid = await flows.start("A", "the job")
        await FlowEngine(store, PlanBrain(plans)).run_flow(fid)
        nodes = (await flows.get(fid))["flow"]["nodes"]

        async def events(entity_id: str) -> int:
            row = await store.fetchone("SELECT count(*) AS n FROM events WHERE entity_id=?",
                                       (entity_id,))
            return int(row["n"]) if row else 0

        last = await store.last_seq()
        t = time.perf_counter()
        new = await rerun_flow(store, f"{fid}/root/c3/c3.{leaves // 2}")
        command_ms = (time.perf_counter() - t) * 1000
        row = await store.fetchone("SELECT count(*) AS n FROM events WHERE seq > ?", (last,))
        by_command = int(row["n"]) if row else 0
        brain = PlanBrain(plans)
        await FlowEngine(store, brain).run_flow(new)
        return {"nodes": nodes, "origin_flow_events": await events(fid),
                "rerun_command_events": by_command, "rerun_command_ms": command_ms,
                "rerun_flow_events": await events(new), "rerun_brain_calls": brain.calls}
    finally:
        await store.close()


async def main() -> None:
    args = parser("going back: session fork, flow rerun", reps=15).parse_args()
    reps = args.reps or (1 if args.quick else args.default_reps)
    with tempfile.TemporaryDirectory() as folder:
        fork = await fork_bench(args.dir or folder, 20 if args.quick else 200, reps)
        flow = await flow_bench(args.dir or folder, 20, 5 if args.quick else 49)
    for k, v in {**fork, **flow}.items():
        print(f"{k:<24} {v:.1f}" if isinstance(v, float) else f"{k:<24} {v}")


if __name__ == "__main__":
    asyncio.run(main())
