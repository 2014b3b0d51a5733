"""A worker process for the multi-worker fault tests: it shares nothing with its peers but
the store (a file or a PostgreSQL URL). Jobs 0..N-1 are claimed with a lease each
(core/leases.py: the same command code on both backends), started, worked on for a few ms,
and finished under a fenced check: the finish commits only while this worker still holds
the job's lease and nobody finished it, with the idempotency key done:<n>.

    python job_worker.py URL OWNER N TTL_S SEED [HOLD_AT]
Prints CLAIMED <n> for each claim (the test kills a worker once it holds some), and at the
end RETRIES <k>: write batches run again after a lost connection (PostgreSQL). With HOLD_AT,
the worker never finishes its HOLD_AT-th claim (it waits to be killed): the kill test then
surely kills a worker holding an unfinished job, however slow the machine is.
"""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

from clawtower.core import events as ev
from clawtower.core import leases
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store


def _claim(n: int, owner: str, ttl: float):  # type: ignore[no-untyped-def]
    def command(tx: Any) -> bool:
        if tx.one("SELECT 1 FROM events WHERE idem_key=?", (f"done:{n}",)) is not None:
            return False
        if not leases._acquire(tx, f"job:{n}", owner, ttl):
            return False
        tx.emit(NewEvent(entity_id=f"job-{n}", actor=owner, role="system",
                         payload=ev.Note(text=f"started {n}")))
        return True
    return command


def _finish(n: int, owner: str):  # type: ignore[no-untyped-def]
    def command(tx: Any) -> bool:
        held = leases.holder(tx, f"job:{n}")
        if held is None or held["owner"] != owner:
            return False  # fenced: the lease expired and someone else may have the job
        if tx.one("SELECT 1 FROM events WHERE idem_key=?", (f"done:{n}",)) is not None:
            return False
        tx.emit(NewEvent(entity_id=f"job-{n}", actor=owner, role="system",
                         payload=ev.Note(text=f"done {n}"), idem_key=f"done:{n}"))
        leases._release(tx, f"job:{n}", owner)
        return True
    return command


async def main(url: str, owner: str, n: int, ttl: float, seed: int, hold_at: int = 0
               ) -> None:
    rng = random.Random(seed)
    claims = 0
    store = await open_store(url)
    try:
        while True:
            rows = await store.fetchall(
                "SELECT idem_key FROM events WHERE idem_key LIKE 'done:%'")
            left = sorted(set(range(n)) - {int(r["idem_key"][5:]) for r in rows})
            if not left:
                return
            rng.shuffle(left)
            progressed = False
            for job in left[:20]:
                if not await store.execute(_claim(job, owner, ttl)):
                    continue
                print(f"CLAIMED {job}", flush=True)
                claims += 1
                if claims == hold_at:
                    await asyncio.Event().wait()  # held until the test kills this worker
                await asyncio.sleep(rng.uniform(0.001, 0.005))  # the work
                await store.execute(_finish(job, owner))
                progressed = True
            if not progressed:  # everything left is held by others: wait for a change
                await store.wait_for_change(await store.last_seq(), 0.2)
    finally:
        print(f"RETRIES {getattr(store, 'retries', 0)}", flush=True)  # batches run again
        await store.close()


if __name__ == "__main__":
    url, owner, n, ttl, seed = sys.argv[1:6]
    hold = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    asyncio.run(main(url, owner, int(n), float(ttl), int(seed), hold))
