"""1,000 tasks through the whole simulated lifecycle: events/s, bytes per event, peak RSS.

Workload: N tasks (default 1,000) are created through the task API and driven by
`Orchestrator.run_until_idle` with the embedded simulator at speed 0 (no think time):
spec_draft -> spec_review -> execution_ready -> executing -> spec_gate -> quality_gate ->
completed, every step an event committed through the store (synchronous=NORMAL unless
--sync FULL). The mix (by task number):

  70%  plain        the happy path
  10%  flaky        attempt 1 fails, the retry succeeds (retrying phase, backoff)
  10%  rework       the spec gate requests changes once, then approves (second attempt)
   8%  effects      two planned side effects: the task stops in awaiting_approval; the
                    benchmark approves them all (Approvals.approve) and drives again:
                    ready_to_resume -> intent/done per effect -> completed
   2%  doomed       every attempt fails; the circuit opens after attempt 3

Retries back off 1 s, 2 s ... through the orchestrator's Clock. A SystemClock would make the
throughput figure a measure of those sleeps, so the store and the orchestrator share ONE
core.clock.FakeClock: `sleep` advances it at once and the store's guard sees the same time.
Everything else is real: SQLite on disk, the writer task, group commit, projections.

Floor, in the same process run: the very rows the run stored, read back from its events
table chunk by chunk outside the timing, inserted with raw aiosqlite into a fresh file
holding only the events table, in as many commits as the store made (equal chunks,
executemany). The ratio says what the task protocol, projections, reads and orchestration
cost on top of writing the same bytes.

Bytes per event: (database + WAL) after the store is closed and a TRUNCATE checkpoint, over
the events stored; dbstat splits it into the log (events table and its indexes) and the
projections. Peak RSS: VmHWM, reset before each run (Linux clear_refs).

    .venv/bin/python benchmarks/bench_lifecycle.py [--quick] [--tasks N] [--reps N] [--json PATH]
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as cm
import aiosqlite

from clawtower.core.agents.registry import AgentSet
from clawtower.core.agents.simulator import DEFAULT_AGENTS, SimScript, Step
from clawtower.core.approvals import Approvals
from clawtower.core.clock import FakeClock
from clawtower.core.orchestrator import Orchestrator
from clawtower.core.store import open_store
from clawtower.core.store.schema import LOG_SCHEMA
from clawtower.core.tasks.service import Tasks
from clawtower.core.tasks.spec import PlannedEffect, TaskSpec

INSERT = ("INSERT INTO events (seq, ts, entity, entity_id, type, actor, role, payload, idem_key)"
          " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")
LOG_OBJECTS = {"events", "events_by_entity", "sqlite_autoindex_events_1", "sqlite_sequence"}


def kind_of(i: int) -> str:
    m = i % 50  # 50 = 35 plain + 5 flaky + 5 rework + 4 effects + 1 doomed
    if m < 35:
        return "plain"
    if m < 40:
        return "flaky"
    if m < 45:
        return "rework"
    if m < 49:
        return "effects"
    return "doomed"


def make_spec(i: int) -> TaskSpec:
    kind = kind_of(i)
    effects = []
    if kind == "effects":
        effects = [PlannedEffect(kind="notify", description=f"Announce change {i} in #eng",
                                 target="chat://eng"),
                   PlannedEffect(kind="deploy", description=f"Publish the docs of change {i}",
                                 target=f"https://docs.example.invalid/{i}")]
    return TaskSpec(
        title=f"Change {i}: make the invoice export configurable",
        goal="Let accountants choose the columns of the invoice CSV export.",
        scope_in=["CSV writer", "export settings page"], scope_out=["PDF export"],
        inputs=["invoices table"], outputs=[f"src/export/columns_{i}.py", "tests/test_cols.py"],
        acceptance_criteria=["Chosen columns appear in the given order in the file",
                             "Unknown column names are rejected with a clear message"],
        risks=["large months may time out"], side_effects=effects,
        labels=[] if kind in ("plain", "effects") else [kind])


def make_script() -> SimScript:
    return SimScript(
        seed=1, speed=0.0, agents=dict(DEFAULT_AGENTS),
        scripts={
            "flaky": {"execute": [Step(fail="integration test timed out after 30 s"),
                                  Step(ok=True)]},
            "rework": {"spec_gate": [Step(verdict="changes_requested",
                                          findings=["src/export/csv.py:41: dates not in UTC"]),
                                     Step(verdict="approved")]},
            "doomed": {"execute": [Step(fail="cannot reach the staging database")]},
        })


def disk_bytes(path: Path) -> tuple[int, dict[str, int], dict[str, float]]:
    """Checkpoint (TRUNCATE), then: file bytes incl. WAL, dbstat bytes per object, row stats."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        per_object: dict[str, int] = {}
        try:
            for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
                per_object[name] = int(size)
        except sqlite3.DatabaseError:
            pass
        n, payload, row = conn.execute(
            "SELECT count(*), avg(length(payload)), avg(length(payload) + length(entity)"
            " + length(entity_id) + length(type) + length(actor) + length(role) + 8)"
            " FROM events").fetchone()
    finally:
        conn.close()
    total = sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal")
                if os.path.exists(f"{path}{s}"))
    return total, per_object, {"events": n, "avg_payload": payload, "avg_row_values": row}


