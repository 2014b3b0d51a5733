"""Hybrid recall (issue 25 item 2): BM25 candidates fused with cosine similarity.

A recall takes the top `candidates` memories by BM25 (the FTS5 query of bm25.py) and the
top `candidates` by cosine similarity to the query's vector, and ranks their union by

    score = (w_vector * max(cos, 0) + w_keyword * bm25 / max_bm25) / (w_vector + w_keyword)

(a memory missing from one list scores 0 there, so a paraphrase with no word in common is
still found, and an exact keyword hit still counts). The score is in [0, 1].

Vectors: the `embedding_cache` (content sha256, model) -> float32 BLOB, filled by
`memory.embedded` events, so the same text is never embedded twice, and `memory_vectors`
linking each live memory to its content's vector. The cosine search is exact (brute force)
over a per-process numpy index of those BLOBs, one matrix per namespace, refreshed from the
rows whose `last_seq` moved (MAX(last_seq) is one index lookup per recall). The choice over
sqlite-vec is measured in benchmarks/bench_memory.py (BENCHMARKS.md): this Python's sqlite3
cannot load extensions at all, and brute force over BLOBs read per query is what sqlite-vec's
vec0 does too.

numpy is imported only here, and only when a recall is hybrid."""

from __future__ import annotations

import asyncio
import base64
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ClawError, ValidationError
from .bm25 import COLUMNS, bm25_rows
from .bm25 import RecallResult as RecallResult  # re-exported (it lives with BM25)
from .config import RecallWeights
from .projections import content_sha

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..store.interface import Store, WriteTx
    from .embeddings import Embedder
    from .events import MemoryEmbedded, MemoryStored

    Matrix = npt.NDArray[np.float32]


@dataclass
class _Part:
    """One namespace's vectors: rows [0, size) of `matrix` (unit length), dead rows masked."""

    dim: int
    matrix: Matrix
    ids: Any  # int64 array
    alive: Any  # bool array
    size: int = 0
    dead: int = 0

    def add(self, mid: int, vec: Matrix) -> int:
        import numpy as np

        if self.size == len(self.ids):
            cap = max(64, 2 * self.size)
            m = np.zeros((cap, self.dim), dtype=np.float32)
            m[:self.size] = self.matrix[:self.size]
            ids = np.zeros(cap, dtype=np.int64)
            ids[:self.size] = self.ids[:self.size]
            alive = np.zeros(cap, dtype=bool)
            alive[:self.size] = self.alive[:self.size]
            self.matrix, self.ids, self.alive = m, ids, alive
        self.matrix[self.size] = vec
        self.ids[self.size] = mid
        self.alive[self.size] = True
        self.size += 1
        return self.size - 1


