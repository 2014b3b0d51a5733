"""Agent memory in the store (core/memory, issue 25): one event per write, the FTS5 index
kept by the projection (verify/rebuild cover it), BM25 recall with top-k / min score /
token budget, FTS5 syntax in a query searched as plain words, bad input refused whole."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.errors import NotFound, StoreError, ValidationError
from clawtower.core.memory.bm25 import fts_query
from clawtower.core.memory.service import (
    MAX_CONTENT,
    Memories,
    parse_jsonl,
    require_fts5,
    to_jsonl,
    to_markdown,
)
from clawtower.core.store import open_store
from clawtower.core.store.sqlite import _migrate_statement


async def _open(tmp_path: Path) -> tuple[Any, Memories]:
    store = await open_store(str(tmp_path / "db.sqlite"))
    return store, Memories(store)


async def _events(store: Any, type_: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = await store.fetchall(
        "SELECT * FROM events WHERE type=? ORDER BY seq", (type_,))
    return rows


async def test_a_write_is_one_event_and_verify_covers_the_fts_index(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        assert (await mem.put("agent:a", "colour", "The favourite colour is teal", by="ann",
                              session="S-1", turn="turn-1", reason="told"))["status"] == "stored"
        assert (await mem.put("agent:a", "colour", "The favourite colour is teal",
                              by="ann"))["status"] == "unchanged"
        assert (await mem.put("agent:a", "colour", "The favourite colour is navy blue",
                              by="bob"))["status"] == "updated"
        stored = await _events(store, "memory.stored")
        assert len(stored) == 2  # the unchanged write emitted nothing
        assert stored[0]["actor"] == "ann"
        assert json.loads(stored[0]["payload"])["source_turn"] == "turn-1"
        row = await mem.get("agent:a", "colour")
        assert row["content"].endswith("navy blue") and row["created_by"] == "ann" \
            and row["updated_by"] == "bob"
        assert [r["key"] for r in await mem.search(["agent:a"], "navy")] == ["colour"]
        assert await mem.search(["agent:a"], "teal") == []  # the old content left the index
        assert await store.verify_projections() == []
        # the index drifting from the log is found by verify, and rebuild repairs it
        await store.execute(lambda tx: tx.conn.execute(
            "INSERT INTO memory_fts (rowid, content, key, mid) VALUES (999, 'x', 'y', 999)"))
        assert any(p.startswith("memory_fts:") for p in await store.verify_projections())
        await store.rebuild_projections()
        assert await store.verify_projections() == []
        assert [r["key"] for r in await mem.search(["agent:a"], "navy")] == ["colour"]
    finally:
        await store.close()


async def test_forget_hides_it_and_records_who_and_why(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        await mem.put("shared:team", "k1", "deploys happen on tuesday", by="ann")
        await mem.forget("shared:team", "k1", by="bob", reason="outdated")
        assert await mem.search(["shared:team"], "tuesday") == []
        assert await mem.listing("shared:team") == []
        row = await mem.get("shared:team", "k1")
        assert row["forgotten"] == 1 and row["forgotten_reason"] == "outdated"
        [e] = await _events(store, "memory.forgotten")
        assert e["actor"] == "bob" and json.loads(e["payload"])["reason"] == "outdated"
        with pytest.raises(NotFound):
            await mem.forget("shared:team", "k1", by="bob", reason="again")
        with pytest.raises(ValidationError, match="reason"):
            await mem.forget("shared:team", "k1", by="bob", reason=" ")
        # stored again after being forgotten: back in recall
        await mem.put("shared:team", "k1", "deploys happen on wednesday", by="ann")
        assert [r["key"] for r in await mem.search(["shared:team"], "wednesday")] == ["k1"]
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_recall_is_per_namespace_with_top_k_min_score_and_budget(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        for i in range(20):
            await mem.put("agent:a", f"k{i}", f"note {i} about the database migration"
                          + (" and the database index" if i < 3 else ""), by="t")
        await mem.put("agent:b", "other", "the database of agent b", by="t")
        rows = await mem.search(["agent:a"], "database", k=5)
        assert len(rows) == 5 and all(r["namespace"] == "agent:a" for r in rows)
        assert {r["key"] for r in rows[:3]} == {"k0", "k1", "k2"}  # BM25: more matches first
        assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
        assert all(r["namespace"] == "agent:b" for r in
                   await mem.search(["agent:b"], "database", k=5))
        budget = await mem.search(["agent:a"], "database", k=20, token_budget=25)
        assert 1 <= len(budget) < 5
        top = rows[0]["score"]
        assert all(r["score"] >= top for r in
                   await mem.search(["agent:a"], "database", k=20, min_score=top))
    finally:
        await store.close()


@pytest.mark.parametrize("query", ['"NEAR(', 'NEAR(a b', '"unbalanced', 'a AND OR NOT',
                                   'content:x*', '^start', '(((', 'key : "', '*', ''])
async def test_fts5_syntax_in_a_query_is_searched_as_words(tmp_path: Path, query: str) -> None:
    store, mem = await _open(tmp_path)
    try:
        await mem.put("agent:a", "near", "near the start of content and a key", by="t")
        rows = await mem.search(["agent:a"], query)  # never an error
        words = {w.lower() for w in query.replace('"', " ").replace("(", " ").split()}
        if words & {"near", "start", "content", "key", "a"}:
            assert [r["key"] for r in rows] == ["near"]
    finally:
        await store.close()


def test_fts_query_quotes_every_term() -> None:
    assert fts_query('say "NEAR(x y) OR') == '"say" OR "near" OR "x" OR "y" OR "or"'
    assert fts_query('"*( )') is None


async def test_bad_input_is_one_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        with pytest.raises(ValidationError, match=f"over the limit of {MAX_CONTENT}"):
            await mem.put("agent:a", "big", "x" * (MAX_CONTENT + 1), by="t")
        with pytest.raises(ValidationError, match="namespace 'robot:x'"):
            await mem.put("robot:x", "k", "text", by="t")
        with pytest.raises(ValidationError, match="memory key"):
            await mem.put("agent:a", "", "text", by="t")
        with pytest.raises(ValidationError, match="empty"):
            await mem.put("agent:a", "k", "  ", by="t")
        assert await _events(store, "memory.stored") == []
    finally:
        await store.close()


async def test_import_is_idempotent_and_a_corrupt_line_imports_nothing(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        await mem.put("agent:a", "one", "first fact", by="t", category="fact")
        await mem.put("agent:a", "two", "second fact", by="t")
        text = to_jsonl(await mem.listing("agent:a"))
        md = to_markdown("agent:a", await mem.listing("agent:a"))
        assert "## one" in md and "- category: fact" in md and "second fact" in md
        before = await store.last_seq()
        out = await mem.import_many(parse_jsonl(text, "x.jsonl", store.clock.now()), by="t")
        assert [o["status"] for o in out] == ["unchanged", "unchanged"]
        assert await store.last_seq() == before  # idempotent by key: nothing written
        bad = text + '{"namespace": "agent:a", "key": "three", "content": "third"}\n{oops\n'
        with pytest.raises(ValidationError, match=r"x.jsonl: line 4: .*nothing imported"):
            parse_jsonl(bad, "x.jsonl", 0)
        with pytest.raises(ValidationError, match=r"line 1: .*over the limit"):
            parse_jsonl(json.dumps({"namespace": "agent:a", "key": "k",
                                    "content": "x" * (MAX_CONTENT + 1)}), "y.jsonl", 0)
        assert await store.last_seq() == before
    finally:
        await store.close()


class _NoFts5:
    """A connection whose SQLite lacks FTS5 (SQLite's own error text)."""

    def execute(self, _sql: str) -> None:
        raise sqlite3.OperationalError("no such module: fts5")


def test_fts5_is_checked_with_a_clear_message() -> None:
    require_fts5()  # this Python has it
    with pytest.raises(StoreError, match="built without FTS5, which agent memory needs"):
        _migrate_statement(_NoFts5(), "CREATE VIRTUAL TABLE memory_fts USING fts5(x)")  # type: ignore[arg-type]


async def test_postgres_recalls_the_same_way_from_its_replica(pg_url: str) -> None:
    """The PostgreSQL store answers reads from its local SQLite replica, built by the same
    migrations and projection handlers: the FTS5 index is there too."""
    store = await open_store(pg_url)
    try:
        mem = Memories(store)
        await mem.put("agent:a", "db", "the staging database runs on port 5433", by="t")
        await mem.put("agent:a", "other", "lunch is at noon", by="t")
        assert [r["key"] for r in await mem.search(["agent:a"], 'port "NEAR(')] == ["db"]
        await mem.forget("agent:a", "db", by="t", reason="moved")
        assert await mem.search(["agent:a"], "port") == []
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_terms_in_too_many_memories_are_dropped_when_rarer_ones_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import clawtower.core.memory.bm25 as bm25

    monkeypatch.setattr(bm25, "COMMON_DF", 2)
    store, mem = await _open(tmp_path)
    try:
        for i in range(4):
            await mem.put("agent:a", f"common{i}", f"project status update {i}", by="t")
        await mem.put("agent:a", "rare", "the project codename is heron", by="t")
        # "project" is in 5 memories (> 2): searched for "heron" only
        assert [r["key"] for r in await mem.search(["agent:a"], "project heron", k=5)] \
            == ["rare"]
        # every term common: the least common one ("status", in 4) is kept
        keys = {r["key"] for r in await mem.search(["agent:a"], "project status", k=10)}
        assert keys == {f"common{i}" for i in range(4)}
        # a word the index holds only stemmed ("codenames" -> "codenam") is kept
        assert [r["key"] for r in await mem.search(["agent:a"], "project codenames")] \
            == ["rare"]
    finally:
        await store.close()


async def test_events_read_as_one_line(tmp_path: Path) -> None:
    from clawtower.core.describe import event_summary

    store, mem = await _open(tmp_path)
    try:
        await mem.put("agent:a", "k", "line one\nline two", by="ann", session="S-3")
        await mem.forget("agent:a", "k", by="bob", reason="stale")
        events = await store.events_after(0)
        lines = [event_summary(e) for e in events if e.type.startswith("memory.")]
        assert lines == ["memory agent:a k stored (from S-3): line one line two",
                         "memory agent:a k forgotten: stale"]
    finally:
        await store.close()


async def test_an_expired_memory_is_not_recalled(tmp_path: Path) -> None:
    store, mem = await _open(tmp_path)
    try:
        now = store.clock.now()
        await mem.put("agent:a", "old", "the office wifi password", by="t",
                      expires_at=now - 1)
        await mem.put("agent:a", "new", "the office printer name", by="t",
                      expires_at=now + 3600)
        assert [r["key"] for r in await mem.search(["agent:a"], "office", k=5)] == ["new"]
    finally:
        await store.close()


async def test_memory_store_tool_ttl_and_expires(tmp_path: Path) -> None:
    """`memory_store`'s optional `ttl` (a duration) or `expires` (an ISO time); a bad one,
    or both, is an error result to the model and nothing is written."""
    from clawtower.core.memory.tools import MemoryTools

    store, mem = await _open(tmp_path)
    try:
        tools = MemoryTools(store, "a", None, "S-1", "turn-1")
        now = store.clock.now()
        out = await tools.call("memory_store", json.dumps(
            {"key": "k", "content": "short lived", "ttl": "10m"}))
        assert not out.is_error, out.content
        assert 599 <= (await mem.get("agent:a", "k"))["expires_at"] - now <= 601
        out = await tools.call("memory_store", json.dumps(
            {"key": "k2", "content": "x", "expires": "2999-01-01T00:00:00+00:00"}))
        assert not out.is_error and (await mem.get("agent:a", "k2"))["expires_at"] \
            == 32472144000.0
        for bad, needle in (({"ttl": "soon"}, "ttl 'soon': not a duration"),
                            ({"ttl": "1h", "expires": "2999-01-01"}, "not both"),
                            ({"expires": "1999-01-01"}, "already past")):
            out = await tools.call("memory_store", json.dumps(
                {"key": "bad", "content": "x", **bad}))
            assert out.is_error and needle in out.content, out.content
        assert [r["key"] for r in await mem.listing()] == ["k", "k2"]
    finally:
        await store.close()


async def test_an_operator_corrects_a_memory_and_sees_an_agents_namespaces(
        tmp_path: Path) -> None:
    """`correct` (the console's command): one `memory.stored` with who and why, keeping
    category and expiry; `of_agent` lists what a spec may read (globs expanded)."""
    store, mem = await _open(tmp_path)
    try:
        await mem.put("agent:a", "cat", "The cat is Miso", category="pet", by="a",
                      expires_at=store.clock.now() + 60)
        await mem.put("shared:team", "lunch", "Lunch at noon", by="t")
        await mem.put("agent:b", "secret", "not for a", by="b")
        out = await mem.correct("agent:a", "cat", "The cat is Mochi", by="alice",
                                reason="it was renamed")
        assert out["status"] == "updated"
        assert (await mem.correct("agent:a", "cat", "The cat is Mochi", by="alice",
                                  reason="again"))["status"] == "unchanged"
        stored = [e for e in await store.events_after(0) if e.type == "memory.stored"]
        assert len(stored) == 4 and stored[-1].actor == "alice"
        assert stored[-1].payload.reason == "it was renamed"  # type: ignore[attr-defined]
        row = await mem.get("agent:a", "cat")
        assert (row["content"], row["category"], row["updated_by"]) == (
            "The cat is Mochi", "pet", "alice")
        assert row["expires_at"] is not None
        for bad, exc in ((("agent:a", "nope", "x"), NotFound),
                         (("agent:a", "cat", ""), ValidationError)):
            with pytest.raises(exc):
                await mem.correct(*bad, by="alice", reason="r")
        with pytest.raises(ValidationError, match="give a reason"):
            await mem.correct("agent:a", "cat", "x", by="alice", reason=" ")
        await mem.forget("agent:a", "cat", by="alice", reason="gone")
        with pytest.raises(NotFound):
            await mem.correct("agent:a", "cat", "back", by="alice", reason="r")

        await mem.put("agent:a", "cat", "The cat is Mochi", by="a")
        ns, rows = await mem.of_agent("a", ["agent:a", "shared:*"], ["shared:other"])
        assert ns == ["agent:a", "shared:other", "shared:team"]
        assert [(r["namespace"], r["key"]) for r in rows] == [
            ("agent:a", "cat"), ("shared:team", "lunch")]
        ns, _ = await mem.of_agent("a", None, ["agent:b"])  # b's namespace is not a's
        assert ns == ["agent:a"]
    finally:
        await store.close()
