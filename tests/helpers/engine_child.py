"""Child processes for the crash and lease tests.

    python engine_child.py effects STORE JOURNAL CRASH_AT
        Drive the store with an orchestrator whose effect sink exits the process (os._exit)
        at CRASH_AT: `after_intent` (the intent is committed, the effect not performed) or
        `after_effect` (performed at the receiver, its `done` not committed).
    python engine_child.py engine STORE OWNER TTL JOURNAL
        Run an Engine (lease TTL seconds) with slow simulated agents; prints HOLDING once it
        runs (it claims tasks one lease each). Runs until killed.
    python engine_child.py busy STORE JOURNAL
        Run an orchestrator plus an operator approving every pending approval, with slow
        simulated agents; prints READY, runs until killed or idle.

Every call of the sink is logged (fsync'd) to JOURNAL + ".calls" before it is made, so the
parent can count re-performed effects as well as the receiver's unique ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import AgentDef, SimScript
from clawtower.core.approvals import Approvals
from clawtower.core.effects import JournalSink
from clawtower.core.engine import Engine
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.store import open_store

AGENTS = {
    "builder": AgentDef(role="executor", model="sim-standard", escalation_model="sim-strong"),
    "checker": AgentDef(role="spec_reviewer"),
    "critic": AgentDef(role="quality_reviewer"),
}


def sim(speed: float = 0.0, delay_ms: tuple[int, int] = (150, 600)) -> AgentSet:
    return AgentSet.simulated(SimScript(speed=speed, delay_ms=delay_ms, agents=dict(AGENTS)))


class LoggingSink(JournalSink):
    """The idempotent JournalSink, logging every call first; optionally crashing."""

    def __init__(self, path: str | Path, crash_at: str | None = None) -> None:
        super().__init__(path)
        self.calls = Path(str(path) + ".calls")
        self.crash_at = crash_at

    async def perform(self, kind: str, target: str, description: str, idem_key: str) -> str:
        with self.calls.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"idem_key": idem_key, "pid": os.getpid()}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.crash_at == "after_intent":
            os._exit(77)
        result = await super().perform(kind, target, description, idem_key)
        if self.crash_at == "after_effect":
            os._exit(78)
        return result


async def effects(path: str, journal: str, crash_at: str) -> None:
    store = await open_store(path)
    o = Orchestrator(store, sim(), effects=LoggingSink(journal, crash_at))
    await o.run_until_idle(60)
    print("NO CRASH", o.errors, flush=True)
    await store.close()


async def engine(path: str, owner: str, ttl: float, journal: str) -> None:
    store = await open_store(path)
    e = Engine(store, sim(speed=1.0, delay_ms=(150, 300)), effects=LoggingSink(journal),
               lease_ttl_s=ttl, owner=owner)
    runner = asyncio.create_task(e.run())
    while not e.holding:
        await asyncio.sleep(0.01)
    print("HOLDING", flush=True)
    await runner


async def approver(store: object) -> None:
    approvals = Approvals(store)  # type: ignore[arg-type]
    while True:
        for a in await approvals.pending():
            with contextlib.suppress(Exception):  # decided meanwhile
                await approvals.approve(a["id"], by="operator")
        await asyncio.sleep(0.005)


async def busy(path: str, journal: str) -> None:
    store = await open_store(path)
    o = Orchestrator(store, sim(speed=0.3), effects=LoggingSink(journal))
    ok = asyncio.create_task(approver(store))
    print("READY", flush=True)
    await o.run_until_idle(60)
    ok.cancel()
    print("IDLE", flush=True)
    await store.close()


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "effects":
        asyncio.run(effects(args[0], args[1], args[2]))
    elif mode == "engine":
        asyncio.run(engine(args[0], args[1], float(args[2]), args[3]))
    elif mode == "busy":
        asyncio.run(busy(args[0], args[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")
