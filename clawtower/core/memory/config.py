"""The `memory:` part of the project config (clawtower.yaml): which embedding model, on which
provider, makes recall hybrid, and how the two scores are weighed.

    providers:
      local: {kind: openai, base_url: http://127.0.0.1:8000/v1, models: [smollm2]}
    memory:
      embeddings:
        provider: local            # a `providers:` entry of kind openai (POST …/embeddings)
        model: smollm2             # sent as `model`; one of the provider's models if it lists any
        dimensions: 576            # optional: a vector of another length is refused
        weights: {vector: 0.7, keyword: 0.3}   # the fusion (a spec's context_policy.recall
                                               # .weights overrides it for its turns)
        candidates: 50             # BM25 and vector candidates fused per recall

Without `memory.embeddings` recall is BM25 alone (and says so). Kept free of httpx and numpy:
the config loader imports it on every command."""

from __future__ import annotations

from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import ValidationError

MAX_DIM = 8192


class RecallWeights(BaseModel):
    """The weight of the cosine similarity and of the (max-normalised) BM25 score in a hybrid
    recall's fused score; the score is their weighted mean, in [0, 1]."""

    model_config = ConfigDict(extra="forbid")
    vector: float = Field(default=0.7, ge=0, le=1)
    keyword: float = Field(default=0.3, ge=0, le=1)

    @model_validator(mode="after")
    def _some_weight(self) -> RecallWeights:
        if self.vector + self.keyword <= 0:
            raise ValueError("vector and keyword cannot both be 0")
        return self


class EmbeddingsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str = Field(min_length=1)
    model: str = Field(min_length=1, max_length=200)
    dimensions: int | None = Field(default=None, ge=1, le=MAX_DIM)
    weights: RecallWeights = Field(default_factory=RecallWeights)
    candidates: int = Field(default=50, ge=1, le=1000)
    batch: int = Field(default=32, ge=1, le=2048)  # texts per /embeddings request


class MemoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    embeddings: EmbeddingsConfig | None = None


def memory_config(raw: Any, path: str, providers: dict[str, Any]) -> MemoryConfig:
    """The validated `memory:` mapping; `providers` (name -> ProviderConfig) must hold the
    embedding provider, of kind openai, listing the model when it lists models at all."""
    if raw is None:
        return MemoryConfig()
    try:
        cfg = MemoryConfig.model_validate(raw)
    except pydantic.ValidationError as exc:
        from ..reader import schema_problem

        loc, msg = schema_problem(exc, MemoryConfig)
        where = ".".join(x for x in ("memory", loc) if x)
        raise ValidationError(f"{path}: field '{where}': {msg}") from None
    e = cfg.embeddings
    if e is None:
        return cfg
    p = providers.get(e.provider)
    if p is None:
        raise ValidationError(f"{path}: field 'memory.embeddings.provider': unknown provider"
                              f" {e.provider!r} (known: {', '.join(sorted(providers)) or 'none'})")
    if p.kind != "openai":
        raise ValidationError(f"{path}: field 'memory.embeddings.provider': {e.provider} is of"
                              f" kind {p.kind}; embeddings need an OpenAI-compatible provider"
                              " (kind: openai, POST <base_url>/embeddings)")
    if p.models and e.model not in p.models:
        raise ValidationError(f"{path}: field 'memory.embeddings.model': unknown model"
                              f" {e.model!r}: not one of provider {e.provider}'s models"
                              f" ({', '.join(p.models)})")
    return cfg


__all__ = ["EmbeddingsConfig", "MemoryConfig", "RecallWeights", "memory_config"]
