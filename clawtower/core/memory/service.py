"""Memory writes (typed commands: one `memory.stored` event per write, plus one
`memory.embedded` when an embedding provider is configured) and reads (listing, recall: BM25,
core/memory/bm25.py, or hybrid with embeddings, core/memory/hybrid.py).

Reads are plain SQL on the projection, so both backends answer them the same way: the
SQLite file, or the PostgreSQL store's local SQLite replica (core/store/postgres.py), which
is built by the same migrations and projection handlers, FTS5 index included.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ClawError, NotFound, ValidationError
from ..store.interface import Store, WriteTx
from .bm25 import COLUMNS, _select, bm25_rows
from .checks import (  # re-exported: the memory API's one import for front ends
    MAX_CONTENT,
    as_read,
    check_category,
    check_content,
    check_key,
    check_namespace,
    parse_expires,
    require_fts5,
)
from .transfer import parse_jsonl, to_jsonl, to_markdown

# The memory events (their models) load with the first write or import: `memory list`,
# `show` and `search` read tables only (start-up: BENCHMARKS.md).
if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig
    from .config import MemoryConfig, RecallWeights
    from .embeddings import Embedder
    from .events import MemoryStored
    from .hybrid import RecallResult
    from .policy import RecallPolicy

log = logging.getLogger("clawtower.memory")


def recalled_refs(memories: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a turn records of its recall (on its start event): which memories, how they
    scored; never their content."""
    return [{"namespace": m["namespace"], "key": m["key"],
             "score": float(f"{float(m['score']):.4g}")} for m in memories]


def memory_context(memories: list[dict[str, Any]]) -> str:
    """The ephemeral block recalled memories add to a turn's system prompt (rendered per
    turn; never stored as a message)."""
    lines = ["# Recalled memories (context for this turn only)"]
    for m in memories:
        cat = f" [{m['category']}]" if m.get("category") else ""
        lines.append(f"- ({m['namespace']}) {m['key']}{cat}: {m['content']}")
    return "\n".join(lines)


NO_PROVIDER = "no embedding provider configured (memory.embeddings)"


