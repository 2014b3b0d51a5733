"""A deterministic OpenAI-compatible `/embeddings` server for unit tests (httpx.MockTransport)
and for the labelled recall set of benchmarks/bench_memory.py.

`concept_vector` maps each word to a concept (SYNONYMS groups words that mean the same
thing: "car", "automobile", "vehicle"), hashes the concept to one of `dim` axes and sums:
texts sharing concepts point the same way even when they share no word, which is what a
real embedding model gives and BM25 cannot. It is a stand-in for a model, documented as
such wherever a number comes from it."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

import httpx

SYNONYMS = [
    {"car", "automobile", "vehicle", "sedan", "drive", "driving", "parked", "garage"},
    {"cat", "kitten", "feline", "pet", "miso"},
    {"dog", "puppy", "hound", "canine"},
    {"deploy", "deploys", "deployment", "release", "releases", "ship", "shipping", "rollout"},
    {"database", "db", "postgres", "postgresql", "sqlite", "storage"},
    {"meeting", "meetings", "standup", "sync", "call"},
    {"lunch", "noon", "meal", "food", "eat", "eating", "dinner", "breakfast"},
    {"commit", "commits", "git", "branch", "branches", "merge", "merged"},
    {"tuesday", "monday", "wednesday", "thursday", "friday", "weekday", "weekly"},
    {"colour", "color", "teal", "blue", "navy", "red", "green"},
    {"test", "tests", "testing", "pytest", "suite", "ci", "checks", "checked"},
    {"password", "secret", "key", "credential", "credentials", "token", "tokens"},
    {"coffee", "tea", "espresso", "latte", "drink"},
    {"vacation", "holiday", "leave", "trip", "travel"},
    {"bug", "bugs", "crash", "error", "failure", "broken", "regression"},
    {"language", "languages", "python", "rust", "typescript", "golang"},
    {"duty", "rotation", "pager", "shift"},
]
CONCEPT = {w: i for i, group in enumerate(SYNONYMS) for w in group}
STOP = {"the", "a", "an", "is", "are", "of", "to", "in", "on", "at", "and", "or", "my", "what",
        "which", "where", "who", "how", "when", "do", "does", "i", "we", "our", "it", "for",
        "with", "be", "by", "this", "that", "user", "user's", "likes", "prefers"}


def concept_vector(text: str, dim: int = 64) -> list[float]:
    vec = [0.0] * dim
    for word in re.findall(r"[a-z']+", text.lower()):
        if word in STOP:
            continue
        concept = f"c{CONCEPT[word]}" if word in CONCEPT else word
        axis = int(hashlib.sha256(concept.encode()).hexdigest(), 16) % dim
        vec[axis] += 1.0 if word in CONCEPT else 0.5
    if not any(vec):
        vec[0] = 1e-3  # a text of stop words only still has a direction
    return vec


Answer = Callable[[list[str], str], Any]


def transport(answer: Answer | None = None, *, dim: int = 64, model: str = "fake-embed",
              calls: list[list[str]] | None = None, status: int = 200
              ) -> httpx.MockTransport:
    """A server answering POST /embeddings. `answer(texts, model)` may return a whole body
    (a dict, or bytes sent as is) to play a broken provider; by default, concept vectors.
    `calls` collects each request's inputs; a `status` >= 400 answers an OpenAI error."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if calls is not None:
            calls.append(texts)
        if status >= 400:
            return httpx.Response(status, json={"error": {
                "message": f"model {body['model']!r} not found", "type": "invalid_request"}})
        if body["model"] != model:
            return httpx.Response(404, json={"error": {
                "message": f"The model `{body['model']}` does not exist"}})
        got = answer(texts, body["model"]) if answer is not None else None
        if isinstance(got, bytes):
            return httpx.Response(200, content=got)
        if got is None:
            got = {"object": "list", "model": model, "data": [
                {"object": "embedding", "index": i, "embedding": concept_vector(t, dim)}
                for i, t in enumerate(texts)]}
        return httpx.Response(200, json=got)

    return httpx.MockTransport(handle)


__all__ = ["concept_vector", "transport"]
