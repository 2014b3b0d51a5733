"""Hybrid memory recall against a real embedding endpoint (issue 25 item 2, real part): the
llama-cpp-python server of scripts/install-peers.sh serving SmolLM2-135M's mean-pooled
embeddings (tests/helpers/llama_peer.py, `embedding=True`; no model downloaded). Skips with
the reason when the peer is missing.

One server for this module, in the llama tests' xdist group (so it never competes with the
chat server's tests for the 2 cores); it starts in ~2 s."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clawtower.core.agents.config import config_from_data
from clawtower.core.memory.embeddings import embedder_for
from clawtower.core.memory.service import Memories
from clawtower.core.store import open_store

pytestmark = pytest.mark.xdist_group("llama")


@pytest.fixture(scope="module")
def llama_embed() -> Iterator[str]:
    from llama_peer import llama_server

    with llama_server(n_ctx=512, embedding=True) as base:
        yield base


def _config(base: str, **embeddings: object) -> object:
    return config_from_data({
        "providers": {"local": {"kind": "openai", "base_url": base, "models": ["smollm2"],
                                "timeout_s": 60}},
        "memory": {"embeddings": {"provider": "local", "model": "smollm2", **embeddings}}},
        "clawtower.yaml")


async def test_real_embeddings_store_vectors_and_recall_hybrid(llama_embed: str,
                                                               tmp_path: Path) -> None:
    cfg = _config(llama_embed)
    embedder = embedder_for(cfg)  # type: ignore[arg-type]
    assert embedder is not None
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        mem = Memories(store, embedder)
        facts = {"cat": "The user's cat is called Miso",
                 "deploy": "Deploys to production happen every Tuesday",
                 "db": "The service stores its data in PostgreSQL 16"}
        from clawtower.core.memory.events import MemoryStored

        out = await mem.import_many([MemoryStored(namespace="agent:a", key=k, content=t)
                                     for k, t in facts.items()], by="ann")  # one request
        assert [o["embedded"] for o in out] == [True] * 3 and embedder.calls == 1, out
        [row] = await store.fetchall("SELECT DISTINCT dim FROM embedding_cache")
        assert row["dim"] == 576  # SmolLM2-135M's hidden size
        vecs = await store.fetchall("SELECT vec FROM embedding_cache")
        mats = [np.frombuffer(v["vec"], dtype="<f4") for v in vecs]
        assert all(np.isfinite(m).all() and np.linalg.norm(m) > 0 for m in mats)
        assert len({m.tobytes() for m in mats}) == 3  # three texts, three vectors

        got = await mem.recall(["agent:a"], facts["deploy"], k=3)
        assert got.mode == "hybrid", got.reason
        top = got.rows[0]
        assert top["key"] == "deploy" and math.isclose(top["similarity"], 1.0, abs_tol=1e-3)
        assert {r["key"] for r in got.rows} == set(facts)  # every vector scored
        assert embedder.calls == 1  # the query is a stored text: its vector was cached

        # a config that expects another dimension: one line, the memory stored without it
        wrong = Memories(store, embedder_for(_config(llama_embed, dimensions=384)))  # type: ignore[arg-type]
        out = await wrong.put("agent:a", "lunch", "Lunch is at noon", by="ann")
        assert "a vector of 576 dimensions; the config says 384" in out["not_embedded"]
        assert (await wrong.recall(["agent:a"], "noon")).mode == "bm25"
        assert await store.verify_projections() == []
    finally:
        await embedder.aclose()
        await store.close()
