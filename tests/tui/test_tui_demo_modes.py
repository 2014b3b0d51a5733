"""The console demo as a newcomer meets it (`clawtower demo --speed 0`, seeded and opened as
`run_demo` does): every one of the eight modes shows something within a minute, and the
README's first keys (`2`, `a`, `y`) approve T-4, not the release workflow or the expert."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tui_helpers import until

from clawtower.cli.demo import DEMO_DIR, console_setup, seed
from clawtower.core import config
from clawtower.core.demo.triggers import EXPERT, WEBHOOK
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.experts import ExpertsScreen
from clawtower.tui.screens.triggers import TriggersScreen

MODES = ["tasks", "approvals", "meetings", "sessions", "workflows", "experts", "flows",
         "triggers"]


def shown(app: ClawtowerApp) -> list[Any]:
    """What the current mode lists (empty while it shows its empty-state line)."""
    screen = app.screen
    if isinstance(screen, ExpertsScreen):
        return list(screen.experts)
    if isinstance(screen, TriggersScreen):
        return list(screen.triggers)
    if screen.id == "tasks" or type(screen).__name__ == "TasksScreen":
        return list(app.model.tasks)
    if type(screen).__name__ == "ApprovalsScreen":
        return list(app.model.approvals)
    items = getattr(screen, "items", None)
    return list(items()) if callable(items) else []


async def open_demo(db: Path) -> tuple[ClawtowerApp, str]:
    await seed(str(db), DEMO_DIR / "specs", live_sessions=True, console=True)
    agents, on_loaded = console_setup(DEMO_DIR, 0.0)
    return ClawtowerApp(str(db), run_engine=True, agents_file=agents, operator="newcomer",
                        on_loaded=on_loaded), agents


async def test_the_readme_keys_approve_t4_and_every_mode_shows_something(
        tmp_path: Path) -> None:
    """README: "Press 2 for Approvals, a to approve (then y), and watch T-4 resume and
    complete": the list is oldest first and T-4's gate is the oldest, so those keys approve
    T-4 (not the release workflow, not the expert's notice). Then each of the eight modes
    lists something, all within a minute of starting (one app: the seeding is shared)."""
    start = time.monotonic()
    app, agents = await open_demo(tmp_path / "clawtower.db")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await app.wait_loaded()
            # the live release workflow reaches its gate too: three kinds are waiting
            await until(pilot, lambda: len(app.model.approvals) == 3, timeout=20)
            waiting = [(a["kind"], a["subject"]) for a in app.model.approvals]
            assert waiting[0] == ("task_side_effect", "T-4"), waiting
            assert [k for k, _ in waiting[1:]] == ["workflow_approval"] * 2, waiting
            await pilot.press("2", "a", "y")
            await until(pilot, lambda: (app.model.tasks.get("T-4") or {}).get("phase")
                        == "completed", timeout=20)
            left = [a["subject"] for a in app.model.approvals]
            assert "T-4" not in left and len(left) == 2, left  # the workflows still wait

            for n, mode in enumerate(MODES, 1):
                await pilot.press(str(n))
                await until(pilot, lambda mode=mode: app.current_mode == mode
                            and bool(shown(app)),
                            timeout=max(1.0, 60 - (time.monotonic() - start)))
            screen = app.screen
            assert isinstance(screen, TriggersScreen)
            assert {t["type"] for t in screen.triggers} == {"webhook", "cron"}
            hook = next(t for t in screen.triggers if t["trigger"] == WEBHOOK)
            assert hook["expert"] == EXPERT and hook["last_fired"] is not None
            assert hook["queue"] == {"(serial)": {"paused": 1}}  # at its confirm gate
            assert time.monotonic() - start < 60
            # the expert's notice was not published: it waits for its own approval
            assert not (config.home() / "statuspage.json").exists()

            # issue 35: approving the notice in the console finishes the invocation there
            # (the console runs the trigger worker `serve` runs): no `serve` needed
            assert app.store is not None
            store = app.store
            row = await store.fetchone("SELECT id, run_id FROM trigger_items WHERE"
                                       " expert=? AND trigger=?", (EXPERT, WEBHOOK))
            assert row is not None
            subjects = [a["subject"] for a in app.model.approvals]
            assert subjects and subjects[0] == row["run_id"], (subjects, row["run_id"])
            await pilot.press("2", "a", "y")
            status = ""
            for _ in range(300):
                got = await store.fetchone("SELECT status FROM trigger_items WHERE id=?",
                                           (row["id"],))
                status = got["status"] if got else ""
                if status == "done":
                    break
                await pilot.pause(0.1)
            assert status == "done"
            await pilot.press("8", "r")
            await until(pilot, lambda: isinstance(app.screen, TriggersScreen) and next(
                t for t in app.screen.triggers if t["trigger"] == WEBHOOK)["queue"] != {
                "(serial)": {"paused": 1}}, timeout=20)
    finally:
        Path(agents).unlink(missing_ok=True)


def test_the_example_expert_validates() -> None:
    """Its own package: no errors, no warnings, a webhook and a cron trigger, and the
    webhook's process has a confirm-tier operation (the gate the demo stops at)."""
    from clawtower.core.demo.triggers import examples_dir
    from clawtower.core.experts.package import load_package
    from clawtower.core.experts.tiers import approval_tier
    from clawtower.core.triggers.spec import triggers_of

    pkg = load_package(examples_dir() / EXPERT)
    assert not pkg.errors and not pkg.warnings, (pkg.errors, pkg.warnings)
    assert {t.name: t.type for t in triggers_of(pkg)} == {WEBHOOK: "webhook",
                                                          "morning_review": "cron"}
    assert approval_tier(pkg, "statuspage", "post_notice") == "confirm"
