"""BM25 and hybrid recall over 100,000 memories (issue 25: p50 <= 5 ms / <= 20 ms), what a
write costs, the vector index chosen on evidence, and recall@5 on a labelled set.

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

Hybrid (unless --no-hybrid): every memory gets a `--dim` (384) float32 vector through the
real write path (`memory.embedded` events, 2,000 per commit; random unit vectors: latency
does not depend on what they mean), then the same queries as hybrid recalls (BM25 top-50
fused with the cosine top-50, core/memory/hybrid.py), query vectors cached (a warm-up pass
embeds them through a fake /embeddings server; the measured pass never calls it):

  hybrid         `Memories.recall` with the process's numpy index warm (one namespace,
                 10,000 vectors); `hybrid_all_ns` recalls over all 10 (100,000 vectors)
  index_load     the first recall's index build from the BLOBs (once per process)

The vector index on evidence, the same vectors and namespace filter, cosine top-50:
  numpy_index    the in-process index alone (what `hybrid` uses)
  numpy_blobs    the namespace's BLOBs read and scored per query (no index kept: one-shot)
  sqlite_vec     sqlite-vec's vec0 table, namespace as partition key (KNN, k = 50)
  sqlite_vec_bf  vec_distance_cosine over the plain BLOB table (ORDER BY ... LIMIT 50)
sqlite-vec runs through apsw: this Python's sqlite3 has no enable_load_extension, so the
store could not load it at all (skipped when apsw or sqlite-vec is not installed:
`pip install apsw sqlite-vec`).

Quality (benchmarks/memory_labelled.py: 40 memories, 30 labelled queries, 20 of them
paraphrases): recall@5 of BM25 alone vs hybrid, with a deterministic concept embedder
(tests/helpers/fake_embeddings.py: synonym groups hashed to axes; a stand-in written with
this vocabulary in mind, so its numbers check the fusion, not a model) and, with --smollm2,
the real SmolLM2-135M mean-pooled embeddings from the llama.cpp peer.

    .venv/bin/python benchmarks/bench_memory.py [--quick] [--n N] [--queries Q] [--dim D]
        [--no-hybrid] [--smollm2] [--json PATH]
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from typing import Any

import _common as cm

from clawtower.core.memory.bm25 import _search_sql, fts_query, informative, query_terms, vocab_sql
from clawtower.core.memory.events import MemoryStored
from clawtower.core.memory.service import Memories
from clawtower.core.store import open_store

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
        if not args.no_hybrid:
            await hybrid_part(db, queries, args, out)
            out["db_mb_with_vectors"] = sum(p.stat().st_size
                                            for p in d.glob("memory.db*")) / 1e6
    out["quality"] = await quality(args)
    return out


def _random_transport(dim: int) -> Any:
    """A fake /embeddings server: a deterministic random unit vector per text."""
    import hashlib
    import json

    import httpx
    import numpy as np

    def handle(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        data = []
        for i, t in enumerate(texts):
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(dim)
            data.append({"index": i, "embedding": (v / np.linalg.norm(v)).tolist()})
        return httpx.Response(200, json={"data": data})

    return httpx.MockTransport(handle)


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50": cm.percentile(xs, 50), "p95": cm.percentile(xs, 95),
            "p99": cm.percentile(xs, 99)}


async def hybrid_part(db: Any, queries: list[str], args: Any, out: dict[str, Any]) -> None:
    import numpy as np

    from clawtower.core.memory.embeddings import Embedder
    from clawtower.core.memory.hybrid import embed_all, index_for, unit
    from clawtower.core.memory.projections import content_sha

    dim = args.dim
    store = await open_store(str(db))
    rng = np.random.default_rng(25)
    rows = await store.fetchall("SELECT namespace, key, content FROM memories"
                                " WHERE forgotten=0 ORDER BY id")
    t0 = time.perf_counter()
    for i in range(0, len(rows), 2_000):
        chunk = [MemoryStored(namespace=r["namespace"], key=r["key"], content=r["content"])
                 for r in rows[i:i + 2_000]]
        vecs = rng.standard_normal((len(chunk), dim)).astype("<f4")
        vectors = {content_sha(p.content): vecs[j].tobytes() for j, p in enumerate(chunk)}
        await store.execute(lambda tx, c=chunk, v=vectors: embed_all(  # type: ignore[misc]
            tx, c, "bench", "operator", v, "bench-embed"))
    out["vectors"] = len(rows)
    out["dim"] = dim
    out["vectors_load_s"] = time.perf_counter() - t0
    embedder = Embedder("bench", "http://embed.bench/v1", "bench-embed", retries=0,
                        transport=_random_transport(dim))
    mem = Memories(store, embedder)
    before = await store.last_seq()
    for i in range(50):
        await mem.put("agent:a0", f"hsingle{i}", f"a single hybrid write number {i}", by="b")
    out["events_per_write_hybrid"] = (await store.last_seq() - before) / 50
    index = index_for(store, "bench-embed")
    index.version = -1  # the writes above warmed it: time a cold build
    index.parts.clear()
    index.where.clear()
    index.loaded.clear()
    every = [f"agent:a{i}" for i in range(NAMESPACES)]
    t = time.perf_counter()
    await index.refresh(store, every[:1])
    out["index_load_one_ns_s"] = time.perf_counter() - t
    t = time.perf_counter()
    await index.refresh(store, every)
    out["index_load_s"] = time.perf_counter() - t + out["index_load_one_ns_s"]
    out["index_mb"] = sum(p.matrix.nbytes for p in index.parts.values()) / 1e6
    embedder.query_cache = len(queries)
    for text in queries:  # warm-up: every query's vector into the process's cache
        await embedder.query(text)
    calls = embedder.calls
    lat, lat_all, modes = [], [], set()
    for i, text in enumerate(queries):
        t = time.perf_counter()
        got = await mem.recall([f"agent:a{i % NAMESPACES}"], text, k=5)
        lat.append((time.perf_counter() - t) * 1000)
        modes.add(got.mode)
        if i % 4 == 0:
            t = time.perf_counter()
            await mem.recall(every, text, k=5)
            lat_all.append((time.perf_counter() - t) * 1000)
    assert modes == {"hybrid"} and embedder.calls == calls, (modes, embedder.calls)
    out["hybrid_ms"] = _stats(lat)
    out["hybrid_all_ns_ms"] = _stats(lat_all)
    out["verify_problems_hybrid"] = await store.verify_projections()
    await store.close()
    qvecs = [unit(await embedder.query(text)) for text in queries[:200]]
    out["index_compare"] = _compare_indexes(str(db), index, qvecs, dim)
    await embedder.aclose()


def _compare_indexes(db: str, index: Any, qvecs: list[Any], dim: int) -> dict[str, Any]:
    """Cosine top-50 of one namespace (a tenth of the vectors) four ways, same vectors."""
    import numpy as np

    res: dict[str, Any] = {}
    ns = [f"agent:a{i % NAMESPACES}" for i in range(len(qvecs))]
    xs = []
    for q, n in zip(qvecs, ns, strict=True):
        t = time.perf_counter()
        index.nearest([n], q, 50)
        xs.append((time.perf_counter() - t) * 1000)
    res["numpy_index_ms"] = _stats(xs)
    conn = sqlite3.connect(db)
    sel = ("SELECT v.id, c.vec FROM memory_vectors v JOIN memories m ON m.id = v.id"
           " JOIN embedding_cache c ON c.sha = v.sha AND c.model = v.model"
           " WHERE m.namespace = ? AND m.forgotten = 0")
    xs = []
    for q, n in zip(qvecs, ns, strict=True):
        t = time.perf_counter()
        got = conn.execute(sel, (n,)).fetchall()
        m = np.frombuffer(b"".join(r[1] for r in got), dtype="<f4").reshape(len(got), dim)
        s = (m @ q) / np.linalg.norm(m, axis=1)
        np.argpartition(-s, 49)[:50]
        xs.append((time.perf_counter() - t) * 1000)
    res["numpy_blobs_ms"] = _stats(xs)
    all_rows = conn.execute(
        "SELECT v.id, m.namespace, c.vec FROM memory_vectors v JOIN memories m"
        " ON m.id = v.id JOIN embedding_cache c ON c.sha = v.sha AND c.model = v.model"
        " WHERE m.forgotten = 0").fetchall()
    conn.close()
    try:
        import apsw
        import sqlite_vec
    except ImportError as exc:
        res["sqlite_vec"] = f"skipped: {exc}"
        return res
    vc = apsw.Connection(":memory:")
    vc.enable_load_extension(True)
    vc.load_extension(sqlite_vec.loadable_path())
    res["sqlite_vec_version"] = next(iter(vc.execute("SELECT vec_version()")))[0]
    vc.execute(f"CREATE VIRTUAL TABLE v USING vec0(namespace text partition key,"
               f" embedding float[{dim}] distance_metric=cosine)")
    vc.execute("CREATE TABLE b (id INTEGER PRIMARY KEY, namespace TEXT, vec BLOB)")
    vc.execute("CREATE INDEX b_ns ON b (namespace)")
    t = time.perf_counter()
    with vc:
        vc.executemany("INSERT INTO v (rowid, namespace, embedding) VALUES (?, ?, ?)",
                       [(r[0], r[1], r[2]) for r in all_rows])
    res["sqlite_vec_insert_s"] = time.perf_counter() - t
    with vc:
        vc.executemany("INSERT INTO b VALUES (?, ?, ?)", all_rows)
    for name, sql in (
            ("sqlite_vec_ms", "SELECT rowid, distance FROM v WHERE embedding MATCH ?"
                              " AND k = 50 AND namespace = ?"),
            ("sqlite_vec_bf_ms", "SELECT id, vec_distance_cosine(vec, ?1) AS d FROM b"
                                 " WHERE namespace = ?2 ORDER BY d LIMIT 50")):
        xs = []
        for q, n in zip(qvecs, ns, strict=True):
            blob = q.astype("<f4").tobytes()
            t = time.perf_counter()
            list(vc.execute(sql, (blob, n)))
            xs.append((time.perf_counter() - t) * 1000)
        res[name] = _stats(xs)
    # the two exact searches agree (same top-10 ids)
    q, n = qvecs[0], ns[0]
    a = [r[0] for r in vc.execute("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10"
                                  " AND namespace = ?", (q.astype("<f4").tobytes(), n))]
    b = list(index.nearest([n], q, 10))
    res["sqlite_vec_agrees_with_numpy"] = a == b
    vc.close()
    return res


async def quality(args: Any) -> dict[str, Any]:
    """recall@5 of BM25 alone vs hybrid on benchmarks/memory_labelled.py."""
    import tempfile
    from pathlib import Path

    from memory_labelled import MEMORIES, QUERIES

    from clawtower.core.memory.config import RecallWeights
    from clawtower.core.memory.embeddings import Embedder
    from tests.helpers.fake_embeddings import transport

    embedders: list[tuple[str, Any]] = [("concept", lambda: Embedder(
        "fake", "http://embed.test/v1", "fake-embed", retries=0, transport=transport()))]
    server = None
    if args.smollm2:
        import sys

        sys.path.insert(0, str(cm.REPO / "tests" / "helpers"))
        from llama_peer import llama_server, missing_reason

        why = missing_reason()
        if why:
            print(f"--smollm2: {why}")
        else:
            server = llama_server(n_ctx=512, embedding=True)
            base = server.__enter__()
            embedders.append(("smollm2", lambda: Embedder("local", base, "smollm2",
                                                          retries=0, timeout_s=120)))
    out: dict[str, Any] = {"memories": len(MEMORIES), "queries": len(QUERIES),
                           "paraphrases": sum(1 for q in QUERIES if q[2] == "paraphrase")}
    try:
        for name, make in embedders:
            with tempfile.TemporaryDirectory() as tmp:
                store = await open_store(str(Path(tmp) / "q.db"))
                emb = make()
                mem = Memories(store, emb)
                res = await mem.import_many([MemoryStored(namespace="agent:q", key=k, content=c)
                                             for k, c in MEMORIES.items()], by="bench")
                assert all(r["embedded"] for r in res), res[0]
                plain = Memories(store)
                scores: dict[str, dict[str, float]] = {}
                runs: list[tuple[str, Any]] = [("bm25", None)] + [
                    (f"hybrid_v{w}", RecallWeights(vector=w, keyword=round(1 - w, 2)))
                    for w in (0.3, 0.5, 0.7, 1.0)]
                for label, weights in runs:
                    hit = {"keyword": 0, "paraphrase": 0}
                    for query, key, kind in QUERIES:
                        got = await (plain.recall(["agent:q"], query, k=5) if weights is None
                                     else mem.recall(["agent:q"], query, k=5, weights=weights))
                        assert got.mode == ("bm25" if weights is None else "hybrid"), got.reason
                        hit[kind] += key in [r["key"] for r in got.rows]
                    n_kw = sum(1 for q in QUERIES if q[2] == "keyword")
                    n_pa = len(QUERIES) - n_kw
                    scores[label] = {"all": (hit["keyword"] + hit["paraphrase"]) / len(QUERIES),
                                     "keyword": hit["keyword"] / n_kw,
                                     "paraphrase": hit["paraphrase"] / n_pa}
                out[name] = scores
                await emb.aclose()
                await store.close()
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    return out


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], 1)
    p.add_argument("--n", type=int, default=None, help="memories (default 100,000)")
    p.add_argument("--queries", type=int, default=None, help="queries (default 2,000)")
    p.add_argument("--dim", type=int, default=384, help="vector dimensions (default 384)")
    p.add_argument("--no-hybrid", action="store_true", help="BM25 only")
    p.add_argument("--smollm2", action="store_true",
                   help="recall@5 with SmolLM2 embeddings too (the llama.cpp peer)")
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
    if "hybrid_ms" in out:
        cm.print_table(
            f"Hybrid recall, {out['vectors']:,} vectors of {out['dim']} dims, query vectors"
            " cached, top-5", ["path", "p50 ms", "p95 ms", "p99 ms"],
            [[k, *(cm.fmt_num(out[f"{k}_ms"][x]) for x in ("p50", "p95", "p99"))]
             for k in ("hybrid", "hybrid_all_ns")])
        c = out["index_compare"]
        cm.print_table(f"Cosine top-50 of one namespace ({out['vectors'] // NAMESPACES:,}"
                       " vectors)",
                       ["index", "p50 ms", "p95 ms", "p99 ms"],
                       [[k, *(cm.fmt_num(c[f"{k}_ms"][x]) for x in ("p50", "p95", "p99"))]
                        for k in ("numpy_index", "numpy_blobs", "sqlite_vec", "sqlite_vec_bf")
                        if f"{k}_ms" in c])
        print(f"\nvectors load {out['vectors_load_s']:.1f} s; index build: one namespace"
              f" {out['index_load_one_ns_s']:.2f} s, all {out['index_load_s']:.2f} s,"
              f" {out['index_mb']:.0f} MB; events per hybrid"
              f" write: {out['events_per_write_hybrid']:.2f}; db with vectors"
              f" {out['db_mb_with_vectors']:.0f} MB; verify: "
              f"{out['verify_problems_hybrid'] or 'no problems'}")
        if "sqlite_vec_insert_s" in c:
            print(f"sqlite-vec {c['sqlite_vec_version']}: insert {c['sqlite_vec_insert_s']:.1f}"
                  f" s; same top-10 as numpy: {c['sqlite_vec_agrees_with_numpy']}")
    qual = out["quality"]
    rows = []
    for name in ("concept", "smollm2"):
        for label, sc in qual.get(name, {}).items():
            rows.append([name, label, f"{sc['all']:.0%}", f"{sc['keyword']:.0%}",
                         f"{sc['paraphrase']:.0%}"])
    cm.print_table(f"recall@5 on the labelled set ({qual['memories']} memories,"
                   f" {qual['queries']} queries, {qual['paraphrases']} paraphrases)",
                   ["embedder", "recall", "all", "keyword", "paraphrase"], rows)
    cm.write_json(args.json, out)


if __name__ == "__main__":
    main()
