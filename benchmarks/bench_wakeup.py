"""Cross-process wake-up: an approval decided in one process, seen by the engine in another.

Two processes share nothing but the store (a file, or a PostgreSQL URL). The "engine"
(this process) requests an approval and waits in `store.wait_for_change`, as the
orchestrator does; the "console" (a child process) is handed the id, takes t0 =
CLOCK_MONOTONIC (one clock for every process on the machine) and calls
`Approvals.approve`. The engine takes t1 once its read shows the approval decided.
Reported: p50/p99 of t1 - t0 in ms, per mode, modes interleaved repetition by repetition:

  sqlite-poll   SQLite, waiters look at the file every 0.1 s (the code before the wake channel)
  sqlite-wake   SQLite with the wake channel (core/store/notify.py)
  postgres      PostgreSQL with LISTEN/NOTIFY (a local pgserver, or --pg URL)

Targets: p50 <= 5 ms on SQLite, <= 10 ms on PostgreSQL.

    .venv/bin/python benchmarks/bench_wakeup.py [--quick] [--cycles N] [--pg URL]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import _common as cm

from clawtower.core.approvals import Approvals
from clawtower.core.store import open_store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role

TARGETS = {"sqlite-poll": None, "sqlite-wake": 5.0, "postgres": 10.0}

CONSOLE = textwrap.dedent("""
    import asyncio, sys, time
    from clawtower.core.approvals import Approvals
    from clawtower.core.store import open_store

    async def main():
        store = await open_store(sys.argv[1])
        approvals = Approvals(store)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                break
            t0 = time.monotonic()
            await approvals.approve(line.strip(), by="operator")
            print(repr(t0), flush=True)
        await store.close()

    asyncio.run(main())
""")


async def run_mode(mode: str, target: str, cycles: int, warmup: int) -> list[float]:
    store = await open_store(target)
    if mode == "sqlite-poll":
        store.cross_process_wake = False  # type: ignore[attr-defined]
    if mode == "postgres":
        await asyncio.wait_for(store.listening.wait(), 30)  # type: ignore[attr-defined]
    console = subprocess.Popen([sys.executable, "-c", CONSOLE, target], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, cwd=cm.REPO,
                               env={**__import__("os").environ, "PYTHONPATH": str(cm.REPO)})
    assert console.stdin is not None and console.stdout is not None
    approvals = Approvals(store)
    out: list[float] = []
    try:
        for i in range(cycles + warmup):
            aid = await store.execute(lambda tx, i=i: c.request_approval(
                tx, kind="gate", subject=f"bench-{i}", title="deploy?", prompt="deploy?",
                context={}, preview="", actor="engine", role=Role.ORCHESTRATOR))
            seq = await store.last_seq()
            await asyncio.sleep(0.02)  # the engine is idle, parked in wait_for_change
            console.stdin.write(aid + "\n")
            console.stdin.flush()
            while True:
                seq = await store.wait_for_change(seq, 30.0)
                if (await approvals.get(aid))["status"] != "pending":
                    t1 = time.monotonic()
                    break
            t0 = float(await asyncio.to_thread(console.stdout.readline))
            if i >= warmup:
                out.append((t1 - t0) * 1000)
    finally:
        console.stdin.close()
        console.wait(60)
        await store.close()
    return out


async def main() -> int:
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--cycles", type=int, default=None, help="approvals per mode and repetition")
    p.add_argument("--pg", metavar="URL", help="a PostgreSQL server (default: a local pgserver)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    cycles = args.cycles or (10 if args.quick else 100)
    warmup = 3
    results: dict[str, list[float]] = {m: [] for m in TARGETS}
    with cm.work_dir(args) as d:
        pg = args.pg
        if pg is None:
            from clawtower.core.store import pglocal

            pg = pglocal.start(Path(tempfile.mkdtemp(prefix="clawtower-bench-pg-")) / "data",
                               stop_at_exit=True)
        import psycopg

        for r in range(reps):
            for mode in TARGETS:
                if mode == "postgres":
                    name = f"bench_wakeup_{r}_{int(time.time())}"
                    with psycopg.connect(pg, autocommit=True) as conn:
                        conn.execute(f"CREATE DATABASE {name}")
                    from urllib.parse import urlsplit, urlunsplit

                    target = urlunsplit(urlsplit(pg)._replace(path="/" + name))
                else:
                    target = str(d / f"{mode}-{r}.db")
                results[mode] += await run_mode(mode, target, cycles, warmup)
    rows: list[list[Any]] = []
    for mode, xs in results.items():
        p50, p99 = cm.percentile(xs, 50), cm.percentile(xs, 99)
        target = TARGETS[mode]
        verdict = "-" if target is None else ("met" if p50 <= target else "MISSED")
        rows.append([mode, len(xs), cm.fmt_num(p50), cm.fmt_num(p99),
                     cm.fmt_num(max(xs)), "-" if target is None else f"<= {target}", verdict])
    cm.print_table(f"cross-process approval wake-up, ms ({reps} reps x {cycles} cycles)",
                   ["mode", "n", "p50", "p99", "max", "target p50", ""], rows)
    cm.write_json(args.json, {"results": results, "machine": cm.machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