async def run_lifecycle(path: Path, n_tasks: int, sync: str,
                        concurrency: int = 16) -> dict[str, Any]:
    cm.remove_db(path)
    clock = FakeClock()
    specs = [make_spec(i) for i in range(n_tasks)]
    cm.reset_peak_rss()
    rss0 = cm.rss_mib()
    store = await open_store(path, synchronous=sync, clock=clock)
    try:
        tasks = Tasks(store)
        orch = Orchestrator(store, AgentSet.simulated(make_script()), clock=clock,
                            concurrency=concurrency)
        approvals = Approvals(store)
        t0 = time.perf_counter()
        for i, spec in enumerate(specs):
            await tasks.create(spec, source=f"bench/{i}.yaml")
        t_created = time.perf_counter()
        idle1 = await orch.run_until_idle(600)
        t_run1 = time.perf_counter()
        pending = await approvals.pending()
        await asyncio.gather(*(approvals.approve(a["id"], by="bench-operator") for a in pending))
        idle2 = await orch.run_until_idle(600)
        t1 = time.perf_counter()
        n_events = await store.last_seq()
        phases = await tasks.counts()
        batches, commands = store.batches, store.commands
        errors = list(orch.errors)
        retries = await store.fetchone("SELECT count(*) AS n FROM retries")
    finally:
        await store.close()
    peak = cm.peak_rss_mib()
    size, per_object, rowstats = disk_bytes(path)
    log_bytes = sum(v for k, v in per_object.items() if k in LOG_OBJECTS)
    proj_bytes = sum(v for k, v in per_object.items() if k not in LOG_OBJECTS)
    expect = Counter("circuit_open" if kind_of(i) == "doomed" else "completed"
                     for i in range(n_tasks))
    return {
        "ok": idle1 and idle2 and not errors and phases == dict(expect),
        "errors": errors[:5], "phases": phases, "approvals": len(pending),
        "retries": retries["n"] if retries else 0,
        "events": n_events, "commits": batches, "commands": commands,
        "seconds_total": t1 - t0, "seconds_create": t_created - t0,
        "seconds_drive": (t_run1 - t_created) + (t1 - t_run1),
        "events_per_s": n_events / (t1 - t0),
        "tasks_per_s": n_tasks / (t1 - t0),
        "bytes_total": size, "bytes_per_event": size / max(1, n_events),
        "log_bytes_per_event": log_bytes / max(1, n_events),
        "projection_bytes_per_event": proj_bytes / max(1, n_events),
        "avg_payload_bytes": rowstats["avg_payload"],
        "rss_before_mib": rss0, "peak_rss_mib": peak,
    }


async def run_floor(src: Path, dst: Path, commits: int, sync: str) -> dict[str, Any]:
    """Raw aiosqlite: the same rows, the same number of commits, no logic. Rows are read
    from the run's file chunk by chunk, outside the timing (and without holding them all,
    which would inflate the next run's RSS)."""
    reader = sqlite3.connect(src)
    n = reader.execute("SELECT count(*) FROM events").fetchone()[0]
    chunk = max(1, math.ceil(n / max(1, commits)))
    cur = reader.execute("SELECT seq, ts, entity, entity_id, type, actor, role, payload,"
                         " idem_key FROM events ORDER BY seq")
    cm.remove_db(dst)
    conn = await aiosqlite.connect(dst)
    done = batches = 0
    dt = 0.0
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA synchronous={sync}")
        await conn.executescript(LOG_SCHEMA)
        await conn.commit()
        while rows := cur.fetchmany(chunk):
            t0 = time.perf_counter()
            await conn.executemany(INSERT, rows)
            await conn.commit()
            dt += time.perf_counter() - t0
            done += len(rows)
            batches += 1
    finally:
        await conn.close()
        reader.close()
    size, _, _ = disk_bytes(dst)
    return {"events": done, "commits": batches, "seconds": dt,
            "events_per_s": done / dt, "bytes_per_event": size / max(1, done)}


