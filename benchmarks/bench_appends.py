"""Event appends/s through the store API vs raw aiosqlite doing the same writes.

Workload (baselines.md, workload 1): N events with a 320-byte JSON payload
(core.events.Note with padded text) appended to a WAL file by P concurrent coroutine
producers (1, 4, 16), in two shapes:

  one per commit   store: each producer awaits `store.append([event])` per event; the
                   store's writer task batches whatever is queued into one transaction
                   (group commit), so concurrency is what feeds it.
                   raw: one aiosqlite connection behind an asyncio.Lock (the safe way to
                   share it), `execute(INSERT)` + `commit()` per event.
  100 per commit   store: `store.append(100 events)` per call.
                   raw: `executemany(INSERT, 100 rows)` + `commit()` per batch.

Both sides write the same table (core.store.schema.LOG_SCHEMA: the events table, its index
and append-only triggers) with journal_mode=WAL and the same synchronous mode (NORMAL, FULL).
The raw side gets its rows pre-serialised; the store side gets pre-built NewEvent objects
and pays for serialising payloads and building StoredEvents itself.

Every repetition runs every configuration, store and raw back to back (alternating which
goes first), on fresh files. Reported: median events/s per cell, the median of the paired
per-repetition ratios, and the target ratio: store API >= 50% of the raw batched floor.

    .venv/bin/python benchmarks/bench_appends.py [--quick] [--reps N] [--json PATH]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import _common as cm
import aiosqlite

from clawtower.core.events import NewEvent, Note
from clawtower.core.store import open_store
from clawtower.core.store.schema import LOG_SCHEMA

PAYLOAD_BYTES = 320
SYNC_MODES = ("NORMAL", "FULL")
PRODUCERS = (1, 4, 16)
SHAPES = (1, 100)  # events per commit (raw) / per append call (store)
TARGET = 0.50

INSERT = ("INSERT INTO events (ts, entity, entity_id, type, actor, role, payload, idem_key)"
          " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def make_events(n: int) -> list[NewEvent]:
    filler = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    out = []
    for i in range(n):
        head = f"note {i:07d}: "
        body = (head + filler * 8)[: PAYLOAD_BYTES - len('{"text":""}')]
        out.append(NewEvent(entity_id=f"N-{i % 97}", actor="bench", role="system",
                            payload=Note(text=body)))
    assert len(out[0].payload.model_dump_json()) == PAYLOAD_BYTES
    return out


def make_rows(events: list[NewEvent]) -> list[tuple[Any, ...]]:
    now = time.time()
    return [(now, e.entity, e.entity_id, e.type, e.actor, e.role, e.payload.model_dump_json(),
             e.idem_key) for e in events]


def deal(items: list[Any], per_commit: int, producers: int) -> list[list[list[Any]]]:
    """Cut items into batches of `per_commit` and deal them round-robin to producers."""
    batches = [items[i:i + per_commit] for i in range(0, len(items), per_commit)]
    return [batches[k::producers] for k in range(producers)]


async def run_store(path: Path, sync: str, producers: int, per_commit: int,
                    events: list[NewEvent]) -> dict[str, float]:
    cm.remove_db(path)
    store = await open_store(path, synchronous=sync)
    try:
        work = deal(events, per_commit, producers)

        async def producer(batches: list[list[NewEvent]]) -> None:
            for b in batches:
                await store.append(b)

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(w) for w in work))
        dt = time.perf_counter() - t0
        n = await store.last_seq()
        commits = store.batches
    finally:
        await store.close()
    assert n == len(events), (n, len(events))
    return {"events_per_s": len(events) / dt, "seconds": dt,
            "events_per_commit": len(events) / max(1, commits)}


async def run_raw(path: Path, sync: str, producers: int, per_commit: int,
                  rows: list[tuple[Any, ...]]) -> dict[str, float]:
    cm.remove_db(path)
    conn = await aiosqlite.connect(path)  # sqlite3's implicit BEGIN before the INSERT
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA synchronous={sync}")
        await conn.executescript(LOG_SCHEMA)
        await conn.commit()
        lock = asyncio.Lock()
        work = deal(rows, per_commit, producers)

        async def producer(batches: list[list[tuple[Any, ...]]]) -> None:
            for b in batches:
                async with lock:  # one transaction at a time on the shared connection
                    if len(b) == 1:
                        await conn.execute(INSERT, b[0])
                    else:
                        await conn.executemany(INSERT, b)
                    await conn.commit()

        t0 = time.perf_counter()
        await asyncio.gather(*(producer(w) for w in work))
        dt = time.perf_counter() - t0
        async with conn.execute("SELECT count(*) FROM events") as cur:
            row = await cur.fetchone()
        n = row[0] if row else 0
    finally:
        await conn.close()
    assert n == len(rows), (n, len(rows))
    return {"events_per_s": len(rows) / dt, "seconds": dt, "events_per_commit": per_commit}


async def main() -> None:
    args = cm.parser(__doc__.splitlines()[0], reps=5).parse_args()
    reps = cm.reps_of(args)
    n_for = {1: 200, 100: 1_000} if args.quick else {1: 2_000, 100: 10_000}
    events = make_events(max(n_for.values()))
    rows = make_rows(events)
    configs = [(s, p, k) for s in SYNC_MODES for p in PRODUCERS for k in SHAPES]
    # results[(side, sync, producers, per_commit)] -> list of per-rep dicts
    results: dict[tuple[str, str, int, int], list[dict[str, float]]] = {}
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        print(f"{reps} repetition(s); events per run: {n_for[1]:,} one per commit,"
              f" {n_for[100]:,} batched; payload {PAYLOAD_BYTES} bytes")
        t_start = time.perf_counter()
        for r in range(reps):
            for i, (sync, prod, k) in enumerate(configs):
                n = n_for[k]
                sides = ["store", "raw"] if (r + i) % 2 == 0 else ["raw", "store"]
                for side in sides:
                    path = d / f"{side}.db"
                    if side == "store":
                        res = await run_store(path, sync, prod, k, events[:n])
                    else:
                        res = await run_raw(path, sync, prod, k, rows[:n])
                    results.setdefault((side, sync, prod, k), []).append(res)
                    cm.remove_db(path)
            print(f"  repetition {r + 1}/{reps} done ({time.perf_counter() - t_start:.0f} s)",
                  flush=True)

    def eps(side: str, sync: str, prod: int, k: int) -> list[float]:
        return [x["events_per_s"] for x in results[(side, sync, prod, k)]]

    def paired(a: list[float], b: list[float]) -> float:
        return cm.median([x / y for x, y in zip(a, b, strict=True)])

    table = []
    out_rows = []
    for sync, prod, k in configs:
        s, w = eps("store", sync, prod, k), eps("raw", sync, prod, k)
        floor = eps("raw", sync, prod, 100)
        vs_same, vs_floor = paired(s, w), paired(s, floor)
        epc = cm.median([x["events_per_commit"] for x in results[("store", sync, prod, k)]])
        shape = "1/commit" if k == 1 else f"{k}/commit"
        table.append([sync, prod, shape, cm.fmt_num(cm.median(s)), cm.spread(s),
                      f"{epc:.1f}", cm.fmt_num(cm.median(w)), cm.spread(w),
                      f"{vs_same:.2f}", f"{vs_floor:.2f}"])
        out_rows.append({
            "synchronous": sync, "producers": prod, "events_per_call": k,
            "store_events_per_s": s, "raw_events_per_s": w,
            "store_median": cm.median(s), "raw_median": cm.median(w),
            "store_events_per_commit_median": epc,
            "ratio_store_vs_raw_same_shape": vs_same,
            "ratio_store_vs_raw_batched_floor": vs_floor,
        })
    cm.print_table(
        "events/s (median over repetitions, range) — store API vs raw aiosqlite, same run",
        ["sync", "producers", "shape", "store", "store range", "store ev/commit", "raw",
         "raw range", "store/raw", "store/raw-batched"],
        table)

    # The target: the store API (its best shape: 100 events per call) against the raw
    # batched floor (executemany 100 per commit), same sync mode and producers.
    verdicts = []
    target_rows = []
    for sync in SYNC_MODES:
        for prod in PRODUCERS:
            ratio = paired(eps("store", sync, prod, 100), eps("raw", sync, prod, 100))
            gc = paired(eps("store", sync, prod, 1), eps("raw", sync, prod, 100))
            ok = ratio >= TARGET
            verdicts.append(ok)
            target_rows.append([sync, prod, f"{ratio:.2f}", "met" if ok else "NOT met",
                                f"{gc:.2f}"])
    cm.print_table(
        f"target: store API >= {TARGET:.0%} of the raw batched floor (paired median ratios)",
        ["sync", "producers", "store 100/call ÷ raw batched", "target",
         "store 1/call ÷ raw batched"], target_rows)
    print(f"\ntarget met in {sum(verdicts)}/{len(verdicts)} configurations")
    cm.write_json(args.json, {
        "benchmark": "appends", "machine": info, "repetitions": reps,
        "events_per_run": {str(k): v for k, v in n_for.items()},
        "payload_bytes": PAYLOAD_BYTES, "target_ratio": TARGET, "results": out_rows,
        "target_met": f"{sum(verdicts)}/{len(verdicts)}",
    })


if __name__ == "__main__":
    asyncio.run(main())
