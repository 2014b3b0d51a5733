"""Execution policy with the real executor (the expert's compiled process, as `expert run`
runs it): delivery format and SLA, and a confirm gate's approval timeout (reject: the run is
cancelled and on_failure applies; escalate: the gate stays open and the invocation waits)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from clawtower.core.experts import home
from clawtower.core.experts.timeouts import sweep
from clawtower.core.store.interface import Store
from clawtower.core.triggers import views
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept
from clawtower.core.triggers.worker import Worker
from tests.helpers.gate_expert import install_gate_expert
from tests.helpers.hook_expert import install_hook_expert

from .helpers import wait_until


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


async def test_delivery_format_and_sla_breach(tmp_path: Path, hook_home: Path,
                                             wall_store: Store) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "sla", proc_extra="delivery:\n  format: narrative\n"
                        "  sla: 1ms\n  sla_breach: escalate\n")
    spec = Catalog().get("hook-expert", "inbound")
    assert spec is not None and spec.delivery.format == "narrative"
    out = await accept(wall_store, spec, {"event_id": "e", "contact_id": "c-7"}, "webhook")
    async with running(Worker(wall_store)):
        rows = await wait_until(wall_store, "SELECT * FROM trigger_items WHERE id=?",
                                (out["id"],), lambda r: r[0]["status"] == "done")
    result = json.loads(rows[0]["result"])
    assert result["delivery"]["format"] == "narrative" and "structured" not in \
        result["delivery"]
    assert result["delivery"]["narrative"].startswith("hook-expert: note (trigger inbound)")
    assert "sla 1ms breached" in rows[0]["warning"] and rows[0]["warning"].endswith("escalate")
    run = await wall_store.fetchone("SELECT status, args FROM workflow_runs WHERE id=?",
                                    (rows[0]["run_id"],))
    assert run is not None and run["status"] == "ok"
    assert json.loads(run["args"]) == {"contact_id": "c-7"}  # payload_mapping -> inputs


POLICY = """policy:
  approval:
    default: confirm
    timeout: 1h
    on_timeout: {on_timeout}
execution:
  on_failure: escalate
triggers:
  - name: note_hook
    type: webhook
    concurrency: serial
    payload_mapping:
      contact_id: contact
      body: text
    process: note
"""


@pytest.mark.parametrize("on_timeout", ["reject", "escalate"])
async def test_approval_timeout_applies_on_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wall_store: Store,
        on_timeout: str) -> None:
    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    log = install_gate_expert(tmp_path, policy=POLICY.format(on_timeout=on_timeout))
    spec = Catalog().get("gate-expert", "note_hook")
    assert spec is not None
    out = await accept(wall_store, spec, {"contact": "c-1", "text": "hi"}, "webhook")
    behind = await accept(wall_store, spec, {"contact": "c-2", "text": "later"}, "webhook")
    async with running(Worker(wall_store, approval_sweep_s=3600)):
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                         (out["id"],), lambda r: r[0]["status"] == "paused")
        item = await views.item(wall_store, out["id"])
        # the gate holds the serial lane: the next invocation waits behind it
        assert (await views.item(wall_store, behind["id"]))["status"] == "queued"
        done = await sweep(wall_store, now=time.time() + 7200)
        assert [d["action"] for d in done] == [on_timeout]
        if on_timeout == "reject":
            await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                             (out["id"],), lambda r: r[0]["status"] == "escalated")
            failed = await views.item(wall_store, out["id"])
            assert failed["run_id"] == item["run_id"]
            assert failed["error"] == "rejected: no decision within 1h (on_timeout: reject)"
        else:
            ev = await wall_store.fetchone("SELECT 1 FROM events WHERE"
                                           " type='expert.approval_escalated'")
            assert ev is not None
            await asyncio.sleep(1.5)  # the settle pass runs every second: still waiting
            assert (await views.item(wall_store, out["id"]))["status"] == "paused"
    assert not log.exists()  # the confirm-tier note was never written


async def test_session_main_sends_each_event_to_the_expert_main_session(
        tmp_path: Path, hook_home: Path, wall_store: Store) -> None:
    from clawtower.core.triggers.channel import ChannelWatcher

    home.remove("hook-expert")
    install_hook_expert(tmp_path / "main", triggers="""  - name: inbound
    type: webhook
    session: main
    concurrency: serial
    payload_mapping:
      contact_id: contact_id
    process: note
  - name: chat
    type: channel
    process: note
""")
    watcher = ChannelWatcher(wall_store)
    pos = await watcher.cursor()
    spec = Catalog().get("hook-expert", "inbound")
    assert spec is not None and spec.session == "main"
    ids = [(await accept(wall_store, spec, {"contact_id": f"c-{i}"}, "webhook"))["id"]
           for i in range(2)]
    async with running(Worker(wall_store)):
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE trigger='inbound'",
                         (), lambda r: [x["status"] for x in r] == ["done", "done"])
    sessions = await wall_store.fetchall("SELECT id, title, channel FROM sessions")
    assert [(s["title"], s["channel"]) for s in sessions] == [("hook-expert (main)", "trigger")]
    inbox = await wall_store.fetchall("SELECT session_id, sender, text FROM session_inbox"
                                      " ORDER BY seq")
    assert [m["sender"] for m in inbox] == [f"trigger:{i}" for i in ids]
    assert all(m["session_id"] == sessions[0]["id"] for m in inbox)
    assert '"contact_id": "c-1"' in inbox[1]["text"] and "process `note`" in inbox[1]["text"]
    runs = await wall_store.fetchall("SELECT id FROM workflow_runs")
    assert runs == []  # no isolated run: the main session does the work
    # a trigger's own message to the main session does not fire the channel trigger
    _, fired = await watcher.scan(pos)
    assert fired == []
