"""`clawtower`: the command line. Every command goes through the same core API as the console.

Exit codes: 0 ok, 1 runtime error, 2 usage or validation error (one line naming the file,
field or id at fault).

Each command group lives in its own module with `register(subparsers)` (cli/common.py says
how); this module lists them, parses, and runs the handler the parser chose. No command
module imports this one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

# Only what building the parser and reporting errors needs is imported here; each handler
# imports the core modules of its own command (start-up: BENCHMARKS.md).
from clawtower.core.config import default_db
from clawtower.core.errors import ClawError
from clawtower.core.tasks.phases import Phase

from . import boundary
from .common import CommandParser, add_config_option

# The command groups (modules of cli/), in the order `clawtower --help` lists them.
GROUPS: tuple[str, ...] = (
    "demo", "init", "serve", "events", "task", "approvals", "meeting", "store_admin", "workflow",
    "agents", "tools", "session", "expert", "flow", "acp", "triggers", "deadletter", "memory",
    "traces", "console",
)
# Each top-level command and the group that registers it: a command's process imports and
# builds only its own group's parser (help, no command or an unknown one: every group).
# tests/test_core_imports.py checks this table against what each group registers.
COMMANDS: dict[str, str] = {
    "demo": "demo", "init": "init", "serve": "serve", "events": "events", "task": "task",
    "approvals": "approvals", "approve": "approvals", "reject": "approvals",
    "meeting": "meeting", "store": "store_admin", "workflow": "workflow", "agents": "agents",
    "llm": "agents", "tools": "tools", "session": "session", "expert": "expert",
    "flow": "flow", "acp": "acp", "triggers": "triggers", "deadletter": "deadletter",
    "memory": "memory", "trace": "traces", "traces": "traces", "console": "console",
}


def group(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def _groups_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The one group a command line needs, or every group (no argv, help, an unknown
    command). No command opens the console: its group only (the console's first paint waits
    on this parser: start-up, BENCHMARKS.md)."""
    if argv is None:
        return GROUPS
    value_next = False  # the top level's options (--db, --config) take a value
    for arg in argv:
        if arg in ("-h", "--help"):
            return GROUPS
        if arg == "--version":
            return ()
        if arg.startswith("-"):
            value_next = "=" not in arg
        elif value_next:
            value_next = False
        else:
            return (COMMANDS[arg],) if arg in COMMANDS else GROUPS
    return ("console",)


class _Version(argparse.Action):
    """`clawtower --version`: the installed distribution's version, read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("clawtower")
        except PackageNotFoundError:  # a checkout run without installing it
            text = "unknown (not installed: pip install -e .)"
        sys.stdout.write(f"clawtower {text}\n")
        parser.exit(0)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given the command line, only the parser of its command."""
    p = CommandParser(prog="clawtower",
                      description="Multi-agent orchestration engine with an operator console.")
    add_config_option(p, "--agents")  # for the console (no COMMAND)
    p.add_argument("--version", action=_Version, nargs=0,
                   help="print the installed version of clawtower and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in _groups_for(argv):
        group(name).register(sub)
    return p


def dispatch(args: argparse.Namespace) -> int:
    handler = getattr(args, "handler", None)
    if handler is None:  # no command: the console, as `clawtower console`
        return group("console").terminal(args.db, args.config)  # type: ignore[no-any-return]
    from .output import safe_output

    # a console's screen (and a web console's packets on stdout) must reach the driver as is
    console = (args.command == "demo" and not getattr(args, "headless", False)) or (
        args.command == "console" and not args.web)
    with safe_output(bool(getattr(args, "json", False)) or console):
        return _run(handler, args)


def _run(handler: Any, args: argparse.Namespace) -> int:
    result = handler(args)
    if isinstance(result, int):
        return result
    import asyncio  # here, not at the top: `--help` and usage errors never load it

    async def run() -> int:  # asyncio.run wants a coroutine; handlers return awaitables
        try:
            return int(await result)
        finally:
            await _close_http_clients()

    return asyncio.run(run())


async def _close_http_clients() -> None:
    """Model providers keep one HTTP client per loop (keep-alive); close them with the loop.
    Imported only if a provider module was: a command without one pays nothing."""
    common = sys.modules.get("clawtower.core.agents.httpcommon")
    if common is not None:
        await common.close_clients()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.db_given = hasattr(args, "db")
    if not args.db_given:
        args.db = os.environ.get("CLAWTOWER_DB") or str(default_db())
    elif not args.db:
        parser.error("argument --db: expected a path, got an empty string")
    try:
        boundary.check_args(parser, args)  # every argument, before anything is opened
        return dispatch(args)
    except ClawError as exc:
        sys.stderr.write(f"clawtower: error: {boundary.one_line(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("clawtower: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: still one line and exit 1 (CLAWTOWER_DEBUG=1 raises)
        if os.environ.get("CLAWTOWER_DEBUG") == "1":
            raise
        sys.stderr.write(f"clawtower: internal error: {type(exc).__name__}:"
                         f" {boundary.one_line(str(exc), 300)}\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["Phase", "main"]
