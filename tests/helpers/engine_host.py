"""The composed engine (core/workers.py: `build_engine`, every worker) in a process of its
own, for the kill -9 half of the protocol contract (tests/test_protocol_contract.py): it
shares nothing with the test but the store's path or URL.

    python engine_host.py STORE CONFIG TTL_S

CONFIG: a clawtower.yaml on the simulator (its agents for the tasks worker and the
meetings it adopts, the whole file for the session turns and the flows); the trigger
worker's experts come from $CLAWTOWER_HOME. TTL_S: the session worker's lease (a killed
worker's turn jobs are taken over once it lapses). Prints READY once the engine runs, then runs
until killed.
"""

from __future__ import annotations

import asyncio
import sys

from clawtower.core.agents.config import load_agents, load_config
from clawtower.core.store import open_store
from clawtower.core.workers import build_engine


async def main(target: str, config: str, ttl: float) -> None:
    store = await open_store(target)
    engine = build_engine(store, load_agents(config), config=load_config(config),
                          session_kw={"lease_ttl_s": ttl},
                          warn=lambda text: print(text, file=sys.stderr, flush=True))
    runner = asyncio.create_task(engine.run())
    await asyncio.sleep(0)
    print("READY", flush=True)
    await runner


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
