"""The one boundary every CLI argument passes through before a command runs.

argparse turns argv into a Namespace; `check_args` then walks the options of the command
that was chosen and checks every value by what its option holds (by argparse `dest`): ids
and names, one-line words, free text, paths, JSON text, counts and durations, each against a
named maximum in core/limits.py. Anything not listed is still checked as text, so a new
option can never let non-UTF-8 bytes (which Python hands over as lone surrogates), a NUL or
a megabyte of text through to the core. A refusal is a ValidationError naming the option
(exit 2); nothing has been opened or written yet. Files named by arguments are read by the
core's bounded reader (core/limits.read_file), JSON arguments parsed by its strict parser.

`one_line` makes any message safe to print as the single stderr line the CLI promises.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clawtower.core.errors import ValidationError
from clawtower.core.limits import (
    MAX_ID_CHARS,
    MAX_JSON_BYTES,
    MAX_MEETING_ROUNDS,
    MAX_SEQ,
    MAX_TEXT_CHARS,
    check_float,
    check_id,
    check_int,
    check_name,
    check_text,
    printable,
)

MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MAX_TOKEN_CHARS = 4096
MAX_OUTPUT_TOKENS = 1_000_000  # llm --max-tokens
MAX_SPEED = 1000.0  # demo --speed
MAX_TIMEOUT_S = 86_400.0  # llm task --timeout: a day

# What each option holds, by its argparse dest. Unlisted strings are checked as TEXT.
IDS = frozenset({"id", "entity", "name", "agent", "subject"})
NAMES = frozenset({"by"})  # an operator's name, recorded on what they do: the one name rule
TOKENS = frozenset({"token"})  # a resume token: one word, longer than an id (~150 chars)
WORDS = frozenset({"choice", "phase", "role", "verdict", "risk", "format", "approve",
                   "cancel", "mode", "participants", "command", "task_cmd", "meeting_cmd",
                   "store_cmd", "workflow_cmd", "tools_cmd", "agents_cmd", "llm_cmd"})
JSONS = frozenset({"args_json", "response_json", "args"})
PATHS = frozenset({"db", "spec", "file", "path", "agents", "agents_file", "config", "schema",
                   "input", "minutes_dir", "token_file", "secret_file", "openclaw"})
INTS: dict[str, tuple[int, int]] = {
    "after": (0, MAX_SEQ),
    "max_rounds": (1, MAX_MEETING_ROUNDS),
    "summary_tokens": (1, 1_000_000),
    "n": (1, MAX_MEETING_ROUNDS),
    "max_tokens": (1, MAX_OUTPUT_TOKENS),
    "max_depth": (1, 1_000_000),  # flow run
    "max_width": (1, 1_000_000),
    "max_nodes": (1, 1_000_000),
    "port": (0, 65535),  # console --web, serve (0: a free one)
    "max_consoles": (1, 1000),
    "auth_failures": (1, 10_000),
    "auth_trigger_failures": (1, 1_000_000),
}
FLOATS: dict[str, tuple[float, float]] = {
    "speed": (0.0, MAX_SPEED),
    "temperature": (0.0, 2.0),
    "timeout": (0.001, MAX_TIMEOUT_S),
    "idle_minutes": (0.01, 7 * 24 * 60),  # console --web: a week
    "auth_window": (1.0, 86_400.0),
}


def one_line(message: str, limit: int = 2000) -> str:
    """A message as one printable line (user text inside it may hold anything)."""
    return printable(message, limit)


def _field(action: argparse.Action) -> str:
    if action.option_strings:  # its long names: "--config/--agents" (which one was typed
        longs = [o for o in action.option_strings if o.startswith("--")]  # is not known)
        return "/".join(longs) if longs else action.option_strings[0]
    return str(action.metavar or action.dest.upper())


def _chosen(parser: argparse.ArgumentParser,
            args: argparse.Namespace) -> Iterator[argparse.Action]:
    """The actions of `parser` and of every subcommand parser `args` went through."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name is not None:
                check_text(str(name), "COMMAND", max_chars=MAX_ID_CHARS, one_line=True)
                sub = action.choices.get(name)
                if sub is not None:
                    yield from _chosen(sub, args)
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield action


