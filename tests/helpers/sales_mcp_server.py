"""A stdio MCP server (official SDK) implementing the operations of the expert packages the
tests run: our own acme-support-expert's helpdesk and kb tools, and the openexperts radiant
fixture's crm and email tools. Neither package's tools have real servers here.

Every call is appended as a JSON line to $SALES_MCP_CALLS (when set), so tests see exactly
what was executed (and that a manual-tier operation never was). With
$SALES_MCP_LIST_DELAY (seconds) the process's first tools/list answers that late.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

CONTACT = {"contact_id": "c-17", "name": "Sarah Lee", "company": "Acme",
           "deal_stage": "Stage 3", "last_activity": "2026-11-20", "notes": []}
DEAL = {"deal_name": "Acme platform", "amount": 45000, "stage": "Stage 3",
        "competitors": ["LegacyCRM Pro"], "close_date": "2026-12-31"}

TOOLS: dict[str, tuple[list[str], Any]] = {
    "get_email": (["message_id"], lambda a: {
        "from": "sarah@acme.example", "subject": "Enterprise pricing?",
        "body": "Hi, can you send enterprise pricing? We have budget approved.",
        "date": "2026-11-23", "message_id": a["message_id"]}),
    "find_contact": (["email"], lambda a: {**CONTACT, "email": a["email"]}),
    "get_deal": (["contact_id"], lambda a: {**DEAL, "contact_id": a["contact_id"]}),
    "create_note": (["contact_id", "body"], lambda a: {"note_id": "n-1"}),
    "update_deal_stage": (["deal_id", "stage"], lambda a: {"success": True}),
    "send": (["to", "body"], lambda a: {"message_id": "sent-1", "status": "sent"}),
    # acme-support-expert (tests/fixtures/acme-support-expert)
    "get_ticket": (["ticket_id"], lambda a: {
        "ticket_id": a["ticket_id"], "requester": "dana@globex.example",
        "subject": "Cannot log in after the SSO change",
        "body": "Since this morning's SSO switch none of our team can sign in.",
        "opened_at": "2026-11-23T07:10:00Z"}),
    "lookup_customer": (["email"], lambda a: {
        "customer_id": "cu-9", "name": "Globex", "plan": "enterprise", "open_tickets": 2,
        "email": a["email"]}),
    "search_articles": (["query"], lambda a: {
        "articles": [{"id": "kb-12", "title": "Re-linking accounts after an SSO change"},
                     {"id": "kb-40", "title": "Resetting a password"}],
        "top_article_id": "kb-12", "query": a["query"]}),
    "get_article": (["article_id"], lambda a: {"title": "Article " + a["article_id"],
                                               "text": "Steps ..."}),
    "list_overdue": ([], lambda a: {"ticket_id": "T-311", "hours_overdue": 26.5,
                                    "plan": "team", "subject": "Invoice charged twice"}),
    "add_internal_note": (["ticket_id", "note"], lambda a: {"note_id": "in-1"}),
    "set_priority": (["ticket_id", "priority"], lambda a: {
        "updated": a["priority"] in ("urgent", "high", "normal")}),
    "send_reply": (["ticket_id", "body"], lambda a: {"reply_id": "r-1"}),
}


_slowed: list[bool] = []


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    delay = os.environ.get("SALES_MCP_LIST_DELAY")  # the first list of this process is slow
    if delay and not _slowed:
        _slowed.append(True)
        await anyio.sleep(float(delay))
    return types.ListToolsResult(tools=[
        types.Tool(name=n, description=f"{n} (test double)", input_schema={
            "type": "object", "properties": {k: {} for k in req}, "required": req})
        for n, (req, _) in TOOLS.items()])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                    ) -> types.CallToolResult:
    args = params.arguments or {}
    log = os.environ.get("SALES_MCP_CALLS")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": params.name, "args": args}) + "\n")
    if params.name not in TOOLS:
        raise MCPError(code=-32602, message=f"Unknown tool: {params.name}")
    req, fn = TOOLS[params.name]
    missing = [k for k in req if k not in args]
    if missing:
        return types.CallToolResult(content=[types.TextContent(
            type="text", text=f"missing arguments: {', '.join(missing)}")], is_error=True)
    out = fn(args)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(out))],
                                structured_content=out)


async def main() -> None:
    server: Server[Any] = Server("sales", version="1.0", on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
