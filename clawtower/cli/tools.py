"""`clawtower tools`: the tool registry (built-in and MCP tools), listed and called.

    clawtower tools list [--agent A] [--json]
    clawtower tools call NAME --args JSON [--agent A] [--json]

MCP servers come from the `mcp_servers:` key of the project config (--config FILE, else
$CLAWTOWER_CONFIG, else $CLAWTOWER_HOME/clawtower.yaml). A tool whose definition is not
pinned refuses to run and names the approval to decide with `clawtower approve ID`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ValidationError

if TYPE_CHECKING:  # the registry loads the MCP SDK (~0.8 s): only `tools` commands pay it
    from clawtower.core.tools.mcp import ToolProgress
    from clawtower.core.tools.registry import ToolInfo, ToolRegistry

from . import output
from .common import add_config_option, db_parent
from .stores import cli_store

Handler = Callable[[argparse.Namespace], Awaitable[int]]

# error kinds that are the caller's input at fault (exit 2); the rest are runtime (exit 1)
INPUT_ERRORS = ("policy", "unknown", "arguments")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser("tools", help="built-in and MCP tools: list, call, pin")
    t.set_defaults(handler=cmd_tools)
    sub = t.add_subparsers(dest="tools_cmd", metavar="ACTION", required=True,
                           parser_class=type(t))  # the top level's one-line-error parser
    common = db_parent()
    add_config_option(common)  # its agents' tool allow-lists and its mcp_servers:
    common.add_argument("--agent", default=None, metavar="A",
                        help="only what this agent's tool allow-list lets it see and call")
    common.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("list", help="every tool: name, source, pin status, description",
                   parents=[common])
    c = sub.add_parser("call", help="run a tool (the real one) and print its result",
                       parents=[common])
    c.add_argument("name", metavar="NAME", help="the tool (see `tools list`)")
    c.add_argument("--args", default="{}", metavar="JSON", help="the arguments, a JSON object")
    p = sub.add_parser("pin", help="ask again to pin a tool whose definition was rejected"
                                   " (a new approval in the approvals list)", parents=[common])
    p.add_argument("name", metavar="NAME", help="the tool whose definition was rejected")


def _allow_list(args: argparse.Namespace) -> list[str] | None:
    if not args.agent:
        return None
    from clawtower.core.agents.config import load_config

    return list(load_config(args.config).agent(args.agent).tools)


def _parse_args_json(text: str) -> dict[str, Any]:
    """Strict: an object, no duplicate keys, bounded (core.limits.parse_json)."""
    from clawtower.core.limits import parse_json

    value: dict[str, Any] = parse_json(text, "--args", want=dict)
    return value


def _status(info: ToolInfo) -> str:
    if info.status in ("pending", "changed") and info.approval_id:
        return f"{info.status} ({info.approval_id})"
    return info.status


def _first_line(text: str, width: int = 72) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= width else line[: width - 1] + "…"


async def cmd_tools(args: argparse.Namespace) -> int:
    from clawtower.core.tools.config import load_mcp_servers
    from clawtower.core.tools.registry import ToolRegistry

    # input first: a bad --args, config or agent writes nothing and starts nothing
    servers = load_mcp_servers(args.config)
    allow = _allow_list(args)
    call_args = _parse_args_json(args.args) if args.tools_cmd == "call" else None
    if args.tools_cmd == "pin" and allow is not None:
        raise ValidationError("tools pin: --agent does not apply (a pin is for every agent)")
    # listing only built-ins reads; an MCP server's first listing records its pins (writes)
    read_only = args.tools_cmd == "list" and not servers
    async with (cli_store(args.db, read_only=read_only) as store,
                ToolRegistry(store, servers) as registry):
        if args.tools_cmd == "list":
            return await _list(args, registry, allow)
        if args.tools_cmd == "pin":
            return await _pin(args, registry)
        assert call_args is not None
        return await _call(args, registry, allow, call_args)


async def _list(args: argparse.Namespace, registry: ToolRegistry,
                allow: list[str] | None) -> int:
    listing = await registry.list_tools()
    from clawtower.core.tools.registry import allowed

    tools = [t for t in listing.tools if allowed(t.name, allow)]
    if args.json:
        output.emit_json({"tools": [t.as_json() for t in tools], "errors": listing.errors})
    elif tools:
        print(output.table([[t.name, t.source, _status(t), _first_line(t.description)]
                            for t in tools], ["NAME", "SOURCE", "STATUS", "DESCRIPTION"]))
    else:
        print("no tools" + (f" allowed for {args.agent}" if args.agent else ""))
    for err in listing.errors.values():
        sys.stderr.write(f"clawtower: error: {err}\n")
    return 1 if listing.errors else 0


async def _call(args: argparse.Namespace, registry: ToolRegistry, allow: list[str] | None,
                call_args: dict[str, Any]) -> int:
    from .common import operator_name

    def progress(p: ToolProgress) -> None:
        total = f"/{p.total:g}" if p.total is not None else ""
        msg = f" {p.message}" if p.message else ""
        sys.stderr.write(f"{p.tool}: progress {p.progress:g}{total}{msg}\n")
        sys.stderr.flush()

    result = await registry.call(args.name, call_args, allow=allow,
                                 caller=args.agent or operator_name(), progress=progress)
    if args.json:
        output.emit_json(result.model_dump(mode="json"))
    elif not result.is_error:
        print(result.content)
    if result.is_error:
        if not args.json:
            sys.stderr.write(f"clawtower: error: {result.content}\n")
        return 2 if result.error_kind in INPUT_ERRORS else 1
    return 0


async def _pin(args: argparse.Namespace, registry: ToolRegistry) -> int:
    info = await registry.request_pin(args.name)
    if args.json:
        output.emit_json(info.as_json())
    else:
        print(f"{info.name}: pin requested (approval {info.approval_id}); approve it with"
              f" `clawtower approve {info.approval_id}` or in the console (mode 2)")
    return 0

