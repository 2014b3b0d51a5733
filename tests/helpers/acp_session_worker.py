"""A session worker in its own process that runs ACP turns, for the kill -9 test.

    python acp_session_worker.py STORE TTL_S

Runs a SessionRunner (leases of TTL_S seconds) until killed; prints READY once running.
"""

from __future__ import annotations

import asyncio
import sys

from clawtower.core.sessions.runner import SessionRunner
from clawtower.core.sessions.skills import SkillSet
from clawtower.core.store import open_store


async def main(db: str, ttl: float) -> int:
    store = await open_store(db)
    runner = SessionRunner(store, lease_ttl_s=ttl, skills=SkillSet(), tools=False)
    print("READY", flush=True)
    try:
        await runner.run()
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], float(sys.argv[2]))))
