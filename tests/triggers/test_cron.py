"""Cron triggers under a controllable clock: 5- and 6-field expressions in an IANA zone,
no double fire with several schedulers on one store, the missed-fire policy, next fire."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from clawtower.core.clock import FakeClock
from clawtower.core.experts import home
from clawtower.core.store import open_store
from clawtower.core.triggers import views
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.cron import Scheduler, due, next_fire
from tests.helpers.hook_expert import install_hook_expert

BERLIN = ZoneInfo("Europe/Berlin")


def at(*args: int) -> float:
    return datetime(*args, tzinfo=BERLIN).timestamp()  # type: ignore[misc]


def tick_spec() -> Any:
    s = Catalog().get("hook-expert", "tick")
    assert s is not None
    return s


def test_next_fire_is_computed_in_the_trigger_time_zone(hook_home: Path) -> None:
    s = tick_spec()  # "0 8 * * 1-5" Europe/Berlin
    friday_9 = at(2026, 3, 27, 9, 0)
    nxt = next_fire(s, friday_9)
    assert datetime.fromtimestamp(nxt, BERLIN) == datetime(2026, 3, 30, 8, 0, tzinfo=BERLIN)
    # across the DST change (29 March): still 08:00 local, one hour less in UTC
    before = next_fire(s, at(2026, 3, 26, 9, 0))
    assert nxt - before == 3 * 86400 - 3600  # Friday 08:00 to Monday 08:00


async def test_fires_once_per_time_with_two_schedulers_and_coalesces_missed(
        tmp_path: Path, hook_home: Path) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "sec", cron="*/10 * * * * *")  # 6 fields: seconds first
    clock = FakeClock(start=at(2026, 5, 4, 12, 0, 1))
    db = str(tmp_path / "c.db")
    s1, s2 = await open_store(db, clock=clock), await open_store(db, clock=clock)
    try:
        a, b = Scheduler(s1, clock=clock), Scheduler(s2, clock=clock)
        assert await a.tick() == [] and await b.tick() == []  # first sight: starts from now
        clock.advance(9)  # 12:00:10
        fired = await a.tick() + await b.tick()
        assert len(fired) == 1 and fired[0]["fire_at"] == at(2026, 5, 4, 12, 0, 10)
        assert await a.tick() + await b.tick() == []
        clock.advance(10)  # 12:00:20, both race for it
        both = await b.tick() + await a.tick()
        assert [f["fire_at"] for f in both] == [at(2026, 5, 4, 12, 0, 20)]
        clock.advance(95)  # down from 12:00:20 to 12:01:55: 12:00:30..12:01:50 due
        late = await a.tick() + await b.tick()
        assert len(late) == 1
        assert late[0]["fire_at"] == at(2026, 5, 4, 12, 1, 50) and late[0]["missed"] == 8
        rows = await s1.fetchall("SELECT payload FROM trigger_items WHERE trigger='tick'"
                                 " ORDER BY seq")
        assert len(rows) == 3 and '"missed":8' in rows[-1]["payload"].replace(" ", "")
        over = await views.overview(s1, now=clock.now())
        tick = next(r for r in over if r["trigger"] == "tick")
        assert tick["next_fire"] == at(2026, 5, 4, 12, 2, 0)
        assert tick["last_fire"] == at(2026, 5, 4, 12, 1, 50) and tick["depth"] == 3
        assert tick["queue"] == {"(serial)": {"queued": 3}}
    finally:
        await s1.close()
        await s2.close()


async def test_restart_after_downtime_fires_the_latest_missed_time(
        tmp_path: Path, hook_home: Path) -> None:
    clock = FakeClock(start=at(2026, 5, 4, 7, 0))  # a Monday
    db = str(tmp_path / "c.db")
    s = await open_store(db, clock=clock)
    sched = Scheduler(s, clock=clock)
    await sched.tick()
    clock.advance(3600 + 60)  # 08:01
    assert len(await sched.tick()) == 1
    await s.close()
    clock.advance(3 * 86400)  # down until Thursday 08:01: Tue, Wed, Thu 08:00 missed
    s = await open_store(db, clock=clock)
    try:
        fired = await Scheduler(s, clock=clock).tick()  # a new process: no memory but the store
        assert len(fired) == 1 and fired[0]["missed"] == 2
        assert fired[0]["fire_at"] == at(2026, 5, 7, 8, 0)
    finally:
        await s.close()


def test_due_is_none_before_the_first_time(hook_home: Path) -> None:
    s = tick_spec()
    assert due(s, at(2026, 5, 4, 7, 0), at(2026, 5, 4, 7, 59)) is None
    assert due(s, at(2026, 5, 4, 7, 0), at(2026, 5, 4, 8, 0)) == (at(2026, 5, 4, 8, 0), 0)
