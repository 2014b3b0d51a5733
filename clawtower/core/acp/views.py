"""Read models of the ACP bridge for the CLI and the console: one run whole, and the runs
of a session (mode 4 shows a session's tool calls and diffs from here)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import NotFound
from ..store.interface import Store


def _tool(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "locations": json.loads(row["locations"]),
            "content": json.loads(row["content"])}


async def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """The run, its tool calls, evidence (plans, diffs) and permission requests."""
    run, tools, evidence, perms = await store.fetch_many([
        ("SELECT * FROM acp_runs WHERE id=?", (run_id,)),
        ("SELECT * FROM acp_tool_calls WHERE run_id=? ORDER BY first_seq", (run_id,)),
        ("SELECT * FROM acp_evidence WHERE run_id=? ORDER BY seq", (run_id,)),
        ("SELECT * FROM acp_permissions WHERE run_id=? ORDER BY seq", (run_id,))])
    if not run:
        raise NotFound(f"acp run {run_id!r}: no such run (see `clawtower acp runs`)")
    r = dict(run[0])
    r["command"] = json.loads(r["command"])
    r["agent_info"] = json.loads(r["agent_info"])
    return {"run": r, "tool_calls": [_tool(t) for t in tools],
            "evidence": [{**e, "body": json.loads(e["body"])} for e in evidence],
            "permissions": [{**p, "locations": json.loads(p["locations"]),
                             "options": json.loads(p["options"])} for p in perms]}


async def session_activity(store: Store, session_id: str, limit: int = 5
                           ) -> list[dict[str, Any]]:
    """The latest ACP runs of a session, newest last, each with its tool calls and diffs."""
    runs = await store.fetchall("SELECT id FROM acp_runs WHERE subject=? ORDER BY"
                                " started_at DESC LIMIT ?", (session_id, limit))
    return [await run_detail(store, r["id"]) for r in reversed(runs)]


__all__ = ["run_detail", "session_activity"]
