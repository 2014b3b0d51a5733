"""Opening a PostgreSQL store: the replica replayed in memory (before) vs kept in a file
between opens (core/store/replica.py, after), as the log grows.

The log is real lifecycle traffic: tasks driven through the whole protocol with simulated
agents (the bench_lifecycle workload) on a SQLite file, copied into PostgreSQL with
`copy_log` (`clawtower store copy`). For each size, every repetition
times `open_store(url)` + `close()` in this process:

  memory            CLAWTOWER_REPLICA_DIR=:memory: (the behaviour before): replays all N
  kept, first open  an empty replica folder: replays all N into the file (once per machine)
  kept, reopen      the replica left by the previous open: nothing to replay
  kept, +1000       1,000 events logged by another process since: replays those

Each repetition adds those 1,000 events to the log: "log events" is the size before the
first repetition, "replayed" what the last repetition's open replayed.

    .venv/bin/python benchmarks/bench_replica_open.py [--quick] [--reps N] [--pg URL]
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _common as cm
from bench_backends import database, lifecycle, note

from clawtower.core.store import open_store
from clawtower.core.store.copy import copy_log


async def seed(server: str, sqlite_file: Path, events: int) -> str:
    """A PostgreSQL store with about `events` events of lifecycle traffic (~23 per task)."""
    await lifecycle(str(sqlite_file), max(1, events // 23))
    url = database(server, f"replica_{uuid.uuid4().hex[:8]}")
    src, dst = await open_store(str(sqlite_file)), await open_store(url)
    try:
        await copy_log(src, dst)
    finally:
        await src.close()
        await dst.close()
    return url


async def timed_open(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    s = await open_store(url)
    dt = time.perf_counter() - t0
    replayed = int(getattr(s, "replayed", -1))
    await s.close()
    return dt * 1000, replayed


async def main() -> None:
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--pg", metavar="URL", help="a PostgreSQL server (default: a local pgserver)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    sizes = [2_000, 10_000] if args.quick else [10_000, 50_000, 100_000]
    server = args.pg
    if server is None:
        from clawtower.core.store import pglocal

        server = pglocal.start(Path(tempfile.mkdtemp(prefix="clawtower-bench-pg-")) / "data",
                               stop_at_exit=True)
    rows: list[list[Any]] = []
    res: dict[str, dict[str, list[float]]] = {}
    with cm.work_dir(args) as d:
        for size in sizes:
            url = await seed(server, d / f"life-{size}.db", size)
            s = await open_store(url)
            n = await s.last_seq()
            await s.close()
            cells: dict[str, list[float]] = {}
            replayed: dict[str, int] = {}
            for _ in range(reps):
                os.environ["CLAWTOWER_REPLICA_DIR"] = ":memory:"
                ms, k = await timed_open(url)
                cells.setdefault("memory (before)", []).append(ms)
                replayed["memory (before)"] = k
                folder = d / f"replicas-{size}"
                shutil.rmtree(folder, ignore_errors=True)
                os.environ["CLAWTOWER_REPLICA_DIR"] = str(folder)
                for label in ("kept, first open", "kept, reopen"):
                    ms, k = await timed_open(url)
                    cells.setdefault(label, []).append(ms)
                    replayed[label] = k
                os.environ["CLAWTOWER_REPLICA_DIR"] = ":memory:"
                other = await open_store(url)  # another process's writes, meanwhile
                await other.append([note(i) for i in range(1000)])
                await other.close()
                os.environ["CLAWTOWER_REPLICA_DIR"] = str(folder)
                ms, k = await timed_open(url)
                cells.setdefault("kept, +1000 since", []).append(ms)
                replayed["kept, +1000 since"] = k
            res[str(n)] = cells
            for label, xs in cells.items():
                rows.append([f"{n:,}", label, replayed[label], cm.fmt_num(cm.median(xs)),
                             cm.spread(xs)])
    cm.print_table(f"Opening a PostgreSQL store ({reps} reps; ms, medians, range)",
                   ["log events", "replica", "replayed", "open ms", "range"], rows)
    cm.write_json(args.json, {"results": res, "machine": cm.machine_info()})


if __name__ == "__main__":
    asyncio.run(main())
