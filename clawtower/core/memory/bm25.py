"""BM25 recall over the memory projection: plain SQL on the FTS5 index, so both store
backends answer it the same way. The layer below core/memory/hybrid.py (which fuses it with
vector similarity) and core/memory/service.py (the memory API); it imports neither."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..store.interface import Store, WriteTx


@dataclass
class RecallResult:
    """What a recall found and how: mode "hybrid", or "bm25" with the reason why not. Here,
    beside BM25, so that a search without an embedder loads no vector or config module."""

    mode: str
    reason: str
    rows: list[dict[str, Any]]


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
    """BM25 recall inside a write transaction. The probe for any memory in `namespaces`
    (once per batch) comes before the query is split into terms: a turn's claim recalls
    for every job, and most agents have no memories (the terms of a flow node's task were
    ~8% of the writer's CPU per node, issue 36)."""
    if not namespaces or k <= 0 or not query:
        return []
    marks = ", ".join("?" for _ in namespaces)
    all_rows = tx.all
    if not tx.cached(MEMORY_ENTITY, ("any", tuple(namespaces)), lambda: bool(all_rows(
            f"SELECT 1 FROM memories WHERE namespace IN ({marks}) LIMIT 1",
            list(namespaces)))):
        return []  # nothing in these namespaces: one indexed probe (once per batch), not
        # the vocabulary + FTS queries
    terms = query_terms(query)
    if not terms:
        return []
    df = {r["term"]: r["doc"] for r in all_rows(*vocab_sql(terms))}
    match = fts_query(informative(terms, df))
    if match is None:
        return []
    sql, params = _search_sql(namespaces, match, k, now)
    return _select(all_rows(sql, params), min_score, token_budget)


async def bm25_rows(store: Store, namespaces: Sequence[str], query: str, k: int,
                    min_score: float, token_budget: int | None, cols: str | None = None
                    ) -> list[dict[str, Any]]:
    """BM25 recall; with `cols` the raw rows of those columns (and `score`), unfiltered."""
    terms = query_terms(query)
    if not terms or not namespaces:
        return []
    df = {r["term"]: r["doc"] for r in await store.fetchall(*vocab_sql(terms))}
    match = fts_query(informative(terms, df))
    if match is None:
        return []
    sql, params = _search_sql(namespaces, match, k, store.clock.now(), cols)
    rows = await store.fetchall(sql, params)
    return rows if cols else _select(rows, min_score, token_budget)


__all__ = ["COLUMNS", "COMMON_DF", "MAX_QUERY_TERMS", "bm25_rows", "estimate_tokens",
           "fts_query", "informative", "query_terms", "recall_sync", "vocab_sql"]
