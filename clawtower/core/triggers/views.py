"""What the CLI and the console show and do: the triggers with their next fire, queue
depth per lane and last result; the history; the dead-letter queue and escalations.
One API for both fronts."""

from __future__ import annotations

import time
from typing import Any

from ..errors import Conflict, NotFound, ValidationError
from ..store.interface import Store
from . import queue as q
from .catalog import Catalog
from .cron import next_fire
from .intake import accept

AUTH_WINDOW_S = 3600.0  # `triggers list` and the console count refused credentials this far back


async def overview(store: Store, catalog: Catalog | None = None,
                   now: float | None = None) -> list[dict[str, Any]]:
    cat = catalog or Catalog()
    now = time.time() if now is None else now
    rows = await store.fetchall(
        "SELECT expert, trigger, lane, status, count(*) AS n FROM trigger_items WHERE status"
        " IN ('queued', 'retry', 'running', 'paused') GROUP BY expert, trigger, lane, status")
    last = await store.fetchall(
        "SELECT t.expert, t.trigger, t.id, t.status, t.error, t.ended_at FROM trigger_items t"
        " JOIN (SELECT expert, trigger, max(seq) AS s FROM trigger_items WHERE status NOT IN"
        " ('queued', 'retry', 'running', 'paused', 'skipped') GROUP BY expert, trigger) m"
        " ON m.expert = t.expert AND m.trigger = t.trigger AND m.s = t.seq")
    # a skipped duplicate never ran: "last" is the last invocation that did; the skipped
    # ones are counted on their own
    skipped = {(r["expert"], r["trigger"]): int(r["n"]) for r in await store.fetchall(
        "SELECT expert, trigger, count(*) AS n FROM trigger_items WHERE status='skipped'"
        " GROUP BY expert, trigger")}
    cron = {(r["expert"], r["trigger"]): float(r["last_fire"]) for r in await store.fetchall(
        "SELECT expert, trigger, last_fire FROM trigger_cron")}
    lasts = {(r["expert"], r["trigger"]): r for r in last}
    fired = {(r["expert"], r["trigger"]): float(r["at"]) for r in await store.fetchall(
        "SELECT expert, trigger, max(received_at) AS at FROM trigger_items"
        " GROUP BY expert, trigger")}
    auth = {(r["expert"], r["trigger"]): r for r in await store.fetchall(
        "SELECT expert, trigger, sum(kind='failed') AS failed, sum(kind='throttled') AS"
        " throttled, count(DISTINCT address) AS addresses FROM trigger_auth_failures"
        " WHERE at >= ? GROUP BY expert, trigger", (now - AUTH_WINDOW_S,))}
    out = []
    for s in cat.all():
        k = (s.expert, s.name)
        lanes: dict[str, dict[str, int]] = {}
        for r in rows:
            if (r["expert"], r["trigger"]) == k:
                lane = str(r["lane"]).removeprefix(f"{s.expert}/{s.name}")
                lane = lane.removeprefix("/key:") if lane.startswith("/key:") else (
                    "(parallel)" if lane.startswith("/item:") else "(serial)")
                lanes.setdefault(lane, {})[r["status"]] = \
                    lanes.get(lane, {}).get(r["status"], 0) + int(r["n"])
        nxt = None
        if s.type == "cron":
            try:
                nxt = next_fire(s, max(now, cron.get(k, now)))
            except (ValueError, KeyError):
                nxt = None
        lr = lasts.get(k)
        af = auth.get(k)
        out.append({"expert": s.expert, "trigger": s.name, "type": s.type,
                    "process": s.process, "mode": s.mode, "key": s.concurrency_key,
                    "dedupe_key": s.dedupe_key, "expr": s.expr, "tz": s.tz,
                    "inactive": s.inactive,
                    "next_fire": nxt, "last_fire": cron.get(k),
                    # the latest event of any source (webhook, cron, channel, by hand)
                    "last_fired": fired.get(k, cron.get(k)),
                    "queue": lanes, "depth": sum(sum(v.values()) for v in lanes.values()),
                    "skipped": skipped.get(k, 0),
                    "auth_failures_1h": int(af["failed"]) if af else 0,
                    "auth_throttled_1h": int(af["throttled"]) if af else 0,
                    "auth_addresses_1h": int(af["addresses"]) if af else 0,
                    "last": None if lr is None else {"id": lr["id"], "status": lr["status"],
                                                     "error": lr["error"],
                                                     "at": lr["ended_at"]}})
    return out


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
