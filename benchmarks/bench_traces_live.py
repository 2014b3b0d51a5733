"""Live trace export's cost to the agents (issue 38): bench_sessions.py's fan-out (a lead
spawning N subagents) and bench_flows.py's flow (a random DAG of N subtasks, each executed
as a session turn), each run with the engine's trace exporter (core/traces/live.py, a worker
in the same process and event loop, as `clawtower serve` runs it) sending to a receiver on
loopback, and without it, alternating. Reported: the median wall and CPU time (every
thread's) of each, on/off, and the median of each "on" run over the "off" run just before it
(on this shared machine wall times drift by ±15% from run to run). Target: within 5%.

    .venv/bin/python benchmarks/bench_traces_live.py [--quick] [--reps N] [--n 1000]
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from pathlib import Path
from typing import Any

import _common as cm
import bench_flows
import bench_sessions
from bench_traces import _Sink

from clawtower.core.store import open_store
from clawtower.core.traces.config import TelemetryConfig
from clawtower.core.traces.live import TracesWorker

TARGET = 0.05


def with_exporter(url: str, sent: list[int]) -> Any:
    """`open_store` whose store runs a live trace exporter until it is closed."""

    async def opened(path: Path, **kw: Any) -> Any:
        store = await open_store(path, **kw)
        worker = TracesWorker(store, TelemetryConfig(otlp_endpoint=url))
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        close = store.close

        async def closing() -> None:
            stop.set()
            await task
            sent.append(worker.sent)
            await close()

        store.close = closing  # type: ignore[method-assign]
        return store
    return opened


def main() -> None:
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--n", type=int, default=None, help="subagents and subtasks (default 1000)")
    args = p.parse_args()
    n = args.n or (100 if args.quick else 1000)
    reps = cm.reps_of(args)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    sent: list[int] = []
    live = with_exporter(url, sent)
    walls: dict[tuple[str, bool], list[float]] = {}
    cpus: dict[tuple[str, bool], list[float]] = {}
    with cm.work_dir(args) as folder:
        db = Path(folder) / "live.db"
        dag = bench_flows.random_dag(n, 100)
        for _ in range(reps):
            for on in (False, True):
                bench_sessions.open_store = live if on else open_store  # type: ignore[attr-defined]
                bench_flows.open_store = live if on else open_store  # type: ignore[attr-defined]
                r = asyncio.run(bench_sessions.ours_fanout(db, n, "NORMAL", n))
                walls.setdefault(("fan-out", on), []).append(r["wall_s"])
                cpus.setdefault(("fan-out", on), []).append(r["cpu_s"])
                r = asyncio.run(bench_flows.ours(db, dag, "NORMAL", 100, turns=True))
                walls.setdefault(("flow", on), []).append(r["wall_s"])
                cpus.setdefault(("flow", on), []).append(r["cpu_s"])
                print(f"export {'on ' if on else 'off'}  fan-out {walls['fan-out', on][-1]:.2f} s"
                      f"  flow {walls['flow', on][-1]:.2f} s"
                      + (f"  (spans sent {sent[-2:]})" if on else ""), flush=True)
    server.shutdown()
    for what in ("fan-out", "flow"):
        off, on = cm.median(walls[what, False]), cm.median(walls[what, True])
        # each "on" run beside the "off" run just before it: the machine's drift cancels
        paired = cm.median([b / a for a, b in zip(walls[what, False], walls[what, True],
                                                  strict=True)])
        cpu_off, cpu_on = cm.median(cpus[what, False]), cm.median(cpus[what, True])
        print(f"{what:>8} n={n}: wall off {off:.2f} s  on {on:.2f} s  on/off {on / off:.3f},"
              f" paired {paired:.3f}; CPU off {cpu_off:.2f} s  on {cpu_on:.2f} s  on/off"
              f" {cpu_on / cpu_off:.3f} (target <= {1 + TARGET:.2f}; wall runs off"
              f" {[round(x, 2) for x in walls[what, False]]}, on"
              f" {[round(x, 2) for x in walls[what, True]]})")


if __name__ == "__main__":
    main()
