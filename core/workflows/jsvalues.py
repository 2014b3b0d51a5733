"""JavaScript value semantics the Lobster format depends on, in Python.

Lobster is TypeScript: its envelopes are `JSON.stringify` output, `${arg}` inserts `String(v)`
and a missing field is `undefined`, not `null`. Matching those byte for byte is what makes
our envelopes comparable with the real CLI's, so the conversions live in one place.
"""

from __future__ import annotations

import json
import math
from typing import Any


class _Undefined:
    """JavaScript's `undefined`: a missing value, distinct from JSON null (None)."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __bool__(self) -> bool:
        return False


UNDEFINED: Any = _Undefined()


def js_number(value: float | int) -> str:
    """`String(n)` for a finite number: integral floats print without `.0`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:  # Python 1e-07 -> JS 1e-7, 1e+21 stays
        mant, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        text = f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return text


def _normalise(value: Any) -> Any:
    """Make a value serialise as JSON.stringify would (integral floats as ints, NaN -> null)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer() and abs(value) < 1e21:
            return int(value)
        return value
    if isinstance(value, dict):
        return {str(k): _normalise(v) for k, v in value.items() if v is not UNDEFINED}
    if isinstance(value, (list, tuple)):
        return [None if v is UNDEFINED else _normalise(v) for v in value]
    return value


def to_json(value: Any, indent: int | None = None) -> str:
    """`JSON.stringify(value)` (compact) or `JSON.stringify(value, null, indent)`."""
    if indent is None:
        return json.dumps(_normalise(value), ensure_ascii=False, separators=(",", ":"))
    return json.dumps(_normalise(value), ensure_ascii=False, indent=indent)


def js_string(value: Any) -> str:
    """`String(value)` as JavaScript renders it."""
    if value is UNDEFINED:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join("" if v is None or v is UNDEFINED else js_string(v) for v in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def js_typeof(value: Any) -> str:
    if value is UNDEFINED:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def parse_json(text: str) -> Any:
    """`JSON.parse`: ValueError, worded as V8 words it, on anything JavaScript refuses."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        from .v8json import json_error

        raise ValueError(json_error(text) or "Unexpected end of JSON input") from None


def parse_stdout_json(stdout: str) -> Any:
    """A step's `json`: its trimmed stdout parsed, or UNDEFINED when that is not JSON."""
    trimmed = stdout.strip()
    if not trimmed:
        return UNDEFINED
    try:
        return parse_json(trimmed)
    except (ValueError, RecursionError):
        return UNDEFINED


def serialize_for_stdout(value: Any) -> str:
    if value is None or value is UNDEFINED:
        return ""
    if isinstance(value, str):
        return value
    return to_json(value)


def is_object(value: Any) -> bool:
    """A plain JSON object (what Lobster calls a record)."""
    return isinstance(value, dict)


def truthy(value: Any) -> bool:
    """JavaScript truthiness."""
    if value is UNDEFINED or value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True
