"""Going back in a session (issue 37): a fork of it at the end of one of its turns.

The new session (`session.forked`) gets the origin's transcript up to that turn's end, each
message copied as a `session.message` naming its original (`meta.fork`), read from the log
at that point (`history.py`), never from today's projections. A copied turn's tool calls and
approvals are history: the new session has no job, no approval and no backlog until it is
sent a message, and a fork of a session waiting for an approval does not wait for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..events import NewEvent
from ..ids import new_id
from ..store.interface import WriteTx
from . import events as sev
from .history import Log, check_turn, load
from .registry import spec_by_ref


def fork_in(tx: WriteTx, row: dict[str, Any], at: int, *, agent: str | None, reason: str,
            by: str, new_session_id: Callable[[WriteTx], str]) -> tuple[str, Log]:
    """Write the fork of session `row` at the end of its turn `at` (checked first: a refusal
    writes nothing; the caller checked who owns it). Returns the new session's id and the
    origin's log."""
    sid = str(row["id"])
    log = load(tx.all, sid)
    end = int(check_turn(log, at)["end_seq"])
    spec = spec_by_ref(tx, agent) if agent else None
    new = new_session_id(tx)
    title = f"{row['title'] or sid} (fork of {sid} at turn {at})"
    created = sev.SessionCreated(
        title=title[:120], agent_id=spec.agent_id if spec else row["agent_id"],
        provider_override=row["provider_override"], model_override=row["model_override"],
        channel="cli" if row["channel"] == "agent" else row["channel"],
        trace_id=new_id("tr"), created_by=by)
    tx.emit(NewEvent(entity_id=new, actor=by or "operator", role="operator",
                     payload=sev.SessionForked(origin=sid, at_turn=at, at_seq=end,
                                               reason=reason, by=by, session=created)))
    for m in log.messages:
        if m["seq"] > end:
            break
        meta = {**m["meta"], "fork": {"from": sid, "msg_id": m["msg_id"],
                                      "turn": log.turn_of(m["seq"])}}
        tx.emit(NewEvent(entity_id=new, actor=by or "operator", role="operator",
                         payload=sev.SessionMessage(msg_id=new_id("m"), role=m["role"],
                                                    text=m["text"], meta=meta)))
    return new, log



__all__ = ["fork_in"]
