"""Built-in tools: small, safe, in-process (no shell, no files, no network).

They are pinned implicitly (their definitions ship with clawtower). Each takes the already
validated arguments object and returns a ToolResult; an exception inside one becomes a
`failed` result in the registry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..clock import Clock, SystemClock
from .types import ToolResult


@dataclass(frozen=True)
class BuiltinTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any]], ToolResult]


def _ok(value: Any) -> ToolResult:
    return ToolResult(content=json.dumps(value, ensure_ascii=False, sort_keys=True),
                      structured=value)


def _err(text: str) -> ToolResult:
    return ToolResult(content=text, is_error=True, error_kind="failed")


def clock_now(clock: Clock) -> BuiltinTool:
    def run(args: dict[str, Any]) -> ToolResult:
        tz_name = args.get("timezone") or "UTC"
        try:
            tz = ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError):
            return _err(f"clock.now: unknown timezone {tz_name!r} (use an IANA name such as"
                        " 'Europe/Paris' or 'UTC')")
        now = datetime.fromtimestamp(clock.now(), tz=UTC).astimezone(tz)
        return _ok({"timezone": tz_name, "iso": now.isoformat(timespec="seconds"),
                    "unix": round(clock.now(), 3), "weekday": now.strftime("%A")})

    return BuiltinTool(
        "clock.now",
        "The current date and time (ISO 8601) in a timezone (IANA name, default UTC).",
        {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA timezone, e.g. Europe/Paris"}},
         "additionalProperties": False},
        run)


_MISSING = object()


def _pointer(doc: Any, pointer: str) -> Any:
    """RFC 6901 JSON Pointer ("" is the whole document, "/a/0/b" a path)."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise KeyError(f"a JSON pointer starts with '/' (got {pointer!r})")
    cur = doc
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict):
            if part not in cur:
                raise KeyError(f"no key {part!r}")
            cur = cur[part]
        elif isinstance(cur, list):
            if not part.isdigit() or int(part) >= len(cur):
                raise KeyError(f"no index {part!r} in a list of {len(cur)}")
            cur = cur[int(part)]
        else:
            raise KeyError(f"{part!r}: cannot index into a {type(cur).__name__}")
    return cur


def json_query() -> BuiltinTool:
    def run(args: dict[str, Any]) -> ToolResult:
        doc = args["document"]
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except json.JSONDecodeError as exc:
                return _err(f"json.query: document is not JSON: {exc.msg} at line {exc.lineno}"
                            f" column {exc.colno}")
        try:
            value = _pointer(doc, args.get("pointer", ""))
        except KeyError as exc:
            return _err(f"json.query: {exc.args[0]}")
        return _ok(value)

    return BuiltinTool(
        "json.query",
        "Extract a value from a JSON document with a JSON Pointer (RFC 6901), e.g. /items/0/name.",
        {"type": "object", "properties": {
            "document": {"description": "the JSON document (a value, or JSON text)"},
            "pointer": {"type": "string", "description": "JSON Pointer; empty = whole document"}},
         "required": ["document"], "additionalProperties": False},
        run)


def text_count() -> BuiltinTool:
    def run(args: dict[str, Any]) -> ToolResult:
        text: str = args["text"]
        return _ok({"characters": len(text), "words": len(text.split()),
                    "lines": len(text.splitlines())})

    return BuiltinTool(
        "text.count",
        "Count the characters, words and lines of a text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
         "additionalProperties": False},
        run)


def builtin_tools(clock: Clock | None = None) -> dict[str, BuiltinTool]:
    tools = [clock_now(clock or SystemClock()), json_query(), text_count()]
    return {t.name: t for t in tools}
