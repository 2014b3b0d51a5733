"""Embeddings and hybrid recall (issue 25 item 2), against a fake OpenAI-compatible
`/embeddings` server (httpx.MockTransport; tests/helpers/fake_embeddings.py): a write is at
most 2 events and the same text is never embedded twice; hybrid recall finds a paraphrase
BM25 misses and says which mode it ran in; weights steer the fusion; a provider that is down,
answers garbage or the wrong dimension is one line, nothing of it stored, recall falls back
to BM25 with the reason; vectors follow updates, forgets and a rebuild; before a turn the
query is embedded outside any write transaction."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from clawtower.core.agents.config import config_from_data
from clawtower.core.agents.provider import ProviderError
from clawtower.core.errors import ValidationError
from clawtower.core.memory.config import RecallWeights
from clawtower.core.memory.embeddings import Embedder, embedder_for
from clawtower.core.memory.hybrid import fuse
from clawtower.core.memory.service import Memories
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from tests.helpers.fake_embeddings import transport
from tests.helpers.session_helpers import runner, spec

MODEL = "fake-embed"


def embedder(t: httpx.MockTransport | None = None, *, dim: int | None = None,
             model: str = MODEL) -> Embedder:
    return Embedder("local", "http://embed.test/v1", model, dimensions=dim, retries=0,
                    transport=t or transport())


async def _types(store: Any) -> list[str]:
    return [r["type"] for r in await store.fetchall("SELECT type FROM events ORDER BY seq")]


async def test_a_write_is_two_events_and_a_text_is_embedded_once(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    store = await open_store(str(tmp_path / "db.sqlite"))
    mem = Memories(store, embedder(transport(calls=calls)))
    try:
        out = await mem.put("agent:a", "car", "The car is parked in the garage", by="ann")
        assert out["status"] == "stored" and out["embedded"] is True
        assert await _types(store) == ["memory.stored", "memory.embedded"]
        # the same text under another key: cached by (sha256, model), no request
        await mem.put("agent:a", "car2", "The car is parked in the garage", by="ann")
        assert calls == [["The car is parked in the garage"]]
        assert (await mem.put("agent:a", "car", "The car is parked in the garage",
                              by="ann"))["status"] == "unchanged"
        assert len(await _types(store)) == 4 and len(calls) == 1  # nothing new
        [e] = (await store.fetchall("SELECT payload FROM events WHERE type='memory.embedded'"
                                    " ORDER BY seq LIMIT 1"))
        p = json.loads(e["payload"])
        assert p["model"] == MODEL and p["dim"] == 64 and len(p["sha"]) == 64
        assert (await store.fetchone("SELECT count(*) AS n FROM embedding_cache"))["n"] == 1
        # a query already seen is not embedded again either
        await mem.recall(["agent:a"], "where is my automobile")
        await mem.recall(["agent:a"], "where is my automobile")
        assert len(calls) == 2
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_hybrid_finds_a_paraphrase_bm25_misses_and_says_its_mode(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        mem = Memories(store, embedder())
        await mem.put("agent:a", "car", "The car is parked in the garage", by="ann")
        await mem.put("agent:a", "lunch", "Lunch is at noon", by="ann")
        await mem.put("agent:b", "car", "Their sedan is parked outside", by="ann")
        got = await mem.recall(["agent:a"], "automobile location", k=1)
        assert (got.mode, got.reason) == ("hybrid", "")
        [r] = got.rows
        assert r["key"] == "car" and r["namespace"] == "agent:a"  # never agent:b's
        assert r["bm25"] is None and 0 < r["similarity"] <= 1 and 0 < r["score"] <= 1
        plain = await Memories(store).recall(["agent:a"], "automobile location")
        assert plain.mode == "bm25" and "no embedding provider" in plain.reason
        assert plain.rows == []
        # an exact keyword hit still ranks first
        got = await mem.recall(["agent:a"], "noon")
        assert got.rows[0]["key"] == "lunch" and got.rows[0]["bm25"] > 0
    finally:
        await store.close()


def test_fusion_weights() -> None:
    bm25 = {1: 8.0, 2: 4.0}
    cos = {2: 0.9, 3: 0.8, 1: -0.5}
    assert [m for m, _ in fuse(bm25, cos, RecallWeights(vector=0, keyword=1))][:2] == [1, 2]
    assert [m for m, _ in fuse(bm25, cos, RecallWeights(vector=1, keyword=0))][:2] == [2, 3]
    mixed = dict(fuse(bm25, cos, RecallWeights(vector=0.5, keyword=0.5)))
    assert math.isclose(mixed[2], (0.9 + 0.5) / 2) and math.isclose(mixed[1], 0.5)
    assert math.isclose(mixed[3], 0.4)  # not a keyword candidate: 0 there, cos counted
    with pytest.raises(ValueError, match="both be 0"):
        RecallWeights(vector=0, keyword=0)


def _body(texts: list[str], vec: Any) -> dict[str, Any]:
    return {"data": [{"index": i, "embedding": vec} for i in range(len(texts))]}


BAD = [
    (lambda t, m: b"<html>bad gateway</html>", "the answer is not JSON"),
    (lambda t, m: {"data": []}, "expected 1 embeddings in `data`, got 0"),
    (lambda t, m: _body(t, [[0.1, 0.2], [0.3, 0.4]]), "one per token"),
    (lambda t, m: _body(t, [0.1, "x"]), "not finite numbers"),
    (lambda t, m: b'{"data": [{"index": 0, "embedding": [0.1, NaN]}]}', "not finite"),
    (lambda t, m: _body(t, [0.0] * 64), "all-zero vector"),
    (lambda t, m: _body(t, [0.5] * 8), "a vector of 8 dimensions; the config says 64"),
]


@pytest.mark.parametrize(("answer", "needle"), BAD)
async def test_a_bad_answer_is_one_line_and_nothing_of_it_is_stored(
        tmp_path: Path, answer: Any, needle: str) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        mem = Memories(store, embedder(transport(answer), dim=64))
        out = await mem.put("agent:a", "k", "deploys happen on tuesday", by="ann")
        assert out["status"] == "stored" and out["embedded"] is False
        msg = out["not_embedded"]
        assert needle in msg and msg.startswith(f"provider local: embeddings ({MODEL}):")
        assert "\n" not in msg and "Traceback" not in msg
        assert await _types(store) == ["memory.stored"]  # stored, no vector: nothing half
        assert (await store.fetchone("SELECT count(*) AS n FROM embedding_cache"))["n"] == 0
        got = await mem.recall(["agent:a"], "deploys")
        assert got.mode == "bm25" and needle in got.reason and got.rows[0]["key"] == "k"
        with pytest.raises(ProviderError, match="embeddings"):
            await mem.embed_missing(by="ann")
    finally:
        await store.close()


async def test_provider_down_or_unknown_model_falls_back_to_bm25(tmp_path: Path) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        mem = Memories(store, embedder(httpx.MockTransport(down)))
        out = await mem.put("agent:a", "k", "deploys happen on tuesday", by="ann")
        assert "cannot reach http://embed.test/v1/embeddings" in out["not_embedded"]
        got = await mem.recall(["agent:a"], "tuesday")
        assert got.mode == "bm25" and got.reason.startswith("embeddings failed: provider local")
        assert [r["key"] for r in got.rows] == ["k"]
        unknown = Memories(store, embedder(model="no-such-model"))
        got = await unknown.recall(["agent:a"], "tuesday")
        assert got.mode == "bm25" and "HTTP 404" in got.reason \
            and "no-such-model" in got.reason
        # the provider back: `memory embed` fills in the vector, once
        mem = Memories(store, embedder())
        assert (await mem.embed_missing(by="ann"))["embedded"] == 1
        assert (await mem.embed_missing(by="ann"))["embedded"] == 0
        assert (await mem.recall(["agent:a"], "weekly release day")).rows[0]["key"] == "k"
    finally:
        await store.close()


async def test_a_model_changing_dimension_is_refused(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        await Memories(store, embedder()).put("agent:a", "a", "the cat sleeps", by="ann")
        other = Memories(store, embedder(transport(dim=32)))
        out = await other.put("agent:a", "b", "the dog barks", by="ann")
        assert "the store holds 64-dimension vectors" in out["not_embedded"]
        got = await other.recall(["agent:a"], "puppy")
        assert got.mode == "bm25" and "query's vector has 32 dimensions" in got.reason
    finally:
        await store.close()


async def test_vectors_follow_updates_forgets_and_a_rebuild(tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        mem = Memories(store, embedder())
        await mem.put("agent:a", "pet", "The kitten is called Miso", by="ann")
        await mem.put("agent:a", "food", "Lunch is at noon", by="ann")
        assert (await mem.recall(["agent:a"], "feline", k=1)).rows[0]["key"] == "pet"
        await mem.put("agent:a", "pet", "The puppy is called Rex", by="ann")  # new content
        got = await mem.recall(["agent:a"], "feline", k=5)
        assert all(r["key"] != "pet" or not r["similarity"] for r in got.rows)
        assert (await mem.recall(["agent:a"], "canine", k=1)).rows[0]["key"] == "pet"
        await mem.forget("agent:a", "pet", by="ann", reason="gone")
        assert [r["key"] for r in (await mem.recall(["agent:a"], "canine")).rows] != ["pet"]
        assert all(r["key"] != "pet" for r in (await mem.recall(["agent:a"], "canine")).rows)
        before = await store.fetchall("SELECT * FROM memory_vectors ORDER BY id")
        assert await store.verify_projections() == []
        await store.rebuild_projections()
        assert await store.fetchall("SELECT * FROM memory_vectors ORDER BY id") == before
        assert (await store.fetchone("SELECT count(*) AS n FROM embedding_cache"))["n"] == 3
    finally:
        await store.close()


def test_config_names_the_field_at_fault() -> None:
    prov = {"local": {"kind": "openai", "base_url": "http://127.0.0.1:1/v1",
                      "models": ["smollm2"]},
            "claude": {"kind": "anthropic", "base_url": "http://127.0.0.1:2"}}
    ok = config_from_data({"providers": prov, "memory": {"embeddings": {
        "provider": "local", "model": "smollm2", "weights": {"vector": 0.5}}}}, "c.yaml")
    e = embedder_for(ok)
    assert e is not None and e.model == "smollm2" and e.base_url == "http://127.0.0.1:1/v1"
    assert ok.memory.embeddings is not None and ok.memory.embeddings.weights.keyword == 0.3
    assert embedder_for(config_from_data({"providers": prov}, "c.yaml")) is None
    cases = [
        ({"provider": "nope", "model": "m"}, "'memory.embeddings.provider': unknown provider"),
        ({"provider": "claude", "model": "m"}, "embeddings need an OpenAI-compatible"),
        ({"provider": "local", "model": "bge"}, "'memory.embeddings.model': unknown model"),
        ({"provider": "local", "model": "smollm2", "dimensions": 0},
         "'memory.embeddings.dimensions'"),
        ({"provider": "local", "model": "smollm2", "colour": 1}, "'memory.embeddings.colour'"),
    ]
    for raw, needle in cases:
        with pytest.raises(ValidationError, match=r"^c\.yaml: field ") as err:
            config_from_data({"providers": prov, "memory": {"embeddings": raw}}, "c.yaml")
        assert needle in str(err.value)


async def test_turn_recall_is_hybrid_and_embeds_outside_the_write_transaction(
        tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    locked: list[bool] = []
    inner = transport()

    def handle(request: httpx.Request) -> httpx.Response:
        probe = sqlite3.connect(str(db), timeout=0)  # a writer mid-transaction would block
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            locked.append(False)
        except sqlite3.OperationalError:
            locked.append(True)
        finally:
            probe.close()
        return inner.handle_request(request)

    store = await open_store(str(db))
    try:
        sessions = Sessions(store)
        await spec(sessions, "alpha")
        await Memories(store, embedder()).put("agent:alpha", "car",
                                              "The car is parked in the garage", by="ann")
        sid = await sessions.create(agent="alpha")
        await sessions.send(sid, "automobile whereabouts?")  # no word in common: BM25 misses
        r, rec = runner(store)
        r.embedder = embedder(httpx.MockTransport(handle))
        try:
            assert await r.run_until_idle(30, {sid}), r.errors
        finally:
            await r.aclose()
        system = rec.requests[-1].messages[0].content
        assert "(agent:alpha) car: The car is parked in the garage" in system
        assert locked == [False]  # one request (the query), no transaction open meanwhile
        # what the turn recalled is the hybrid set (the claim's BM25 found nothing)
        job = (await sessions.get(sid))["jobs"][-1]
        assert [(m["namespace"], m["key"]) for m in job["recalled"]] == [("agent:alpha", "car")]
        assert await store.verify_projections() == []

        # a spec's own weights: keywords only, so the paraphrase scores 0 and is not recalled
        await spec(sessions, "alpha", context_policy={"recall": {
            "weights": {"vector": 0, "keyword": 1}, "min_score": 0.01}})
        sid = await sessions.create(agent="alpha")
        await sessions.send(sid, "automobile whereabouts?")
        r, rec = runner(store)
        r.embedder = embedder()
        try:
            assert await r.run_until_idle(30, {sid}), r.errors
        finally:
            await r.aclose()
        assert "# Recalled memories" not in rec.requests[-1].messages[0].content
    finally:
        await store.close()


async def test_postgres_recalls_hybrid_from_its_replica(pg_url: str) -> None:
    """The PostgreSQL store's local SQLite replica holds the cache and the vector links
    (same migrations, same projection handlers): hybrid recall is the same there."""
    store = await open_store(pg_url)
    try:
        mem = Memories(store, embedder())
        await mem.put("agent:a", "car", "The car is parked in the garage", by="ann")
        await mem.put("agent:a", "lunch", "Lunch is at noon", by="ann")
        got = await mem.recall(["agent:a"], "automobile location", k=1)
        assert got.mode == "hybrid" and [r["key"] for r in got.rows] == ["car"]
        assert await store.verify_projections() == []
    finally:
        await store.close()
