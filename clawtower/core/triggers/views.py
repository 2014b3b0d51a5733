"""What the CLI and the console show and do: the triggers with their next fire, queue
depth per lane and last result; the history; the dead-letter queue and escalations.
One API for both fronts."""

from __future__ import annotations

from typing import Any

from ..errors import Conflict, NotFound, ValidationError
from ..store.interface import Store
from . import queue as q
from .catalog import Catalog
from .intake import accept
from .overview import AUTH_WINDOW_S as AUTH_WINDOW_S  # re-exported: one API for both fronts
from .overview import overview as overview


async def history(store: Store, expert: str | None = None, trigger: str | None = None,
                  limit: int = 50, status: str | None = None) -> list[dict[str, Any]]:
    where, params = [], []
    if expert:
        where.append("expert=?")
        params.append(expert)
    if trigger:
        where.append("trigger=?")
        params.append(trigger)
    if status:
        where.append("status=?")
        params.append(status)
    sql = ("SELECT * FROM trigger_items" + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY seq DESC LIMIT ?")
    rows = await store.fetchall(sql, (*params, limit))
    return [q.decode_row(r) for r in rows]


async def auth_failures(store: Store, limit: int = 50) -> list[dict[str, Any]]:
    """The latest refused webhook credentials and throttle episodes, newest first (with the
    detail their callers were not told)."""
    return await store.fetchall(
        "SELECT * FROM trigger_auth_failures ORDER BY seq DESC LIMIT ?", (limit,))


async def item(store: Store, item_id: str) -> dict[str, Any]:
    row = await store.fetchone("SELECT * FROM trigger_items WHERE id=?", (item_id,))
    if row is None:
        raise NotFound(f"trigger invocation {item_id!r}: no such invocation")
    return q.decode_row(row)


async def dead_letters(store: Store, limit: int = 200) -> list[dict[str, Any]]:
    return await history(store, status="dead_letter", limit=limit)


async def escalations(store: Store, limit: int = 200) -> list[dict[str, Any]]:
    return await history(store, status="escalated", limit=limit)


async def fire(store: Store, expert: str, trigger: str, payload: dict[str, Any], *,
               by: str, catalog: Catalog | None = None) -> dict[str, Any]:
    """Fire a trigger by hand (any type) with `payload`: the same intake as a webhook."""
    for field, value in (("expert", expert), ("trigger", trigger)):
        if not value.strip():
            raise ValidationError(f"triggers fire: {field}: empty (see clawtower triggers list)")
    spec = (catalog or Catalog()).get(expert, trigger)
    if spec is None:
        raise NotFound(f"trigger {expert + '/' + trigger!r}: no such trigger (clawtower"
                       " triggers list)")
    if spec.inactive:
        raise Conflict(f"trigger {expert + '/' + trigger!r}: inactive: {spec.inactive}")
    try:
        return await accept(store, spec, payload, "manual", actor=by)
    except q.BadEvent as exc:
        raise ValidationError(f"trigger {expert}/{trigger}: {exc}") from None


async def retry_dead_letter(store: Store, item_id: str, by: str) -> None:
    await store.execute(lambda tx: q.deadletter_retry_in(tx, item_id, by))


async def drop_dead_letter(store: Store, item_id: str, by: str, reason: str = "") -> None:
    await store.execute(lambda tx: q.deadletter_drop_in(tx, item_id, by, reason))


async def resolve_escalation(store: Store, item_id: str, by: str) -> None:
    await store.execute(lambda tx: q.resolve_escalation_in(tx, item_id, by))
