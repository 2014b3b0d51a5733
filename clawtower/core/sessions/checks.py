"""What a session command checks before it writes (the fronts' commands in service.py,
the spawns in spawn.py): the session exists and takes the action, who owns it, the input
bounds; a refusal is recorded (`permission.refused`) and fails the command."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import events as ev
from ..errors import Conflict, NotFound, PermissionDenied
from ..events import NewEvent, Payload
from ..store.interface import WriteTx

INTERNAL_CHANNEL = "agent"  # child sessions: internal execution, never delivered outside
ACTIVE = ("idle", "queued", "running", "waiting")  # waiting: a tool call awaits approval


@dataclass(frozen=True)
class SessionLimits:
    """Loop prevention and input bounds (OpenClaw's maxSpawnDepth, maxChildrenPerAgent)."""

    max_hop: int = 1  # a child is hop 1; its own spawns (hop 2) are refused by default
    max_children: int = 100  # children one session may have in total
    max_message_chars: int = 32_000


def _ev(entity_id: str, by: str, payload: Payload, role: str = "operator",
        idem_key: str | None = None) -> NewEvent:
    return NewEvent(entity_id=entity_id, actor=by or "operator", role=role, payload=payload,
                    idem_key=idem_key)


def refuse(tx: WriteTx, target: str, action: str, reason: str, by: str,
           error: Exception | None = None) -> None:
    """Record a refusal (the one refusals list: `permission.refused`) and fail with it."""
    tx.emit(NewEvent(entity_id=target, actor=by or "operator", role="operator",
                     payload=ev.PermissionRefused(action=action, target=target, reason=reason)))
    tx.defer_error(error or PermissionDenied(f"{target}: {reason}"))


# --------------------------------------------------------------------------- sessions


def _session(tx: WriteTx, sid: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM sessions WHERE id=?", (sid,))
    if row is None:
        raise NotFound(f"session {sid!r}: no such session")
    return row


def _next_session_id(tx: WriteTx) -> str:
    row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM sessions")
    return f"S-{int(row['n']) if row else 1}"


def _open_for(tx: WriteTx, sid: str, action: str, by: str) -> dict[str, Any] | None:
    """The session if it can take `action`; None after recording a refusal."""
    row = _session(tx, sid)
    if row["status"] not in ACTIVE:
        refuse(tx, sid, action, f"the session is {row['status']}", by,
               Conflict(f"session {sid!r}: {row['status']}; it takes no more messages"))
        return None
    return row


#: what may own a session (its `created_by` is `<kind>:<id>`): only the owner sends to it
OWNER_KINDS = ("flow", "meeting", "expert-run", "acp-task")


def owned_by(session: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, id) of the protocol run that created the session and drives it, or None for
    a session that takes messages from anybody (the CLI's, the console's, a chat's)."""
    kind, sep, ref = str(session.get("created_by") or "").partition(":")
    return (kind, ref) if sep and kind in OWNER_KINDS and ref else None


def _foreign(tx: WriteTx, session: dict[str, Any], action: str, by: str) -> bool:
    """True (after recording a refusal) when `by` is neither the session's owner nor the
    session itself (its own turn may use its tools, spawns included)."""
    owner = owned_by(session)
    sid = session["id"]
    if owner is None or by in (f"{owner[0]}:{owner[1]}", sid):
        return False
    kind, ref = owner
    refuse(tx, sid, action, f"the session belongs to {kind} {ref}", by,
           Conflict(f"{sid} belongs to {kind} {ref}; use clawtower {kind} ..."))
    return True