@dataclass
class VectorIndex:
    """The unit vectors of one model's live memories, per namespace, in this process; a
    namespace is loaded on its first recall (a process holds only what it recalls)."""

    model: str
    version: int = -1  # memories.last_seq up to which the loaded namespaces are current
    dim: int | None = None
    parts: dict[str, _Part] = field(default_factory=dict)
    where: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (ns, row)
    loaded: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    _SELECT = ("SELECT v.id, m.namespace, c.vec FROM memory_vectors v JOIN memories m"
               " ON m.id = v.id JOIN embedding_cache c ON c.sha = v.sha AND c.model = v.model"
               " WHERE v.model = ? AND m.forgotten = 0")

    async def refresh(self, store: Store, namespaces: Sequence[str]) -> None:
        """Bring `namespaces` up to date: the rows changed since `version` dropped and
        re-read, a namespace not seen before read whole. A row that changes meanwhile has
        a larger last_seq than the `latest` read first, so the next refresh takes it again
        (drop, then add: never twice)."""
        async with self.lock:
            top = await store.fetchone("SELECT MAX(last_seq) AS v FROM memories")
            latest = int(top["v"] or 0) if top else 0
            if latest != self.version and self.loaded:
                changed = await store.fetchall(
                    "SELECT id FROM memories WHERE last_seq > ?", (self.version,))
                for r in changed:
                    self._drop(int(r["id"]))
                marks = ", ".join("?" for _ in self.loaded)
                self._add(await store.fetchall(
                    f"{self._SELECT} AND m.last_seq > ? AND m.namespace IN ({marks})",
                    (self.model, self.version, *sorted(self.loaded))))
            self.version = latest
            for ns in namespaces:
                if ns not in self.loaded:
                    self._add(await store.fetchall(f"{self._SELECT} AND m.namespace = ?",
                                                   (self.model, ns)))
                    self.loaded.add(ns)

    def _drop(self, mid: int) -> None:
        at = self.where.pop(mid, None)
        if at is not None:
            part = self.parts[at[0]]
            part.alive[at[1]] = False
            part.dead += 1

    def _add(self, rows: list[dict[str, Any]]) -> None:
        import numpy as np

        by_ns: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_ns.setdefault(r["namespace"], []).append(r)
        for ns, group in by_ns.items():
            dim = len(group[0]["vec"]) // 4
            if self.dim is None:
                self.dim = dim
            group = [r for r in group if len(r["vec"]) == 4 * self.dim]
            mat = np.frombuffer(b"".join(r["vec"] for r in group),
                                dtype="<f4").reshape(len(group), self.dim)
            norms = np.linalg.norm(mat, axis=1, keepdims=True)
            mat = (mat / np.where(norms == 0, 1, norms)).astype(np.float32)
            part = self.parts.get(ns)
            if part is None or part.dead > part.size // 2:
                part = self._compact(ns, len(group))
            for r, vec in zip(group, mat, strict=True):
                self._drop(int(r["id"]))  # changed again since the rows said what changed
                self.where[int(r["id"])] = (ns, part.add(int(r["id"]), vec))

    def _compact(self, ns: str, extra: int) -> _Part:
        """A fresh part for `ns` holding only its live rows (room for `extra` more)."""
        import numpy as np

        assert self.dim is not None
        old = self.parts.get(ns)
        keep = [] if old is None else [i for i in range(old.size) if old.alive[i]]
        cap = max(64, len(keep) + extra)
        part = _Part(self.dim, np.zeros((cap, self.dim), dtype=np.float32),
                     np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=bool))
        for i in keep:
            assert old is not None
            self.where[int(old.ids[i])] = (ns, part.add(int(old.ids[i]), old.matrix[i]))
        self.parts[ns] = part
        return part

    def nearest(self, namespaces: Sequence[str], query: Matrix, n: int
                ) -> dict[int, float]:
        """The `n` live memories of `namespaces` most similar to `query` (unit length)."""
        import numpy as np

        ids, sims = [], []
        for ns in namespaces:
            part = self.parts.get(ns)
            if part is None or part.size == 0:
                continue
            s = part.matrix[:part.size] @ query
            s[~part.alive[:part.size]] = -np.inf
            take = min(n, part.size)
            top = np.argpartition(-s, take - 1)[:take] if take < part.size \
                else np.arange(part.size)
            ids.append(part.ids[top])
            sims.append(s[top])
        if not ids:
            return {}
        all_ids, all_sims = np.concatenate(ids), np.concatenate(sims)
        order = np.argsort(-all_sims)[:n]
        return {int(all_ids[i]): float(all_sims[i]) for i in order
                if np.isfinite(all_sims[i])}

    def similarity(self, mids: Sequence[int], query: Matrix) -> dict[int, float]:
        """The cosine similarity of these memories (those with a vector) to `query`."""
        out = {}
        for mid in mids:
            at = self.where.get(mid)
            if at is not None:
                out[mid] = float(self.parts[at[0]].matrix[at[1]] @ query)
        return out


_INDEXES: weakref.WeakKeyDictionary[Any, dict[str, VectorIndex]] = weakref.WeakKeyDictionary()


