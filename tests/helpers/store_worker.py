"""A child process that hammers a store (used by the multi-process and kill -9 tests).

    python store_worker.py PATH NAME SECONDS START_AT [--print-acks] [--ops N]

Waits until the wall clock reaches START_AT (so every worker opens the file at once), then
for SECONDS (with --ops: until it has run N operations, however long that takes) appends
events and runs read-then-write commands as fast as it can:
- `append` of 1-4 notes (its acknowledged seqs are recorded),
- `count`: reads how many counter events exist and appends the next number (a lost update
  across processes would show up as a repeated number),
- task commands: creates a task and moves it a few phases (projections get exercised).
With --print-acks every acknowledged seq is printed (and flushed) as soon as the call
returns: the kill -9 test compares them with the file. At the end prints one JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

from clawtower.core import events as ev
from clawtower.core.errors import StoreError
from clawtower.core.events import NewEvent
from clawtower.core.store import open_store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.phases import Phase
from clawtower.core.tasks.spec import TaskSpec

SPEC = TaskSpec(goal="Exercise the store.", outputs=["out.txt"],
                acceptance_criteria=["The output file lists every input line once"])


def count_command(name: str):
    def run(tx: Any) -> int:
        row = tx.one("SELECT count(*) AS n FROM events WHERE entity_id='counter'")
        n = int(row["n"]) + 1
        tx.emit(NewEvent(entity_id="counter", actor=name, role="system",
                         payload=ev.Note(text=str(n))))
        return n
    return run


async def main() -> None:
    path, name, seconds, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        float(sys.argv[4])
    print_acks = "--print-acks" in sys.argv
    ops = int(sys.argv[sys.argv.index("--ops") + 1]) if "--ops" in sys.argv else None
    rng = random.Random(name)
    while time.time() < start_at:
        await asyncio.sleep(0.001)
    stats: dict[str, Any] = {"name": name, "busy_errors": 0, "other_errors": [],
                             "acked_events": 0, "appends": 0, "counts": 0, "task_cmds": 0}
    acked: list[int] = []
    store = await open_store(path)
    if print_acks:
        print("READY", flush=True)
    deadline = time.monotonic() + seconds
    i = 0
    try:
        while (i < ops) if ops is not None else (time.monotonic() < deadline):
            i += 1
            kind = rng.random()
            try:
                if kind < 0.6:
                    k = rng.randint(1, 4)
                    seqs = await store.append([
                        NewEvent(entity_id=f"{name}-{i}", actor=name, role="system",
                                 payload=ev.Note(text=f"{i}.{j}")) for j in range(k)])
                    acked.extend(seqs)
                    stats["appends"] += 1
                    if print_acks:
                        print(" ".join(map(str, seqs)), flush=True)
                elif kind < 0.9:
                    await store.execute(count_command(name))
                    stats["counts"] += 1
                else:
                    tid = await store.execute(
                        lambda tx: c.create_task(tx, SPEC, name, Role.OPERATOR))
                    await store.execute(lambda tx, t=tid: c.transition(
                        tx, t, Phase.SPEC_REVIEW, "go", name, Role.ORCHESTRATOR))
                    await store.execute(lambda tx, t=tid: c.append_review(
                        tx, t, Role.SPEC_REVIEWER, name, "approved", []))
                    await store.execute(lambda tx, t=tid: c.transition(
                        tx, t, Phase.EXECUTION_READY, "go", name, Role.ORCHESTRATOR))
                    stats["task_cmds"] += 4
            except StoreError as exc:
                text = str(exc).lower()
                if "locked" in text or "busy" in text:
                    stats["busy_errors"] += 1
                else:
                    stats["other_errors"].append(str(exc))
    finally:
        await store.close()
    stats["ops"] = i
    stats["acked_events"] = len(acked)
    stats["acked_min"] = min(acked, default=0)
    if not print_acks:
        stats["acked"] = acked
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
