"""An engine process for the engine fault tests (tests/test_store_engines.py): it shares
nothing with its peers but the store's URL. It runs an Engine (tasks claimed per task,
workflow runs adopted per run) with instant simulated agents until nothing is left to do in
the store, then stops.

    python engine_worker.py URL OWNER TTL_S
Prints `RUNS-OWNER <owner>` (who holds the workflow runs it drives) at start, and at the end
`ERRORS <n>` (driving errors), `RETRIES <k>` (write batches run again after a lost
connection, PostgreSQL) and `DONE`.
"""

from __future__ import annotations

import asyncio
import sys

from engine_child import sim

from clawtower.core.engine import Engine
from clawtower.core.store import open_store
from clawtower.core.tasks.scan import ACTIVE_SQL


async def left(store: object) -> int:
    rows = await store.fetchall(  # type: ignore[attr-defined]
        f"SELECT (SELECT count(*) FROM tasks WHERE phase IN ({ACTIVE_SQL}))"
        " + (SELECT count(*) FROM workflow_runs WHERE status='running') AS n")
    return int(rows[0]["n"])


async def main(url: str, owner: str, ttl: float) -> None:
    store = await open_store(url)
    engine = Engine(store, sim(speed=1.0, delay_ms=(0, 2)), lease_ttl_s=ttl, owner=owner)
    print(f"RUNS-OWNER {engine.workflows.owner}", flush=True)
    runner = asyncio.create_task(engine.run())
    try:
        while await left(store) and not runner.done():
            await store.wait_for_change(await store.last_seq(), 0.5)
            await asyncio.sleep(0.2)  # a count per change would be a query per commit
    finally:
        engine.stop()
        await runner
        errors = engine.orchestrator.errors
        for e in errors[-5:]:
            print(f"ERROR {e}", file=sys.stderr, flush=True)
        for e in list(engine.adoption_errors)[-5:]:
            print(f"ADOPTION {e}", file=sys.stderr, flush=True)
        print(f"ERRORS {len(errors)}", flush=True)
        print(f"RETRIES {getattr(store, 'retries', 0)}", flush=True)
        await store.close()
        print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
