"""Channel triggers: a message sent to a session (`session.inbound`) whose session channel
matches the trigger's `channel` (any channel when unset) and whose text matches its `match`
regular expression (any text when unset) starts the trigger's process.

The payload is normalised as the spec asks: `sender_id`, `message_text`, `channel_name`,
plus `session_id` and `msg_id`. Each message fires a trigger at most once (idem_key
`channel:<expert>/<trigger>:<msg_id>`), however many servers scan. The scan's position is
store state (`trigger.channel_scanned`): messages that arrive while no server runs are
picked up at the next start; a store's first server starts from the end of the log.
"""

from __future__ import annotations

import asyncio
import re
from functools import partial
from typing import Any

from ..errors import ClawError
from ..events import NewEvent
from ..store.interface import Store
from ..tasks.permissions import Role
from . import events as tev
from . import queue as q
from .catalog import Catalog
from .intake import accept_prepared_in
from .mainsession import SENDER_PREFIX
from .spec import TriggerSpec

CURSOR = "channels"
BATCH = 500


def matches(spec: TriggerSpec, channel: str, text: str) -> bool:
    if spec.channel is not None and spec.channel != channel:
        return False
    if spec.match is not None:
        try:
            return re.search(spec.match, text) is not None
        except re.error:
            return False
    return True


class ChannelWatcher:
    def __init__(self, store: Store, *, catalog: Catalog | None = None,
                 poll_s: float = 0.5) -> None:
        self.store = store
        self.catalog = catalog or Catalog()
        self.poll_s = poll_s
        self.errors: list[str] = []

    async def cursor(self) -> int:
        row = await self.store.fetchone("SELECT seq FROM trigger_cursor WHERE name=?",
                                        (CURSOR,))
        if row is not None:
            return int(row["seq"])
        seq = await self.store.last_seq()
        await self._save(seq)
        return seq

    async def _save(self, seq: int) -> None:
        await self.store.execute(lambda tx: tx.emit(NewEvent(
            entity_id=CURSOR, actor=q.ACTOR, role=Role.SYSTEM.value,
            payload=tev.ChannelScanned(seq=seq))))

    async def scan(self, after: int) -> tuple[int, list[dict[str, Any]]]:
        """Fire for the inbound messages after `after`; returns the new position (the
        cursor is saved only when messages were looked at: no write per idle tick)."""
        top = await self.store.last_seq()
        rows = await self.store.fetchall(
            # a message: a `session.inbound`, or the first message folded into a
            # `session.created` (a spawned child's task, a flow node's: issue 24.2)
            "SELECT e.seq, e.entity_id AS session_id, json_extract(e.payload, r.m) AS msg_id,"
            " json_extract(e.payload, r.t) AS text, json_extract(e.payload, r.s) AS sender,"
            " s.channel FROM events e JOIN (SELECT 'session.inbound' AS type, '$.msg_id' AS m,"
            " '$.text' AS t, '$.sender' AS s UNION ALL SELECT 'session.created',"
            " '$.inbound.msg_id', '$.inbound.text', '$.inbound.sender') r ON r.type = e.type"
            " LEFT JOIN sessions s ON s.id = e.entity_id WHERE e.seq > ? AND"
            " json_extract(e.payload, r.m) IS NOT NULL ORDER BY e.seq LIMIT ?", (after, BATCH))
        if not rows:
            return max(after, top), []
        specs = [s for s in self.catalog.of_type("channel") if not s.inactive]
        fired = []
        for r in rows:
            if str(r["sender"] or "").startswith(SENDER_PREFIX):
                continue  # a trigger's own message to a main session never fires triggers
            for spec in specs:
                channel, text = str(r["channel"] or ""), str(r["text"] or "")
                if not matches(spec, channel, text):
                    continue
                payload = {"sender_id": r["sender"] or "", "message_text": text,
                           "channel_name": channel, "session_id": r["session_id"],
                           "msg_id": r["msg_id"]}
                p = q.prepare(spec, payload, "channel", strict=False)
                p.source_seq = int(r["seq"])
                p.idem_key = f"channel:{spec.expert}/{spec.name}:{r['msg_id']}"
                try:
                    out = await self.store.execute(partial(accept_prepared_in, p=p))
                except (ClawError, q.BadEvent) as exc:
                    self.errors.append(f"{spec.expert}/{spec.name}: {exc}")
                    continue
                if out["status"] != "replayed":
                    fired.append({**out, "expert": spec.expert, "trigger": spec.name})
        last = int(rows[-1]["seq"]) if len(rows) == BATCH else max(top, int(rows[-1]["seq"]))
        await self._save(last)
        return last, fired

    async def run(self, stop: asyncio.Event) -> None:
        pos = await self.cursor()
        while not stop.is_set():
            try:
                pos, _ = await self.scan(pos)
            except ClawError as exc:
                self.errors.append(str(exc))
            waiter = asyncio.ensure_future(self.store.wait_for_change(pos, self.poll_s))
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            stopper.cancel()