async def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=3)
    p.add_argument("--tasks", type=int, default=None, help="tasks per run (default 1000)")
    p.add_argument("--sync", default="NORMAL", choices=["NORMAL", "FULL"])
    p.add_argument("--concurrency", type=int, default=16,
                   help="tasks the orchestrator drives at once (default 16, its default)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    n_tasks = args.tasks or (100 if args.quick else 1000)
    runs: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        print(f"{reps} repetition(s) of {n_tasks:,} tasks, synchronous={args.sync},"
              f" orchestrator concurrency {args.concurrency},"
              f" FakeClock for backoff, simulator speed 0; RSS after imports"
              f" {cm.rss_mib():.1f} MiB")
        for r in range(reps):
            path, floor_path = d / "lifecycle.db", d / "floor.db"
            res = await run_lifecycle(path, n_tasks, args.sync, args.concurrency)
            runs.append(res)
            fl = await run_floor(path, floor_path, res["commits"], args.sync)
            floors.append(fl)
            cm.remove_db(path)
            cm.remove_db(floor_path)
            print(f"  rep {r + 1}/{reps}: {res['events']:,} events in {res['seconds_total']:.2f} s"
                  f" = {res['events_per_s']:,.0f} ev/s; floor {fl['events_per_s']:,.0f} ev/s;"
                  f" ok={res['ok']}", flush=True)
            if not res["ok"]:
                print(f"    phases {res['phases']} errors {res['errors']}")

    def med(key: str, xs: list[dict[str, Any]]) -> float:
        return cm.median([float(x[key]) for x in xs])

    ratio = cm.median([a["events_per_s"] / b["events_per_s"]
                       for a, b in zip(runs, floors, strict=True)])
    last = runs[-1]
    rows = [
        ["tasks", f"{n_tasks:,}", ""],
        ["events per run", f"{med('events', runs):,.0f}",
         f"{med('events', runs) / n_tasks:.1f} per task"],
        ["commits per run", f"{med('commits', runs):,.0f}",
         f"{med('events', runs) / med('commits', runs):.2f} events per commit"],
        ["final phases", ", ".join(f"{k} {v}" for k, v in sorted(last["phases"].items())),
         f"{last['retries']} retries, {last['approvals']} approvals"],
        ["wall time (create + drive)", f"{med('seconds_total', runs):.2f} s",
         cm.spread([x["seconds_total"] for x in runs]) + " s"],
        ["  of which creating tasks", f"{med('seconds_create', runs):.2f} s", ""],
        ["events/s (lifecycle)", cm.fmt_num(med("events_per_s", runs)),
         cm.spread([x["events_per_s"] for x in runs])],
        ["tasks/s", cm.fmt_num(med("tasks_per_s", runs)), ""],
        ["events/s (raw floor, same rows)", cm.fmt_num(med("events_per_s", floors)),
         cm.spread([x["events_per_s"] for x in floors])],
        ["lifecycle ÷ floor (paired median)", f"{ratio:.3f}", ""],
        ["bytes per event (db+WAL)", f"{med('bytes_per_event', runs):,.0f}",
         f"floor (log only) {med('bytes_per_event', floors):,.0f}"],
        ["  log: events + indexes", f"{med('log_bytes_per_event', runs):,.0f}",
         f"avg payload {med('avg_payload_bytes', runs):,.0f} B"],
        ["  projections", f"{med('projection_bytes_per_event', runs):,.0f}", ""],
        ["store file per run", f"{med('bytes_total', runs) / 2**20:.1f} MiB", ""],
        ["peak RSS during a run", f"{med('peak_rss_mib', runs):.1f} MiB",
         f"RSS before: {med('rss_before_mib', runs):.1f} MiB"],
        ["all runs ended as expected", str(all(x["ok"] for x in runs)), ""],
    ]
    cm.print_table("lifecycle (medians over repetitions)", ["figure", "value", "note"], rows)
    cm.write_json(args.json, {
        "benchmark": "lifecycle", "machine": info, "repetitions": reps, "tasks": n_tasks,
        "synchronous": args.sync, "concurrency": args.concurrency,
        "clock": "FakeClock (shared by store and orchestrator)",
        "runs": runs, "floors": floors, "ratio_lifecycle_vs_floor": ratio,
        "median_events_per_s": med("events_per_s", runs),
        "median_bytes_per_event": med("bytes_per_event", runs),
        "median_peak_rss_mib": med("peak_rss_mib", runs),
    })


if __name__ == "__main__":
    asyncio.run(main())
