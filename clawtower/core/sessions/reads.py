"""The sessions' read API (`Sessions` inherits it): plain dicts from the projection tables,
each call one read snapshot. Kept apart from the write commands so a read (`session show`,
the console's Sessions mode) loads no payload model, spec model or tool gate (start-up:
BENCHMARKS.md)."""

from __future__ import annotations

import builtins
import json
from typing import Any

from ..errors import NotFound
from ..store.interface import Store


def clip(text: str, limit: int) -> str:
    """`text` on one line (whitespace collapsed), cut to `limit` characters with an ellipsis:
    an announce's summary, a failed turn's error."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def announce_context(announces: list[dict[str, Any]]) -> str:
    """The ephemeral block a parent's turn gets from its children's announces (rendered
    per turn from their meta; never stored as a message)."""
    lines = ["# Subagent results (context for this turn only)"]
    for a in announces:
        meta = json.loads(a["meta"]) if isinstance(a.get("meta"), str) else a["meta"]
        src, res, stats = meta["source"], meta["result"], meta["stats"]
        task = meta["task"].get("label") or clip(meta["task"].get("prompt", ""), 80)
        lines.append(f"- @agent:{src['agent_name']}#{src['agent_id']} ({src['session_id']},"
                     f" run {src['run_id']}) task: {task} -> {res['status']}:"
                     f" {res['summary']} [{stats['tokens']} tokens, ${stats['cost_usd']:.6f}]")
    return "\n".join(lines)


def announce_said(meta: dict[str, Any]) -> str | None:
    """What an announce message is for a reader: `S-2 @worker ok: <the child's summary>`,
    from its meta (the transcript text is the seed's protocol line, the same for every
    child). None when the meta lacks the result (an older or foreign message). The CLI's
    `session show` and the console's mode 4 both print it."""
    result, source = meta.get("result"), meta.get("source")
    if not isinstance(result, dict) or not isinstance(source, dict):
        return None
    who = " ".join(str(p) for p in (source.get("session_id"),
                                      f"@{source.get('agent_name')}") if p)
    return f"{who} {result.get('status', '?')}: {result.get('summary') or '(no summary)'}"


def _session_json(r: dict[str, Any], spec_names: dict[str, str]) -> dict[str, Any]:
    return {
        "id": r["id"], "title": r["title"], "status": r["status"], "result": r["result"],
        "agent_id": r["agent_id"], "agent": spec_names.get(r["agent_id"], r["agent_id"]),
        "provider_override": r["provider_override"], "model_override": r["model_override"],
        "deliver": bool(r["deliver"]), "channel": r["channel"], "parent_id": r["parent_id"],
        "hop": r["hop"], "trace_id": r["trace_id"], "run_id": r["run_id"],
        "task": json.loads(r["task"] or "{}"), "active_job": r["active_job"],
        "turns": r["turns"], "prompt_tokens": r["prompt_tokens"],
        "completion_tokens": r["completion_tokens"],
        "tokens": r["prompt_tokens"] + r["completion_tokens"], "cost_usd": r["cost_usd"],
        "created_by": r["created_by"], "created_at": r["created_at"],
        "updated_at": r["updated_at"], "last_seq": r["last_seq"],
    }


def executor_label(defaults: dict[str, Any]) -> str:
    """What runs a spec's turns, from its `defaults` (JSON form): `openclaw:AGENT` (a
    Gateway agent), `acp:NAME` (another ACP harness), else `PROVIDER/MODEL`."""
    acp = defaults.get("acp")
    if isinstance(acp, str):
        return f"acp:{acp}"
    if isinstance(acp, dict):
        oc = acp.get("openclaw")
        if isinstance(oc, dict):
            return f"openclaw:{oc.get('agent') or 'main'}"
        return f"acp:{acp.get('name') or 'inline'}"
    return f"{defaults.get('provider') or 'simulator'}/{defaults.get('model') or '-'}"


def _runs_on(session: dict[str, Any], configs: dict[str, str]) -> str:
    """What runs the session's turns: its model override, else its spec's executor
    (`openclaw:main`, `acp:NAME`, `simulator/sim-standard`)."""
    if session["model_override"]:
        return f"{session['provider_override']}/{session['model_override']}"
    raw = configs.get(session["agent_id"])
    if not raw:
        return "spec default"
    return executor_label(json.loads(raw).get("defaults") or {})


