"""A flow engine in its own process, for the kill -9 tests: drives every running flow of
DB with a scripted brain (random_plans(SEED)) whose answers take 0-MAX_MS ms, prints READY
once it holds the engine lease, and exits 0 when no flow has work left."""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

from flow_helpers import GatedBrain, random_plans

from core.flows.engine import LEASE, FlowEngine
from core.store import open_store


class SlowBrain(GatedBrain):
    def __init__(self, plans: dict[str, list[dict[str, Any]]], max_ms: float) -> None:
        super().__init__(plans)
        self.rng = random.Random()
        self.max_ms = max_ms

    async def _wait(self, item: Any) -> None:
        await asyncio.sleep(self.rng.uniform(0, self.max_ms) / 1000)


async def main(db: str, seed: int, max_ms: float) -> int:
    store = await open_store(db)
    try:
        eng = FlowEngine(store, SlowBrain(random_plans(seed), max_ms), concurrency=8)

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
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))))
