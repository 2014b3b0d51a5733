"""The embedding client: any OpenAI-compatible `POST <base_url>/embeddings` (OpenAI, the
llama.cpp server with embeddings on, LiteLLM, vLLM, ...), named by `memory.embeddings` in
the project config (core/memory/config.py).

It is an HTTP provider like the chat ones (core/agents/httpcommon.py): the key read from the
variable the provider's `api_key_env` names and scrubbed from errors, bounded retries with
backoff, the provider's timeout and concurrency limit. Everything the server answers is
checked before a vector is used: one vector per input, a flat list of finite numbers (a
list of per-token vectors, as a llama.cpp model without pooling answers, is refused), the
configured or first-seen dimension, not all zeros. Any fault is one `ProviderError` line
naming the provider and the model; nothing is stored from a bad answer.

A vector travels as float32 little-endian bytes (`array('f')`): the form the events and the
embedding cache hold."""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..agents.httpcommon import HTTPProvider, clip
from ..agents.provider import ChatRequest, ProviderError

if TYPE_CHECKING:
    import httpx

    from ..agents.config import ClawtowerConfig
    from .config import EmbeddingsConfig

QUERY_CACHE = 1024  # query vectors kept per process (a recall's query is embedded once)


def to_blob(values: list[float]) -> bytes:
    a = array("f", values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


class Embedder(HTTPProvider):
    """One embedding model on one provider."""

    kind = "embeddings"

    def __init__(self, provider: str, base_url: str, model: str, *,
                 api_key_env: str | None = None, timeout_s: float = 60.0, retries: int = 2,
                 max_concurrency: int = 4, dimensions: int | None = None, batch: int = 32,
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(provider, base_url, api_key_env, timeout_s, retries, max_concurrency,
                         backoff_s=backoff_s, max_backoff_s=max_backoff_s, transport=transport)
        self.model = model
        self.dimensions = dimensions
        self.batch = batch
        self.calls = 0  # requests sent (the cache tests count them)
        self.query_cache = QUERY_CACHE
        self._queries: OrderedDict[str, bytes] = OrderedDict()

    def _error(self, message: str, *, retryable: bool = False) -> ProviderError:
        return super()._error(f"embeddings ({self.model}): {message}", retryable=retryable)

    async def embed(self, texts: list[str]) -> list[bytes]:
        """One float32 vector per text, in order (requests of at most `batch` texts)."""
        out: list[bytes] = []
        for i in range(0, len(texts), self.batch):
            out += await self._request(texts[i:i + self.batch])
        return out

    async def query(self, text: str, stored: bytes | None = None) -> bytes:
        """A recall query's vector: from this process's cache when it was embedded before,
        else `stored` (the embedding cache's vector of the same text), else embedded."""
        hit = self._queries.get(text)
        if hit is not None:
            self._queries.move_to_end(text)
            return hit
        vec = stored if stored is not None else (await self.embed([text]))[0]
        self._queries[text] = vec
        if len(self._queries) > self.query_cache:
            self._queries.popitem(last=False)
        return vec

    def knows(self, text: str) -> bool:
        return text in self._queries

    async def _request(self, texts: list[str]) -> list[bytes]:
        request = ChatRequest(model=self.model, messages=[], timeout_s=self.timeout_s)
        url = f"{self.base_url}/embeddings"
        self.calls += 1
        raw = await self._post_read(request, url,
                                    lambda: {"model": self.model, "input": texts})
        try:
            data = json.loads(raw)
        except ValueError:
            raise self._error(f"the answer is not JSON: {clip(raw)}") from None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list) or len(items) != len(texts):
            got = len(items) if isinstance(items, list) else "no"
            raise self._error(f"expected {len(texts)} embeddings in `data`, got {got}:"
                              f" {clip(raw)}")
        if all(isinstance(it, dict) and isinstance(it.get("index"), int) for it in items):
            items = sorted(items, key=lambda it: it["index"])
        return [self._vector(n, it) for n, it in enumerate(items)]

    def _vector(self, n: int, item: Any) -> bytes:
        vec = item.get("embedding") if isinstance(item, dict) else None
        if not isinstance(vec, list) or not vec:
            raise self._error(f"input {n}: no `embedding` list in the answer")
        if any(isinstance(x, list) for x in vec):
            raise self._error(f"input {n}: a list of {len(vec)} vectors (one per token?), not"
                              " one: serve the model with pooling (llama.cpp: --pooling mean,"
                              " or llama-cpp-python: --kv_overrides <arch>.pooling_type=int:1)")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
                   for x in vec):
            raise self._error(f"input {n}: the embedding holds values that are not finite"
                              " numbers")
        want = self.dimensions
        if want is not None and len(vec) != want:
            raise self._error(f"input {n}: a vector of {len(vec)} dimensions; the config says"
                              f" {want} (memory.embeddings.dimensions)")
        if not any(vec):
            raise self._error(f"input {n}: an all-zero vector (no direction to compare)")
        return to_blob(vec)


def embedder_for(config: ClawtowerConfig, *, transport: httpx.AsyncBaseTransport | None = None
                 ) -> Embedder | None:
    """The config's embedder, or None when `memory.embeddings` is not configured (recall is
    BM25 alone)."""
    e: EmbeddingsConfig | None = config.memory.embeddings
    if e is None:
        return None
    p = config.providers[e.provider]  # checked when the config was loaded
    return Embedder(e.provider, p.base_url, e.model, api_key_env=p.api_key_env,
                    timeout_s=p.timeout_s, retries=p.retries.max,
                    max_concurrency=p.max_concurrency, dimensions=e.dimensions,
                    batch=e.batch, backoff_s=p.retries.backoff_s,
                    max_backoff_s=p.retries.max_backoff_s, transport=transport)


__all__ = ["Embedder", "embedder_for", "to_blob"]
