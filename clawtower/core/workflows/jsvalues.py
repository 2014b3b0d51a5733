"""JavaScript value semantics the Lobster format depends on, in Python.

Lobster is TypeScript: its envelopes are `JSON.stringify` output, `${arg}` inserts `String(v)`
and a missing field is `undefined`, not `null`. Matching those byte for byte is what makes
our envelopes comparable with the real CLI's, so the conversions live in one place.
"""

from __future__ import annotations

import copy
import json
import math
from json.encoder import encode_basestring as _encode_string
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


MAX_SAFE = 2**53  # beyond it a JavaScript number is a double that cannot hold every integer


def js_number(value: float | int) -> str:
    """`String(n)` / JSON.stringify of a number: the shortest round-trip digits laid out by
    ECMAScript's Number::toString (1e-6 -> "0.000001", 1e-7 -> "1e-7", 1e21 -> "1e+21");
    integers beyond 2**53 are doubles, as in JavaScript."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -MAX_SAFE <= value <= MAX_SAFE:
            return str(value)
        value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"  # -0 too
    sign = "-" if value < 0 else ""
    mant, _, exp = repr(abs(value)).partition("e")
    whole, _, frac = mant.partition(".")
    digits = (whole + frac.rstrip("0")).lstrip("0") if frac != "0" else whole.lstrip("0")
    # value = 0.DIGITS x 10^n: n counts the digits before the point
    point = len(whole) if whole != "0" else -(len(frac) - len(frac.lstrip("0")))
    n = point + (int(exp) if exp else 0)
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-") \
            + str(abs(e))
    return sign + out


def _is_index(key: str) -> bool:
    """An array index as JavaScript orders object keys: a canonical integer below 2**32-1
    (ASCII digits only: `"¹".isdigit()` is true in Python, and int() refuses it)."""
    return (key.isascii() and key.isdigit() and (key == "0" or not key.startswith("0"))
            and int(key) < 2**32 - 1)


def js_keys(obj: dict[str, Any]) -> list[str]:
    """Object key order in JavaScript: integer-like keys ascending, then the rest in
    insertion order."""
    keys = [k if type(k) is str else str(k) for k in obj]
    index = [k for k in keys if "0" <= k[:1] <= "9" and _is_index(k)]
    if not index:  # most objects: their own order (one pass, no int() per key)
        return keys
    marked = set(index)
    return sorted(index, key=int) + [k for k in keys if k not in marked]


def _string(text: str) -> str:
    """A JSON string as JSON.stringify writes it (a lone surrogate escaped, not raw)."""
    out = _encode_string(text)  # what json.dumps(text, ensure_ascii=False) returns
    if out.isascii():
        return out
    if any("\ud800" <= ch <= "\udfff" for ch in out):
        out = "".join(f"\\u{ord(ch):04x}" if "\ud800" <= ch <= "\udfff" else ch
                      for ch in out)
    return out


def _stringify(value: Any, indent: str, level: int) -> str | None:
    if value is UNDEFINED:
        return None
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return "null"
        return js_number(value)
    if isinstance(value, str):
        return _string(value)
    pad = "\n" + indent * (level + 1) if indent else ""
    end = "\n" + indent * level if indent else ""
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        items = [_stringify(v, indent, level + 1) for v in value]
        parts = ["null" if x is None else x for x in items]
        return "[" + pad + ("," + pad).join(parts) + end + "]"
    if isinstance(value, dict):
        sep = ": " if indent else ":"
        pairs = []
        for key in js_keys(value):
            raw = value[key] if key in value else value[int(key)]
            text = _stringify(raw, indent, level + 1)
            if text is not None:
                pairs.append(_string(key) + sep + text)
        if not pairs:
            return "{}"
        return "{" + pad + ("," + pad).join(pairs) + end + "}"
    return _string(str(value))


def to_json(value: Any, indent: int | None = None) -> str:
    """`JSON.stringify(value)` (compact) or `JSON.stringify(value, null, indent)`: key order,
    number layout and escapes as JavaScript writes them."""
    out = _stringify(value, " " * indent if indent else "", 0)
    return "undefined" if out is None else out


def js_plain(value: Any) -> Any:
    """`json.loads(to_json(value))` without the text in between: the value as JSON.stringify
    would carry it (undefined members dropped, undefined items null, integer-like keys
    first, numbers as JavaScript holds them, anything else its string). Why: a gate's pause
    normalised its request, subject and context this way in the write, ~40 µs each through
    the text (issue 36). Undefined itself is not JSON: ValueError, as the round trip raised."""
    if value is UNDEFINED:
        raise ValueError("undefined is not JSON")
    return _plain(value)


def _plain(value: Any) -> Any:
    if value is None or value is True or value is False:
        return value
    kind = type(value)
    if kind is str:
        return value
    if kind is int and -MAX_SAFE <= value <= MAX_SAFE:
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return json.loads(js_number(value))  # the digits JavaScript writes, read back
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (list, tuple)):
        return [None if v is UNDEFINED else _plain(v) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key in js_keys(value):
            raw = value[key] if key in value else value[int(key)]
            if raw is not UNDEFINED:
                out[key] = _plain(raw)
        return out
    return str(value)


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


def js_prefix(text: str, units: int) -> str:
    """`text.slice(0, units)` counting UTF-16 code units as JavaScript does; a character cut
    in half is left out (JavaScript keeps its first half, a lone surrogate: a deviation)."""
    if len(text) * 2 <= units:
        return text
    count = 0
    for i, ch in enumerate(text):
        count += 2 if ord(ch) > 0xFFFF else 1
        if count > units:
            return text[:i]
    return text


def _js_int(text: str) -> int | float:
    """A JSON integer as JavaScript holds it: beyond 2**53, a double."""
    value = int(text)
    return value if -MAX_SAFE <= value <= MAX_SAFE else float(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def parse_json(text: str) -> Any:
    """`JSON.parse`: ValueError, worded as V8 words it, on anything JavaScript refuses."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=_js_int)
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


def copy_plain(value: Any) -> Any:
    """A deep copy of parsed YAML/JSON: dicts and lists copied (read-only ones too, into
    plain ones), scalars (immutable) shared, anything else through `copy.deepcopy`. ~5x
    cheaper than `copy.deepcopy` of the whole workflow (issue 24)."""
    kind = type(value)
    if kind is dict or kind is FrozenDict:
        return {k: copy_plain(v) for k, v in value.items()}
    if kind is list or kind is FrozenList:
        return [copy_plain(v) for v in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)


def _read_only(*_args: Any, **_kwargs: Any) -> Any:
    raise TypeError("a cached workflow is read-only: copy it (copy_plain) to change it")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict no one can change: the parse of a workflow file shared by every run of it
    (issue 36: a resume no longer copies the whole workflow). Still a dict to every check
    (`isinstance`, JSON); a write raises TypeError instead of changing the shared parse."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy_plain(self)

    def __reduce__(self) -> Any:
        return (dict, (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A list no one can change (see FrozenDict)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only
    append = extend = insert = pop = remove = clear = sort = reverse = _read_only

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy_plain(self)

    def __reduce__(self) -> Any:
        return (list, (list(self),))


def freeze(value: Any) -> Any:
    """`value` (parsed YAML/JSON) with every dict and list made read-only. RecursionError
    for a structure that contains itself (a YAML alias), as `copy_plain` raises it."""
    kind = type(value)
    if kind is dict:
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if kind is list:
        return FrozenList([freeze(v) for v in value])
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})
