"""One active TurnJob per session across workers, under each worker's own lease
(`worker:<owner>`): a job of a session is claimed only while no other job of it runs under
a live worker, a dead worker's job is taken over once its lease expired, and the stalled
worker that comes back owns nothing any more (it writes nothing, its renewal says lost)."""

from __future__ import annotations

from typing import Any

from clawtower.core.agents.config import SIMULATOR
from clawtower.core.clock import FakeClock
from clawtower.core.sessions.runner import _claim, _ours, _renew
from clawtower.core.sessions.service import Sessions, queue_job
from clawtower.core.sessions.specs import SIM_MODELS

DEFAULTS = {SIMULATOR: SIM_MODELS[0]}


async def _running(store: Any, sid: str) -> list[dict[str, Any]]:
    return await store.fetchall("SELECT id, owner, attempt FROM turn_jobs WHERE"
                                " session_id=? AND status='running'", (sid,))


async def test_a_session_runs_one_job_under_live_workers_and_a_dead_ones_is_taken_over(
        store: Any, clock: FakeClock) -> None:
    s = Sessions(store)
    sid = await s.create()
    await s.send(sid, "first")
    [a] = await store.execute(lambda tx: _claim(tx, "A", 0.4, 5, set(), DEFAULTS, None,
                                                False))
    # the session's next job, queued while A's job runs (as a direct queue would)
    j2 = await store.execute(lambda tx: queue_job(tx, sid, "test", "operator"))
    # B sees A alive: neither the queued job nor A's running one is B's to take
    took = await store.execute(lambda tx: _claim(tx, "B", 30, 5, set(), DEFAULTS, None,
                                                 True))
    assert took == [] and [r["owner"] for r in await _running(store, sid)] == ["A"]
    held = await store.fetchone("SELECT owner FROM leases WHERE name='worker:A'")
    assert held is not None and held["owner"] == "A"
    clock.advance(1.0)  # A "dies" (or stalls): its lease expires
    took = await store.execute(lambda tx: _claim(tx, "B", 30, 5, set(), DEFAULTS, None,
                                                 True))
    assert len(took) == 1, "one job of the session at a time, never both"
    running = await _running(store, sid)
    assert len(running) == 2 or [r["owner"] for r in running] == ["B"]
    live = [r for r in running if r["owner"] == "B"]
    assert len(live) == 1 and live[0]["id"] in (a.job_id, j2)
    # A comes back: it owns nothing any more, so it writes nothing and its renewal says so
    assert await store.execute(lambda tx: _ours(tx, a, "A")) is False
    assert await store.execute(lambda tx: _renew(tx, [a], "A", 30)) == [a.job_id]
    # while B runs the session's job, nobody else (A renewed) claims any job of it
    again = await store.execute(lambda tx: _claim(tx, "A", 30, 5, set(), DEFAULTS, None,
                                                  True))
    assert again == []
    assert await store.verify_projections() == []


async def test_one_worker_lease_covers_a_batch_of_claims(store: Any) -> None:
    s = Sessions(store)
    sids = [await s.create() for _ in range(5)]
    for sid in sids:
        await s.send(sid, "hello")
    before = await store.last_seq()
    took = await store.execute(lambda tx: _claim(tx, "W", 30, 10, set(), DEFAULTS, None,
                                                 False))
    assert sorted(c.session_id for c in took) == sorted(sids)
    rows = await store.fetchall("SELECT type FROM events WHERE seq > ? AND type LIKE 'lease.%'",
                                (before,))
    assert [r["type"] for r in rows] == ["lease.acquired"]
    assert all(await store.execute(lambda tx: [_ours(tx, c, "W") for c in took]))
