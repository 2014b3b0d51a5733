"""The same workloads on SQLite and on PostgreSQL, and LangGraph's PostgreSQL checkpointer on
the same server.

Every repetition runs every workload on a fresh SQLite file and a fresh PostgreSQL database
(a local pgserver, or --pg URL), alternating which backend goes first:

  appends 1/commit   16 producers each awaiting `store.append([event])` (group commit)
  appends 100/commit `store.append(100 events)` calls, one after another
  linear steps       baselines.md workload 2: 1000 trivial steps in a row, each durably
                     recorded (awaited) before the next starts
  16 concurrent      16 such runs of 100 steps at once
  lifecycle          tasks through the whole protocol with simulated agents (the
                     bench_lifecycle workload, smaller): durable events/s
  approval           approve -> the decision visible to a reader woken by wait_for_change,
                     in one process: p50/p90 ms

LangGraph (only if `langgraph` and `langgraph-checkpoint-postgres` are importable, e.g.
from .venv-bench, see benchmarks/requirements-peers.txt): a one-node graph looping 1000
times with PostgresSaver, durability="sync" (every step's checkpoint committed before the
next), on the same server: the peer of "linear steps"; and 16 such runs at once, one
thread and connection each, the peer of "16 concurrent linear runs" (ours: 16 coroutines
on one store, so their awaited steps share commits). Target: ours >= 5x its steps/s.
At the end, one more linear run of each counts the server's WAL fsyncs per step
(pg_stat_wal): an awaited durable step cannot cost less than its share of one fsync.

    .venv/bin/python benchmarks/bench_backends.py [--quick] [--reps N] [--pg URL]
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import _common as cm
from bench_lifecycle import make_script, make_spec

from clawtower.core.agents.registry import AgentSet
from clawtower.core.approvals import Approvals
from clawtower.core.clock import FakeClock
from clawtower.core.events import NewEvent, Note
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.store import open_store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.service import Tasks

PAYLOAD = "x" * 300
TARGET_RATIO = 5.0
CONCURRENT_RUNS = 16


def note(i: int) -> NewEvent:
    return NewEvent(entity_id=f"n-{i % 64}", actor="bench", role="system",
                    payload=Note(text=PAYLOAD))


async def appends_one(target: str, n: int) -> float:
    store = await open_store(target)
    try:
        per = n // 16

        async def producer(p: int) -> None:
            for i in range(per):
                await store.append([note(p * per + i)])

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(p) for p in range(16)))
        return 16 * per / (time.perf_counter() - t0)
    finally:
        await store.close()


async def appends_batched(target: str, n: int) -> float:
    store = await open_store(target)
    try:
        batches = [[note(b * 100 + i) for i in range(100)] for b in range(n // 100)]
        t0 = time.perf_counter()
        for batch in batches:
            await store.append(batch)
        return len(batches) * 100 / (time.perf_counter() - t0)
    finally:
        await store.close()


async def linear_steps(target: str, steps: int) -> float:
    store = await open_store(target)
    try:
        t0 = time.perf_counter()
        for i in range(steps):
            await store.append([NewEvent(entity_id="run-1", actor="bench", role="system",
                                         payload=Note(text=f"step {i}"))])
        return steps / (time.perf_counter() - t0)
    finally:
        await store.close()


async def lifecycle(target: str, n_tasks: int) -> float:
    clock = FakeClock()
    store = await open_store(target, clock=clock)
    try:
        tasks = Tasks(store)
        orch = Orchestrator(store, AgentSet.simulated(make_script()), clock=clock,
                            concurrency=16)
        approvals = Approvals(store)
        t0 = time.perf_counter()
        for i in range(n_tasks):
            await tasks.create(make_spec(i), source=f"bench/{i}.yaml")
        assert await orch.run_until_idle(600)
        pending = await approvals.pending()
        await asyncio.gather(*(approvals.approve(a["id"], by="bench") for a in pending))
        assert await orch.run_until_idle(600)
        dt = time.perf_counter() - t0
        assert orch.errors == [], orch.errors[:3]
        return await store.last_seq() / dt
    finally:
        await store.close()


async def approval_round_trip(target: str, cycles: int) -> list[float]:
    store = await open_store(target)
    try:
        approvals = Approvals(store)
        out: list[float] = []
        for i in range(cycles + 5):
            aid = await store.execute(lambda tx, i=i: c.request_approval(
                tx, kind="gate", subject=f"b-{i}", title="ok?", prompt="ok?", context={},
                preview="", actor="engine", role=Role.ORCHESTRATOR))
            seq = await store.last_seq()

            async def engine(aid: str = aid, seq: int = seq) -> float:
                while True:
                    seq = await store.wait_for_change(seq, 30)
                    if (await approvals.get(aid))["status"] != "pending":
                        return time.perf_counter()

            waiter = asyncio.create_task(engine())
            await asyncio.sleep(0)
            t0 = time.perf_counter()
            await approvals.approve(aid, by="operator")
            t1 = await waiter
            if i >= 5:
                out.append((t1 - t0) * 1000)
        return out
    finally:
        await store.close()


async def concurrent_steps(target: str, runs: int, steps: int) -> float:
    """`runs` linear runs at once, each step awaited before the next (group commit)."""
    store = await open_store(target)
    try:
        async def run(k: int) -> None:
            for i in range(steps):
                await store.append([NewEvent(entity_id=f"run-{k}", actor="bench",
                                             role="system", payload=Note(text=f"step {i}"))])

        t0 = time.perf_counter()
        await asyncio.gather(*(run(k) for k in range(runs)))
        return runs * steps / (time.perf_counter() - t0)
    finally:
        await store.close()


def langgraph_linear(url: str) -> tuple[Callable[..., float] | None, str]:
    try:
        import langgraph
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.graph import END, START, StateGraph
        from psycopg import Connection
        from psycopg.rows import dict_row
    except ImportError as exc:
        return None, (f"LangGraph column skipped: {exc.name or exc} is not installed here"
                      " (install benchmarks/requirements-peers.txt into a side venv)")
    from typing import TypedDict

    class State(TypedDict):
        n: int
        limit: int

    def step(state: State) -> dict[str, int]:
        return {"n": state["n"] + 1}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: END if s["n"] >= s["limit"] else "step")
    conn: Any = Connection.connect(url, autocommit=True, prepare_threshold=0,
                                   row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    graph = builder.compile(checkpointer=saver)

    def one(steps: int, graph: Any = graph) -> None:
        config: Any = {"configurable": {"thread_id": uuid.uuid4().hex},
                       "recursion_limit": steps + 10}
        out = graph.invoke({"n": 0, "limit": steps}, config, durability="sync")
        assert out["n"] == steps, out

    # the concurrent peer: one connection and compiled graph per thread (psycopg
    # connections are not shared between threads running transactions)
    graphs = []
    for _ in range(CONCURRENT_RUNS):
        c: Any = Connection.connect(url, autocommit=True, prepare_threshold=0,
                                    row_factory=dict_row)
        graphs.append(builder.compile(checkpointer=PostgresSaver(c)))

    def run(steps: int, runs: int = 1) -> float:
        t0 = time.perf_counter()
        if runs == 1:
            one(steps)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(runs) as pool:
                list(pool.map(lambda g: one(steps, g), graphs[:runs]))
        return runs * steps / (time.perf_counter() - t0)

    from importlib.metadata import version as _v

    version = getattr(langgraph, "__version__", None) or _v("langgraph")
    return run, (f"LangGraph {version} with PostgresSaver"
                 f" {_v('langgraph-checkpoint-postgres')}, durability=sync")


def wal_syncs(server: str) -> int:
    """The server's WAL flushes to disk so far (pg_stat_wal; stats lag up to 1 s: sleep)."""
    import psycopg

    time.sleep(1.1)
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    return int(row[0]) if row else 0


