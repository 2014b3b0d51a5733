"""Meetings as the console reads them (no Textual here).

The core's `Meetings` service is the source; until a core without it is gone, the same shapes
are read from the projection tables directly, so the console still lists and shows meetings.
Stopping, granting rounds and starting a meeting always go through core.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from pathlib import Path
from typing import Any

from core import AgentSet, Store

try:  # the service arrives with issue 5's core work
    from core.meetings.service import Meetings as _Meetings
    from core.meetings.service import start_meeting as _start_meeting
except ImportError:  # pragma: no cover - only before core's service lands
    _Meetings = None
    _start_meeting = None

from core.meetings.coordinator import Coordinator, MeetingConfig, validate

MEETING_LIMIT = 500


def _participants(value: Any) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [v for v in value.split(",") if v]
    return [str(v) for v in value or []]


def _list_row(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    out["participants"] = _participants(r.get("participants"))
    out.setdefault("reason", r.get("end_reason"))
    return out


async def list_meetings(store: Store, limit: int = MEETING_LIMIT) -> list[dict[str, Any]]:
    """Newest first."""
    if _Meetings is not None:
        rows = await _Meetings(store).list(limit=limit)
    else:
        rows = await store.fetchall(
            "SELECT id, topic, status, result, end_reason AS reason, rounds, max_rounds,"
            " participants, started_at, ended_at FROM meetings"
            " ORDER BY started_at DESC, id DESC LIMIT ?", (limit,))
    return [_list_row(r) for r in rows]


async def get_meeting(store: Store, meeting_id: str) -> dict[str, Any] | None:
    """One meeting with its rounds and replies, or None if there is no such meeting."""
    if _Meetings is not None:
        from core import ClawError

        try:
            m = await _Meetings(store).get(meeting_id)
        except ClawError:
            exists = await store.fetchone("SELECT id FROM meetings WHERE id=?", (meeting_id,))
            if exists is None:
                return None
            raise
        return _list_row(m)
    m = await store.fetchone("SELECT * FROM meetings WHERE id=?", (meeting_id,))
    if m is None:
        return None
    out = _list_row(m)
    rounds = await store.fetchall(
        "SELECT * FROM meeting_rounds WHERE meeting_id=? ORDER BY round", (meeting_id,))
    replies = await store.fetchall(
        "SELECT * FROM meeting_replies WHERE meeting_id=? ORDER BY round, seq", (meeting_id,))
    summaries = {s["round"]: s for s in await store.fetchall(
        "SELECT * FROM meeting_summaries WHERE meeting_id=? ORDER BY round", (meeting_id,))}
    out_rounds = []
    for r in rounds:
        rr = [dict(x) for x in replies if x["round"] == r["round"]]
        s = summaries.get(r["round"])
        out_rounds.append({
            **r, "replies": rr,
            "prompt_tokens": sum(x["prompt_tokens"] for x in rr),
            "completion_tokens": sum(x["completion_tokens"] for x in rr),
            "summary": s["text"] if s else "", "summary_tokens": s["tokens"] if s else 0,
        })
    out["rounds_detail"] = out_rounds
    out["summary"] = out_rounds[-1]["summary"] if out_rounds else ""
    return out


def rounds_of(m: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-round records, whichever shape `m` came in."""
    r = m.get("rounds")
    if isinstance(r, list):
        return r
    return list(m.get("rounds_detail") or [])


def round_count(m: dict[str, Any]) -> int:
    r = m.get("rounds")
    return len(r) if isinstance(r, list) else int(r or 0)


def reply_state(reply: dict[str, Any] | None, running: bool) -> str:
    """thinking | replied | timed out | error | absent."""
    if reply is None:
        return "thinking" if running else "absent"
    status = str(reply.get("status") or "")
    if status in ("timeout", "timed_out"):
        return "timed out"
    return status or "replied"


async def start(store: Store, agents: AgentSet, config: MeetingConfig,
                minutes_dir: str | Path | None = None) -> tuple[str, asyncio.Task[Any]]:
    """Start a meeting in this loop; returns (meeting id, the task running it)."""
    if _start_meeting is not None:
        res: Any = _start_meeting(store, agents, config, minutes_dir=minutes_dir)
        if inspect.isawaitable(res):
            res = await res
        mid, task = res
        return str(mid), task
    validate(config, agents)  # bad input raises here, before anything is written
    mid = f"mtg-{uuid.uuid4().hex[:12]}"
    task = asyncio.create_task(Coordinator(store, agents).run(
        config, meeting_id=mid, minutes_dir=minutes_dir), name=f"meeting-{mid}")
    # let the coordinator write meeting.started before the caller looks
    for _ in range(50):
        await asyncio.sleep(0.01)
        if task.done() or await store.fetchone("SELECT id FROM meetings WHERE id=?", (mid,)):
            break
    return mid, task


def _service(store: Store) -> Any:
    if _Meetings is None:
        from core import ClawError

        raise ClawError("meetings: this core cannot stop meetings or grant rounds yet")
    return _Meetings(store)


async def request_stop(store: Store, meeting_id: str, by: str, reason: str = "") -> None:
    res = _service(store).request_stop(meeting_id, by=by, reason=reason)
    if inspect.isawaitable(res):
        await res


async def grant_rounds(store: Store, meeting_id: str, n: int, by: str) -> int:
    res = _service(store).grant_rounds(meeting_id, n, by=by)
    if inspect.isawaitable(res):
        res = await res
    return int(res)
