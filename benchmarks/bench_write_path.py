"""The store's write path alone (issue 24.1): writer CPU per event, split into encode, insert
and projection, beside raw sqlite3 `executemany` of the same rows in the same run.

The events are real: three workloads first run into temporary stores (a subagent fan-out as
`bench_sessions.py` runs it, a random flow DAG as `bench_flows.py`, a Lobster workflow through
approval gates as `bench_workflow_gate.py`). Their logs are read back, then written again on a
fresh store's connection inside one transaction per pass, the way the writer does it:
- `emit`: the writer's own `Tx.emit` per event (encode the payload to JSON, INSERT the row,
  apply the projection, build the StoredEvent): what one event costs the writer thread;
- `encode`: `payload.model_dump_json()` alone;
- `checked`: the writer's encoding, `storable.encode` (the same, then the check that refuses
  NaN and ±Infinity, issue 34): `checked - encode` is what the check costs;
- `insert`: the same per-event INSERT with the JSON already encoded, no projection;
- `project`: `projections.apply` alone, on a fresh store (no event rows);
- `floor`: one `executemany` of every row (the raw SQLite floor, encoded already).
CPU time of this thread (`time.thread_time_ns`), the median of `--reps` passes; COMMIT is not
counted (the disk's share is what `bench_appends.py` measures). Per event type, the `emit`
pass is timed event by event (a clock read adds ~0.3 µs to each). Beside it, `in run`: the
writer thread's CPU per event while the workload itself ran (every command's own reads and
savepoints with its emits, COMMIT not counted): what the writer really spends.

Target (issue 24): <= 15 µs of writer CPU per event on average over the fan-out and <= 3x the
raw executemany floor; a subagent child in <= 6 events.

    .venv/bin/python benchmarks/bench_write_path.py [--quick] [--reps N] [--n CHILDREN]
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as cm
from bench_flows import ours as flow_run
from bench_flows import random_dag
from bench_sessions import ours_fanout
from bench_workflow_gate import Ours as GateRun
from bench_workflow_gate import gate_workflow

import clawtower.core.store.sqlite as sqlite_store
from clawtower.core.events import NewEvent, StoredEvent
from clawtower.core.store import open_store, projections
from clawtower.core.store.storable import encode
from clawtower.core.store.writer import Tx

TARGET_US = 15.0
TARGET_FLOOR_RATIO = 3.0
TARGET_CHILD_EVENTS = 6
INSERT = ("INSERT INTO events (ts, entity, entity_id, type, actor, role, payload, idem_key)"
          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


async def read_log(path: Path) -> list[StoredEvent]:
    store = await open_store(path)
    try:
        out: list[StoredEvent] = []
        seq = 0
        while batch := await store.events_after(seq, limit=5000):
            out.extend(batch)
            seq = batch[-1].seq
        return out
    finally:
        await store.close()


async def fresh_store(path: Path) -> sqlite3.Connection:
    """A migrated, empty store; the writer's pragmas on a plain connection."""
    cm.remove_db(path)
    store = await open_store(path, synchronous="NORMAL")
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class WriterClock:
    """Adds up the writer thread's CPU in `run_commands` (every command of every batch,
    COMMIT excluded) while a workload runs."""

    def __init__(self) -> None:
        self.ns = 0
        self.events = 0
        self.original = sqlite_store.run_commands

    def __enter__(self) -> WriterClock:
        def timed(conn: Any, jobs: Any, now: float, path: str, columns: Any = None) -> Any:
            t0 = time.thread_time_ns()
            result = self.original(conn, jobs, now, path, columns)
            self.ns += time.thread_time_ns() - t0
            self.events += len(result.emitted)
            return result

        sqlite_store.run_commands = timed  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        sqlite_store.run_commands = self.original

    @property
    def us(self) -> float:
        return self.ns / max(1, self.events) / 1e3


def in_tx(conn: sqlite3.Connection, body: Callable[[], Any]) -> float:
    """CPU seconds of `body` inside one BEGIN IMMEDIATE (the COMMIT not counted)."""
    conn.execute("BEGIN IMMEDIATE")
    t0 = time.thread_time_ns()
    body()
    dt = time.thread_time_ns() - t0
    conn.execute("COMMIT")
    return dt / 1e9


def emit_all(conn: sqlite3.Connection, news: list[NewEvent]) -> float:
    tx = Tx(conn, now=time.time())
    return in_tx(conn, lambda: [tx.emit(ev) for ev in news])


def emit_each(conn: sqlite3.Connection, news: list[NewEvent]) -> dict[str, list[int]]:
    """Each emit timed on its own, by event family (session, turn, flow, ...)."""
    tx = Tx(conn, now=time.time())
    clock = time.thread_time_ns
    spent: dict[str, list[int]] = defaultdict(list)

    def body() -> None:
        for ev in news:
            t0 = clock()
            tx.emit(ev)
            spent[ev.type.split(".", 1)[0]].append(clock() - t0)

    in_tx(conn, body)
    return spent


def encode_all(events: list[StoredEvent]) -> float:
    t0 = time.thread_time_ns()
    for e in events:
        e.payload.model_dump_json()
    return (time.thread_time_ns() - t0) / 1e9


def checked_all(events: list[StoredEvent]) -> float:
    t0 = time.thread_time_ns()
    for e in events:
        encode(e.payload)
    return (time.thread_time_ns() - t0) / 1e9


