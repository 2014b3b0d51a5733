"""Memories in and out as text: JSONL (`memory export --format jsonl`, `memory import`,
idempotent by key) and Markdown (`--format md`) for audits and Git diffs."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from .checks import check_category, check_content, check_key, check_namespace

if TYPE_CHECKING:
    from .events import MemoryStored


def parse_jsonl(text: str, where: str) -> list[MemoryStored]:
    """Memories from an export (JSONL): every line checked before anything is written; a
    bad line is one error naming it."""
    from .events import MemoryStored

    out: list[MemoryStored] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValidationError("not a JSON object")
            expires = d.get("expires_at")
            if expires is not None and not isinstance(expires, (int, float)):
                raise ValidationError("expires_at: not a number")
            out.append(MemoryStored(
                namespace=check_namespace(d.get("namespace")), key=check_key(d.get("key")),
                content=check_content(d.get("content")),
                category=check_category(d.get("category") or ""),
                reason=f"import:{where}", expires_at=expires))
        except (ValueError, ValidationError) as exc:
            msg = str(exc).splitlines()[0]
            raise ValidationError(f"{where}: line {n}: {msg}; nothing imported") from None
    return out


def to_jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps({"namespace": r["namespace"], "key": r["key"],
                               "content": r["content"], "category": r["category"],
                               "expires_at": r["expires_at"]}, sort_keys=True) + "\n"
                   for r in rows)


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


__all__ = ["parse_jsonl", "to_jsonl", "to_markdown"]
