"""The sessions part of `clawtower demo` (and of the console's tests and screenshots): a
parent that fanned out to subagents and synthesised their announces, a tool loop that was
steered and resumed from its backlog, and (with `live`) a parent whose fan-out is queued for
the console's worker to run while the operator watches.

Deterministic: the simulator answers by the directives in the messages (`#spawn`, `#work`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..agents.config import config_from_data
from ..sessions.service import Sessions
from ..sessions.skills import SkillSet
from ..sessions.specs import AgentSpecConfig
from ..store.interface import Store
from ..workers import ComposedEngine, build_engine


def _engine(store: Store, config: dict[str, Any], session: str, **kw: Any) -> ComposedEngine:
    """The engine with its session worker only, for `session` (and its subagents)."""
    return build_engine(store, None, workers=["sessions"],
                        config=config_from_data(config, "demo"),
                        session_kw={"skills": SkillSet(), "owner": "demo-seed",
                                    "sessions": {session}, **kw})


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
    if not await _engine(store, {"speed": 0}, review, tools=False).run_until_idle(timeout_s):
        raise TimeoutError("demo: the fan-out did not finish")
    migration = await s.create(agent="worker", title="Table migration", by="demo")
    await s.send(migration, "#work 6 migrate the tables", sender="demo")
    # a model that takes 30 ms a call: long enough to steer the loop while it runs
    steady = _engine(store, {"speed": 1, "delay_ms": [30, 30]}, migration)
    worker = asyncio.create_task(steady.run())
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            row = await store.fetchone(
                "SELECT count(*) AS n FROM turn_jobs j JOIN turn_tools t ON t.turn_id ="
                " j.turn_id WHERE j.session_id=? AND j.status='running'", (migration,))
            if row and row["n"] >= 2:
                break
            if loop.time() > deadline or worker.done():
                raise TimeoutError("demo: the tool loop did not start")
            await asyncio.sleep(0.005)
        await s.send(migration, "Is the users table done yet?", sender="demo")
        if not await steady.until_idle(max(0.0, deadline - loop.time())):
            raise TimeoutError("demo: the steered loop did not finish")
    finally:
        steady.stop()
        await worker
    roots = [review, migration]
    if live:
        shards = await s.create(agent="lead", title="Shard check (live)", by="demo")
        await s.send(shards, "#spawn 4 worker check one shard each", sender="demo")
        roots.append(shards)
    return roots


__all__ = ["seed_sessions"]