def insert_all(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> float:
    return in_tx(conn, lambda: [conn.execute(INSERT, r) for r in rows])


def project_all(conn: sqlite3.Connection, events: list[StoredEvent]) -> float:
    return in_tx(conn, lambda: [projections.apply(conn, e) for e in events])


def floor(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> float:
    return in_tx(conn, lambda: conn.executemany(INSERT, rows))


async def measure(d: Path, name: str, events: list[StoredEvent], reps: int
                  ) -> dict[str, Any]:
    news = [NewEvent(entity_id=e.entity_id, actor=e.actor, role=e.role, payload=e.payload,
                     idem_key=e.idem_key) for e in events]
    rows = [(e.ts, e.entity, e.entity_id, e.type, e.actor, e.role,
             e.payload.model_dump_json(), e.idem_key) for e in events]
    res: dict[str, list[float]] = defaultdict(list)
    per_type: dict[str, list[int]] = {}
    for _ in range(reps):
        for step, run in (("emit", lambda c: emit_all(c, news)),
                          ("insert", lambda c: insert_all(c, rows)),
                          ("project", lambda c: project_all(c, events)),
                          ("floor", lambda c: floor(c, rows))):
            conn = await fresh_store(d / f"{name}-{step}.db")
            res[step].append(run(conn))
            conn.close()
        # alternated: whichever of the two runs first in a pass is the slower (caches)
        for step in (("encode", "checked") if len(res["encode"]) % 2 else ("checked", "encode")):
            res[step].append((encode_all if step == "encode" else checked_all)(events))
        conn = await fresh_store(d / f"{name}-types.db")
        per_type = emit_each(conn, news)
        conn.close()
    us = {k: cm.median(v) / len(events) * 1e6 for k, v in res.items()}
    types = {g: (len(v), sum(v) / len(v) / 1e3) for g, v in per_type.items()}
    return {"events": len(events), "us": us, "types": types}


async def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=5)
    p.add_argument("--n", type=int, default=None, help="subagent children (default 1000)")
    p.add_argument("--nodes", type=int, default=None, help="flow subtasks (default 1000)")
    p.add_argument("--gates", type=int, default=None, help="workflow gates (default 200)")
    args = p.parse_args()
    reps = args.reps or (1 if args.quick else 5)
    n = args.n or (100 if args.quick else 1000)
    nodes = args.nodes or (100 if args.quick else 1000)
    gates = args.gates or (20 if args.quick else 200)
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        clocks = {"fan-out": WriterClock(), "flow DAG": WriterClock(),
                  "workflow gates": WriterClock()}
        with clocks["fan-out"]:
            fan = await ours_fanout(d / "fanout.db", n, "NORMAL", n)
        with clocks["flow DAG"]:
            await flow_run(d / "flow.db", random_dag(nodes, 8), "NORMAL", 32)
        gate = GateRun(d / "gates.db", gate_workflow(d / "g.lobster", gates), "NORMAL")
        await gate.setup()
        with clocks["workflow gates"]:
            for _ in range(gates + 1):
                await gate.cycle()
        await gate.close()
        logs = {"fan-out": await read_log(d / "fanout.db"),
                "flow DAG": await read_log(d / "flow.db"),
                "workflow gates": await read_log(d / "gates.db")}
        results = {name: await measure(d, name.replace(" ", "-"), evs, reps)
                   for name, evs in logs.items()}
    rows = []
    for name, r in results.items():
        u = r["us"]
        r["in_run_us"] = clocks[name].us
        rows.append([name, r["events"], f"{clocks[name].us:.1f}", f"{u['emit']:.1f}",
                     f"{u['encode']:.1f}", f"{u['checked']:.1f}",
                     f"{u['insert']:.1f}", f"{u['project']:.1f}", f"{u['floor']:.2f}",
                     f"{u['emit'] / u['floor']:.1f}x"])
    cm.print_table(f"writer CPU per event, µs (median of {reps} passes, COMMIT not counted)",
                   ["workload", "events", "in run", "emit", "encode", "checked", "insert",
                    "project",
                    "executemany", "emit/floor"], rows)
    for name, r in results.items():
        cm.print_table(f"{name}: emit per event type, µs (last pass, timed one by one)",
                       ["type", "events", "µs/event"],
                       [[g, c, f"{us:.1f}"] for g, (c, us) in
                        sorted(r["types"].items(), key=lambda kv: -kv[1][0])])
    fo = results["fan-out"]["us"]
    per_child = fan["events"] / n
    ratio = fo["emit"] / fo["floor"]
    in_run = results["fan-out"]["in_run_us"]
    print(f"\nfan-out: {in_run:.1f} µs of writer CPU per event in the run, {fo['emit']:.1f}"
          f" µs of it the emit (target <= {TARGET_US}:"
          f" {'met' if in_run <= TARGET_US else 'NOT met'}); emit {ratio:.1f}x raw"
          f" executemany (target <= {TARGET_FLOOR_RATIO}x:"
          f" {'met' if ratio <= TARGET_FLOOR_RATIO else 'NOT met'}); {per_child:.1f} events"
          f" per child (target <= {TARGET_CHILD_EVENTS}:"
          f" {'met' if per_child <= TARGET_CHILD_EVENTS else 'NOT met'})")
    cm.write_json(args.json, {"benchmark": "write_path", "machine": info, "reps": reps,
                              "children": n, "events_per_child": per_child,
                              "results": results})


if __name__ == "__main__":
    asyncio.run(main())
