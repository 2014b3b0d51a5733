"""Pinned tool definitions.

A definition is a tool's description and input schema; its identity is the sha256 of their
canonical JSON. An MCP tool is callable only while the definition its server lists now is
the pinned one. The first sight of a tool, or a changed definition, requests a `tool_pin`
approval in the one approvals list (subject `tool:<server>.<tool>`, preview the definition
or its diff, context the sha256); approving it pins that hash (see the tool_pins projection).

Status of a tool, from its tool_pins row and the definition listed now:
  pinned    the listed definition is the pinned one
  pending   never pinned; a pin approval waits
  changed   a different definition was pinned; a re-pin approval waits
  rejected  the operator rejected this definition (it stays disabled until it changes, or
            until `clawtower tools pin NAME` asks again: `rerequest`)
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from .. import events as ev
from ..errors import Conflict
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..tasks.commands import request_approval
from ..tasks.permissions import Role

ACTOR = "tool-registry"
ROLE = Role.ORCHESTRATOR  # may request approvals; never decides them


def definition_of(description: str | None, input_schema: dict[str, Any] | None
                  ) -> dict[str, Any]:
    return {"description": description or "", "inputSchema": input_schema or {}}


def canonical(definition: dict[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_of(definition: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(definition).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class PinState:
    status: str  # pinned | pending | changed | rejected
    approval_id: str | None = None
    sha256: str = ""
    pinned_sha256: str | None = None


def state_from_row(row: dict[str, Any] | None, sha: str) -> PinState | None:
    """What the stored row says about the definition with hash `sha` (None: never seen it)."""
    if row is None:
        return None
    pinned = row["pinned_sha256"]
    if pinned == sha:
        return PinState("pinned", None, sha, pinned)
    if row["seen_sha256"] != sha:
        return None  # the store knows another definition: this one is news
    status = row["approval_status"]
    if status == "pending":
        return PinState("changed" if pinned else "pending", row["approval_id"], sha, pinned)
    if status == "rejected":
        return PinState("rejected", row["approval_id"], sha, pinned)
    return None  # withdrawn or never requested: ask again


def _pretty(definition: dict[str, Any]) -> str:
    return json.dumps(definition, indent=2, sort_keys=True, ensure_ascii=False)


def observe(tx: WriteTx, name: str, server: str, definition: dict[str, Any],
            auto_pin: bool) -> PinState:
    """The registry listed `name` with `definition`: record news, request a pin when it is
    not pinned. One write transaction, so two processes listing at once ask once."""
    sha = sha256_of(definition)
    row = tx.one("SELECT * FROM tool_pins WHERE name=?", (name,))
    known = state_from_row(row, sha)
    if known is not None and row is not None and row["seen_sha256"] == sha:
        return known  # nothing new
    pinned_sha = row["pinned_sha256"] if row else None
    if row is not None and row["approval_status"] == "pending" and row["approval_id"]:
        # the definition moved on under a pending request: that request is moot
        tx.emit(NewEvent(entity_id=row["approval_id"], actor=ACTOR, role=ROLE.value,
                         payload=ev.ApprovalDecided(
                             decision="withdrawn",
                             reason=f"{name}: the definition changed again before a decision")))
    if pinned_sha == sha:  # back to the pinned definition
        tx.emit(NewEvent(entity_id=name, actor=ACTOR, role=ROLE.value,
                         payload=ev.ToolDefinitionSeen(server=server, sha256=sha,
                                                       definition=definition,
                                                       previous_sha256=pinned_sha)))
        return PinState("pinned", None, sha, sha)
    if auto_pin and pinned_sha is None:  # trust on first use; a change still needs a human
        tx.emit(NewEvent(entity_id=name, actor=ACTOR, role=ROLE.value,
                         payload=ev.ToolDefinitionSeen(server=server, sha256=sha,
                                                       definition=definition,
                                                       previous_sha256=pinned_sha)))
        tx.emit(NewEvent(entity_id=name, actor=ACTOR, role=ROLE.value,
                         payload=ev.ToolPinned(server=server, sha256=sha, definition=definition,
                                               how="auto")))
        return PinState("pinned", None, sha, sha)
    return _request_pin(tx, name, server, definition, sha, row)


def rerequest(tx: WriteTx, name: str, server: str, definition: dict[str, Any]) -> PinState:
    """Ask again for a definition the operator rejected (or whose request was withdrawn): a
    new `tool_pin` approval. Conflict when it is pinned or a request already waits."""
    sha = sha256_of(definition)
    row = tx.one("SELECT * FROM tool_pins WHERE name=?", (name,))
    state = state_from_row(row, sha)
    if state is not None and state.status == "pinned":
        raise Conflict(f"tool {name!r}: already pinned (sha256 {sha[:12]})")
    if state is not None and state.status in ("pending", "changed"):
        raise Conflict(f"tool {name!r}: a pin approval already waits: {state.approval_id}"
                       f" (`clawtower approve {state.approval_id}`)")
    if row is not None and row["seen_sha256"] != sha:
        # the server moved on since the store last saw it: that is news, observe it
        return observe(tx, name, server, definition, auto_pin=False)
    return _request_pin(tx, name, server, definition, sha, row)


def _request_pin(tx: WriteTx, name: str, server: str, definition: dict[str, Any], sha: str,
                 row: dict[str, Any] | None) -> PinState:
    """A `tool_pin` approval for `definition` (a diff against the pinned one, if any)."""
    pinned_sha = row["pinned_sha256"] if row else None
    if pinned_sha is not None and row is not None:
        old = json.loads(row["pinned_definition"] or "{}")
        preview = "".join(difflib.unified_diff(
            _pretty(old).splitlines(keepends=True), _pretty(definition).splitlines(keepends=True),
            fromfile=f"{name} (pinned {pinned_sha[:12]})", tofile=f"{name} (now {sha[:12]})"))
        title = f"Re-pin tool {name}: its definition changed"
        prompt = (f"The MCP server {server!r} changed the description or input schema of"
                  f" {name}. It is disabled until this definition is approved.")
    else:
        preview = _pretty(definition)
        title = f"Pin tool {name} (first seen)"
        prompt = (f"Allow agents to see and call {name} (MCP server {server!r}) with this"
                  " description and input schema?")
    approval_id = request_approval(
        tx, kind="tool_pin", subject=f"tool:{name}", title=title, prompt=prompt,
        context={"sha256": sha, "tool": name, "server": server,
                 "previous_sha256": pinned_sha},
        preview=preview, actor=ACTOR, role=ROLE)
    tx.emit(NewEvent(entity_id=name, actor=ACTOR, role=ROLE.value,
                     payload=ev.ToolDefinitionSeen(server=server, sha256=sha,
                                                   definition=definition,
                                                   approval_id=approval_id,
                                                   previous_sha256=pinned_sha)))
    return PinState("changed" if pinned_sha else "pending", approval_id, sha, pinned_sha)


async def pin_rows(store: Store) -> dict[str, dict[str, Any]]:
    rows = await store.fetchall("SELECT * FROM tool_pins")
    return {str(r["name"]): r for r in rows}
