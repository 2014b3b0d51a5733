"""A recording executor and waits for the trigger tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from clawtower.core.store.interface import Store, WriteTx
from clawtower.core.triggers.spec import TriggerSpec


class Recorder:
    """Records each invocation's start and end; `fail` decides which attempts fail."""

    def __init__(self, hold_s: float = 0.02,
                 fail: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.hold_s = hold_s
        self.fail = fail or (lambda item: False)
        self.calls: list[tuple[str, str, float, float]] = []  # (id, lane, start, end)
        self.active: dict[str, int] = {}
        self.max_active = 0
        self.overlap_in_lane = False
        self.envs: list[dict[str, str]] = []

    async def __call__(self, item: dict[str, Any], spec: TriggerSpec,
                       on_start: Callable[[WriteTx, str], None],
                       env: dict[str, str]) -> dict[str, Any]:
        lane = item["lane"]
        self.envs.append(env)
        if self.active.get(lane):
            self.overlap_in_lane = True
        self.active[lane] = self.active.get(lane, 0) + 1
        self.max_active = max(self.max_active, sum(self.active.values()))
        start = time.monotonic()
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.active[lane] -= 1
        self.calls.append((item["id"], lane, start, time.monotonic()))
        if self.fail(item):
            return {"ok": False, "error": {"type": "runtime_error", "message": "boom"}}
        return {"ok": True, "status": "ok", "output": [{"inputs": item["inputs"]}]}


async def wait_until(store: Store, sql: str, params: tuple[Any, ...], want: Callable[[Any], bool],
                     timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        rows = await store.fetchall(sql, params)
        if want(rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {sql} -> {rows[:5]}")
        await asyncio.sleep(0.05)


async def statuses(store: Store) -> dict[str, str]:
    rows = await store.fetchall("SELECT id, status FROM trigger_items")
    return {r["id"]: r["status"] for r in rows}
