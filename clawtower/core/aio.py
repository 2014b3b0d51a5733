"""Small asyncio helpers.

Python 3.11's `asyncio.wait_for` can swallow a cancellation when the awaited future finishes
at the same moment (the cancelled task then runs on forever); `asyncio.timeout` does not.
"""

from __future__ import annotations

import asyncio


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
