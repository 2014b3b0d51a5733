"""Memory writes (typed commands: one `memory.stored` event per write, plus one
`memory.embedded` when an embedding provider is configured) and reads (listing, recall: BM25,
or hybrid with embeddings, core/memory/hybrid.py).

Reads are plain SQL on the projection, so both backends answer them the same way: the
SQLite file, or the PostgreSQL store's local SQLite replica (core/store/postgres.py), which
is built by the same migrations and projection handlers, FTS5 index included.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ClawError, NotFound, ValidationError
from ..store.interface import Store, WriteTx
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
    from .config import RecallWeights
    from .embeddings import Embedder
    from .events import MemoryStored
    from .hybrid import RecallResult

MAX_QUERY_TERMS = 32
COMMON_DF = 2_000  # a query term in more memories than this is dropped when rarer ones exist
_TERM = re.compile(r"\w+", re.UNICODE)
COLUMNS = ("namespace, key, content, category, source_session, source_turn, reason,"
           " created_by, updated_by, created_at, updated_at, expires_at")


def query_terms(text: str) -> list[str]:
    """The words of a recall query (lower-cased, each once, at most MAX_QUERY_TERMS)."""
    return list(dict.fromkeys(t.lower() for t in _TERM.findall(text or "")))[:MAX_QUERY_TERMS]


def fts_query(text: str | list[str]) -> str | None:
    """A recall query as an FTS5 expression of plain terms: every word quoted, joined with
    OR (BM25 ranks the matches), so FTS5 syntax in the query (`NEAR(`, `"`, `*`, `AND`,
    `col:`) is only ever searched for as words. None when there is no word to search."""
    terms = query_terms(text) if isinstance(text, str) else text
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def vocab_sql(terms: list[str]) -> tuple[str, list[Any]]:
    return (f"SELECT term, doc FROM memory_vocab WHERE term IN"
            f" ({', '.join('?' for _ in terms)})", list(terms))


def informative(terms: list[str], df: dict[str, int]) -> list[str]:
    """The query's terms without those in more than COMMON_DF memories, when it has rarer
    ones: such a term has almost no BM25 weight (idf ~ log(N/df)) but makes FTS5 score every
    memory holding it (at 100,000 memories a query with one cost ~20 ms, without ~4 ms;
    BENCHMARKS.md). A word the index holds only stemmed (df unknown here) is kept. Below
    COMMON_DF memories nothing is ever dropped."""
    rare = [t for t in terms if df.get(t, 0) <= COMMON_DF]
    if rare or not terms:
        return rare
    return [min(terms, key=lambda t: df.get(t, 0))]  # all common: the least common one


def estimate_tokens(text: str) -> int:
    return len(text) // 4 + 1


def _search_sql(namespaces: Sequence[str], match: str, k: int, now: float,
                cols: str | None = None) -> tuple[str, list[Any]]:
    marks = ", ".join("?" for _ in namespaces)
    cols = cols or ", ".join("m." + c.strip() for c in COLUMNS.split(","))
    sql = (f"SELECT {cols}, -bm25(memory_fts) AS score FROM memory_fts JOIN memories m"
           " ON m.id = memory_fts.rowid WHERE memory_fts MATCH ?"
           f" AND m.namespace IN ({marks}) AND (m.expires_at IS NULL OR m.expires_at > ?)"
           " ORDER BY bm25(memory_fts) LIMIT ?")
    return sql, [match, *namespaces, now, k]


def _select(rows: list[dict[str, Any]], min_score: float, token_budget: int | None
            ) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    used = 0
    for r in rows:
        if r["score"] < min_score:
            continue
        cost = estimate_tokens(r["content"])
        if token_budget is not None and used + cost > token_budget:
            continue  # a shorter memory further down may still fit
        used += cost
        out.append(r)
    return out


MEMORY_ENTITY = "memory"  # the memory events' entity (their models load lazily)


def recall_sync(tx: WriteTx, namespaces: Sequence[str], query: str, *, k: int, now: float,
                min_score: float = 0.0, token_budget: int | None = None
                ) -> list[dict[str, Any]]:
    """BM25 recall inside a write transaction."""
    terms = query_terms(query)
    if not terms or not namespaces or k <= 0:
        return []
    marks = ", ".join("?" for _ in namespaces)
    all_rows = tx.all
    if not tx.cached(MEMORY_ENTITY, ("any", tuple(namespaces)), lambda: bool(all_rows(
            f"SELECT 1 FROM memories WHERE namespace IN ({marks}) LIMIT 1",
            list(namespaces)))):
        return []  # nothing in these namespaces: one indexed probe (once per batch), not
        # the vocabulary + FTS queries
    df = {r["term"]: r["doc"] for r in all_rows(*vocab_sql(terms))}
    match = fts_query(informative(terms, df))
    if match is None:
        return []
    sql, params = _search_sql(namespaces, match, k, now)
    return _select(all_rows(sql, params), min_score, token_budget)


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

        return await embed_missing(self, self.embedder,
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
        from .hybrid import RecallResult

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
            rows = await hybrid_rows(self, self.embedder.model, namespaces, query, qvec, k,
                                     weights or self.weights or _default_weights())
        except ClawError as exc:
            return RecallResult("bm25", f"embeddings failed: {exc}", await self.bm25(
                namespaces, query, k, min_score, token_budget))
        return RecallResult("hybrid", "", _select(rows, min_score, token_budget))

    async def bm25(self, namespaces: Sequence[str], query: str, k: int, min_score: float,
                   token_budget: int | None, cols: str | None = None
                   ) -> list[dict[str, Any]]:
        """BM25 recall; with `cols` the raw rows of those columns (and `score`), unfiltered."""
        terms = query_terms(query)
        if not terms or not namespaces:
            return []
        df = {r["term"]: r["doc"] for r in await self.store.fetchall(*vocab_sql(terms))}
        match = fts_query(informative(terms, df))
        if match is None:
            return []
        sql, params = _search_sql(namespaces, match, k, self.store.clock.now(), cols)
        rows = await self.store.fetchall(sql, params)
        return rows if cols else _select(rows, min_score, token_budget)


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


__all__ = ["MAX_CONTENT", "Memories", "check_namespace", "fts_query", "memory_context",
           "parse_expires", "parse_jsonl", "recall_sync", "recalled_refs", "require_fts5",
           "to_jsonl", "to_markdown"]
