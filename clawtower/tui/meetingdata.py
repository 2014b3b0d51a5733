"""Meetings as the console reads them, through core's `Meetings` service (no Textual here)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawtower import core  # its names load on first use: the console paints before them

if TYPE_CHECKING:
    from clawtower.core import AgentSet, MeetingConfig, Store

MEETING_LIMIT = 500


async def list_meetings(store: Store, limit: int = MEETING_LIMIT) -> list[dict[str, Any]]:
    """Newest first."""
    return await core.Meetings(store).list(limit=limit)


async def get_meeting(store: Store, meeting_id: str) -> dict[str, Any] | None:
    """One meeting with its rounds and replies, or None if there is no such meeting."""
    try:
        meeting = await core.Meetings(store).get(meeting_id)
    except core.NotFound:
        return None
    # tokens and cost per agent (the `usage` projection; the meeting id is the subject)
    meeting["usage"] = await store.fetchall(
        "SELECT * FROM usage WHERE subject=? ORDER BY agent, model", (meeting_id,))
    return meeting


def rounds_of(m: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-round records of a meeting from `get_meeting` ([] for a list row)."""
    r = m.get("rounds")
    return r if isinstance(r, list) else []


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
    return await core.start_meeting(store, agents, config, minutes_dir=minutes_dir)


async def request_stop(store: Store, meeting_id: str, by: str, reason: str = "") -> bool:
    """True when the meeting ended at once (orphaned: nobody was left to finish a round)."""
    return await core.Meetings(store).request_stop(meeting_id, by=by, reason=reason)


async def grant_rounds(store: Store, meeting_id: str, n: int, by: str) -> int:
    return await core.Meetings(store).grant_rounds(meeting_id, n, by=by)