def _message_json(r: dict[str, Any]) -> dict[str, Any]:
    return {"seq": r["seq"], "msg_id": r["msg_id"], "role": r["role"], "text": r["text"],
            "meta": json.loads(r["meta"]), "at": r["at"]}


class SessionReads:
    """`list`, `get`, `changed_since`, `transcript`, `backlog`, `announces`, `tree`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def _spec_names(self) -> dict[str, str]:
        rows = await self.store.fetchall("SELECT agent_id, name FROM agent_specs")
        return {r["agent_id"]: r["name"] for r in rows}

    async def list(self, *, limit: int = 5000, roots_only: bool = False
                   ) -> builtins.list[dict[str, Any]]:
        where = "WHERE parent_id IS NULL" if roots_only else ""
        rows, specs = await self.store.fetch_many([
            (f"SELECT * FROM sessions {where} ORDER BY num LIMIT ?", (limit,)),
            ("SELECT agent_id, name FROM agent_specs", ())])
        names = {r["agent_id"]: r["name"] for r in specs}
        return [_session_json(r, names) for r in rows]

    async def get(self, sid: str) -> dict[str, Any]:
        """One session with its transcript, backlog, pending messages, announces, jobs and
        children (one read snapshot)."""
        (rows, msgs, backlog, inbox, announces, jobs, children, specs, waits,
         drafts, forked) = await self.store.fetch_many([
            ("SELECT * FROM sessions WHERE id=?", (sid,)),
            ("SELECT * FROM session_messages WHERE session_id=? ORDER BY seq", (sid,)),
            ("SELECT * FROM session_backlog WHERE session_id=? ORDER BY seq", (sid,)),
            ("SELECT * FROM session_inbox WHERE session_id=? ORDER BY seq", (sid,)),
            ("SELECT * FROM session_announces WHERE parent_id=? ORDER BY seq", (sid,)),
            ("SELECT * FROM turn_jobs WHERE session_id=? ORDER BY queued_seq", (sid,)),
            ("SELECT * FROM sessions WHERE parent_id=? ORDER BY num", (sid,)),
            ("SELECT agent_id, name, config_json FROM agent_specs", ()),
            ("SELECT * FROM approvals WHERE kind='tool_call' AND subject=? AND"
             " status='pending' ORDER BY seq", (sid,)),
            ("SELECT e.seq, e.ts, e.payload FROM turns t JOIN events e ON e.entity='turn' AND"
             " e.entity_id=t.id AND e.type='turn.tool_drafted' WHERE t.subject=?"
             " ORDER BY e.seq", (sid,)),
            ("SELECT seq, ts, actor, payload FROM events WHERE entity='session' AND"
             " entity_id=? AND type='session.forked'", (sid,))])
        if not rows:
            raise NotFound(f"session {sid!r}: no such session")
        names = {r["agent_id"]: r["name"] for r in specs}
        out = _session_json(rows[0], names)
        out["origin"] = _origin(forked[0]) if forked else None
        out["runs_on"] = _runs_on(out, {r["agent_id"]: r["config_json"] for r in specs})
        out["messages"] = [_message_json(m) for m in msgs]
        out["backlog"] = [_backlog_json(b) for b in backlog]
        out["pending"] = [{"msg_id": i["msg_id"], "text": i["text"], "sender": i["sender"],
                           "status": i["status"], "job": i["job_id"], "at": i["at"]}
                          for i in inbox if i["status"] in ("pending", "cancelled")]
        out["announces"] = [_announce_json(a) for a in announces]
        out["jobs"] = [_job_json(j) for j in jobs]
        out["children"] = [_session_json(c, names) for c in children]
        # confirm-tier calls waiting for an operator; manual-tier calls drafted, never run
        out["approvals"] = [{**dict(w), "context": json.loads(w["context"])} for w in waits]
        out["drafts"] = [{"seq": d["seq"], "at": d["ts"], **json.loads(d["payload"])}
                         for d in drafts]
        return out

    async def history(self, sid: str) -> dict[str, Any]:
        """`sid`'s turns as its log has them (a fork's copied turns first, marked), and
        where it was forked from: {session, origin, turns: [{n, at, status, message,
        tool_calls, tokens, reply (first line), copied_from, ...}]} (history.py)."""
        from .history import origin_json, read, turn_json

        log = await read(self.store, sid)
        return {"session": sid, "origin": origin_json(log),
                "turns": [turn_json(t) for t in log.turns]}

    async def changed_since(self, seq: int) -> builtins.list[dict[str, Any]]:
        """Sessions whose row changed after event `seq` (a live view refreshes only these;
        each carries `last_seq`)."""
        rows, specs = await self.store.fetch_many([
            ("SELECT * FROM sessions WHERE last_seq > ? ORDER BY num", (seq,)),
            ("SELECT agent_id, name FROM agent_specs", ())])
        names = {r["agent_id"]: r["name"] for r in specs}
        return [_session_json(r, names) for r in rows]

    async def transcript(self, sid: str, *, after_seq: int = 0, limit: int = 10_000
                         ) -> builtins.list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT * FROM session_messages WHERE session_id=? AND seq>? ORDER BY seq LIMIT ?",
            (sid, after_seq, limit))
        return [_message_json(r) for r in rows]

    async def backlog(self, sid: str, *, waiting_only: bool = True
                      ) -> builtins.list[dict[str, Any]]:
        cond = " AND status='waiting'" if waiting_only else ""
        rows = await self.store.fetchall(
            f"SELECT * FROM session_backlog WHERE session_id=?{cond} ORDER BY seq", (sid,))
        return [_backlog_json(r) for r in rows]

    async def announces(self, sid: str) -> builtins.list[dict[str, Any]]:
        rows = await self.store.fetchall(
            "SELECT * FROM session_announces WHERE parent_id=? ORDER BY seq", (sid,))
        return [_announce_json(r) for r in rows]

    async def tree(self, root: str | None = None) -> builtins.list[dict[str, Any]]:
        """Sessions as a forest: each {..session.., children: [...]} (one read snapshot)."""
        rows, specs = await self.store.fetch_many([
            ("SELECT * FROM sessions ORDER BY num", ()),
            ("SELECT agent_id, name FROM agent_specs", ())])
        names = {r["agent_id"]: r["name"] for r in specs}
        nodes = {r["id"]: {**_session_json(r, names), "children": []} for r in rows}
        roots: list[dict[str, Any]] = []
        for r in rows:
            node = nodes[r["id"]]
            parent = nodes.get(r["parent_id"]) if r["parent_id"] else None
            if parent is not None:
                parent["children"].append(node)
            else:
                roots.append(node)
        if root is not None:
            if root not in nodes:
                raise NotFound(f"session {root!r}: no such session")
            return [nodes[root]]
        return roots


def _origin(r: dict[str, Any]) -> dict[str, Any]:
    """Where a fork came from (its `session.forked` event): session, turn, by, why."""
    p = json.loads(r["payload"])
    return {"session": p["origin"], "turn": p["at_turn"], "at_seq": p["at_seq"],
            "by": p.get("by") or r["actor"], "reason": p.get("reason", ""), "at": r["ts"]}


def _backlog_json(r: dict[str, Any]) -> dict[str, Any]:
    return {"item_id": r["item_id"], "kind": r["kind"], "text": r["text"],
            "data": json.loads(r["data"]), "status": r["status"],
            "drained_by": r["drained_by"], "at": r["at"]}


def _announce_json(r: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": r["run_id"], "child": r["child_id"], "msg_id": r["msg_id"],
            "agent_id": r["agent_id"], "agent": r["agent_name"], "status": r["status"],
            "summary": r["summary"], "tokens": r["tokens"], "cost_usd": r["cost_usd"],
            "consumed_by": r["consumed_by"], "meta": json.loads(r["meta"]), "at": r["at"]}


def _job_json(r: dict[str, Any]) -> dict[str, Any]:
    return {"id": r["id"], "status": r["status"], "reason": r["reason"], "owner": r["owner"],
            "attempt": r["attempt"], "turn_id": r["turn_id"], "model": r["model"],
            "provider": r["provider"], "steers": r["steers"], "stop_reason": r["stop_reason"],
            "error": r["error"], "prompt_tokens": r["prompt_tokens"],
            "completion_tokens": r["completion_tokens"], "cost_usd": r["cost_usd"],
            "queued_at": r["queued_at"], "started_at": r["started_at"],
            "ended_at": r["ended_at"],
            "recalled": _recalled(r["took"])}


def _recalled(took: str | None) -> list[dict[str, Any]]:
    """The memories a job's turn recalled (namespace, key, score), from its start event."""
    value = json.loads(took or "{}")
    return list(value.get("recalled") or []) if isinstance(value, dict) else []
