"""Going back in a session (issue 37), the read side: its turns as the log has them (the
fork itself is `fork.py`).

A turn is a TurnJob that started (numbered by its first `turnjob.started`, or the start its
session's `session.created` carries when the job was claimed there, issue 36): the messages it
took, its tool calls, its tokens, its reply, the log position it ended at. A fork is a new
session (`session.forked`) whose transcript is the origin's messages up to that position,
each copied as a `session.message` naming its original: read from the log at that point,
never from today's projections. A copied turn's tool calls and approvals are history; the
new session has no job, no approval and no backlog of its own until it is sent a message.
A fork's own history lists the turns it copied (marked) before its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, ValidationError

if TYPE_CHECKING:
    from ..store.interface import Store

Rows = list[dict[str, Any]]
Fetch = Callable[[str, tuple[Any, ...]], Rows]

#: a session's own events, its jobs' and its turns' (tool calls): one read, in log order
LOG_SQL = (
    "SELECT seq, ts, entity, entity_id, type, actor, payload FROM events WHERE"
    " (entity='session' AND entity_id=?1) OR (entity='turnjob' AND entity_id IN"
    " (SELECT id FROM turn_jobs WHERE session_id=?1)) OR (entity='turn' AND entity_id IN"
    " (SELECT json_extract(payload, '$.turn_id') FROM events WHERE entity='turnjob' AND"
    " type='turnjob.started' AND entity_id IN (SELECT id FROM turn_jobs WHERE"
    " session_id=?1) UNION SELECT json_extract(payload, '$.start.turn_id') FROM events"
    " WHERE entity='session' AND entity_id=?1 AND type='session.created'))"
    " ORDER BY seq")

_TYPES = ("session.created", "session.forked", "session.message", "session.announced",
          "turnjob.started", "turnjob.finished", "turnjob.waiting", "turnjob.resumed",
          "turn.tool_called")


def first_line(text: str, limit: int = 100) -> str:
    line = next((x for x in text.splitlines() if x.strip()), "").strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Log:
    """One session's turns and messages, from its log rows (and, for a fork, its origin's)."""

    def __init__(self, sid: str, rows: Rows, origin: Log | None = None) -> None:
        self.sid = sid
        self.origin = origin
        self.created = False
        self.fork: dict[str, Any] | None = None  # the `session.forked` payload (+ seq, by)
        self.messages: list[dict[str, Any]] = []  # {seq, msg_id, role, text, meta}
        own: list[dict[str, Any]] = []
        by_job: dict[str, dict[str, Any]] = {}
        by_turn: dict[str, dict[str, Any]] = {}
        for r in rows:
            kind = r["type"]
            if kind not in _TYPES:
                continue
            p = json.loads(r["payload"])
            seq = int(r["seq"])
            if kind == "session.created":
                self.created = True
                if p.get("start") and p.get("job_id"):  # its job claimed there (issue 36)
                    kind, p = "turnjob.started", {**p["start"], "job": p["job_id"]}
            elif kind == "session.forked":
                self.created = True
                self.fork = {**p, "seq": seq, "at": r["ts"], "actor": r["actor"]}
            elif kind == "session.message":
                self._message(seq, p)
            elif kind == "session.announced":
                self._message(seq, {**p, "role": "announce"})
            if kind == "turnjob.started":
                job = p.get("job") or r["entity_id"]
                t = by_job.get(job)
                if t is None:
                    t = by_job[job] = {
                        "job": job, "at": r["ts"], "started_seq": seq, "end_seq": None,
                        "status": "running", "agent_id": p.get("agent_id", ""),
                        "model": f"{p.get('provider', '')}/{p.get('model', '')}",
                        "message": "", "tool_calls": [], "prompt_tokens": 0,
                        "completion_tokens": 0, "reply": "", "approval": None}
                    own.append(t)
                by_turn[str(p.get("turn_id") or "")] = t
                if p.get("message"):
                    self._message(seq, p["message"])
            elif kind == "turnjob.finished" and r["entity_id"] in by_job:
                t = by_job[r["entity_id"]]
                t.update(status=p.get("status", ""), end_seq=seq, approval=None)
                t["prompt_tokens"] += int(p.get("prompt_tokens") or 0)
                t["completion_tokens"] += int(p.get("completion_tokens") or 0)
                if p.get("reply"):
                    self._message(seq, p["reply"])
            elif kind == "turnjob.waiting" and r["entity_id"] in by_job:
                t = by_job[r["entity_id"]]
                t.update(status="waiting", approval=p.get("approval_id"))
                t["prompt_tokens"] += int(p.get("prompt_tokens") or 0)
                t["completion_tokens"] += int(p.get("completion_tokens") or 0)
            elif kind == "turnjob.resumed" and r["entity_id"] in by_job:
                by_job[r["entity_id"]].update(status="queued", approval=None)
            elif kind == "turn.tool_called" and r["entity_id"] in by_turn:
                by_turn[r["entity_id"]]["tool_calls"].append(
                    {"name": p.get("name", ""), "arguments": p.get("arguments", ""),
                     "tier": p.get("tier", "")})
        for m in self.messages:  # what each turn took, and what it answered
            job = m["meta"].get("job")
            if job in by_job and m["role"] == "user" and m["meta"].get("kind") != "backlog":
                t = by_job[job]
                t["message"] = (t["message"] + "\n" if t["message"] else "") + m["text"]
            if job in by_job and m["role"] == "assistant":
                by_job[job]["reply"] = m["text"]
        copied = self._copied()
        self.turns: list[dict[str, Any]] = copied + own
        for n, t in enumerate(self.turns, 1):
            t["n"] = n

    def _message(self, seq: int, p: dict[str, Any]) -> None:
        self.messages.append({"seq": seq, "msg_id": p["msg_id"], "role": p["role"],
                              "text": p["text"], "meta": dict(p.get("meta") or {})})

    def _copied(self) -> list[dict[str, Any]]:
        """A fork's copied turns: its origin's, each ending at its last copied message."""
        if self.fork is None or self.origin is None:
            return []
        out = []
        for t in self.origin.turns[: int(self.fork["at_turn"])]:
            ends = [m["seq"] for m in self.messages
                    if int((m["meta"].get("fork") or {}).get("turn", 0) or 0) == t["n"]]
            out.append({**t, "tool_calls": list(t["tool_calls"]),
                        "copied_from": self.origin.sid, "job": None, "approval": None,
                        "end_seq": max(ends) if ends else int(self.fork["seq"])})
        for i in range(1, len(out)):  # a turn with no message of its own ends where the last
            out[i]["end_seq"] = max(out[i]["end_seq"], out[i - 1]["end_seq"])
        return out

    def turn_of(self, seq: int) -> int:
        """The number of the turn a message logged at `seq` belongs to (the first turn
        ending at or after it; after the last ended turn: the number after it)."""
        for t in self.turns:
            if t["end_seq"] is not None and seq <= t["end_seq"]:
                return int(t["n"])
        return len(self.turns) + 1


def _origin(rows: Rows) -> str | None:
    fork = next((r for r in rows if r["type"] == "session.forked"), None)
    return str(json.loads(fork["payload"])["origin"]) if fork else None


def _made(log: Log) -> Log:
    if not log.created:
        raise NotFound(f"session {log.sid!r}: no such session")
    return log


def load(fetch: Fetch, sid: str) -> Log:
    """`sid`'s Log (and its fork origins', recursively), read with `fetch` (in a command)."""
    rows = fetch(LOG_SQL, (sid,))
    origin = _origin(rows)
    return _made(Log(sid, rows, load(fetch, origin) if origin else None))


async def read(store: Store, sid: str) -> Log:
    """`load` on a read snapshot per session (the CLI's `session history`)."""
    rows = await store.fetchall(LOG_SQL, (sid,))
    origin = _origin(rows)
    return _made(Log(sid, rows, await read(store, origin) if origin else None))


def turn_json(t: dict[str, Any]) -> dict[str, Any]:
    return {"n": t["n"], "at": t["at"], "status": t["status"], "job": t["job"],
            "message": t["message"], "tool_calls": t["tool_calls"],
            "prompt_tokens": t["prompt_tokens"], "completion_tokens": t["completion_tokens"],
            "tokens": t["prompt_tokens"] + t["completion_tokens"],
            "reply": first_line(t["reply"]), "model": t["model"],
            "approval": t.get("approval"), "copied_from": t.get("copied_from"),
            "end_seq": t["end_seq"]}


def origin_json(log: Log) -> dict[str, Any] | None:
    if log.fork is None:
        return None
    f = log.fork
    return {"session": f["origin"], "turn": f["at_turn"], "at_seq": f["at_seq"],
            "by": f.get("by") or f["actor"], "reason": f.get("reason", ""), "at": f["at"]}


def check_turn(log: Log, at: int) -> dict[str, Any]:
    """Turn `at` of `log`, if it ended (else a one-line ValidationError; nothing written)."""
    n = len(log.turns)
    if n == 0:
        raise ValidationError(f"session {log.sid!r}: --at {at}: the session has no turns yet")
    if not 1 <= at <= n:
        raise ValidationError(f"session {log.sid!r}: --at {at}: out of range (turns 1..{n})")
    t = log.turns[at - 1]
    if t["end_seq"] is None:
        why = (f"it waits for approval {t['approval']}" if t["status"] == "waiting"
               else f"it is {t['status']}")
        raise Conflict(f"session {log.sid!r}: --at {at}: turn {at} has not ended ({why});"
                       " fork at an earlier turn, or after it ends")
    return t


__all__ = ["LOG_SQL", "Log", "check_turn", "first_line", "load", "origin_json", "read",
           "turn_json"]
