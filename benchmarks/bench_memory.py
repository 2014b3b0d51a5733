"""BM25 recall over 100,000 memories (issue 25: p50 <= 5 ms), and what a write costs.

Workload: N memories (default 100,000) in 10 agent namespaces, written through the real
write path (`Memories.import_many`, 2,000 per commit: one `memory.stored` event each),
content 12-40 words drawn Zipf-like from a 5,000-word vocabulary. Then Q recall queries of
2-4 words (a rare, a middling and a common word mixed) against one namespace, top-5:

  api            `Memories.search` as a tool call or the CLI makes it (store read thread,
                 dict rows; the pre-turn recall runs the same SQL in the claim transaction)
  sql            the same two statements (term counts, FTS5 query) on a plain connection
  sql_all_terms  the FTS5 query with every term, common ones too (what recall costs
                 without dropping terms held by more than COMMON_DF memories), and how many
                 of its top-5 the recall returned

Also: events per single write (`Memories.put`: 1), single-write latency, and the FTS index
agreeing with the log (`store verify`) after the load.

    .venv/bin/python benchmarks/bench_memory.py [--quick] [--n N] [--queries Q] [--json PATH]
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from typing import Any

import _common as cm

from core.memory.events import MemoryStored
from core.memory.service import (
    Memories,
    _search_sql,
    fts_query,
    informative,
    query_terms,
    vocab_sql,
)
from core.store import open_store

VOCAB = 5_000
NAMESPACES = 10


def words(rng: random.Random) -> list[str]:
    return [f"w{i}{'abcdefghij'[i % 10]}" for i in range(VOCAB)]


def zipf_pick(rng: random.Random, vocab: list[str]) -> str:
    # rank ~ 1/x: a few words are everywhere, most are rare
    return vocab[min(int(rng.paretovariate(1.1)) - 1, VOCAB - 1)]


async def run(args: Any) -> dict[str, Any]:
    n = args.n or (5_000 if args.quick else 100_000)
    q = args.queries or (200 if args.quick else 2_000)
    rng = random.Random(25)
    vocab = words(rng)
    out: dict[str, Any] = {"memories": n, "queries": q, "machine": cm.machine_info()}
    with cm.work_dir(args) as d:
        db = d / "memory.db"
        store = await open_store(str(db))
        mem = Memories(store)
        t0 = time.perf_counter()
        batch: list[MemoryStored] = []
        for i in range(n):
            text = " ".join(zipf_pick(rng, vocab) for _ in range(rng.randint(12, 40)))
            batch.append(MemoryStored(namespace=f"agent:a{i % NAMESPACES}", key=f"k{i}",
                                      content=text))
            if len(batch) == 2_000:
                await mem.import_many(batch, by="bench")
                batch = []
        if batch:
            await mem.import_many(batch, by="bench")
        out["load_s"] = time.perf_counter() - t0
        before = await store.last_seq()
        lat = []
        for i in range(50):
            t = time.perf_counter()
            await mem.put("agent:a0", f"single{i}", f"a single write number {i}", by="b")
            lat.append((time.perf_counter() - t) * 1000)
        out["events_per_write"] = (await store.last_seq() - before) / 50
        out["single_write_ms_p50"] = cm.percentile(lat, 50)
        queries = []
        for _ in range(q):
            k = rng.randint(2, 4)
            queries.append(" ".join([vocab[rng.randint(500, VOCAB - 1)],
                                     vocab[rng.randint(20, 500)],
                                     *(zipf_pick(rng, vocab) for _ in range(k - 2))]))
        api, hits, got = [], 0, []
        for i, text in enumerate(queries):
            t = time.perf_counter()
            rows = await mem.search([f"agent:a{i % NAMESPACES}"], text, k=5)
            api.append((time.perf_counter() - t) * 1000)
            hits += bool(rows)
            got.append([r["key"] for r in rows])
        out["api_ms"] = {"p50": cm.percentile(api, 50), "p95": cm.percentile(api, 95),
                         "p99": cm.percentile(api, 99)}
        out["queries_with_hits"] = hits
        verify_t = time.perf_counter()
        out["verify_problems"] = await store.verify_projections()
        out["verify_s"] = time.perf_counter() - verify_t
        await store.close()
        conn = sqlite3.connect(str(db))
        full, pruned, same, total = [], [], 0, 0
        for i, text in enumerate(queries):
            ns = [f"agent:a{i % NAMESPACES}"]
            terms = query_terms(text)
            t = time.perf_counter()
            sql, params = vocab_sql(terms)
            df = dict(conn.execute(sql, params).fetchall())
            match = fts_query(informative(terms, df))
            assert match is not None
            sql, params = _search_sql(ns, match, 5, time.time())
            conn.execute(sql, params).fetchall()
            pruned.append((time.perf_counter() - t) * 1000)
            sql, params = _search_sql(ns, fts_query(terms) or "", 5, time.time())
            t = time.perf_counter()
            every = [r[1] for r in conn.execute(sql, params).fetchall()]
            full.append((time.perf_counter() - t) * 1000)
            same += len(set(every) & set(got[i]))
            total += len(every)
        conn.close()
        for name, xs in (("sql_ms", pruned), ("sql_all_terms_ms", full)):
            out[name] = {"p50": cm.percentile(xs, 50), "p95": cm.percentile(xs, 95),
                         "p99": cm.percentile(xs, 99)}
        out["top5_shared_with_all_terms"] = same / total if total else float("nan")
        out["db_mb"] = sum(p.stat().st_size for p in d.glob("memory.db*")) / 1e6
    return out


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], 1)
    p.add_argument("--n", type=int, default=None, help="memories (default 100,000)")
    p.add_argument("--queries", type=int, default=None, help="queries (default 2,000)")
    args = p.parse_args()
    out = asyncio.run(run(args))
    cm.print_table(
        f"BM25 recall over {out['memories']:,} memories ({NAMESPACES} namespaces),"
        f" {out['queries']:,} queries, top-5",
        ["path", "p50 ms", "p95 ms", "p99 ms"],
        [[k, *(cm.fmt_num(out[f"{k}_ms"][x]) for x in ("p50", "p95", "p99"))]
         for k in ("api", "sql", "sql_all_terms")])
    print(f"\ntop-5 keys shared with the all-terms query:"
          f" {out['top5_shared_with_all_terms']:.0%}")
    print(f"queries with hits: {out['queries_with_hits']:,} of {out['queries']:,};"
          f" load {out['load_s']:.1f} s; db {out['db_mb']:.0f} MB")
    print(f"events per write: {out['events_per_write']:.2f}; single write p50"
          f" {out['single_write_ms_p50']:.2f} ms; verify {out['verify_s']:.1f} s,"
          f" problems: {out['verify_problems'] or 'none'}")
    cm.write_json(args.json, out)


if __name__ == "__main__":
    main()
