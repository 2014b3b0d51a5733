"""Memories in and out as text: JSONL (`memory export --format jsonl`, `memory import`,
idempotent by key) and Markdown (`--format md`) for audits and Git diffs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..reader import check_fields, parse_json_lines
from .checks import (
    check_category,
    check_content,
    check_expires_at,
    check_key,
    check_namespace,
)

if TYPE_CHECKING:
    from .events import MemoryStored

# what `memory export` writes, and all an import line may hold
FIELDS = ("namespace", "key", "content", "category", "expires_at")
# an import file: what an export of ~8,000 full-size memories takes (a line is bounded by the
# memory checks; the reader still reads no byte past this before parsing)
MAX_IMPORT_BYTES = 64 << 20


def parse_jsonl(text: str, where: str, now: float) -> list[MemoryStored]:
    """Memories from an export (JSONL) through the bounded reader (core/reader.py), every
    line checked as `memory put` checks it (an expiry in the past is refused as of `now`)
    before anything is written; a bad line is one error naming it."""
    try:
        lines = parse_json_lines(text, where)
    except ValidationError as exc:
        raise ValidationError(f"{str(exc).splitlines()[0]}; nothing imported") from None
    out: list[MemoryStored] = []
    for n, d in lines:
        try:
            out.append(_memory(d, where, now))
        except (ValueError, ValidationError) as exc:
            msg = str(exc).splitlines()[0]
            raise ValidationError(f"{where}: line {n}: {msg}; nothing imported") from None
    return out


def _memory(d: Any, where: str, now: float) -> MemoryStored:
    from .events import MemoryStored

    if not isinstance(d, dict):
        raise ValidationError("not a JSON object")
    check_fields(d, FIELDS, "")
    return MemoryStored(
        namespace=check_namespace(d.get("namespace")), key=check_key(d.get("key")),
        content=check_content(d.get("content")),
        category=check_category(d.get("category") or ""),
        reason=f"import:{where}", expires_at=check_expires_at(d.get("expires_at"), now))


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps({f: r[f] for f in FIELDS}, sort_keys=True) + "\n" for r in rows)


def to_markdown(namespace: str, rows: list[dict[str, Any]]) -> str:
    out = [f"# Memories: {namespace}", ""]
    for r in rows:
        out += [f"## {r['key']}", "",
                f"- category: {r['category'] or '-'}",
                f"- updated by {r['updated_by']} (source: "
                + (" ".join(x for x in (r["source_session"], r["source_turn"]) if x) or "-")
                + ")",
                "", r["content"], ""]
    return "\n".join(out)


__all__ = ["FIELDS", "MAX_IMPORT_BYTES", "parse_jsonl", "to_jsonl", "to_markdown"]