def check_value(dest: str, field: str, value: Any) -> None:
    """Check one parsed value by what option `dest` holds (ValidationError naming `field`)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, list):
        for v in value:
            check_value(dest, field, v)
        return
    if isinstance(value, int):
        lo, hi = INTS.get(dest, (-MAX_SEQ - 1, MAX_SEQ))
        check_int(value, field, lo, hi)
    elif isinstance(value, float):
        lo_f, hi_f = FLOATS.get(dest, (-1e12, 1e12))
        check_float(value, field, lo_f, hi_f)
    elif isinstance(value, str):
        if dest in IDS:
            check_id(value, field)
        elif dest in NAMES:
            check_name(value, field)
        elif dest in TOKENS:
            check_text(value, field, max_chars=MAX_TOKEN_CHARS, one_line=True)
        elif dest in WORDS:
            check_text(value, field, max_chars=MAX_ID_CHARS, one_line=True)
        elif dest in PATHS:
            check_text(value, field, max_chars=MAX_PATH_CHARS, one_line=True)
            if not value.strip():
                raise ValidationError(f"{field}: expected a path, got an empty string")
        elif dest in JSONS:  # parsed by the command, strictly (core.limits.parse_json)
            check_text(value, field, max_chars=MAX_JSON_BYTES)
        else:
            check_text(value, field, max_chars=MAX_TEXT_CHARS)


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every value of the chosen command, before it runs; ValidationError on the first bad."""
    fields: dict[str, list[str]] = {}  # options sharing a dest (--config, --agents) name all
    for action in _chosen(parser, args):
        if action.dest != argparse.SUPPRESS:
            fields.setdefault(action.dest, []).append(_field(action))
    for dest, names in fields.items():
        check_value(dest, "/".join(dict.fromkeys(names)), getattr(args, dest, None))
    minutes = getattr(args, "minutes_dir", None)
    if minutes:
        confined_dir(minutes, "--minutes-dir")
    env_operator()


def env_operator() -> str | None:
    """$CLAWTOWER_OPERATOR under the one name rule, or None when it is not set; checked with
    the arguments, so a bad one refuses a command before anything is opened. Set but empty
    is refused, not skipped: it is what `CLAWTOWER_OPERATOR=$WHO` gives when WHO is unset,
    and acting under the login name instead would go unnoticed."""
    value = os.environ.get("CLAWTOWER_OPERATOR")
    if value is None:
        return None
    if not value:
        raise ValidationError("$CLAWTOWER_OPERATOR: set but empty (unset it to act as your"
                              " login name, or give --by NAME)")
    return check_name(value, "$CLAWTOWER_OPERATOR")


def confined_dir(value: str, field: str) -> Path:
    """A directory the CLI will write into: inside the current directory or
    $CLAWTOWER_HOME (symlinks resolved), and a directory if it exists already."""
    from clawtower.core.config import home

    target = Path(value).expanduser()
    try:
        resolved = target.resolve()
        roots = [Path.cwd().resolve(), home().resolve()]
    except (OSError, RuntimeError) as exc:
        raise ValidationError(f"{field}: {printable(value)}: not a usable path ({exc})"
                              ) from None
    if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
        raise ValidationError(f"{field}: {printable(value)} is outside the current directory"
                              " and $CLAWTOWER_HOME")
    if resolved.exists() and not resolved.is_dir():
        raise ValidationError(f"{field}: {printable(value)} is not a directory")
    existing = next((p for p in (resolved, *resolved.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise ValidationError(f"{field}: {printable(value)}: permission denied")
    return resolved


__all__ = ["FLOATS", "INTS", "check_args", "check_value", "confined_dir", "env_operator",
           "one_line"]
