"""`clawtower agents` and `clawtower llm`: configured agents and direct model calls."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable

from . import llm_task as llm_task_cli

Handler = Callable[[argparse.Namespace], Awaitable[int]]
HANDLERS: dict[str, Handler] = {}


def register(cmd: Callable[..., argparse.ArgumentParser]) -> None:
    """Add this module's subcommands; `cmd(name, help)` makes a top-level subparser."""
    llm = cmd("llm", "direct model calls: structured JSON tasks")
    llm_sub = llm.add_subparsers(dest="llm_cmd", metavar="ACTION", parser_class=type(llm),
                                 required=True)
    # `llm task` lives in cli/llm_task.py; other `llm` actions are added beside it.
    llm_task_cli.add_task_parser(llm_sub, [_db_option()])


def _db_option() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="PATH",
                        help="store file (default: $CLAWTOWER_HOME/clawtower.db)")
    return common


async def cmd_llm(args: argparse.Namespace) -> int:
    actions: dict[str, Handler] = {"task": llm_task_cli.cmd_llm_task}
    return await actions[args.llm_cmd](args)


HANDLERS["llm"] = cmd_llm
