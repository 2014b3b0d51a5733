"""Webhook ack latency and sustained accepted events/s of `clawtower serve`'s trigger
runtime, beside a minimal starlette endpoint that does nothing (the floor), with 10,000
events over 1,000 keys in `serial_per_key`; then checks, from the store and the executor's
journal, that none was lost, none ran twice and every key ran in arrival order.

    python benchmarks/bench_triggers.py [--quick] [--reps N] [--json PATH]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import httpx

HERE = Path(__file__).resolve().parent
TOKEN = "bench-token-0123456789abcdef"


def start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, str(HERE / "trigger_server.py"), *args],
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    return proc, int(line.split()[1])


async def load(port: int, n: int, keys: int, conc: int) -> tuple[list[float], float, list[str]]:
    lat: list[float] = []
    ids: list[str] = [""] * n
    nxt = 0
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits,
                                 timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}
                                 ) as client:
        async def worker() -> None:
            nonlocal nxt
            while nxt < n:
                i = nxt
                nxt += 1
                body = json.dumps({"event_id": f"e-{i}", "contact_id": f"k-{i % keys}"})
                t0 = time.perf_counter()
                r = await client.post("/hooks/bench-expert/inbound", content=body,
                                      headers={"content-type": "application/json"})
                lat.append(time.perf_counter() - t0)
                assert r.status_code == 202, r.text
                ids[i] = r.json()["id"]

        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(conc)])
        wall = time.perf_counter() - t0
    return lat, wall, ids


MANIFEST = """spec: "1.0"
name: bench-expert
version: "1.0.0"
description: Benchmark triggers
concurrency:
  default: serial_per_key
  key: contact_id
components:
  orchestrator: orchestrator.md
  persona: [persona/p.md]
  functions: [functions/f.md]
  processes: [processes/p.md]
triggers:
  - name: inbound
    type: webhook
    dedupe_key: event_id
    process: p
"""


def install(home: Path) -> None:
    os.environ["CLAWTOWER_HOME"] = str(home)
    from clawtower.core.experts import home as h
    from clawtower.core.triggers import hookauth

    src = home.parent / "bench-src"
    files = {"expert.yaml": MANIFEST, "README.md": "# b\n", "orchestrator.md": "b\n",
             "persona/p.md": "b\n",
             "functions/f.md": "---\nname: f\ndescription: f\n---\nf\n",
             "processes/p.md": "---\nname: p\ndescription: p\ntrigger: inbound\n---\n- [ ] x\n"}
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    h.install(str(src))
    hookauth.write("bench-expert", "inbound", token=TOKEN)


def check(db: Path, journal: Path, ids: list[str]) -> dict[str, Any]:
    import sqlite3

    deadline = time.monotonic() + 1800
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    while True:
        done = conn.execute("SELECT count(*) FROM trigger_items WHERE status='done'"
                            ).fetchone()[0]
        if done >= len(ids) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    drained = time.monotonic()
    items = conn.execute("SELECT id, lane, seq, status FROM trigger_items").fetchall()
    conn.close()
    starts: dict[str, list[float]] = {}
    ends: dict[str, float] = {}
    for line in journal.read_text().splitlines():
        e = json.loads(line)
        if e["ev"] == "start":
            starts.setdefault(e["id"], []).append(e["at"])
        else:
            ends[e["id"]] = e["at"]
    accepted = set(ids)
    stored = {r[0]: r for r in items}
    lost = len(accepted - {i for i, r in stored.items() if r[3] == "done"})
    dups = sum(len(v) - 1 for v in starts.values()) + len(set(starts) - accepted)
    by_lane: dict[str, list[tuple[int, str]]] = {}
    for i, lane, seq, _ in items:
        by_lane.setdefault(lane, []).append((seq, i))
    order_breaks = 0
    for lane_items in by_lane.values():
        lane_items.sort()
        for (_, a), (_, b) in itertools.pairwise(lane_items):
            if not (a in ends and b in starts and starts[b][0] >= ends[a]):
                order_breaks += 1
    return {"lost": lost, "duplicates": dups, "order_breaks": order_breaks,
            "lanes": len(by_lane), "drained_at": drained}


def main() -> None:
    p = c.parser(__doc__ or "", reps=3)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--concurrency", type=int, default=16)
    args = p.parse_args()
    n = 1000 if args.quick else args.events
    keys = 100 if args.quick else args.keys
    results: dict[str, Any] = {"machine": c.machine_info(), "events": n, "keys": keys,
                               "concurrency": args.concurrency, "reps": []}
    with c.work_dir(args) as d:
        install(d / "home")
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        for rep in range(c.reps_of(args)):
            row: dict[str, Any] = {}
            order = ["floor", "ours"] if rep % 2 == 0 else ["ours", "floor"]
            for which in order:
                db, journal = d / f"r{rep}.db", d / f"r{rep}.jsonl"
                proc, port = start(["floor"] if which == "floor" else
                                   ["ours", str(db), str(journal)], env)
                try:
                    lat, wall, ids = asyncio.run(load(port, n, keys, args.concurrency))
                    t_sent = time.monotonic()
                    if which == "ours":
                        chk = check(db, journal, ids)
                        row["check"] = {k: v for k, v in chk.items() if k != "drained_at"}
                        row["drain_s"] = chk["drained_at"] - t_sent
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
                row[which] = {"p50_ms": c.percentile(lat, 50) * 1000,
                              "p99_ms": c.percentile(lat, 99) * 1000,
                              "events_per_s": n / wall}
            row["ratio_p50"] = row["ours"]["p50_ms"] / row["floor"]["p50_ms"]
            row["ratio_p99"] = row["ours"]["p99_ms"] / row["floor"]["p99_ms"]
            results["reps"].append(row)
            print(json.dumps(row), flush=True)
    reps = results["reps"]
    c.print_table("Webhook ack (10,000 events, 1,000 keys, serial_per_key)" if not args.quick
                  else "Webhook ack (quick)",
                  ["", "p50 ms", "p99 ms", "accepted/s"],
                  [[w, c.fmt_num(c.median([r[w]["p50_ms"] for r in reps])),
                    c.fmt_num(c.median([r[w]["p99_ms"] for r in reps])),
                    c.fmt_num(c.median([r[w]["events_per_s"] for r in reps]))]
                   for w in ("floor", "ours")])
    print(f"ratio p50 (median of paired): {c.median([r['ratio_p50'] for r in reps]):.2f}x;"
          f" p99: {c.median([r['ratio_p99'] for r in reps]):.2f}x")
    print("checks:", [r["check"] for r in reps], "drain s:",
          [round(r["drain_s"], 1) for r in reps])
    c.write_json(args.json, results)


if __name__ == "__main__":
    main()
