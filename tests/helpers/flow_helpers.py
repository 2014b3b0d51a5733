"""Helpers for the flow tests: agent specs, a scripted brain with gates, log counts."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from clawtower.core.flows.brains import AgentFailed, Answer, Decision
from clawtower.core.flows.service import WorkItem
from clawtower.core.sessions.service import Sessions
from clawtower.core.sessions.specs import AgentSpecConfig


async def specs(store: Any, allow: dict[str, list[str] | None]) -> None:
    """One agent spec per name, `allow` its policy.subagents."""
    s = Sessions(store)
    for name, subagents in allow.items():
        await s.set_spec(name, AgentSpecConfig.model_validate(
            {"policy": {"subagents": subagents}}))


def sub(id: str, agent: str, *deps: str, text: str = "") -> dict[str, Any]:
    return {"id": id, "agent": agent, "instruction": text or f"do {id}",
            "depends_on": list(deps)}


class GatedBrain:
    """A scripted brain: `plans` by subtask id, `fail` by subtask id; a subtask id in
    `gates` waits for its asyncio.Event before answering; `delay` sleeps per answer."""

    def __init__(self, plans: dict[str, list[dict[str, Any]]] | None = None,
                 fail: dict[str, str] | None = None,
                 gates: dict[str, asyncio.Event] | None = None, delay: float = 0.0) -> None:
        self.plans = plans or {}
        self.fail = fail or {}
        self.gates = gates or {}
        self.delay = delay
        self.seen: list[tuple[str, str]] = []  # (kind, task id)
        self.contexts: dict[str, Any] = {}

    async def _wait(self, item: WorkItem) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        gate = self.gates.get(item.local_id)
        if gate is not None:
            await gate.wait()

    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision:
        self.seen.append(("decide", item.task_id))
        self.contexts[item.local_id] = item.context
        plan = self.plans.get(item.local_id)
        return Decision("decompose", plan) if plan is not None else Decision("execute")

    async def work(self, item: WorkItem) -> Answer:
        self.seen.append(("work", item.task_id))
        await self._wait(item)
        if item.local_id in self.fail:
            raise AgentFailed(self.fail[item.local_id])
        return Answer(f"{item.local_id} by {item.agent}", tokens=3)

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer:
        self.seen.append(("synth", item.task_id))
        await self._wait(item)
        return Answer(f"{item.local_id}[" + ", ".join(str(r["result"]) for r in replies)
                      + "]", tokens=5)


async def counts(store: Any, flow_id: str) -> dict[str, Any]:
    """Per task id: TASKs dispatched and replies applied, from the log itself."""
    rows = await store.fetchall("SELECT type, payload FROM events WHERE entity_id=? AND type"
                                " IN ('flow.task_sent', 'flow.replied')", (flow_id,))
    sent: Counter[str] = Counter()
    replied: Counter[str] = Counter()
    for r in rows:
        p = json.loads(r["payload"])
        (sent if r["type"] == "flow.task_sent" else replied)[p["task_id"]] += 1
    return {"sent": sent, "replied": replied}


async def wait_status(store: Any, task_id: str, *status: str, timeout: float = 60) -> None:
    """Wait until the task exists with one of `status` (generous: a loaded machine)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        row = await store.fetchone("SELECT status FROM flow_tasks WHERE task_id=?", (task_id,))
        if row is not None and row["status"] in status:
            return
        assert loop.time() < end, f"{task_id} never reached {status} (now {row})"
        await asyncio.sleep(0.02)


def random_plans(seed: int, width: int = 6, inner: int = 4) -> dict[str, list[dict[str, Any]]]:
    """A two-level random DAG: the root splits into `width` subtasks with random
    dependencies on earlier ones; every second one splits again into `inner`."""
    import random

    rng = random.Random(seed)
    plans: dict[str, list[dict[str, Any]]] = {}
    top = []
    for i in range(width):
        deps = sorted({f"s{rng.randrange(i)}" for _ in range(rng.randint(0, 2))}) if i else []
        top.append(sub(f"s{i}", "B" if i % 2 == 0 else "W", *deps))
        if i % 2 == 0:
            plans[f"s{i}"] = [sub(f"s{i}.{j}", "W", *([f"s{i}.{j - 1}"] if j and
                                                      rng.random() < 0.5 else []))
                              for j in range(inner)]
    plans["root"] = top
    return plans


KILL_SPECS: dict[str, list[str] | None] = {"A": ["B", "W"], "B": ["W"], "W": []}
