"""A session worker in its own process, for the kill -9 test.

    python session_worker.py STORE DELAY_MS TTL_S [--until-idle]

Runs a SessionRunner on the simulator (every model call takes DELAY_MS) with leases of
TTL_S seconds; prints READY once running. Without --until-idle it runs until killed.
"""

from __future__ import annotations

import asyncio
import sys

from clawtower.core.agents.config import config_from_data
from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.store import open_store


async def main(db: str, delay_ms: int, ttl: float, until_idle: bool) -> int:
    store = await open_store(db)
    cfg = config_from_data({"speed": 1, "delay_ms": [delay_ms, delay_ms]}, "crash-worker")
    runner = SessionRunner(store, cfg, lease_ttl_s=ttl, skills=SkillSet(), max_concurrent=8)
    print("READY", flush=True)
    try:
        if until_idle:
            ok = await runner.run_until_idle(180)
            print(f"IDLE {ok} {runner.finished}", flush=True)
            return 0 if ok else 1
        await runner.run()
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]),
                              "--until-idle" in sys.argv)))
