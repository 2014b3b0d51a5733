"""Write as releases before issue 34 did: pydantic's default encoding wrote NaN and
±Infinity as `null` in the log while the live projection got the number itself."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pydantic_core

from clawtower.core.events import Payload


def old_encode(payload: Payload) -> str:
    """The payload's text as the old writer logged it (`model_dump_json` without the
    constants setting: the same bytes, non-finite floats as `null`)."""
    return pydantic_core.to_json(payload.model_dump(), inf_nan_mode="null").decode()


def old_parse_jsonl(text: str, where: str, now: float) -> list[Any]:
    """`memory import`'s parser as the old release had it: any number as `expires_at` (NaN,
    ±Infinity, 1e308), unknown fields ignored."""
    from clawtower.core.memory.checks import (
        check_category,
        check_content,
        check_key,
        check_namespace,
    )
    from clawtower.core.memory.events import MemoryStored

    out = []
    for line in text.splitlines():
        if line.strip():
            d = json.loads(line)
            out.append(MemoryStored(
                namespace=check_namespace(d.get("namespace")), key=check_key(d.get("key")),
                content=check_content(d.get("content")),
                category=check_category(d.get("category") or ""),
                reason=f"import:{where}", expires_at=d.get("expires_at")))
    return out


@contextlib.contextmanager
def old_release(encode: bool = True) -> Iterator[None]:
    """This process's `memory import` parses, and (with `encode`) its writer encodes, as the
    old release did (no refusal) meanwhile."""
    from clawtower.core.memory import service
    from clawtower.core.store import writer

    m = writer._models()
    saved, parse = m.encode, service.parse_jsonl
    service.parse_jsonl = old_parse_jsonl  # type: ignore[assignment]
    if encode:
        m.encode = old_encode
    try:
        yield
    finally:
        m.encode, service.parse_jsonl = saved, parse  # type: ignore[assignment]
