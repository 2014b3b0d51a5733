"""Named maximums for everything a user hands us, and the checks that enforce them.

The CLI's boundary (cli/boundary.py) applies these to every argument before a command runs;
the core applies the ones it owns (file reads, workflow retry caps, meeting rounds) itself,
so the console and any other front get the same limits. Every refusal is a ValidationError
naming the file or field at fault, in one line that is safe to print (no raw control
characters or lone surrogates from the input).
"""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ValidationError

MAX_FILE_BYTES = 1 << 20  # a spec, workflow, config, schema or input file
MAX_JSON_BYTES = 1 << 20  # a JSON argument (--args-json, --response-json, --args)
MAX_JSON_DEPTH = 64
MAX_NUMBER_CHARS = 100  # a number literal in JSON/JSON5/YAML: an int64 is at most 20
MAX_ID_CHARS = 200  # an id or a name: T-7, 9bfeb6dd, W-3, ada, git.git_status
MAX_TEXT_CHARS = 20_000  # free text: a reason, a topic, a finding, a prompt
MAX_SEQ = (1 << 63) - 1  # an event sequence number (SQLite INTEGER)
MAX_RETRY_ATTEMPTS = 100  # a workflow step's retry.max
MAX_RETRY_DELAY_MS = 3_600_000  # retry.delay_ms / max_delay_ms, for_each pause_ms: 1 hour
MAX_MEETING_ROUNDS = 100  # a meeting's --max-rounds, and a grant of more rounds
MAX_SUBWORKFLOW_DEPTH = 16  # sub-workflows nested in sub-workflows, checked at load
# a process run's inputs together, as JSON: they reach every step's environment (Lobster's
# LOBSTER_ARGS_JSON and LOBSTER_ARG_<NAME>, the compiled steps' EXPERT_IN_<name>), and Linux
# refuses one environment string over 128 KiB ("Argument list too long")
MAX_PROCESS_INPUT_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024


def printable(text: str, limit: int = 200) -> str:
    """`text` as one line that can always be written to a terminal: lone surrogates (from
    non-UTF-8 bytes in argv) shown as \\xNN, control and line-breaking characters escaped, cut
    at `limit` characters."""
    out = []
    for ch in text[:limit]:
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{o & 0xFF:02x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        elif o < 0x20 or 0x7F <= o <= 0x9F or o in (0x2028, 0x2029):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out) + ("..." if len(text) > limit else "")


def check_text(value: str, field: str, *, max_chars: int = MAX_TEXT_CHARS,
               one_line: bool = False) -> str:
    """Free text: valid Unicode (no bytes that were not UTF-8), no NUL, bounded length."""
    for i, ch in enumerate(value):
        o = ord(ch)
        if 0xD800 <= o <= 0xDFFF:
            raise ValidationError(f"{field}: not valid UTF-8 (byte 0x{o & 0xFF:02x} at"
                                  f" character {i})")
        if o == 0:
            raise ValidationError(f"{field}: contains a NUL character")
        if one_line and (o < 0x20 or 0x7F <= o <= 0x9F or o in (0x2028, 0x2029)):
            raise ValidationError(f"{field}: contains a control character"
                                  f" ({printable(ch)!r})")
    if len(value) > max_chars:
        raise ValidationError(f"{field}: longer than {max_chars} characters ({len(value)})")
    return value


def check_id(value: str, field: str) -> str:
    """An id or a name: printable, one word, at most MAX_ID_CHARS."""
    check_text(value, field, max_chars=MAX_ID_CHARS, one_line=True)
    if not value.strip():
        raise ValidationError(f"{field}: empty")
    if any(ch.isspace() for ch in value):
        raise ValidationError(f"{field}: contains whitespace ({printable(value)!r})")
    return value


MAX_NAME_CHARS = 64
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
NAME_RULE = f"1-{MAX_NAME_CHARS} letters, digits, '_', '-' or '.', and not '.' or '..'"


def is_name(value: object) -> bool:
    """The one name rule, for every name made from user input (an operator, an agent spec,
    an OpenClaw agent's id, an expert's trigger): NAME_RULE. `.` and `..` are refused
    because a name can end up as a path segment, a YAML key or a URL part."""
    return (isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS
            and set(value) <= NAME_CHARS and value not in (".", ".."))


def check_name(value: str, field: str) -> str:
    """`value` under the one name rule (is_name), or one ValidationError naming `field`."""
    if not is_name(value):
        raise ValidationError(f"{field}: {printable(str(value), 80)!r} is not a name"
                              f" ({NAME_RULE})")
    return value


MAX_SECRET_CHARS = 4096


