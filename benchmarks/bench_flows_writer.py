"""The store writer's work per flow node (issue 24): SQL statements and writer-thread CPU per
node and per command, on the random DAG of `bench_flows.py` (or its chain, `--width 1
--concurrency 1`).

`core.store.sqlite.run_commands` is wrapped: each command is timed on the writer thread
(`time.thread_time_ns`, COMMIT not counted) and named by its function (a lambda by the first
function it calls). Statements are counted in a second run of the same flow with
`set_trace_callback` on (the callback itself costs CPU, so that run is not timed);
SAVEPOINT/RELEASE and BEGIN/COMMIT count as statements. Repetitions: the median of the
timed runs; the first run of the process (imports, model builds) is dropped.

    .venv/bin/python benchmarks/bench_flows_writer.py [--n 1000] [--width 100] [--reps 3]
                                                      [--turns]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench_flows import ours, random_dag

import clawtower.core.store.sqlite as sqlite_store
from clawtower.core.store.writer import Job

ORIGINAL = sqlite_store.run_commands


def name_of(command: Any) -> str:
    name = str(getattr(command, "__qualname__", type(command).__name__))
    code = getattr(command, "__code__", None)
    if "<lambda>" in name and code is not None and code.co_names:
        return code.co_names[0]
    return name.rsplit(".", 1)[-1]


class Meter:
    """Writer CPU and statements, per command name, while a flow runs."""

    def __init__(self, trace: bool) -> None:
        self.trace = trace
        self.ns = 0
        self.cpu: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.stmts: Counter[str] = Counter()
        self.by_sql: Counter[tuple[str, str]] = Counter()
        self.current = "(batch)"

    def _trace(self, sql: str) -> None:
        self.stmts[self.current] += 1
        key = re.sub(r"'[^']*'|\b\d[\d.]*\b", "?", sql)[:90]
        self.by_sql[(self.current, key)] += 1

    def run_commands(self, conn: Any, jobs: list[Job], now: float, path: str,
                     columns: Any = None) -> Any:
        if self.trace:
            conn.set_trace_callback(self._trace)
        wrapped = [Job(self._timed(j.command), j.future) for j in jobs]
        t0 = time.thread_time_ns()
        try:
            return ORIGINAL(conn, wrapped, now, path, columns)
        finally:
            self.ns += time.thread_time_ns() - t0
            self.current = "(batch)"
            if self.trace:
                conn.set_trace_callback(None)

    def _timed(self, command: Any) -> Any:
        name = name_of(command)

        def run(tx: Any) -> Any:
            self.current = name
            t0 = time.thread_time_ns()
            try:
                return command(tx)
            finally:
                self.cpu[name] += time.thread_time_ns() - t0
                self.calls[name] += 1
                self.current = "(batch)"
        return run


def measure(n: int, width: int, conc: int, trace: bool,
            turns: bool = False) -> tuple[Meter, dict[str, float]]:
    meter = Meter(trace)
    sqlite_store.run_commands = meter.run_commands  # type: ignore[assignment]
    try:
        with tempfile.TemporaryDirectory() as d:
            res = asyncio.run(ours(Path(d) / "flow.db", random_dag(n, width), "FULL", conc,
                                   turns=turns))
    finally:
        sqlite_store.run_commands = ORIGINAL
    return meter, res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--width", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--turns", action="store_true",
                   help="every node a real session turn (bench_flows.py --turns)")
    args = p.parse_args()
    n, conc = args.n, args.concurrency or args.width
    measure(n, args.width, conc, trace=False, turns=args.turns)  # warm-up: imports, models
    timed = [measure(n, args.width, conc, trace=False, turns=args.turns)
             for _ in range(args.reps)]
    counted, _ = measure(n, args.width, conc, trace=True, turns=args.turns)
    per_node = [m.ns / n / 1e3 for m, _ in timed]
    walls = [r["wall_s"] for _, r in timed]
    best = timed[per_node.index(statistics.median(per_node))][0] if args.reps % 2 else \
        timed[0][0]
    total = sum(counted.stmts.values())
    print(f"{n} nodes, width {args.width}, {conc} in flight, {args.reps} timed runs")
    print(f"wall (median) {statistics.median(walls):.3f} s; writer CPU per node"
          f" {statistics.median(per_node):.1f} µs (runs: "
          + ", ".join(f"{x:.1f}" for x in per_node) + ")")
    print(f"statements per node {total / n:.2f} (all commands, savepoints included)")
    print(f"{'command':28s} {'calls':>6s} {'µs/call':>9s} {'µs/node':>8s} {'stmts/node':>10s}")
    for name, calls in best.calls.most_common():
        print(f"{name[:28]:28s} {calls:6d} {best.cpu[name] / calls / 1e3:9.1f}"
              f" {best.cpu[name] / n / 1e3:8.1f} {counted.stmts[name] / n:10.2f}")
    print("statements per node, by command and SQL (top 30):")
    for (cmd, sql), c in counted.by_sql.most_common(30):
        print(f"  {c / n:5.2f}  {cmd[:16]:16s} {sql}")


if __name__ == "__main__":
    main()
