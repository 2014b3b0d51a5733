"""`triggers list` and the console's triggers screen: every installed expert's triggers
with their next fire, queue depth per lane and last result. Apart from views.py (which
re-exports it) so that the read loads the packages' parser, the cron library and the queue
only when an expert package is installed (issue 39: a read command starts fast)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .. import config
from ..store.interface import Store

if TYPE_CHECKING:
    from .catalog import Catalog

AUTH_WINDOW_S = 3600.0  # `triggers list` and the console count refused credentials this far back


async def overview(store: Store, catalog: Catalog | None = None,
                   now: float | None = None) -> list[dict[str, Any]]:
    if catalog is None and not _any_package():
        return []  # no expert installed, no trigger: nothing to parse (or import) to say so
    from .catalog import Catalog
    from .cron import next_fire

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


def _any_package() -> bool:
    """Whether an expert package is installed (experts/home.installed()'s test, by stat)."""
    d = config.home() / "experts"
    try:
        return any((p / "expert.yaml").is_file() for p in d.iterdir())
    except OSError:
        return False
