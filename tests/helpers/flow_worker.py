"""A flow engine in its own process, for the kill -9 tests: drives every running flow of
DB with a scripted brain (random_plans(SEED)) whose answers take 0-MAX_MS ms, prints READY
once it holds the engine lease, and exits 0 when no flow has work left. With --turns the
executed subtasks run as session turns (TurnBrain, its session worker in this process),
each calling the tool text.count once; with --mcp CALLS each calls `sales.get_ticket` of
the real stdio MCP server tests/helpers/sales_mcp_server.py instead, which logs every call it
executes to CALLS (the effects, counted outside the store)."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

from flow_helpers import GatedBrain, random_plans

from clawtower.core.agents.config import config_from_data
from clawtower.core.flows.engine import LEASE, FlowEngine
from clawtower.core.flows.turns import TurnBrain
from clawtower.core.store import open_store


class SlowBrain(GatedBrain):
    def __init__(self, plans: dict[str, list[dict[str, Any]]], max_ms: float) -> None:
        super().__init__(plans)
        self.rng = random.Random()
        self.max_ms = max_ms

    async def _wait(self, item: Any) -> None:
        await asyncio.sleep(self.rng.uniform(0, self.max_ms) / 1000)


SALES = Path(__file__).resolve().parent / "sales_mcp_server.py"


def tool_plans(seed: int, mcp: bool = False) -> dict[str, list[dict[str, Any]]]:
    """random_plans(seed) whose executed subtasks each call a tool once (`#call`)."""
    def call(node: str) -> str:
        if mcp:
            return f'#call sales.get_ticket {{"ticket_id": "{node}"}}'
        return f'#call text.count {{"text": "{node} done"}}'

    return {k: [{**s, "instruction": call(s["id"])} for s in subs]
            for k, subs in random_plans(seed).items()}


async def main(db: str, seed: int, max_ms: float, turns: bool, calls: str | None) -> int:
    store = await open_store(db)
    try:
        brain: Any = SlowBrain(tool_plans(seed, calls is not None) if turns
                               else random_plans(seed), max_ms)
        if turns:  # executed nodes are TurnJobs on the simulator, each model call 0-MAX_MS
            servers = {"sales": {"command": sys.executable, "args": [str(SALES)],
                                 "env": {"SALES_MCP_CALLS": calls}, "pin": "auto"}} \
                if calls is not None else {}
            brain = TurnBrain(store, brain, config=config_from_data(
                {"speed": 1, "delay_ms": [0, max_ms], "mcp_servers": servers},
                "flow-worker"), lease_ttl_s=1.0)
        eng = FlowEngine(store, brain, concurrency=8)

        async def ready() -> None:
            while True:
                row = await store.fetchone("SELECT owner, released FROM leases WHERE name=?",
                                           (LEASE,))
                if row is not None and row["owner"] == eng.owner and not row["released"]:
                    print("READY", flush=True)
                    return
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(ready())
        ok = await eng.run(until_idle=True, timeout_s=120)
        watcher.cancel()
        if eng.errors:
            print("\n".join(eng.errors), file=sys.stderr)
        return 0 if ok and not eng.errors else 1
    finally:
        await store.close()


if __name__ == "__main__":
    mcp = sys.argv[sys.argv.index("--mcp") + 1] if "--mcp" in sys.argv else None
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                              "--turns" in sys.argv or mcp is not None, mcp)))
