"""Value checks the package validator shares: enums, durations, SemVer, cron, time zones.

Each returns None when the value is fine, or a short message saying what is wrong (the
caller names the file and field).
"""

from __future__ import annotations

import re
from typing import Any

DURATION_RE = re.compile(r"^(?:\d+(?:ms|s|m|h|d))+$")
_PART_RE = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")

TIERS = ("auto", "confirm", "manual")
SIMPLE_TYPES = ("string", "number", "boolean", "object", "array", "integer")


def duration_seconds(text: str) -> float:
    """`10m` -> 600.0; `1h30m` -> 5400.0 (the caller checked `duration_problem` first)."""
    return sum(int(n) * _UNIT_S[u] for n, u in _PART_RE.findall(text))


def duration_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a duration string such as 30s, 10m or 24h (got {type_name(value)})"
    if not DURATION_RE.match(value) or duration_seconds(value) <= 0:
        return f"{value!r} is not a duration (use e.g. 30s, 10m, 2h, 1d)"
    return None


def semver(value: str) -> tuple[int, int, int] | None:
    m = SEMVER_RE.match(value)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def cron_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a cron expression string (got {type_name(value)})"
    fields = value.split()
    if len(fields) not in (5, 6):
        return f"{value!r} is not a cron expression (5 fields, or 6 with seconds)"
    from croniter import croniter  # type: ignore[import-untyped,unused-ignore]

    try:
        ok = croniter.is_valid(value, second_at_beginning=len(fields) == 6)
    except Exception:  # croniter raises several unrelated types on odd input
        ok = False
    return None if ok else f"{value!r} is not a valid cron expression"


def tz_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return f"must be an IANA time zone name (got {type_name(value)})"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if ".." in value or value.startswith("/") or "\\" in value:
        return f"{value!r} is not an IANA time zone"
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return f"{value!r} is not an IANA time zone"
    return None


def type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def enum_problem(value: Any, allowed: tuple[str, ...]) -> str | None:
    if isinstance(value, str) and value in allowed:
        return None
    shown = repr(value) if isinstance(value, (str, int, float, bool)) else type_name(value)
    return f"{shown} is not one of {', '.join(allowed)}"
