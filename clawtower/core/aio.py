"""Small asyncio helpers.

Python 3.11's `asyncio.wait_for` can swallow a cancellation when the awaited future finishes
at the same moment (the cancelled task then runs on forever); `asyncio.timeout` does not.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` passes; True if it was set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


async def unless_set(event: asyncio.Event, work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when `event` is set first (`work` is then cancelled and
    awaited): a wait a stop request must end at once."""
    job = asyncio.ensure_future(work)
    if event.is_set():
        job.cancel()
    stopper = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (job, stopper):
            if not f.done():
                f.cancel()
                with contextlib.suppress(BaseException):
                    await f
    if job.done() and not job.cancelled():
        return job.result()
    return None
