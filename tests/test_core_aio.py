"""core/aio.py: `unless_set`, the one wait that a stop request ends at once (the engine's
adoption loop, the live trace exporter and the ACP bridge's cancel watch use it)."""

from __future__ import annotations

import asyncio

from clawtower.core.aio import unless_set


async def test_the_work_finishing_first_gives_its_result() -> None:
    stop = asyncio.Event()
    assert await unless_set(stop, asyncio.sleep(0, result=7)) == 7


async def test_the_event_ends_the_wait_and_cancels_the_work() -> None:
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    waiting = asyncio.create_task(unless_set(stop, forever()))
    await asyncio.sleep(0)
    stop.set()
    assert await waiting is None
    assert cancelled.is_set()  # awaited: nothing left running
    assert await unless_set(stop, asyncio.sleep(3600)) is None  # already set: at once
