"""A SQLite store that cannot be opened leaves no thread behind to fail later: aiosqlite
stops its connection thread without waiting, and when the event loop closed first (a CLI's
error exit right after the failed open) the thread died with "Event loop is closed", an
unhandled-thread-exception traceback in the test output (issue 27)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from clawtower.core.errors import StoreError
from clawtower.core.store import open_store


def test_a_failed_open_then_a_closed_loop_leaves_no_failing_thread(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda a: failures.append(a.exc_value))

    async def open_bad() -> None:
        with pytest.raises(StoreError):
            # a read-only URI of a missing file: SQLite itself refuses it
            await open_store("file:missing.db?mode=ro")

    for _ in range(100):  # before the fix about 1 in 3 failed this way
        asyncio.run(open_bad())
    for t in threading.enumerate():
        if t is not threading.main_thread() and t.name.startswith("Thread-"):
            t.join(2)
    assert failures == []