def index_for(store: Store, model: str) -> VectorIndex:
    """This process's index of `model`'s vectors in `store` (kept while the store lives)."""
    per_store = _INDEXES.setdefault(store, {})
    if model not in per_store:
        per_store[model] = VectorIndex(model)
    return per_store[model]


def unit(vec: bytes, dim: int | None = None) -> Matrix:
    import numpy as np

    q = np.frombuffer(vec, dtype="<f4").astype(np.float32)
    if dim is not None and len(q) != dim:
        raise ClawError(f"the query's vector has {len(q)} dimensions, the stored ones {dim}")
    norm = float(np.linalg.norm(q))
    return q / norm if norm else q


def fuse(bm25: dict[int, float], cos: dict[int, float], w: RecallWeights
         ) -> list[tuple[int, float]]:
    """The union of both candidate lists by fused score, best first (ties: lower id)."""
    top = max(bm25.values(), default=0.0)
    total = w.vector + w.keyword
    scored = []
    for mid in set(bm25) | set(cos):
        kw = bm25.get(mid, 0.0) / top if top > 0 else 0.0
        scored.append((mid, (w.vector * max(cos.get(mid, 0.0), 0.0) + w.keyword * kw) / total))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored


async def vectors_for(store: Store, embedder: Embedder, texts: list[str]
                      ) -> dict[str, bytes]:
    """sha256 -> vector for each text: from the embedding cache when (sha, model) is there,
    else embedded (each distinct text once). Raises ProviderError (nothing stored) on a bad
    answer, or when its dimension differs from the vectors the store holds for the model."""
    shas = {content_sha(t): t for t in texts}
    out: dict[str, bytes] = {}
    keys = list(shas)
    for i in range(0, len(keys), 500):
        chunk = keys[i:i + 500]
        marks = ", ".join("?" for _ in chunk)
        for r in await store.fetchall(f"SELECT sha, vec FROM embedding_cache WHERE model=?"
                                      f" AND sha IN ({marks})", [embedder.model, *chunk]):
            out[r["sha"]] = r["vec"]
    missing = [s for s in keys if s not in out]
    if not missing:
        return out
    got = await embedder.embed([shas[s] for s in missing])
    row = await store.fetchone("SELECT dim FROM embedding_cache WHERE model=? LIMIT 1",
                               (embedder.model,))
    for vec in got:
        if row is not None and len(vec) != 4 * int(row["dim"]):
            raise embedder._error(f"a vector of {len(vec) // 4} dimensions, but the store"
                                  f" holds {row['dim']}-dimension vectors of this model"
                                  " (a different model under the same name?)")
        if len(vec) != len(got[0]):
            raise embedder._error("vectors of different lengths in one answer")
    out.update(zip(missing, got, strict=True))
    return out


async def query_vector(store: Store, embedder: Embedder, text: str) -> bytes:
    """A query's vector, embedded only when neither this process nor the embedding cache
    (a memory of the very same text) has it."""
    row = None if embedder.knows(text) else await store.fetchone(
        "SELECT vec FROM embedding_cache WHERE sha=? AND model=?",
        (content_sha(text), embedder.model))
    return await embedder.query(text, row["vec"] if row else None)