def check_secret(value: str, field: str) -> str:
    """A token, password or secret a user hands over (an option's value, a file's or a
    variable's): one line, not empty. An empty one is refused, never read as "make one up"
    or "no credential": it is what an unset shell variable (`--token "$TOKEN"`) or an empty
    file gives, and a random replacement would silently lock out whoever held the old one."""
    if not value.strip():
        raise ValidationError(f"{field}: empty (an unset variable or an empty file?)")
    return check_text(value, field, max_chars=MAX_SECRET_CHARS, one_line=True)


def secret_in(raw: str, field: str) -> str:
    """The credential a file or stdin holds: one line, surrounding whitespace dropped, not
    empty (check_secret); errors name `field` (the option that named the file)."""
    value = raw.strip()
    if len(raw) > MAX_SECRET_CHARS or "\n" in value:
        raise ValidationError(f"{field}: expected one line of at most {MAX_SECRET_CHARS}"
                              " characters")
    return check_secret(value, field)


def read_secret(path: str | Path, field: str) -> str:
    """secret_in of a file, read bounded; a file that cannot be read is refused naming
    `field` too."""
    try:
        raw = read_text(path, max_bytes=MAX_SECRET_CHARS)
    except ValidationError as exc:
        raise ValidationError(f"{field}: {exc}") from None
    return secret_in(raw, field)


def check_host(value: str, field: str) -> str:
    """Where a server listens: an IP address or a host name (dot-separated labels of
    letters, digits and '-'). An empty one is refused: to a socket it means every
    interface, which nobody asks for by leaving a variable unset."""
    import ipaddress

    with_zone = value.partition("%")[0]  # fe80::1%eth0
    try:
        ipaddress.ip_address(with_zone)
        return value
    except ValueError:
        pass
    labels = (value[:-1] if value.endswith(".") else value).split(".")  # "example.com."
    if not value or len(value) > 253 or not all(
            0 < len(x) <= 63 and x[0] != "-" and x[-1] != "-" and set(x) <= _HOST_CHARS
            for x in labels):
        raise ValidationError(f"{field}: {printable(value, 80)!r} is not an IP address or a"
                              " host name (letters, digits, '-' and '.')")
    return value


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
INT64_MIN = -(1 << 63)


def range_message(field: str, lo: int, hi: int, got: object) -> str:
    """The one way a number out of range is reported: the bounds a user may type, never the
    storage limits (a 64-bit integer's) the store happens to have."""
    shown = printable(str(got), 24)
    if lo <= INT64_MIN and hi >= MAX_SEQ:
        return f"{field}: {shown} is out of range"
    if hi >= MAX_SEQ:
        return f"{field}: must be at least {lo}, got {shown}"
    if lo <= INT64_MIN:
        return f"{field}: must be at most {hi}, got {shown}"
    return f"{field}: must be between {lo} and {hi}, got {shown}"


def check_int(value: int, field: str, lo: int, hi: int) -> int:
    if not lo <= value <= hi:
        raise ValidationError(range_message(field, lo, hi, value))
    return value


def check_float(value: float, field: str, lo: float, hi: float) -> float:
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ValidationError(f"{field}: must be a number between {lo:g} and {hi:g},"
                              f" got {value}")
    return value


class Refused(Exception):  # not a ValueError: json5 would swallow that
    """A value a JSON/JSON5 parser's hooks refuse. `literal` (its `nth` occurrence) is
    searched for in the text to name the line it is on."""

    def __init__(self, message: str, literal: str = "", nth: int = 1) -> None:
        super().__init__(message)
        self.literal, self.nth = literal, nth