def database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return urlunsplit(urlsplit(server)._replace(path="/" + name))


async def main() -> None:
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--pg", metavar="URL", help="a PostgreSQL server (default: a local pgserver)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    n = 800 if args.quick else 4000
    steps = 200 if args.quick else 1000
    n_tasks = 20 if args.quick else 100
    cycles = 20 if args.quick else 100
    server = args.pg
    if server is None:
        from clawtower.core.store import pglocal

        server = pglocal.start(Path(tempfile.mkdtemp(prefix="clawtower-bench-pg-")) / "data",
                               stop_at_exit=True)
    lg_run, lg_note = langgraph_linear(database(server, f"bench_langgraph_{uuid.uuid4().hex[:6]}"))
    print(lg_note)
    res: dict[str, dict[str, list[float]]] = {}

    def add(workload: str, backend: str, value: float | list[float]) -> None:
        cell = res.setdefault(workload, {}).setdefault(backend, [])
        cell.extend(value if isinstance(value, list) else [value])

    with cm.work_dir(args) as d:
        for r in range(reps):
            order = ["sqlite", "postgres"] if r % 2 == 0 else ["postgres", "sqlite"]
            for backend in order:
                def target(label: str, backend: str = backend, r: int = r) -> str:
                    if backend == "sqlite":
                        return str(d / f"{label}-{r}.db")
                    return database(server, f"b_{label}_{r}_{uuid.uuid4().hex[:6]}")

                add("appends 1/commit (events/s)", backend,
                    await appends_one(target("one"), n))
                add("appends 100/commit (events/s)", backend,
                    await appends_batched(target("batch"), n * 5))
                add("linear steps (steps/s)", backend,
                    await linear_steps(target("linear"), steps))
                add(f"{CONCURRENT_RUNS} concurrent linear runs (steps/s)", backend,
                    await concurrent_steps(target("conc"), CONCURRENT_RUNS, steps // 10))
                add("lifecycle (events/s)", backend, await lifecycle(target("life"), n_tasks))
                add("approval round trip (ms)", backend,
                    await approval_round_trip(target("appr"), cycles))
            if lg_run is not None:
                add("linear steps (steps/s)", "langgraph-pg", lg_run(steps))
                add(f"{CONCURRENT_RUNS} concurrent linear runs (steps/s)", "langgraph-pg",
                    lg_run(steps // 10, CONCURRENT_RUNS))
    rows: list[list[Any]] = []
    for workload, cells in res.items():
        if workload.startswith("approval"):
            for backend, xs in cells.items():
                rows.append([workload, backend, f"p50 {cm.fmt_num(cm.percentile(xs, 50))}",
                             f"p90 {cm.fmt_num(cm.percentile(xs, 90))}"])
            continue
        for backend, xs in cells.items():
            rows.append([workload, backend, cm.fmt_num(cm.median(xs)), cm.spread(xs)])
    cm.print_table(f"SQLite vs PostgreSQL ({reps} reps; medians, range)",
                   ["workload", "backend", "median", "range"], rows)
    for workload in ("linear steps (steps/s)",
                     f"{CONCURRENT_RUNS} concurrent linear runs (steps/s)"):
        lin = res[workload]
        if "langgraph-pg" in lin:
            ratio = cm.median(lin["postgres"]) / cm.median(lin["langgraph-pg"])
            print(f"\n{workload} on the same PostgreSQL server: ours / LangGraph = {ratio:.1f}x"
                  f" (target >= {TARGET_RATIO}x: {'met' if ratio >= TARGET_RATIO else 'MISSED'})")
    # WAL fsyncs per durable step: the floor of an awaited step's cost on this disk
    syncs: dict[str, float] = {}
    target = database(server, f"s_{uuid.uuid4().hex[:6]}")
    before = wal_syncs(server)
    await linear_steps(target, steps)
    syncs["postgres"] = (wal_syncs(server) - before) / steps
    if lg_run is not None:
        before = wal_syncs(server)
        lg_run(steps)
        syncs["langgraph-pg"] = (wal_syncs(server) - before) / steps
    print("\nWAL fsyncs per linear step (pg_stat_wal, one run each): "
          + ", ".join(f"{k} {v:.2f}" for k, v in syncs.items()))
    cm.write_json(args.json, {"results": res, "langgraph": lg_note, "wal_syncs": syncs,
                              "machine": cm.machine_info()})


if __name__ == "__main__":
    asyncio.run(main())
