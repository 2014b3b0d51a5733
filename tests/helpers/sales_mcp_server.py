"""A stdio MCP server implementing the operations of the expert packages the tests run: our
own acme-support-expert's helpdesk and kb tools, and the openexperts radiant fixture's crm and
email tools. Neither package's tools have real servers here.

It speaks the protocol our client (the `mcp` SDK, 2.3.0) speaks, MCP 2026-07-28 over stdio,
written out as JSON lines without the SDK: importing the SDK is ~1.3 s of CPU, and this
server is started ~100 times a run (every expert step that calls a tool starts one). What it
answers is what the SDK's low-level server answered for the same requests (the replies
were recorded from it; `tests/test_sales_server.py` holds them), and every test that uses it
drives it through the SDK's client. The SDK's own server side is still exercised by
`fake_mcp_server.py` (progress, concurrent calls, hangs) and the real servers in
`real-peers.md`.

Every call is appended as a JSON line to $SALES_MCP_CALLS (when set), so tests see exactly
what was executed (and that a manual-tier operation never was). With
$SALES_MCP_LIST_DELAY (seconds) the process's first tools/list answers that late, while the
requests after it are answered at once (as the SDK's server, which answers concurrently).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

VERSION = "2026-07-28"
SERVER = {"io.modelcontextprotocol/serverInfo": {"name": "sales", "version": "1.0"}}

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

_out = threading.Lock()
_slowed: list[bool] = []


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            self.error["data"] = data


def send(message: dict[str, Any]) -> None:
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def discover(params: dict[str, Any]) -> dict[str, Any]:
    return {"cacheScope": "private", "capabilities": {"tools": {"listChanged": False}},
            "resultType": "complete", "supportedVersions": [VERSION], "ttlMs": 0,
            "_meta": SERVER}


def list_tools(params: dict[str, Any]) -> dict[str, Any]:
    return {"cacheScope": "private", "resultType": "complete", "tools": [
        {"description": f"{n} (test double)", "inputSchema": {
            "type": "object", "properties": {k: {} for k in req}, "required": req},
         "name": n} for n, (req, _) in TOOLS.items()], "ttlMs": 0, "_meta": SERVER}


def call_tool(params: dict[str, Any]) -> dict[str, Any]:
    name, args = params.get("name"), params.get("arguments") or {}
    log = os.environ.get("SALES_MCP_CALLS")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"tool": name, "args": args}) + "\n")
    if name not in TOOLS:
        raise RpcError(-32602, f"Unknown tool: {name}")
    req, fn = TOOLS[name]
    missing = [k for k in req if k not in args]
    if missing:
        return {"content": [{"text": f"missing arguments: {', '.join(missing)}",
                             "type": "text"}],
                "isError": True, "resultType": "complete", "_meta": SERVER}
    out = fn(args)
    return {"content": [{"text": json.dumps(out), "type": "text"}], "isError": False,
            "resultType": "complete", "structuredContent": out, "_meta": SERVER}


METHODS = {"server/discover": discover, "tools/list": list_tools, "tools/call": call_tool}


def answer(request: dict[str, Any]) -> None:
    rid, method = request["id"], request.get("method")
    try:
        handler = METHODS.get(method)  # type: ignore[arg-type]
        if handler is None:
            raise RpcError(-32601, "Method not found", method)
        send({"jsonrpc": "2.0", "id": rid, "result": handler(request.get("params") or {})})
    except RpcError as exc:
        send({"jsonrpc": "2.0", "id": rid, "error": exc.error})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue  # as the SDK's server: a line that is not JSON is dropped
        if "id" not in request or "method" not in request:
            continue  # a notification (cancelled, initialized) or a reply: nothing to answer
        delay = os.environ.get("SALES_MCP_LIST_DELAY")
        if request["method"] == "tools/list" and delay and not _slowed:
            _slowed.append(True)  # the first list of this process is slow, the rest are not
            late = threading.Timer(float(delay), answer, (request,))
            late.daemon = True  # gone at stdin's end, as the SDK's server is
            late.start()
            continue
        answer(request)


if __name__ == "__main__":
    main()
