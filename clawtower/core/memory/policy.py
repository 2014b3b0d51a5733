"""What a spec may do with memory: the namespaces it may read and write (`policy.memory`)
and what is recalled automatically before each turn (`context_policy.recall`).

Default: a spec reads and writes only its own namespace `agent:<spec name>`; a subagent is a
session of its own spec, so it inherits nothing from its parent unless its policy names the
parent's namespaces."""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .checks import check_namespace
from .config import RecallWeights


class RecallPolicy(BaseModel):
    """Automatic recall before a turn: BM25 (or hybrid, when the config names an embedding
    model) over `namespaces` (default: the spec's own), at most `top_k` memories within
    `token_budget` (estimated), each scoring >= `min_score` (the BM25 score, or in hybrid
    mode the fused score in [0, 1]); `weights` overrides `memory.embeddings.weights`."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool = True
    namespaces: list[str] | None = None
    top_k: int = Field(default=5, ge=0, le=100)
    token_budget: int = Field(default=800, ge=0, le=100_000)
    min_score: float = Field(default=0.0, ge=0)
    weights: RecallWeights | None = None

    @field_validator("namespaces")
    @classmethod
    def _ns(cls, v: list[str] | None) -> list[str] | None:
        for ns in v or []:
            check_namespace(ns)
        return v


def own_namespace(spec_name: str) -> str:
    return f"agent:{spec_name}"


def may_use(allow: list[str] | None, spec_name: str, namespace: str) -> bool:
    """Whether a spec with `policy.memory` = `allow` may read/write `namespace` (globs
    allowed, e.g. `shared:*`; absent means only its own namespace)."""
    names = allow if allow is not None else [own_namespace(spec_name)]
    return any(fnmatch.fnmatchcase(namespace, pattern) for pattern in names)


def recall_namespaces(policy: RecallPolicy, allow: list[str] | None, spec_name: str
                      ) -> list[str]:
    """The namespaces recalled before a turn: the policy's, only those the spec may read."""
    if not policy.enabled:
        return []
    wanted = policy.namespaces if policy.namespaces is not None else [own_namespace(spec_name)]
    return [ns for ns in wanted if may_use(allow, spec_name, ns)]


__all__ = ["RecallPolicy", "may_use", "own_namespace", "recall_namespaces"]