class Memories:
    """The memory API over a store (CLI, tools, console). With an `embedder` every write
    also stores its content's vector and recall is hybrid (`weights`, `candidates`: the
    fusion, core/memory/hybrid.py); without one recall is BM25 alone."""

    def __init__(self, store: Store, embedder: Embedder | None = None, *,
                 weights: RecallWeights | None = None, candidates: int = 50) -> None:
        self.store = store
        self.embedder = embedder
        self.weights = weights
        self.candidates = candidates

    async def _vectors(self, payloads: Sequence[MemoryStored]
                       ) -> tuple[dict[str, bytes], str]:
        """The contents' vectors (cached or embedded, before any write transaction) and,
        when embedding failed, why (the memories are then stored without vectors)."""
        if self.embedder is None or not payloads:
            return {}, ""
        from .hybrid import vectors_for

        try:
            return await vectors_for(self.store, self.embedder,
                                     [p.content for p in payloads]), ""
        except ClawError as exc:
            return {}, str(exc)

    async def put(self, namespace: str, key: str, content: str, *, category: str = "",
                  by: str, role: str = "operator", session: str = "", turn: str = "",
                  reason: str = "", expires_at: float | None = None) -> dict[str, Any]:
        """Store (or replace) one memory: one `memory.stored` event (none when nothing
        changed) and, with an embedder, one `memory.embedded` when its vector is new."""
        from .events import MemoryStored

        payload = MemoryStored(
            namespace=check_namespace(namespace), key=check_key(key),
            content=check_content(content), category=check_category(category),
            source_session=session, source_turn=turn, reason=reason, expires_at=expires_at)
        return (await self.import_many([payload], by=by, role=role))[0]

    async def import_many(self, payloads: list[MemoryStored], *, by: str,
                          role: str = "operator") -> list[dict[str, Any]]:
        """Store many memories in ONE commit (all or nothing); unchanged ones emit nothing.
        With an embedder each is embedded first (outside the transaction; a failure stores
        them without vectors and says why in `not_embedded`)."""
        vectors, failed = await self._vectors(payloads)
        model = self.embedder.model if self.embedder is not None else ""
        out = await self.store.execute(
            lambda tx: _put_all(tx, payloads, by, role, vectors, model))
        if self.embedder is not None:
            for o in out:
                o["embedded"] = not failed
                if failed:
                    o["not_embedded"] = failed
        return out

    async def embed_missing(self, namespace: str | None = None, *, by: str,
                            batch: int = 256) -> dict[str, Any]:
        """Embed the live memories with no vector of the embedder's model (stored before
        embeddings were configured, or while the provider failed): core/memory/hybrid.py."""
        if self.embedder is None:
            raise ValidationError(f"memory embed: {NO_PROVIDER}")
        from .hybrid import embed_missing

        return await embed_missing(self.store, self.embedder,
                                   None if namespace is None else check_namespace(namespace),
                                   by, batch)

    async def forget(self, namespace: str, key: str, *, by: str, reason: str,
                     role: str = "operator", session: str = "", turn: str = ""
                     ) -> dict[str, Any]:
        check_namespace(namespace)
        check_key(key)
        if not reason.strip():
            raise ValidationError("forget: give a reason (recorded with who forgot it)")
        from ..events import NewEvent
        from .events import MemoryForgotten

        def command(tx: WriteTx) -> dict[str, Any]:
            row = tx.one("SELECT forgotten FROM memories WHERE namespace=? AND key=?",
                         (namespace, key))
            if row is None or row["forgotten"]:
                raise NotFound(f"memory {namespace + '/' + key!r}: no such memory")
            tx.emit(NewEvent(entity_id=f"{namespace}/{key}", actor=by, role=role,
                             payload=MemoryForgotten(namespace=namespace, key=key,
                                                     reason=reason, source_session=session,
                                                     source_turn=turn)))
            return {"namespace": namespace, "key": key, "status": "forgotten"}

        return await self.store.execute(command)

    async def correct(self, namespace: str, key: str, content: str, *, by: str, reason: str,
                      role: str = "operator") -> dict[str, Any]:
        """An operator's correction of a memory's content (the console): one
        `memory.stored` naming who and why; its category and expiry stay. A forgotten or
        unknown memory is NotFound; the same content writes nothing."""
        from .events import MemoryStored

        check_namespace(namespace)
        check_key(key)
        check_content(content)
        if not reason.strip():
            raise ValidationError("correct: give a reason (recorded with who corrected it)")

        probe = MemoryStored(namespace=namespace, key=key, content=content, reason=reason)
        vectors, _failed = await self._vectors([probe])  # before the transaction
        model = self.embedder.model if self.embedder is not None else ""

        def command(tx: WriteTx) -> dict[str, Any]:
            row = tx.one("SELECT content, category, expires_at, forgotten FROM memories"
                         " WHERE namespace=? AND key=?", (namespace, key))
            if row is None or row["forgotten"]:
                raise NotFound(f"memory {namespace + '/' + key!r}: no such memory")
            if row["content"] == content:
                return {"namespace": namespace, "key": key, "status": "unchanged"}
            payload = MemoryStored(namespace=namespace, key=key, content=content,
                                   category=row["category"], reason=reason,
                                   expires_at=row["expires_at"])
            return _put_all(tx, [payload], by, role, vectors, model)[0]

        return await self.store.execute(command)

    async def of_agent(self, spec_name: str, allow: list[str] | None,
                       recall: list[str] | None, *, limit: int = 500
                       ) -> tuple[list[str], list[dict[str, Any]]]:
        """What an agent may know: the namespaces its `policy.memory` names (globs matched
        against the namespaces that exist) and those its recall policy names that it may
        read, with their memories (expired ones marked; at most `limit`, the newest)."""
        from .policy import may_use, own_namespace

        globs = [p for p in allow or [] if any(c in p for c in "*?[")]
        wanted = {own_namespace(spec_name), *(p for p in allow or [] if p not in globs),
                  *(recall or [])}
        if globs:
            wanted |= {r["namespace"] for r in await self.store.fetchall(
                "SELECT DISTINCT namespace FROM memories")}
        namespaces = sorted(ns for ns in wanted if may_use(allow, spec_name, ns))
        marks = ", ".join("?" for _ in namespaces)
        now = self.store.clock.now()
        rows = await self.store.fetchall(
            f"SELECT {COLUMNS}, forgotten FROM memories WHERE forgotten=0 AND namespace IN"
            f" ({marks}) ORDER BY updated_at DESC LIMIT ?", [*namespaces, limit])
        rows.sort(key=lambda r: (r["namespace"], r["key"]))
        return namespaces, [as_read(r, now) for r in rows]

    async def get(self, namespace: str, key: str) -> dict[str, Any]:
        row = await self.store.fetchone(
            f"SELECT {COLUMNS}, forgotten, forgotten_reason FROM memories"
            " WHERE namespace=? AND key=?", (check_namespace(namespace), key))
        if row is None:
            raise NotFound(f"memory {namespace + '/' + key!r}: no such memory")
        return as_read(row, self.store.clock.now())

    async def listing(self, namespace: str | None = None, *, include_forgotten: bool = False
                   ) -> list[dict[str, Any]]:
        where, params = [], []
        if namespace is not None:
            where.append("namespace=?")
            params.append(check_namespace(namespace))
        if not include_forgotten:
            where.append("forgotten=0")
        sql = (f"SELECT {COLUMNS}, forgotten, forgotten_reason FROM memories"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY namespace, key")
        now = self.store.clock.now()
        return [as_read(r, now) for r in await self.store.fetchall(sql, params)]

    async def search(self, namespaces: Sequence[str], query: str, *, k: int = 5,
                     min_score: float = 0.0, token_budget: int | None = None
                     ) -> list[dict[str, Any]]:
        return (await self.recall(namespaces, query, k=k, min_score=min_score,
                                  token_budget=token_budget)).rows

    async def recall(self, namespaces: Sequence[str], query: str, *, k: int = 5,
                     min_score: float = 0.0, token_budget: int | None = None,
                     weights: RecallWeights | None = None) -> RecallResult:
        """The best `k` memories of `namespaces` for `query`: hybrid with an embedder
        (`score` fused in [0, 1], with `bm25` and `similarity` beside it), else BM25 (the
        reason says why). A provider that fails makes it BM25, with the failure as reason."""
        from .bm25 import RecallResult

        for ns in namespaces:
            check_namespace(ns)
        if k < 1:
            raise ValidationError(f"-k {k}: must be at least 1")
        if self.embedder is None:
            return RecallResult("bm25", NO_PROVIDER, await self.bm25(
                namespaces, query, k, min_score, token_budget))
        if not namespaces or not query.strip():
            return RecallResult("hybrid", "", [])
        from .hybrid import hybrid_rows, query_vector

        try:
            qvec = await query_vector(self.store, self.embedder, query)
            rows = await hybrid_rows(self.store, self.embedder.model, namespaces, query, qvec,
                                     k, weights or self.weights or _default_weights(),
                                     self.candidates)
        except ClawError as exc:
            return RecallResult("bm25", f"embeddings failed: {exc}", await self.bm25(
                namespaces, query, k, min_score, token_budget))
        return RecallResult("hybrid", "", _select(rows, min_score, token_budget))

    async def bm25(self, namespaces: Sequence[str], query: str, k: int, min_score: float,
                   token_budget: int | None, cols: str | None = None
                   ) -> list[dict[str, Any]]:
        """BM25 recall; with `cols` the raw rows of those columns (and `score`), unfiltered."""
        return await bm25_rows(self.store, namespaces, query, k, min_score, token_budget,
                               cols)


def _default_weights() -> RecallWeights:
    from .config import RecallWeights

    return RecallWeights()


def _put_all(tx: WriteTx, payloads: list[MemoryStored], by: str, role: str,
             vectors: dict[str, bytes] | None = None, model: str = ""
             ) -> list[dict[str, Any]]:
    from ..events import NewEvent

    out = []
    for p in payloads:
        row = tx.one("SELECT content, category, expires_at, forgotten FROM memories"
                     " WHERE namespace=? AND key=?", (p.namespace, p.key))
        same = row is not None and not row["forgotten"] and row["content"] == p.content \
            and row["category"] == p.category and row["expires_at"] == p.expires_at
        if not same:
            tx.emit(NewEvent(entity_id=f"{p.namespace}/{p.key}", actor=by, role=role,
                             payload=p))
        out.append({"namespace": p.namespace, "key": p.key,
                    "status": "unchanged" if same else
                    ("updated" if row is not None and not row["forgotten"] else "stored")})
    if vectors:  # in the same commit: at most 2 events per memory written
        from .hybrid import embed_all

        embed_all(tx, payloads, by, role, vectors, model)
    return out


def memories_for(store: Store, config: ClawtowerConfig) -> Memories:
    """The memory API a front end (CLI, console) writes and recalls through: with the
    config's embedder when `memory.embeddings` names one, so a put or a correction stores
    its vector and a search is hybrid; BM25 alone otherwise."""
    e = config.memory.embeddings
    if e is None:
        return Memories(store)
    from .embeddings import embedder_for

    return Memories(store, embedder_for(config), weights=e.weights, candidates=e.candidates)


async def turn_recall(store: Store, embedder: Embedder, config: MemoryConfig, spec_name: str,
                      allow: list[str] | None, policy: RecallPolicy, focus: str,
                      bm25_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The memories recalled before a turn, hybrid: called after the claim committed (the
    query's embedding is an HTTP call, never made inside a write transaction). Falls back
    to `bm25_rows` (what the claim recalled) when the provider fails, logging why."""
    from .hybrid import RecallResult
    from .policy import recall_namespaces

    namespaces = recall_namespaces(policy, allow, spec_name)
    if not namespaces or policy.top_k <= 0 or not focus.strip():
        return bm25_rows
    e = config.embeddings
    mem = Memories(store, embedder, weights=e.weights if e else None,
                   candidates=e.candidates if e else 50)
    try:
        got = await mem.recall(namespaces, focus, k=policy.top_k, min_score=policy.min_score,
                               token_budget=policy.token_budget, weights=policy.weights)
    except ClawError as exc:
        got = RecallResult("bm25", str(exc), bm25_rows)
    if got.mode != "hybrid":
        log.warning("recall for %s: BM25 only: %s", spec_name, got.reason)
        return bm25_rows
    return got.rows


__all__ = ["MAX_CONTENT", "Memories", "check_namespace", "memories_for", "memory_context",
           "parse_expires", "parse_jsonl", "recalled_refs", "require_fts5", "to_jsonl",
           "to_markdown", "turn_recall"]
