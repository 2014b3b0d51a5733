"""`session: main` triggers: the event goes to the expert's main session, one long-running
session per expert (an ordinary expert chat session, titled `<expert> (main)`, on the
`trigger` channel), instead of an isolated run of the process.

The invocation is done once the message is in the session's inbox; the session worker runs
the turn like any message. A worker that died after sending is recovered without sending
twice: the message carries the invocation as its sender (`trigger:<id>`).
"""

from __future__ import annotations

import json
from typing import Any

from ..store.interface import Store
from .spec import TriggerSpec

CHANNEL = "trigger"
SENDER_PREFIX = "trigger:"
MAX_PAYLOAD_CHARS = 8_000


def title(expert: str) -> str:
    return f"{expert} (main)"


async def main_session(store: Store, expert: str, by: str) -> str:
    """The expert's main session: the oldest one with its title on the trigger channel,
    opened (as `expert chat` opens one) the first time."""
    from ..experts.chat import open_chat

    row = await store.fetchone("SELECT id FROM sessions WHERE title=? AND channel=? ORDER BY"
                               " num LIMIT 1", (title(expert), CHANNEL))
    if row is not None:
        return str(row["id"])
    return await open_chat(store, expert, title=title(expert), channel=CHANNEL, by=by)


def message(spec: TriggerSpec, item: dict[str, Any]) -> str:
    payload = json.dumps(item.get("payload"), sort_keys=True)
    if len(payload) > MAX_PAYLOAD_CHARS:
        payload = payload[:MAX_PAYLOAD_CHARS] + " …(cut)"
    return (f"Trigger `{spec.name}` fired ({item.get('source')} event {item['id']}). Follow"
            f" the process `{spec.process}` with these inputs:"
            f" {json.dumps(item.get('inputs') or {}, sort_keys=True)}\n\nEvent payload:"
            f" {payload}")


async def enqueue(store: Store, spec: TriggerSpec, item: dict[str, Any], by: str
                  ) -> dict[str, Any]:
    """Send the event to the main session (once); the envelope the worker records."""
    from ..sessions.service import Sessions

    sender = f"{SENDER_PREFIX}{item['id']}"
    sent = await store.fetchone("SELECT session_id, msg_id FROM session_inbox WHERE sender=?",
                                (sender,))
    if sent is None:
        sid = await main_session(store, spec.expert, by)
        out = await Sessions(store).send(sid, message(spec, item), sender=sender)
        if not out:
            return {"ok": False, "error": {"type": "runtime_error",
                                           "message": f"session {sid} refused the message"}}
        sent = {"session_id": sid, "msg_id": out.get("msg_id")}
    return {"ok": True, "status": "ok",
            "output": [{"session": sent["session_id"], "message": sent["msg_id"]}]}