async def hybrid_rows(store: Store, model: str, namespaces: Sequence[str], query: str,
                      qvec: bytes, k: int, weights: RecallWeights, candidates: int
                      ) -> list[dict[str, Any]]:
    """The `k` best memories by fused score (before min score and token budget), each with
    its `score`, `bm25` (None: not a keyword candidate) and `similarity` (None: no vector);
    `candidates` of each kind (at least `k`) are fused."""
    n = max(candidates, k)
    index = index_for(store, model)
    await index.refresh(store, namespaces)
    if index.dim is not None and len(qvec) != 4 * index.dim:
        raise ValidationError(f"memory recall: the query's vector has {len(qvec) // 4}"
                              f" dimensions, the stored ones {index.dim}")
    q = unit(qvec)
    bm25 = {int(r["id"]): float(r["score"]) for r in await bm25_rows(
        store, namespaces, query, n, 0.0, None, cols="m.id AS id")}
    near = index.nearest(namespaces, q, n)
    cos = {**index.similarity([m for m in bm25 if m not in near], q), **near}
    ranked = fuse(bm25, cos, weights)[:k * 2]  # a few spare: some may have expired
    if not ranked:
        return []
    marks = ", ".join("?" for _ in ranked)
    got = {int(r["id"]): r for r in await store.fetchall(
        f"SELECT id, {COLUMNS} FROM memories WHERE id IN ({marks}) AND forgotten=0 AND"
        " (expires_at IS NULL OR expires_at > ?)",
        [*(mid for mid, _ in ranked), store.clock.now()])}
    out = []
    for mid, score in ranked:
        r = got.get(mid)
        if r is None:
            continue
        r = {c: v for c, v in r.items() if c != "id"}
        r.update(score=score, bm25=bm25.get(mid), similarity=cos.get(mid))
        out.append(r)
    return out[:k]


def embed_all(tx: WriteTx, payloads: Sequence[MemoryStored], by: str, role: str,
              vectors: dict[str, bytes], model: str) -> int:
    """In a write transaction: a `memory.embedded` event for each memory that still holds
    the content embedded and has no vector of `model` for it yet. Returns how many."""
    from ..events import NewEvent

    n = 0
    for p in payloads:
        sha = content_sha(p.content)
        vec = vectors.get(sha)
        row = tx.one("SELECT m.content, v.sha FROM memories m LEFT JOIN memory_vectors v"
                     " ON v.id = m.id AND v.model = ? WHERE m.namespace=? AND m.key=? AND"
                     " m.forgotten=0", (model, p.namespace, p.key))
        if vec is None or row is None or row["content"] != p.content or row["sha"] == sha:
            continue
        tx.emit(NewEvent(entity_id=f"{p.namespace}/{p.key}", actor=by, role=role,
                         payload=embedded_event(p, model, vec)))
        n += 1
    return n


async def embed_missing(store: Store, embedder: Embedder, namespace: str | None, by: str,
                        batch: int) -> dict[str, Any]:
    """Embed the live memories (of `namespace`, or all) with no vector of the model: one
    `memory.embedded` event each, one commit per `batch`, each batch embedded before its
    commit. A provider error stops it (the batches before stay embedded)."""
    from .events import MemoryStored

    where, params = ["m.forgotten=0"], [embedder.model]
    if namespace is not None:
        where.append("m.namespace=?")
        params.append(namespace)
    rows = await store.fetchall(
        "SELECT m.namespace, m.key, m.content FROM memories m LEFT JOIN memory_vectors v"
        " ON v.id = m.id AND v.model = ? WHERE v.id IS NULL AND " + " AND ".join(where)
        + " ORDER BY m.id", params)
    done = 0
    for i in range(0, len(rows), batch):
        chunk = [MemoryStored(namespace=r["namespace"], key=r["key"], content=r["content"])
                 for r in rows[i:i + batch]]
        vectors = await vectors_for(store, embedder, [p.content for p in chunk])

        def command(tx: WriteTx, c: list[MemoryStored] = chunk,
                    v: dict[str, bytes] = vectors) -> int:
            return embed_all(tx, c, by, "operator", v, embedder.model)

        done += await store.execute(command)
    return {"model": embedder.model, "embedded": done, "missing_before": len(rows)}


def embedded_event(p: MemoryStored, model: str, vec: bytes) -> MemoryEmbedded:
    from .events import MemoryEmbedded

    return MemoryEmbedded(namespace=p.namespace, key=p.key, model=model,
                          sha=content_sha(p.content), dim=len(vec) // 4,
                          vector=base64.b64encode(vec).decode("ascii"))


__all__ = ["RecallResult", "VectorIndex", "embed_all", "embed_missing", "embedded_event",
           "fuse", "hybrid_rows", "index_for", "query_vector", "unit", "vectors_for"]
