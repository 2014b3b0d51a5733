"""What the log may hold: every number a replay and every projection can read back.

A payload is encoded once, by the writer (`Tx.emit`); `encode` is that encoding, and it
refuses what the store could not replay (issue 34):
- NaN and ±Infinity anywhere (a float field, a list, a free-form dict): JSON has no such
  numbers. Pydantic used to write them as `null`, so the live projection held `inf` and a
  replay `NULL` (`store verify` failed for good), or a required float could not be decoded;
- an integer a projection's column cannot hold (outside the signed 64 bits of SQLite's
  INTEGER): the projection's INSERT fails with an OverflowError, which `Tx.emit` turns into
  the same refusal naming the field (`overflow`). In a free-form dict (a spec, an output) an
  integer is projected as JSON text, which holds any integer, so it stays storable.

Payloads serialize non-finite floats as the constants `NaN`/`Infinity`
(`ser_json_inf_nan="constants"` on `core.events.Payload`), so the check reads the encoded
text: two substring scans at C speed (0.3 µs for a 200-byte payload; a regex for 19-digit
runs as well cost 3-6 µs, a fifth of an emit, so integers are left to the projection's own
bound), and only a text that holds one (a suspect: a string may say "NaN") is parsed to find
the field at fault.

A value finite and in range but meaningless to its domain (a memory expiring in the year
10^300) is the domain's to refuse; its readers must still not crash on one already logged.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError

if TYPE_CHECKING:
    from ..events import Payload

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1


class Unstorable(ValidationError):
    """A value no event may carry (exit 2, like any refused input)."""


def encode(payload: Payload) -> str:
    """The payload's JSON text for the log, or Unstorable naming the event type and field."""
    text = payload.model_dump_json()
    if "NaN" in text or "Infinity" in text:  # a suspect; else nothing more to read
        check_text(payload.TYPE, text)
    return text


def check_text(type_name: str, text: str) -> None:
    """Raise Unstorable for the first unstorable number in the JSON `text` of a payload."""
    problem = first_problem(json.loads(text, parse_constant=_Constant))
    if problem is not None:
        raise unstorable(type_name, problem)


def overflow(payload: Payload, exc: OverflowError) -> Exception:
    """What a projection's OverflowError (an integer too large for its column) becomes: the
    refusal naming the field, or the error itself when no integer of the payload is out of
    range (then it is a bug of the projection, not bad input)."""
    problem = first_problem(payload.model_dump())
    return exc if problem is None else unstorable(payload.TYPE, problem)


def unstorable(type_name: str, problem: tuple[str, str]) -> Unstorable:
    path, what = problem
    return Unstorable(f"{type_name}: field {path}: {what} is not a storable number (events"
                      " hold finite numbers and 64-bit integers)")


class _Constant(float):
    """A NaN/Infinity constant read from JSON text, keeping how it was written."""

    def __new__(cls, name: str) -> _Constant:
        self = super().__new__(cls, name.replace("Infinity", "inf"))
        self.name = name
        return self

    name: str


def first_problem(value: Any, path: str = "") -> tuple[str, str] | None:
    """(field path, value as written) of the first unstorable number in a decoded JSON or
    Python value (a payload's `model_dump()`), or None."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if INT_MIN <= value <= INT_MAX else (path or "(payload)", str(value))
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return path or "(payload)", value.name if isinstance(value, _Constant) else \
            "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        for k, v in value.items():
            found = first_problem(v, f"{path}.{k}" if path else str(k))
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = first_problem(v, f"{path}[{i}]")
            if found is not None:
                return found
    return None


__all__ = ["INT_MAX", "INT_MIN", "Unstorable", "check_text", "encode", "first_problem",
           "overflow", "unstorable"]
