"""What one PostgreSQL store carries (issue 35): awaited single-event steps/s from 1, 2, 4 and
8 worker processes on one local server, beside SQLite (one file, the same processes) as the
floor; then a fresh process's replica: catch-up time and memory at 100k and 1M events.

Steps/s. For every N and repetition, N worker processes (fresh interpreters) open the same
fresh store by URL (a new database on the one server; a new SQLite file) and make 5 warm-up
steps; once all are ready they start together (a common CLOCK_MONOTONIC start and end) and
make awaited single-event steps for `--duration` seconds: `await store.append([event])`,
one `Note` of 300 bytes each, the store's normal write path (one command, one commit; the
next step starts once the commit returned). Reported: total steps/s, the median over the
processes of each one's p50 step latency, the ratio to N=1 of the same backend, and:

  fsync/step   PostgreSQL's WAL flushes per step (`pg_stat_wal`): below 1 the server
               shares one fsync between several processes' commits (group commit)
  cpu/step     CPU time of the worker processes (RUSAGE_CHILDREN) and, for the local
               server, of its backends (the postmaster's reaped children) per step: the
               CPU use over the wall time, ~2.0 on this 2-core machine, says it is CPU-bound

The backends, one after another in each repetition (rotated): `sqlite` (synchronous=NORMAL,
the default: no fsync per commit), `postgres` (synchronous_commit=on, the default: one WAL
fsync per commit) and `pg-nofsync` (the same server, a database with synchronous_commit=off:
the same lock, round trips and CPU without waiting for the disk; a diagnostic, not a setting
we recommend). Workers keep their replica in memory (CLAWTOWER_REPLICA_DIR=:memory:).

Replica. A database is filled with `--events` Note events (300-byte payloads, cumulative:
100k, then 900k more for 1M) through the write path, 1,000 events per `store.append` (one
transaction each). Then, per size and repetition, a fresh process opens the store and is
timed from `open_store(url)` to its return (the replica is current: every logged event
applied), its memory measured in the process (VmRSS before the open, after the imports;
VmHWM and VmRSS after):

  replay     CLAWTOWER_REPLICA_DIR=:memory: (or a first open on a machine): the whole log
  snapshot   a replica kept from an earlier (untimed) open of the same slot: a page copy

Note events have no projection of their own, so the replica here is the log's copy (the
`events` table and its indexes); real traffic adds its projections' rows (bench_replica_open
replays lifecycle traffic at ~17 ms per 1,000 events).

    .venv/bin/python benchmarks/bench_pg_scaling.py [--quick] [--reps N] [--procs 1,2,4,8]
        [--duration S] [--events 100000,1000000] [--pg URL] [--skip-steps] [--skip-replica]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _common as cm

HERE = Path(__file__).resolve()
PAYLOAD = "x" * 300
WARMUP = 5
BACKENDS = ("sqlite", "postgres", "pg-nofsync")
SEED_BATCH = 1000


def note(k: int, i: int) -> Any:
    from clawtower.core.events import NewEvent, Note

    return NewEvent(entity_id=f"w{k}-{i % 64}", actor="bench", role="system",
                    payload=Note(text=PAYLOAD))


# ----------------------------------------------------------------------------- children


async def worker(target: str, k: int) -> None:
    """A worker process: open, warm up, say READY, wait for `start end`, step until end."""
    from clawtower.core.store import open_store

    store = await open_store(target)
    try:
        for i in range(WARMUP):
            await store.append([note(k, i)])
        print("READY", flush=True)
        line = await asyncio.to_thread(sys.stdin.readline)
        start, end = (float(x) for x in line.split())
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        lat: list[float] = []
        i = 0
        while True:
            t0 = time.monotonic()
            if t0 >= end:
                break
            await store.append([note(k, i)])
            lat.append((time.monotonic() - t0) * 1000)
            i += 1
        print(json.dumps({"steps": len(lat), "p50": cm.percentile(lat, 50),
                          "p99": cm.percentile(lat, 99)}), flush=True)
    finally:
        await store.close()


async def replica_child(url: str) -> None:
    """A fresh process opening the store: open ms, replayed events, memory (MiB)."""
    import psycopg  # noqa: F401  (imported before the baseline: not the replica's memory)

    from clawtower.core import events
    from clawtower.core.store import open_store, postgres, projections  # noqa: F401

    events._payload_modules.load()
    projections.load_all()
    rss0 = cm.rss_mib()
    cm.reset_peak_rss()
    t0 = time.perf_counter()
    store = await open_store(url)
    dt = time.perf_counter() - t0
    out = {"open_ms": dt * 1000, "replayed": int(getattr(store, "replayed", -1)),
           "kept_seq": int(getattr(store, "kept_seq", -1)), "rss0": rss0,
           "hwm": cm.peak_rss_mib(), "rss": cm.rss_mib()}
    await store.close()
    print(json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- the server


def database(server: str, name: str, *, nofsync: bool = False) -> str:
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        if nofsync:
            conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
    return urlunsplit(urlsplit(server)._replace(path="/" + name))


def drop(server: str, url: str) -> None:
    from urllib.parse import urlsplit

    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def wal_syncs(server: str) -> int:
    import psycopg

    time.sleep(1.1)  # pg_stat_wal lags up to 1 s
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    return int(row[0]) if row else 0


def server_cpu_s(data: Path | None) -> float:
    """CPU seconds of the local server's exited backends (the postmaster's reaped children)."""
    if data is None:
        return float("nan")
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state): cutime and cstime are fields 16 and 17
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ----------------------------------------------------------------------------- steps/s


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CLAWTOWER_REPLICA_DIR"] = ":memory:"
    env["PYTHONPATH"] = os.pathsep.join([str(cm.REPO), env.get("PYTHONPATH", "")])
    return env


def run_steps(target: str, n: int, duration: float) -> dict[str, Any]:
    """N worker processes stepping together for `duration` s on `target`."""
    procs = [subprocess.Popen([sys.executable, str(HERE), "--worker", target, str(k)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=child_env()) for k in range(n)]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"worker did not start: {line!r}")
        start = time.monotonic() + 0.2
        end = start + duration
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(f"{start} {end}\n")
            p.stdin.flush()
        outs = []
        for p in procs:
            assert p.stdout is not None
            outs.append(json.loads(p.stdout.readline()))
        for p in procs:
            if p.wait(60) != 0:
                raise RuntimeError(f"worker exited {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    steps = sum(o["steps"] for o in outs)
    return {"steps_s": steps / duration, "steps": steps,
            "p50": cm.median([o["p50"] for o in outs]),
            "p99": cm.median([o["p99"] for o in outs])}


def logged(target: str) -> int:
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target) as conn:
            row = conn.execute("SELECT count(*) FROM clawtower_events").fetchone()
        return int(row[0]) if row else 0
    with contextlib.closing(sqlite3.connect(target)) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def steps_bench(server: str, data: Path | None, d: Path, procs: list[int], reps: int,
                duration: float) -> dict[str, dict[int, list[dict[str, Any]]]]:
    res: dict[str, dict[int, list[dict[str, Any]]]] = {b: {} for b in BACKENDS}
    for r in range(reps):
        for n in procs:
            order = BACKENDS[r % 3:] + BACKENDS[:r % 3]
            for backend in order:
                tag = f"{n}_{r}_{uuid.uuid4().hex[:6]}"
                if backend == "sqlite":
                    target = str(d / f"steps-{tag}.db")
                else:
                    target = database(server, f"steps_{tag}", nofsync=backend == "pg-nofsync")
                syncs = wal_syncs(server) if backend != "sqlite" else 0
                srv0, cpu0 = server_cpu_s(data), children_cpu_s()
                out = run_steps(target, n, duration)
                out["client_cpu"] = (children_cpu_s() - cpu0) / out["steps"]
                if backend != "sqlite":
                    out["fsync"] = (wal_syncs(server) - syncs) / out["steps"]
                    out["server_cpu"] = (server_cpu_s(data) - srv0) / out["steps"]
                got = logged(target)
                if got != out["steps"] + n * WARMUP:
                    raise RuntimeError(f"{backend} N={n}: {got} events logged,"
                                       f" {out['steps'] + n * WARMUP} steps made")
                if backend == "sqlite":
                    cm.remove_db(Path(target))
                else:
                    drop(server, target)
                res[backend].setdefault(n, []).append(out)
                print(f"  rep {r + 1} N={n} {backend}: {out['steps_s']:,.0f} steps/s,"
                      f" p50 {out['p50']:.2f} ms, load {os.getloadavg()[0]:.2f}", flush=True)
    return res


def steps_table(res: dict[str, dict[int, list[dict[str, Any]]]], duration: float,
                reps: int) -> str:
    rows = []
    for backend, by_n in res.items():
        if not by_n:
            continue
        base = cm.median([o["steps_s"] for o in by_n[min(by_n)]])
        for n, outs in sorted(by_n.items()):
            sps = [o["steps_s"] for o in outs]
            cpu = cm.median([o["client_cpu"] + o.get("server_cpu", 0.0) for o in outs])
            rows.append([backend, n, cm.fmt_num(cm.median(sps)), cm.spread(sps),
                         f"{cm.median(sps) / base:.2f}x",
                         cm.fmt_num(cm.median([o["p50"] for o in outs])),
                         cm.fmt_num(cm.median([o["p99"] for o in outs])),
                         f"{cm.median([o['fsync'] for o in outs]):.2f}" if "fsync" in outs[0]
                         else "-",
                         f"{cpu * 1e6:,.0f}", f"{cpu * cm.median(sps):.2f}"])
    cm.print_table(f"Awaited single-event steps, N processes x {duration:g} s ({reps} reps;"
                   " medians)", ["backend", "N", "steps/s", "range", "vs N=1", "p50 ms",
                                 "p99 ms", "fsync/step", "cpu us/step", "cpu/wall"], rows)
    pg = res.get("postgres", {})
    if pg:
        top = max(pg)
        med = {n: cm.median([o["steps_s"] for o in v]) for n, v in pg.items()}
        return (f"PostgreSQL: {med[min(med)]:,.0f} steps/s with {min(med)} process(es),"
                f" {med[top]:,.0f} with {top} ({med[top] / med[min(med)]:.2f}x)")
    return ""


# ----------------------------------------------------------------------------- replica


async def seed(url: str, have: int, want: int) -> float:
    """Append Note events through the write path, SEED_BATCH per transaction; events/s."""
    from clawtower.core.store import open_store

    os.environ["CLAWTOWER_REPLICA_DIR"] = ":memory:"
    store = await open_store(url)
    try:
        t0 = time.perf_counter()
        i = have
        while i < want:
            k = min(SEED_BATCH, want - i)
            await store.append([note(0, i + j) for j in range(k)])
            i += k
        return (want - have) / (time.perf_counter() - t0)
    finally:
        await store.close()


def open_child(url: str, replica_dir: str) -> dict[str, Any]:
    env = child_env()
    env["CLAWTOWER_REPLICA_DIR"] = replica_dir
    out = subprocess.run([sys.executable, str(HERE), "--replica-child", url], env=env,
                         capture_output=True, text=True, check=True, timeout=1800)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def replica_bench(server: str, d: Path, sizes: list[int], reps: int) -> list[list[Any]]:
    url = database(server, f"replica_{uuid.uuid4().hex[:8]}")
    rows: list[list[Any]] = []
    have = 0
    try:
        for size in sizes:
            rate = asyncio.run(seed(url, have, size))
            have = size
            print(f"  seeded {size:,} events ({rate:,.0f} events/s through the write path,"
                  f" {SEED_BATCH} per transaction)", flush=True)
            folder = d / f"replicas-{size}"
            open_child(url, str(folder))  # untimed: leaves the snapshot the timed opens load
            snap = next(folder.rglob("slot-0.db"), None)
            snap_mib = snap.stat().st_size / 2**20 if snap else float("nan")
            cells: dict[str, list[dict[str, Any]]] = {"replay": [], "snapshot": []}
            for _ in range(reps):
                for mode, rdir in (("replay", ":memory:"), ("snapshot", str(folder))):
                    o = open_child(url, rdir)
                    cells[mode].append(o)
                    print(f"  {size:,} {mode}: {o['open_ms']:,.0f} ms, replayed"
                          f" {o['replayed']:,}, peak +{o['hwm'] - o['rss0']:,.0f} MiB,"
                          f" load {os.getloadavg()[0]:.2f}", flush=True)
            for mode, os_ in cells.items():
                ms = [o["open_ms"] for o in os_]
                rows.append([f"{size:,}", mode, f"{os_[-1]['replayed']:,}",
                             cm.fmt_num(cm.median(ms)), cm.spread(ms),
                             cm.fmt_num(cm.median([o["hwm"] - o["rss0"] for o in os_])),
                             cm.fmt_num(cm.median([o["rss"] - o["rss0"] for o in os_])),
                             cm.fmt_num(snap_mib)])
    finally:
        drop(server, url)
    return rows


# ----------------------------------------------------------------------------- main


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        asyncio.run(worker(sys.argv[2], int(sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--replica-child":
        asyncio.run(replica_child(sys.argv[2]))
        return
    p = cm.parser(__doc__ or "", reps=3)
    p.add_argument("--pg", metavar="URL", help="a PostgreSQL server (default: a local pgserver)")
    p.add_argument("--procs", default=None, help="worker process counts (default 1,2,4,8)")
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of stepping per run (default 10; 2 with --quick)")
    p.add_argument("--events", default=None,
                   help="replica sizes (default 100000,1000000; 5000,20000 with --quick)")
    p.add_argument("--skip-steps", action="store_true")
    p.add_argument("--skip-replica", action="store_true")
    args = p.parse_args()
    reps = cm.reps_of(args)
    procs = [int(x) for x in (args.procs or ("1,2" if args.quick else "1,2,4,8")).split(",")]
    duration = args.duration or (2.0 if args.quick else 10.0)
    sizes = [int(x) for x in (args.events or ("5000,20000" if args.quick
                                              else "100000,1000000")).split(",")]
    server, data = args.pg, None
    if server is None:
        from clawtower.core.store import pglocal

        data = Path(tempfile.mkdtemp(prefix="clawtower-bench-pg-")) / "data"
        server = pglocal.start(data, stop_at_exit=True)
    load0 = os.getloadavg()
    summary: list[str] = []
    results: dict[str, Any] = {}
    with cm.work_dir(args) as d:
        results["machine"] = info = cm.machine_info(d)
        cm.print_machine(info)
        if not args.skip_steps:
            res = steps_bench(server, data, d, procs, reps, duration)
            results["steps"] = {b: {str(n): v for n, v in by_n.items()}
                                for b, by_n in res.items()}
            summary.append(steps_table(res, duration, reps))
        if not args.skip_replica:
            rows = replica_bench(server, d, sizes, reps)
            results["replica"] = rows
            cm.print_table(f"A fresh process opening the PostgreSQL store ({reps} reps;"
                           " medians)", ["log events", "replica", "replayed", "open ms",
                                         "range", "peak MiB", "kept MiB", "snapshot MiB"],
                           rows)
            big = [r for r in rows if r[1] == "replay"][-1]
            summary.append(f"a fresh process replays {big[0]} events in {big[3]} ms"
                           f" (+{big[5]} MiB peak)")
    load1 = os.getloadavg()
    print(f"\nload average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at the start,"
          f" {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    print("summary: " + "; ".join(s for s in summary if s))
    cm.write_json(args.json, results)


if __name__ == "__main__":
    main()
