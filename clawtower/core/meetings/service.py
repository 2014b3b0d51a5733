"""The meetings API the fronts use (CLI, console): list, get, stop, grant more rounds, start.

Reads come from the projections; stop and grant are events, so they work from any process:
the coordinator reads the meeting row before each round (see Coordinator.proceed). A stop
that arrives during a round takes effect when that round has finished.

A running meeting whose process died is `orphaned` (its lease lapsed, or its process is seen
gone from this host): `adopt` continues it here; a stop ends it at once, since nobody is
left to finish its round.

Reply statuses are reported as 'replied' | 'timeout' | 'error' (the event says timed_out).
An agent without a reply in the current round of a running meeting is still thinking.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import Conflict, NotFound, ValidationError
from ..limits import MAX_MEETING_ROUNDS
from ..liveness import holder_gone, unheld
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role

# The coordinator, the leases and the meeting events (their models) load with the first
# write: `meeting list` and `show` read tables only (start-up: BENCHMARKS.md).
if TYPE_CHECKING:
    from ..agents.registry import AgentSet
    from .config import MeetingConfig, MeetingOutcome

_STATUS = {"timed_out": "timeout"}
# a meeting row with its lease's holder (no row: a meeting from before meetings had leases)
_WITH_LEASE = ("SELECT m.*, l.owner AS lease_owner, l.expires_at AS lease_expires,"
               " l.released AS lease_released FROM meetings m"
               " LEFT JOIN leases l ON l.name = 'meeting:' || m.id")


def orphaned(row: dict[str, Any], now: float) -> bool:
    """A running meeting nobody runs: its lease is gone, lapsed, or held by a dead process."""
    if row["status"] != "running":
        return False
    return unheld(row.get("lease_owner"), row.get("lease_released"), row.get("lease_expires"),
                  now)


def _meeting(row: dict[str, Any], now: float) -> dict[str, Any]:
    return {
        "id": row["id"],
        "topic": row["topic"],
        "status": row["status"],
        "result": row["result"],
        "reason": row["end_reason"],
        "detail": row["detail"],
        "rounds": row["rounds"],
        "max_rounds": row["max_rounds"],
        "participants": json.loads(row["participants"]),
        "summarizer": row["summarizer"],
        "summary_tokens": row["summary_tokens"],
        "started_at": row["started_at"],
        "ended_at": row["ended_at"],
        "stop_requested": bool(row["stop_requested"]),
        "stop_by": row["stop_by"],
        "stop_reason": row["stop_reason"],
        "last_seq": row["last_seq"],
        "orphaned": orphaned(row, now),
    }


class Meetings:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def list(self, limit: int = 500) -> list[dict[str, Any]]:
        """Newest first."""
        rows = await self.store.fetchall(
            _WITH_LEASE + " ORDER BY m.started_at DESC, m.last_seq DESC LIMIT ?", (limit,))
        now = self.store.clock.now()
        return [_meeting(r, now) for r in rows]

    async def get(self, meeting_id: str) -> dict[str, Any]:
        meeting, rounds, replies, summaries = await self.store.fetch_many([
            (_WITH_LEASE + " WHERE m.id=?", (meeting_id,)),
            ("SELECT * FROM meeting_rounds WHERE meeting_id=? ORDER BY round", (meeting_id,)),
            ("SELECT * FROM meeting_replies WHERE meeting_id=? ORDER BY round, seq",
             (meeting_id,)),
            ("SELECT * FROM meeting_summaries WHERE meeting_id=? ORDER BY round", (meeting_id,)),
        ])
        if not meeting:
            raise NotFound(f"meeting {meeting_id!r}: no such meeting")
        out = _meeting(meeting[0], self.store.clock.now())
        out["minutes_path"] = meeting[0]["minutes_path"]
        by_round: dict[int, list[dict[str, Any]]] = {}
        for r in replies:
            by_round.setdefault(r["round"], []).append({
                "agent": r["agent"],
                "status": _STATUS.get(r["status"], r["status"]),
                "stance": r["stance"],
                "why": r["why"],
                "raw": r["raw"],
                "prompt_tokens": r["prompt_tokens"],
                "completion_tokens": r["completion_tokens"],
                "elapsed_s": r["elapsed_s"],
            })
        sums = {s["round"]: s for s in summaries}
        out["rounds"] = []
        for rnd in rounds:
            n = rnd["round"]
            got = by_round.get(n, [])
            s = sums.get(n)
            out["rounds"].append({
                "round": n,
                "consensus": rnd["consensus"],
                "reason": rnd["reason"],
                "agree": rnd["agree"],
                "disagree": rnd["disagree"],
                "neutral": rnd["neutral"],
                "summary_in_tokens": rnd["summary_in_tokens"],
                "prompt_tokens": sum(r["prompt_tokens"] for r in got),
                "completion_tokens": sum(r["completion_tokens"] for r in got),
                "summary": s["text"] if s else None,
                "summary_tokens": s["tokens"] if s else None,
                "started_at": rnd["started_at"],
                "ended_at": rnd["ended_at"],
                "replies": got,
            })
        out["summary"] = summaries[-1]["text"] if summaries else ""
        return out

    async def request_stop(self, meeting_id: str, *, by: str, reason: str = "") -> bool:
        """Ask the meeting to stop after its current round. An orphaned meeting has nobody
        to finish that round: it ends now (stopped). Returns True when it ended now."""
        from .. import leases
        from ..events import NewEvent
        from . import events as mev
        from .consensus import Consensus
        from .coordinator import ACTOR, lease_name

        def command(tx: WriteTx) -> bool:
            row = _open_meeting(tx, meeting_id, "stop")
            tx.emit(NewEvent(entity_id=meeting_id, actor=by, role=Role.OPERATOR.value,
                             payload=mev.StopRequested(by=by, reason=reason)))
            name = lease_name(meeting_id)
            if not leases._acquire(tx, name, by, 1.0, holder_gone=holder_gone):
                return False  # its process is alive: it stops after the round under way
            done = tx.one("SELECT max(round) AS n FROM meeting_summaries WHERE meeting_id=?",
                          (meeting_id,))
            rounds = int(done["n"] or 0) if done else 0
            stances = {r["agent"]: r["stance"] for r in tx.all(
                "SELECT agent, stance FROM meeting_replies WHERE meeting_id=? AND round=?",
                (meeting_id, rounds))}
            why = f": {reason}" if reason else ""
            tx.emit(NewEvent(entity_id=meeting_id, actor=ACTOR, role=Role.ORCHESTRATOR.value,
                             payload=mev.MeetingEnded(
                                 result=Consensus.NO.value, reason="stopped", rounds=rounds,
                                 detail=f"stopped by {by} after {rounds} round(s), its process"
                                        f" gone (orphaned in round {row['rounds']}){why}",
                                 stances=stances)))
            leases.release_in(tx, name, by)
            return True

        return bool(await self.store.execute(command))

    async def adopt(self, agents: AgentSet, meeting_id: str, *,
                    minutes_dir: str | Path | None = None) -> MeetingOutcome:
        """Continue an orphaned meeting in this process (see Coordinator.adopt)."""
        from .coordinator import Coordinator

        return await Coordinator(self.store, agents).adopt(meeting_id, minutes_dir=minutes_dir)

    async def grant_rounds(self, meeting_id: str, n: int, *, by: str) -> int:
        from ..events import NewEvent
        from . import events as mev

        if n < 1:
            raise ValidationError(f"meeting {meeting_id!r}: grant at least 1 round, got {n}")
        if n > MAX_MEETING_ROUNDS:
            raise ValidationError(f"meeting {meeting_id!r}: grant at most {MAX_MEETING_ROUNDS}"
                                  f" rounds at once (MAX_MEETING_ROUNDS), got {n}")

        def command(tx: WriteTx) -> int:
            row = _open_meeting(tx, meeting_id, "grant rounds to")
            total = int(row["max_rounds"]) + n
            tx.emit(NewEvent(entity_id=meeting_id, actor=by, role=Role.OPERATOR.value,
                             payload=mev.RoundsGranted(by=by, n=n, max_rounds=total)))
            return total

        return await self.store.execute(command)


def _open_meeting(tx: WriteTx, meeting_id: str, what: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM meetings WHERE id=?", (meeting_id,))
    if row is None:
        raise NotFound(f"meeting {meeting_id!r}: no such meeting")
    if row["status"] == "ended":
        raise Conflict(f"meeting {meeting_id!r}: already ended ({row['end_reason']});"
                       f" cannot {what} it")
    return row


async def start_meeting(
    store: Store,
    agents: AgentSet,
    config: MeetingConfig,
    *,
    minutes_dir: str | Path | None = None,
    meeting_id: str | None = None,
) -> tuple[str, asyncio.Task[MeetingOutcome]]:
    """Validate, record meeting.started, and run the rounds in a task; return (id, task)."""
    from .config import validate
    from .coordinator import Coordinator

    validate(config, agents)
    coordinator = Coordinator(store, agents)
    mid = await coordinator.open(config, meeting_id=meeting_id)
    task = asyncio.create_task(coordinator.proceed(mid, config, minutes_dir=minutes_dir),
                               name=f"meeting {mid}")
    return mid, task


__all__ = ["Meetings", "start_meeting"]
