"""The sessions part of `clawtower demo` (and of the console's tests and screenshots): a
parent that fanned out to subagents and synthesised their announces, a tool loop that was
steered and resumed from its backlog, and (with `live`) a parent whose fan-out is queued for
the console's worker to run while the operator watches.

Deterministic: the simulator answers by the directives in the messages (`#spawn`, `#work`).
"""

from __future__ import annotations

import asyncio

from ..agents.config import config_from_data
from ..store.interface import Store
from .runner import SessionRunner
from .service import Sessions
from .skills import SkillSet
from .specs import AgentSpecConfig


async def seed_sessions(store: Store, *, live: bool = True, timeout_s: float = 120.0
                        ) -> list[str]:
    """Seed and run the finished part; returns the top-level session ids."""
    s = Sessions(store)
    await s.set_spec("lead", AgentSpecConfig.model_validate({
        "defaults": {"system_prompt": "You coordinate subagents and synthesise their results."},
        "policy": {"tools": ["spawn_subagent", "spawn_subagents"], "subagents": ["worker"]}}),
        source="demo", by="demo")
    await s.set_spec("worker", AgentSpecConfig.model_validate({
        "defaults": {"system_prompt": "You do one focused piece of work."},
        "policy": {"tools": ["text.count"]}}), source="demo", by="demo")
    review = await s.create(agent="lead", title="Release review", by="demo")
    await s.send(review, "#spawn 3 worker review one module of the release each",
                 sender="demo")
    quick = SessionRunner(store, config_from_data({"speed": 0}, "demo"), skills=SkillSet(),
                          tools=False, owner="demo-seed")
    if not await quick.run_until_idle(timeout_s, {review}):
        raise TimeoutError("demo: the fan-out did not finish")
    migration = await s.create(agent="worker", title="Table migration", by="demo")
    await s.send(migration, "#work 6 migrate the tables", sender="demo")
    # a model that takes 30 ms a call: long enough to steer the loop while it runs
    steady = SessionRunner(store, config_from_data({"speed": 1, "delay_ms": [30, 30]},
                                                   "demo"), skills=SkillSet(),
                           owner="demo-seed")
    stop = asyncio.Event()
    worker = asyncio.create_task(steady.run(stop))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            row = await store.fetchone(
                "SELECT count(*) AS n FROM turn_jobs j JOIN turn_tools t ON t.turn_id ="
                " j.turn_id WHERE j.session_id=? AND j.status='running'", (migration,))
            if row and row["n"] >= 2:
                break
            if loop.time() > deadline:
                raise TimeoutError("demo: the tool loop did not start")
            await asyncio.sleep(0.005)
        await s.send(migration, "Is the users table done yet?", sender="demo")
        while not await steady.quiet({migration}):
            if loop.time() > deadline:
                raise TimeoutError("demo: the steered loop did not finish")
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await worker
    roots = [review, migration]
    if live:
        shards = await s.create(agent="lead", title="Shard check (live)", by="demo")
        await s.send(shards, "#spawn 4 worker check one shard each", sender="demo")
        roots.append(shards)
    return roots


__all__ = ["seed_sessions"]