def unique_pairs(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """object_pairs_hook: a key given twice is refused (JSON's own parsers keep the last)."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Refused(f"duplicate key {printable(str(key), 60)!r}", str(key), 2)
        out[key] = value
    return out


def json_int(text: str, base: int = 10) -> int:
    """parse_int: at most MAX_NUMBER_CHARS digits (Python refuses over 4,300 itself, with
    advice about sys.set_int_max_str_digits that is no use to a user)."""
    if len(text) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(text)} digits (at most {MAX_NUMBER_CHARS})",
                      text[:MAX_NUMBER_CHARS + 1])
    return int(text, base)


def json_float(text: str) -> float:
    """parse_float: bounded length, and finite (1e400 overflows to infinity)."""
    if len(text) > MAX_NUMBER_CHARS:
        raise Refused(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})",
                      text[:MAX_NUMBER_CHARS + 1])
    value = float(text)
    if not math.isfinite(value):
        raise Refused(f"number {printable(text, 24)} is out of range (it overflows to"
                      " infinity)", text)
    return value


def _constant(name: str) -> Any:
    raise Refused(f"{name} is not JSON", name)


def check_tree(value: Any, source: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A parsed JSON/YAML value: nested at most `max_depth` deep, and every string (key or
    value) valid Unicode: a `"\\ud800"` escape decodes to a lone surrogate, which no store,
    terminal or JSON encoder downstream accepts."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if d > max_depth:
            raise ValidationError(f"{source}: nested deeper than {max_depth} levels")
        if isinstance(v, str):
            _no_surrogates(v, source)
        elif isinstance(v, float) and not math.isfinite(v):  # YAML's .inf, .nan, 1e400
            raise ValidationError(f"{source}: a number that is not finite ({v})")
        elif isinstance(v, dict):
            for k, x in v.items():
                if isinstance(k, str):
                    _no_surrogates(k, source)
                stack.append((x, d + 1))
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return value


def check_process_inputs(inputs: dict[str, Any], where: dict[str, str] | None = None) -> None:
    """What a process run can take as inputs, checked before anything is accepted (a 202, a
    started run): no NUL in any string (an environment cannot hold one) and at most
    MAX_PROCESS_INPUT_BYTES of JSON together. `where` names each input's source field (a
    webhook's payload path); the error names the field."""
    names = where or {}

    def label(name: str) -> str:
        return names.get(name, f"inputs.{name}")

    for name, value in inputs.items():
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, str) and "\x00" in v:
                raise ValidationError(f"{label(name)}: contains a NUL character, which a"
                                      " process input cannot carry")
            if isinstance(v, dict):
                if any(isinstance(k, str) and "\x00" in k for k in v):
                    raise ValidationError(f"{label(name)}: a key contains a NUL character,"
                                          " which a process input cannot carry")
                stack.extend(v.values())
            elif isinstance(v, list):
                stack.extend(v)
    sizes = {n: len(json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
             for n, v in inputs.items()}
    if sum(sizes.values()) > MAX_PROCESS_INPUT_BYTES:
        big = max(sizes, key=lambda n: sizes[n])
        raise ValidationError(f"{label(big)}: {sizes[big]} bytes; a process's inputs are at"
                              f" most {MAX_PROCESS_INPUT_BYTES} bytes of JSON together")


def _no_surrogates(text: str, source: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{source}: a string holds a lone surrogate"
                              f" ({printable(text[exc.start:exc.start + 1])}), not text"
                              ) from None


def parse_json(text: str, field: str, *, want: type | None = None,
               max_bytes: int = MAX_JSON_BYTES, file: bool = False) -> Any:
    """Strict JSON: duplicate keys, NaN/Infinity and over-deep nesting refused; `want=dict`
    requires an object (an array is not an object, whatever JavaScript makes of it).
    `field` names the argument, or with `file` the file (errors then give the line)."""
    if not file:  # a file's text is decoded UTF-8 already; JSON itself refuses a raw NUL
        check_text(text, field, max_chars=max_bytes)
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise ValidationError(f"{field}: larger than {max_bytes} bytes")
    try:
        value = json.loads(text, object_pairs_hook=unique_pairs, parse_constant=_constant,
                           parse_int=json_int, parse_float=json_float)
    except Refused as exc:
        raise ValidationError(f"{field}: {exc}") from None
    except json.JSONDecodeError as exc:
        if file:
            raise ValidationError(f"{field}: line {exc.lineno}: invalid JSON ({exc.msg})"
                                  ) from None
        raise ValidationError(f"{field}: not valid JSON ({exc.msg} at column {exc.colno})"
                              ) from None
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"{field}: not valid JSON ({printable(str(exc), 80)})") from None
    check_tree(value, field)
    if want is dict and not isinstance(value, dict):
        raise ValidationError(f"{field}: must be a JSON object, got {_js_type(value)}")
    return value


def _js_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "a string"


def read_file(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A file's bytes, read incrementally: refused once it passes `max_bytes` (so /dev/zero
    or a FIFO that never ends costs at most max_bytes + one chunk). Errors name the file."""
    p = Path(path)
    chunks: list[bytes] = []
    total = 0
    try:
        mode = p.stat().st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise ValidationError(f"{_name(p)}: not a regular file (a pipe or socket)")
        with p.open("rb") as f:
            while True:
                chunk = f.read(min(_READ_CHUNK, max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise ValidationError(f"{_name(p)}: larger than {max_bytes} bytes")
    except FileNotFoundError:
        raise ValidationError(f"{_name(p)}: no such file") from None
    except IsADirectoryError:
        raise ValidationError(f"{_name(p)}: is a directory") from None
    except PermissionError:
        raise ValidationError(f"{_name(p)}: permission denied") from None
    except OSError as exc:
        raise ValidationError(f"{_name(p)}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:  # an embedded NUL in the path
        raise ValidationError(f"{_name(p)}: not a usable path ({exc})") from None
    return b"".join(chunks)


def _name(p: Path) -> str:
    """The path as an error names it: built only when there is an error (a workflow's file
    is read at every resume of a gate, issue 36)."""
    return printable(str(p))


def read_text(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """read_file, decoded as UTF-8 (an error names the file and the first bad byte)."""
    raw = read_file(path, max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{printable(str(path))}: not UTF-8 text (byte {exc.start})"
                              ) from None
