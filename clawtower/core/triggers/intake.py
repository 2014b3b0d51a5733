"""Accepting events: the one durable append every trigger type goes through."""

from __future__ import annotations

from typing import Any

from ..store.interface import Store, WriteTx
from . import queue as q
from .spec import TriggerSpec


async def accept(store: Store, spec: TriggerSpec, payload: dict[str, Any], source: str, *,
                 strict: bool = True, idem_key: str | None = None,
                 actor: str = q.ACTOR, idempotency: str | None = None,
                 hold: bool | None = None) -> dict[str, Any]:
    """Queue (or skip as a duplicate) one event for `spec`; BadEvent if it cannot be keyed.
    With `idem_key`, a second accept of the same key from any process answers
    {"status": "replayed"} and writes nothing. `idempotency` (a sender's Idempotency-Key)
    is the dedupe key when the trigger declares none: a repeat within the trigger's dedupe
    window is recorded skipped, never run. `hold=False`: on a storage fault raise at once
    (a webhook answers 503, nothing queued) even while an engine holds the store's writes."""
    p = q.prepare(spec, payload, source, strict=strict)
    p.idem_key = idem_key
    if idempotency is not None and p.dedupe is None:
        p.dedupe = f"idempotency:{idempotency}"
    return await store.execute(lambda tx: accept_prepared_in(tx, p, actor), hold=hold)


def accept_prepared_in(tx: WriteTx, p: q.Prepared, actor: str = q.ACTOR) -> dict[str, Any]:
    if p.idem_key is not None and tx.one("SELECT 1 FROM events WHERE idem_key=?",
                                         (p.idem_key,)) is not None:
        return {"id": None, "status": "replayed"}
    return q.accept_in(tx, p, actor)
