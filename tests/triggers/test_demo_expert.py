"""The demo's example expert (examples/experts/incident-desk) on the real paths: installed
and bound, its webhook posted through the endpoint `serve` runs, its run paused at the
confirm gate; approved, the run publishes the notice through the example MCP server, and
the worker records the invocation done. Run again, the demo replaces only its own copy."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from clawtower.core import Approvals
from clawtower.core.demo import triggers as demo
from clawtower.core.errors import ValidationError
from clawtower.core.experts import home
from clawtower.core.store.interface import Store
from clawtower.core.triggers.worker import Worker


@pytest.fixture
def demo_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


async def test_alert_to_gate_then_approved_notice(demo_home: Path, wall_store: Store) -> None:
    out = await demo.seed_expert(wall_store, by="demo")
    assert out["status"] == "paused", out
    item = await wall_store.fetchone("SELECT * FROM trigger_items WHERE id=?", (out["item"],))
    assert item is not None and (item["expert"], item["trigger"]) == (demo.EXPERT, demo.WEBHOOK)
    assert item["source"] == "webhook"  # through the endpoint, authenticated
    [gate] = await Approvals(wall_store).pending()
    assert gate["kind"] == "workflow_approval" and gate["subject"] == item["run_id"]
    assert json.loads(gate["preview"]) == {"operation": "statuspage.post_notice", "input": {
        "service": "invoices-api", "summary": demo.ALERT["alert"]["summary"]}}
    run = await wall_store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                    (item["run_id"],))
    assert run is not None and run["status"] == "paused"
    started = await wall_store.fetchone(
        "SELECT actor FROM events WHERE type='workflow.started' AND entity_id=?",
        (item["run_id"],))
    assert started is not None and started["actor"] == "demo"  # a later demo may replace it
    notices = demo_home / "statuspage.json"
    assert not notices.exists()  # nothing published before the approval

    await Approvals(wall_store).approve(gate["id"], by="operator")  # resumes it here
    run = await wall_store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                    (item["run_id"],))
    assert run is not None and run["status"] == "ok"
    [notice] = json.loads(notices.read_text())
    assert (notice["notice_id"], notice["service"]) == ("N-1", "invoices-api")

    stop = asyncio.Event()  # any worker records the paused invocation's outcome
    task = asyncio.create_task(Worker(wall_store, approval_sweep_s=3600).run(stop))
    try:
        for _ in range(100):
            row = await wall_store.fetchone("SELECT status FROM trigger_items WHERE id=?",
                                            (out["item"],))
            if row is not None and row["status"] == "done":
                break
            await asyncio.sleep(0.05)
        assert row is not None and row["status"] == "done"
    finally:
        stop.set()
        await task


def test_the_demo_replaces_only_its_own_copy(demo_home: Path, tmp_path: Path) -> None:
    assert demo.install(tmp_path / "nowhere") == f"no example package at {tmp_path}/nowhere"
    assert demo.install() is None
    assert demo.install() is None  # its own earlier copy: replaced
    assert home.package_dir(demo.EXPERT).is_dir()
    home.remove(demo.EXPERT)
    elsewhere = tmp_path / "mine" / demo.EXPERT
    shutil.copytree(demo.examples_dir() / demo.EXPERT, elsewhere)
    home.install(str(elsewhere))
    why = demo.install()
    assert why is not None and "installed from elsewhere" in why
    source = json.loads((demo_home / "expert-config" / demo.EXPERT / "source.json").read_text())
    assert source["source"] == str(elsewhere.resolve())  # untouched


async def test_a_refused_webhook_is_one_clear_error(demo_home: Path, wall_store: Store
                                                    ) -> None:
    assert demo.install() is None
    with pytest.raises(ValidationError, match="webhook answered 422"):
        await demo.fire_webhook(wall_store, {"alert": "not an object"})
