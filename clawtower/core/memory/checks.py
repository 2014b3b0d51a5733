"""What a memory may hold (namespace, key, content, category, expiry), checked once at the
boundary (CLI, tools, import, the console) with one error line naming the field."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from typing import Any

from ..errors import ValidationError

MAX_CONTENT = 8_000  # characters of one memory
MAX_KEY = 200
MAX_CATEGORY = 64
MAX_EXPIRES_AT = 253402300799.0  # 9999-12-31T23:59:59Z, the last time ISO 8601 can name
KINDS = ("agent", "session", "expert", "shared")
_NAMESPACE = re.compile(r"(agent|session|expert|shared):[A-Za-z0-9_.\-]{1,128}")

def require_fts5() -> None:
    """Fail with one clear line when this Python's sqlite3 has no FTS5."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
    except sqlite3.OperationalError:
        raise ValidationError(f"this Python's SQLite ({sqlite3.sqlite_version}) is built"
                              " without FTS5, which agent memory needs") from None
    finally:
        conn.close()


def check_namespace(ns: Any) -> str:
    if not isinstance(ns, str) or not _NAMESPACE.fullmatch(ns):
        raise ValidationError(f"memory namespace {ns!r}: expected <kind>:<name> with kind one"
                              f" of {', '.join(KINDS)} and a name of letters, digits, '_',"
                              " '-' or '.' (e.g. agent:coder)")
    return ns


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY \
            or any(ord(c) < 32 for c in key):
        raise ValidationError(f"memory key {str(key)[:40]!r}: 1-{MAX_KEY} printable"
                              " characters")
    return key


def check_content(content: Any, where: str = "memory content") -> str:
    if not isinstance(content, str):
        raise ValidationError(f"{where}: not a string")
    if not content.strip():
        raise ValidationError(f"{where}: empty")
    if len(content) > MAX_CONTENT:
        raise ValidationError(f"{where}: {len(content)} characters, over the limit of"
                              f" {MAX_CONTENT}; store a shorter summary")
    return content


def check_category(category: Any) -> str:
    if not isinstance(category, str) or len(category) > MAX_CATEGORY \
            or any(ord(c) < 32 for c in category):
        raise ValidationError(f"memory category {str(category)[:40]!r}: at most"
                              f" {MAX_CATEGORY} printable characters")
    return category


def parse_expires(value: Any, now: float, where: str = "--expires") -> float:
    """When a memory expires: `value` is a duration from `now` (30s, 10m, 2h, 7d, 1h30m) or
    an ISO 8601 time (a time without a zone is UTC). A bad or past value is one error."""
    from datetime import UTC, datetime

    from ..experts.checks import duration_problem, duration_seconds

    if isinstance(value, str) and value and value[0].isdigit() \
            and duration_problem(value) is None:
        return now + duration_seconds(value)
    try:
        when = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None:
        raise ValidationError(f"{where} {str(value)[:40]!r}: not a duration (30s, 10m, 2h,"
                              " 7d) or an ISO 8601 time (2026-12-31T00:00:00Z)")
    return _future((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp(), now,
                   where, repr(value))


def check_expires_at(value: Any, now: float, where: str = "expires_at") -> float | None:
    """An expiry as an import file holds it: seconds since the epoch (what `memory export`
    writes), or what `--expires` takes (parse_expires); finite, in the future and at most
    the year 9999, else one error. None: it never expires."""
    if value is None:
        return None
    if isinstance(value, str):
        return parse_expires(value, now, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise ValidationError(f"{where} {json.dumps(value)[:40]}: not a time (seconds since"
                              " the epoch, or an ISO 8601 time such as 2026-12-31T00:00:00Z)")
    return _future(float(value), now, where, json.dumps(value))


def _future(at: float, now: float, where: str, shown: str) -> float:
    if at <= now:
        raise ValidationError(f"{where} {shown}: already past; a memory must expire in"
                              " the future")
    if at > MAX_EXPIRES_AT:
        raise ValidationError(f"{where} {shown}: after 9999-12-31T23:59:59Z, the last time"
                              " a memory can expire")
    return at


def is_expired(row: dict[str, Any], now: float) -> bool:
    return row.get("expires_at") is not None and float(row["expires_at"]) <= now


def as_read(row: dict[str, Any], now: float) -> dict[str, Any]:
    """A `memories` row as the memory API returns it, with `expired`. An expiry that is not
    a finite number (±Infinity, projected live by releases before issue 34 while their log
    recorded `null`) reads as the log's None: `show`, `--json` and `export` print what a
    replay holds, never `Infinity`, which JSON lacks (`clawtower store repair` fixes the row)."""
    exp = row.get("expires_at")
    if exp is not None and not math.isfinite(exp):
        row = {**row, "expires_at": None}
    return {**row, "expired": is_expired(row, now)}


__all__ = ["KINDS", "MAX_CATEGORY", "MAX_CONTENT", "MAX_EXPIRES_AT", "MAX_KEY", "as_read",
           "check_category", "check_content", "check_expires_at", "check_key",
           "check_namespace", "is_expired", "parse_expires", "require_fts5"]
