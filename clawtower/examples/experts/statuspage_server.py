"""A small status page served over MCP (stdio, the official SDK): the `statuspage` tool of
the example expert `incident-desk`, so the demo's approved notice is really published
somewhere you can look at.

    .venv/bin/python examples/experts/statuspage_server.py [--data FILE]

It needs the MCP SDK (the project's venv has it). Notices are kept in FILE (default
`$CLAWTOWER_HOME/statuspage.json`, or `~/.clawtower/statuspage.json` when that is unset), one
JSON list, rewritten whole on each post. An MCP server's environment is scrubbed, so a
binding passes the home explicitly (`--env CLAWTOWER_HOME=...`, see the package's README).
Operations: `post_notice {service, summary}` -> `{notice_id, url}`;
`list_open_incidents {}` -> `{open_incidents}`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def default_data() -> Path:
    home = os.environ.get("CLAWTOWER_HOME") or str(Path.home() / ".clawtower")
    return Path(home) / "statuspage.json"


class StatusPage:
    def __init__(self, path: Path) -> None:
        self.path = path

    def notices(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        return data if isinstance(data, list) else []

    def post(self, service: str, summary: str) -> dict[str, Any]:
        notices = self.notices()
        notice = {"notice_id": f"N-{len(notices) + 1}", "service": service, "summary": summary,
                  "status": "investigating", "posted_at": time.time()}
        notices.append(notice)
        # a whole new file renamed over the old one: a reader never sees half a list
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".statuspage-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(notices, f, indent=1)
        os.replace(tmp, self.path)
        return {"notice_id": notice["notice_id"],
                "url": f"https://status.example/notices/{notice['notice_id']}"}

    def open_incidents(self) -> dict[str, Any]:
        return {"open_incidents": sum(n.get("status") != "resolved" for n in self.notices())}


TOOLS: dict[str, tuple[str, list[str]]] = {
    "post_notice": ("Publish a notice about a service", ["service", "summary"]),
    "list_open_incidents": ("The incidents still open", []),
}


def build(page: StatusPage) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=name, description=desc, input_schema={
                "type": "object", "properties": {k: {"type": "string"} for k in req},
                "required": req})
            for name, (desc, req) in TOOLS.items()])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name not in TOOLS:
            raise MCPError(code=-32602, message=f"Unknown tool: {params.name}")
        missing = [k for k in TOOLS[params.name][1] if not isinstance(args.get(k), str)
                   or not args[k].strip()]
        if missing:
            return types.CallToolResult(content=[types.TextContent(
                type="text", text=f"missing arguments: {', '.join(missing)}")], is_error=True)
        out = page.post(args["service"], args["summary"]) if params.name == "post_notice" \
            else page.open_incidents()
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(out))],
            structured_content=out)

    return Server("statuspage", version="1.0", on_list_tools=list_tools,
                  on_call_tool=call_tool)


async def main(data: Path) -> None:
    server = build(StatusPage(data))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="the notices file")
    a = parser.parse_args()
    anyio.run(main, a.data or default_data())
