"""The console through a full disk (issue 40): the mode bar says the condition (the store,
the cause, since when) while writes wait, the console keeps reading, and the bar clears once
a write lands. The full disk is SQLite's own SQLITE_FULL (the drill, tests/helpers/full_disk)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from full_disk import fill
from tui_helpers import SIZE, shown, until

from clawtower.core import Tasks, TaskSpec, open_store
from clawtower.core.store.faults import DRILL_ENV
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.views import ModeBar

SPEC = TaskSpec(title="Ship the fix", goal="Ship it.", outputs=["src/fix.py"],
                acceptance_criteria=["the fix ships"])


async def test_the_mode_bar_says_the_disk_is_full_and_clears_when_writes_land(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "c.db"
    store = await open_store(db)
    await Tasks(store).create(SPEC)
    await store.close()
    flag = tmp_path / "disk-full"
    await asyncio.to_thread(fill, db, flag)
    monkeypatch.setenv(DRILL_ENV, str(flag))
    app = ClawtowerApp(str(db), run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        assert app.store is not None
        app.store.set_hold(True)  # as the console's engine holds it
        write = asyncio.ensure_future(Tasks(app.store).create(SPEC))
        bar = app.screen.query_one(ModeBar)
        await until(pilot, lambda: "store disk full since" in shown(bar), timeout=60)
        assert "retrying" in shown(bar) and not write.done()
        flag.unlink()
        await asyncio.wait_for(write, 60)
        await until(pilot, lambda: "disk full" not in shown(bar), timeout=60)
        assert "engine:" in shown(bar)
