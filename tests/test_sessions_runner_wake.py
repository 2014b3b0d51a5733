"""A worker's loop wakes when a job's task ends, not only when the store changes.

A job's last commit wakes the worker's loop; the task then still has to finish before it
leaves `running`. Since small commits run on the loop's thread (issue 36), the loop could
wake first, see the job still running, and wait for a store change that never came: 50 ms
at the end of every `run_until_idle`, and a free slot left unclaimed as long."""

from __future__ import annotations

import asyncio
from typing import Any

from session_helpers import runner, spec

from clawtower.core.sessions.service import Sessions


async def test_the_worker_sees_its_last_job_end_without_a_store_change(store: Any) -> None:
    s = Sessions(store)
    await spec(s, "clerk")
    sid = await s.create(agent="clerk")
    await s.send(sid, "hello")
    r, _ = runner(store)
    waits: list[int] = []

    async def no_change(after_seq: int, timeout: float) -> int:
        """As if no store change ever came: only a job's end can end the wait."""
        waits.append(after_seq)
        await asyncio.sleep(3600)
        return after_seq

    store.wait_for_change = no_change
    try:
        async with asyncio.timeout(30):  # before: the loop waited here for good
            assert await r.run_until_idle(600, {sid})
    finally:
        del store.wait_for_change
        await r.aclose()
    assert waits  # the loop did wait, and the job's end woke it
    row = await store.fetchone("SELECT status FROM turn_jobs WHERE session_id=?", (sid,))
    assert row == {"status": "done"}
