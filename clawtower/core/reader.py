"""One bounded reader for everything a user imports or configures: JSON, JSONL, JSON5 (YAML:
core/safe_yaml.py, the layer above, which reads a `.json` file through this one).

Before anything is parsed the file's bytes are read incrementally up to a limit
(core/limits.read_file: a FIFO or socket is refused, /dev/zero stops at the limit) and the
text's bracket nesting is measured without recursion (json5 is a recursive pure-Python
parser: a 50,000-deep file must never reach it). While parsing, a key given twice, a number
literal longer than MAX_NUMBER_CHARS (Python refuses to convert over 4,300 digits, with a
message about sys.set_int_max_str_digits), NaN, Infinity and a float that overflows to
infinity are refused. `check_fields` refuses a field a schema does not know, with a
did-you-mean. Every refusal is one ValidationError line naming the file, the line and the
field (exit 2); nothing is returned, so nothing can be written, until the whole file passed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from .errors import ValidationError
from .limits import (
    MAX_FILE_BYTES,
    MAX_JSON_DEPTH,
    MAX_NUMBER_CHARS,
    Refused,
    check_tree,
    json_float,
    json_int,
    printable,
    read_text,
    unique_pairs,
)

# JSON5's parser is pure Python (about 10 s a MiB): its files (OpenClaw's config, a few KiB)
# get a quarter of MAX_FILE_BYTES
MAX_JSON5_BYTES = MAX_FILE_BYTES // 4

# what can hold a bracket that does not nest: strings (and, in JSON5, comments)
_JSON_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]', re.DOTALL)
_JSON5_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"|\'(?:[^\'\\]++|\\.)*+\'|//[^\n]*+'
                           r'|/\*.*?(?:\*/|\Z)|[\[\]{}]', re.DOTALL)


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, max(pos, 0)) + 1


def check_depth(text: str, source: str, *, json5: bool = False,
                max_depth: int = MAX_JSON_DEPTH, line: int | None = None) -> None:
    """Brackets nested at most `max_depth` deep in JSON (or JSON5) text, measured by a
    scan that skips strings and comments, so no parser recurses into a hostile file.
    `line`: the text is that one line of a file (JSONL)."""
    depth = 0
    for m in (_JSON5_TOKENS if json5 else _JSON_TOKENS).finditer(text):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                n = line if line is not None else _line_of(text, m.start())
                raise ValidationError(f"{source}: line {n}: nested"
                                      f" deeper than {max_depth} levels")
        elif ch in "]}":
            depth = max(depth - 1, 0)


def _constant(name: str) -> Any:
    raise Refused(f"{name} is not a number a file may hold (only finite numbers)", name)


def _refusal(exc: Refused, text: str, source: str, line: int | None = None) -> ValidationError:
    if line is None and exc.literal:  # the n-th occurrence of the literal: its likely place
        pos = -1
        for _ in range(exc.nth):
            pos = text.find(exc.literal, pos + 1)
        line = _line_of(text, pos) if pos >= 0 else None
    where = f"line {line}: " if line is not None else ""
    return ValidationError(f"{source}: {where}{exc}")


def parse_json(text: str, source: str, *, want: type | None = None, line: int | None = None,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict, bounded JSON text from a file (`line`: the line it is, for JSONL)."""
    label = source if line is None else f"{source}: line {line}"
    check_depth(text, source, max_depth=max_depth, line=line)
    try:
        value = json.loads(text, object_pairs_hook=unique_pairs, parse_constant=_constant,
                           parse_int=json_int, parse_float=json_float)
    except Refused as exc:
        raise _refusal(exc, text, source, line) from None
    except json.JSONDecodeError as exc:
        n = line if line is not None else exc.lineno
        raise ValidationError(f"{source}: line {n}: invalid JSON ({exc.msg} at column"
                              f" {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"{label}: not valid JSON ({type(exc).__name__})") from None
    check_tree(value, label, max_depth)
    return _want(value, want, label, "JSON")


def parse_json_lines(text: str, source: str) -> list[tuple[int, Any]]:
    """JSONL: (line number, value) of every non-blank line, each parsed as parse_json."""
    return [(n, parse_json(line, source, line=n))
            for n, line in enumerate(text.split("\n"), 1) if line.strip()]


def parse_json5(text: str, source: str, *, want: type | None = None,
                max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict, bounded JSON5 text (comments, unquoted keys, trailing commas, hex numbers)."""
    import json5

    check_depth(text, source, json5=True, max_depth=max_depth)
    try:
        value = json5.loads(text, object_pairs_hook=unique_pairs, parse_constant=_constant,
                            parse_int=json_int, parse_float=json_float)
    except Refused as exc:
        raise _refusal(exc, text, source) from None
    except RecursionError:
        raise ValidationError(f"{source}: nested too deeply to read") from None
    except ValueError as exc:
        msg = printable(str(exc).splitlines()[0] if str(exc) else "", 160)
        m = re.match(r"<string>:(\d+) (.*)", msg)
        where, msg = (f"line {m.group(1)}: ", m.group(2)) if m else ("", msg)
        raise ValidationError(f"{source}: {where}not valid JSON5 ({msg})") from None
    check_tree(value, source, max_depth)
    return _want(value, want, source, "JSON5")


def _want(value: Any, want: type | None, source: str, what: str) -> Any:
    if want is dict and not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "not an object"
        raise ValidationError(f"{source}: must be a {what} object, got {kind}")
    return value


def read_json(path: str | Path, *, want: type | None = None,
              max_bytes: int = MAX_FILE_BYTES) -> Any:
    return parse_json(read_text(path, max_bytes), printable(str(path)), want=want)


def read_json_lines(path: str | Path, *, max_bytes: int = MAX_FILE_BYTES
                    ) -> list[tuple[int, Any]]:
    return parse_json_lines(read_text(path, max_bytes), printable(str(path)))


def read_json5(path: str | Path, *, want: type | None = None,
               max_bytes: int = MAX_JSON5_BYTES) -> Any:
    return parse_json5(read_text(path, max_bytes), printable(str(path)), want=want)


def _near(key: str, known: Collection[str]) -> str:
    import difflib

    near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(sorted(known))})"


def _fields_at(model: Any, path: Sequence[Any]) -> list[str]:
    """The field names of the pydantic model at `path` (field names, dict keys, list
    indexes) inside `model`; [] when the path leads to no model."""
    from pydantic import BaseModel

    def models(tp: Any) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [m for a in get_args(tp) for m in models(a)] if get_origin(tp) in (
            Union, UnionType, Annotated) else []

    def step(tp: Any, part: Any) -> Any:
        for m in models(tp):
            if isinstance(part, str) and part in m.model_fields:
                return m.model_fields[part].annotation
        origin, args = get_origin(tp), get_args(tp)
        if origin in (Union, UnionType, Annotated):
            return next((t for t in (step(a, part) for a in args) if t is not None), None)
        if origin is dict and len(args) == 2:
            return args[1]
        if origin in (list, tuple, set, frozenset) and args:
            return args[0]
        return None

    tp: Any = model
    for part in path:
        tp = step(tp, part)
        if tp is None:
            return []
    return [f for m in models(tp) for f in m.model_fields]


def schema_problem(exc: Any, model: Any, *, also: Collection[str] = ()) -> tuple[str, str]:
    """(field path, message) of the first problem pydantic found validating `model`. A
    field the schema does not have (extra="forbid") is "unknown field", with the closest
    name its object does have (`also`: more names the top level takes); it is reported
    first, as a misspelt field is also a missing one."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = [x for x in err["loc"] if x != "__root__"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden" and loc:
        known = [*_fields_at(model, loc[:-1]), *(also if len(loc) == 1 else ())]
        msg = "unknown field" + (_near(str(loc[-1]), known) if known else "")
    return ".".join(str(x) for x in loc), msg


def check_fields(data: Mapping[str, Any], known: Collection[str], source: str) -> None:
    """Every key of `data` is one of `known`: else one error naming the first unknown one,
    with the closest known name (a misspelt `expires` must not pass as no expiry)."""
    for key in data:
        if key not in known:
            at = f"{source}: " if source else ""
            raise ValidationError(f"{at}unknown field {printable(str(key), 60)!r}"
                                  f"{_near(str(key), known)}")


__all__ = ["MAX_JSON5_BYTES", "MAX_NUMBER_CHARS", "check_depth", "check_fields", "parse_json",
           "parse_json5", "parse_json_lines", "read_json", "read_json5", "read_json_lines",
           "schema_problem"]
