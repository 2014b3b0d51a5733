"""Mode 8: triggers with their next fire and queue per key, the dead-letter queue (retried
and dropped from the console) and escalated invocations (acknowledged)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static
from tui_helpers import SIZE, shown, until

from clawtower.core import open_store
from clawtower.core.triggers import queue as q
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.screens.triggers import TriggersScreen
from tests.helpers.hook_expert import install_hook_expert


async def _failed(store: object, event: str, action: str) -> str:
    spec = Catalog().get("hook-expert", "inbound")
    assert spec is not None
    out = await accept(store, spec, {"event_id": event, "contact_id": "c-1"},  # type: ignore[arg-type]
                       "webhook")
    claimed = await store.execute(lambda tx: q.claim_in(tx, "w", 1))  # type: ignore[attr-defined]
    assert [c["id"] for c in claimed] == [out["id"]]
    await store.execute(lambda tx: q.fail_in(  # type: ignore[attr-defined]
        tx, out["id"], 1, "w", error="the CRM said no", run_id=None, retry_delay=None,
        action=action, execution_log={}))
    return str(out["id"])


async def test_triggers_mode_shows_queues_and_acts_on_dead_letters(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    install_hook_expert(tmp_path)
    db = str(tmp_path / "store.db")
    store = await open_store(db)
    try:
        dead = await _failed(store, "e-1", "dead_letter")
        escalated = await _failed(store, "e-2", "escalate")
        spec = Catalog().get("hook-expert", "inbound")
        assert spec is not None
        for i in range(3):
            await accept(store, spec, {"event_id": f"q-{i}", "contact_id": f"k-{i % 2}"},
                         "webhook")
    finally:
        await store.close()
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("8")

        def body() -> str:
            return shown(app.screen.query_one("#triggers-body", Static))

        await until(pilot, lambda: isinstance(app.screen, TriggersScreen) and dead in body())
        text = body()
        assert "hook-expert/inbound" in text and "hook-expert/tick" in text
        assert "k-0 queued 2" in text and "k-1 queued 1" in text  # depth per key and status
        assert escalated in text and "the CRM said no" in text
        await pilot.press("a")  # the selection is the dead letter: nothing to acknowledge
        await pilot.press("t")
        await until(pilot, lambda: dead not in body().split("Dead-letter queue")[1])
        store = await open_store(db)
        try:
            row = await store.fetchone("SELECT status FROM trigger_items WHERE id=?", (dead,))
            assert row is not None and row["status"] == "queued"
        finally:
            await store.close()
        await pilot.press("a")
        await until(pilot, lambda: escalated not in body().split("Escalated")[1])
        assert f"failed {escalated}" in body()  # its last result, acknowledged


async def test_triggers_mode_shows_refused_webhook_credentials_of_the_last_hour(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clawtower.core.events import NewEvent
    from clawtower.core.triggers import events as tev

    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    install_hook_expert(tmp_path)
    db = str(tmp_path / "store.db")
    store = await open_store(db)

    try:
        for i in range(3):
            failed = tev.HookAuthFailed(expert="hook-expert", trigger="inbound",
                                        address="10.0.0.9", reason="bad bearer token",
                                        error_id=f"E-{i}")
            await store.execute(lambda tx, p=failed: tx.emit(NewEvent(
                entity_id="hook:hook-expert/inbound", actor="triggers", role="system",
                payload=p)))
        throttled = tev.HookAuthThrottled(expert="hook-expert", trigger="inbound",
                                          address="10.0.0.9", failures=3, window_s=60,
                                          retry_after=60, error_id="E-2")
        await store.execute(lambda tx: tx.emit(NewEvent(
            entity_id="hook:hook-expert/inbound", actor="triggers", role="system",
            payload=throttled)))
    finally:
        await store.close()
    app = ClawtowerApp(db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        await pilot.press("8")

        def body() -> str:
            return shown(app.screen.query_one("#triggers-body", Static))

        await until(pilot, lambda: isinstance(app.screen, TriggersScreen)
                    and "hook-expert/inbound" in body())
        text = body()
    assert "Auth fails 1h" in text and "3, 429 x1" in text
    assert "Refused webhook requests" in text and "E-1" in text and "bad bearer token" in text
    mail = next(line for line in text.splitlines() if "hook-expert/mail" in line)
    assert " 0 " in mail  # a webhook trigger without failures shows 0


async def test_the_console_alone_runs_a_fired_invocation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: the console runs the engine `serve` runs, its trigger worker included: an
    invocation fired with no `serve` running leaves `queued` and runs to its end."""
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    install_hook_expert(tmp_path)
    db = str(tmp_path / "store.db")
    store = await open_store(db)
    try:
        spec = Catalog().get("hook-expert", "inbound")
        assert spec is not None
        fired = await accept(store, spec, {"event_id": "e-1", "contact_id": "c-2"}, "cli")
    finally:
        await store.close()
    rows = await _console_until(db, "SELECT status FROM trigger_items WHERE id=?",
                                (fired["id"],), lambda rows: [r["status"] for r in rows]
                                == ["done"])
    assert [r["status"] for r in rows] == ["done"]


async def test_the_console_fires_a_cron_trigger_on_its_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 35: the console's engine runs the cron scheduler `serve` runs: with no `serve`,
    an expert's cron trigger (every 2 s) fires while the console is open, on the schedule."""
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    install_hook_expert(tmp_path, cron="*/2 * * * * *")
    db = str(tmp_path / "store.db")
    rows = await _console_until(
        db, "SELECT payload FROM trigger_items WHERE trigger='tick' ORDER BY seq", (),
        lambda rows: len(rows) >= 2)
    fired = [float(json.loads(r["payload"])["fired_at"]) for r in rows]
    assert len(fired) >= 2
    assert all(t % 2 == 0 for t in fired)  # on the schedule, once per time
    assert len(set(fired)) == len(fired)


async def _console_until(db: str, sql: str, args: tuple[Any, ...],
                         done: Callable[[list[Any]], bool], timeout_s: float = 60.0
                         ) -> list[Any]:
    """Open the console (its engine running) on `db` until `done(rows of sql)`, at most
    `timeout_s`; the last rows read."""
    app = ClawtowerApp(db, run_engine=True, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        assert app.store is not None
        rows: list[Any] = []
        for _ in range(int(timeout_s * 10)):
            rows = await app.store.fetchall(sql, args)
            if done(rows):
                break
            await pilot.pause(0.1)
        return rows
