"""A fake stdio MCP server built on the SDK's low-level server side, for the tool tests.

Driven by environment variables (the client passes them through `env:`):
  FAKE_MCP_DESC_FILE   the `echo` tool's description is read from this file on every list
                       (rewrite it to change the definition under a running client)
  FAKE_MCP_CALLS_FILE  every tools/call appends the tool's name and a newline here
  FAKE_MCP_HANG_START  when "1", never answer anything (a server hung from the start)
  FAKE_MCP_HANG_LIST   when this file exists, tools/list never answers

Tools: echo(text), crash() exits the process mid-call, hang() never answers (the rest of
the server still does), block() wedges the whole server,
progress(steps) reports progress, fail() returns an isError result.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def _desc() -> str:
    path = os.environ.get("FAKE_MCP_DESC_FILE")
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return "Echo the text back."


def _schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    hang = os.environ.get("FAKE_MCP_HANG_LIST")
    if hang and os.path.exists(hang):
        await anyio.sleep_forever()
    return types.ListToolsResult(tools=[
        types.Tool(name="echo", description=_desc(),
                   input_schema=_schema({"text": {"type": "string"}}, ["text"])),
        types.Tool(name="crash", description="Exit the server process mid-call.",
                   input_schema=_schema({}, [])),
        types.Tool(name="hang", description="Never answer.", input_schema=_schema({}, [])),
        types.Tool(name="progress", description="Report progress steps, then finish.",
                   input_schema=_schema({"steps": {"type": "integer"}}, ["steps"])),
        types.Tool(name="fail", description="Return an error result.",
                   input_schema=_schema({}, [])),
        types.Tool(name="block", description="Block the whole server.",
                   input_schema=_schema({}, [])),
    ])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                    ) -> types.CallToolResult:
    calls = os.environ.get("FAKE_MCP_CALLS_FILE")
    if calls:
        with open(calls, "a", encoding="utf-8") as f:
            f.write(params.name + "\n")
    args = params.arguments or {}
    if params.name == "echo":
        if args["text"] == "$FAKE_TOKEN":
            args = {"text": f"token={os.environ.get('FAKE_TOKEN')}"}
        return types.CallToolResult(content=[types.TextContent(type="text", text=args["text"])],
                                    structured_content={"echo": args["text"], "pid": os.getpid(),
                                                        "cwd": os.getcwd()})
    if params.name == "crash":
        token = os.environ.get("FAKE_TOKEN")
        if token:
            sys.stderr.write(f"fake server: my token is {token}\n")
        sys.stderr.write("fake server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if params.name == "hang":
        await anyio.sleep_forever()
    if params.name == "block":  # wedges the whole server: nothing else is answered
        time.sleep(3600)
    if params.name == "progress":
        steps = int(args["steps"])
        for i in range(1, steps + 1):
            await ctx.session.report_progress(i, steps, f"step {i}")
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])
    if params.name == "fail":
        return types.CallToolResult(content=[types.TextContent(type="text", text="it failed")],
                                    is_error=True)
    raise MCPError(code=-32602, message=f"Unknown tool: {params.name}")


async def main() -> None:
    if os.environ.get("FAKE_MCP_HANG_START") == "1":
        await asyncio.sleep(3600)
    server: Server[Any] = Server("fake", version="1.0", on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
