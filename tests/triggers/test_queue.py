"""The persisted queue and the worker, in process (a recording executor stands in for the
expert's process; test_serve.py runs the real one): dedupe, lanes, execution policy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.errors import Conflict, ValidationError
from clawtower.core.experts import home
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store
from clawtower.core.triggers import queue as q
from clawtower.core.triggers import views
from clawtower.core.triggers.catalog import Catalog
from clawtower.core.triggers.intake import accept
from clawtower.core.triggers.worker import Worker
from tests.helpers.hook_expert import install_hook_expert

from .helpers import Recorder, statuses, wait_until


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


def spec(name: str = "inbound") -> Any:
    s = Catalog().get("hook-expert", name)
    assert s is not None
    return s


def reinstall(tmp_path: Path, **kw: str) -> None:
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "again", **kw)


async def test_same_key_in_arrival_order_other_keys_in_parallel(
        hook_home: Path, wall_store: Store) -> None:
    rec = Recorder(hold_s=0.05)
    ids: dict[str, list[str]] = {}
    for i in range(12):
        key = f"c{i % 3}"
        out = await accept(wall_store, spec(), {"event_id": f"e{i}", "contact_id": key},
                           "webhook")
        ids.setdefault(key, []).append(out["id"])
    async with running(Worker(wall_store, executor=rec, capacity=8)):
        await wait_until(wall_store, "SELECT id FROM trigger_items WHERE status='done'", (),
                         lambda rows: len(rows) == 12)
    assert not rec.overlap_in_lane
    assert rec.max_active >= 2  # different keys ran at the same time
    for key, expected in ids.items():
        ran = [c[0] for c in sorted(rec.calls, key=lambda c: c[2])
               if c[1] == f"hook-expert/inbound/key:{key}"]
        assert ran == expected, key
    assert len(rec.calls) == 12


async def test_serial_runs_one_at_a_time_and_parallel_all_at_once(
        tmp_path: Path, hook_home: Path, wall_store: Store) -> None:
    reinstall(tmp_path, extra="")
    rec = Recorder(hold_s=0.05)
    for i in range(4):
        await accept(wall_store, spec("tick"), {"n": i}, "manual", strict=False)
    async with running(Worker(wall_store, executor=rec, capacity=8)):
        await wait_until(wall_store, "SELECT id FROM trigger_items WHERE status='done'", (),
                         lambda rows: len(rows) == 4)
    assert rec.max_active == 1 and not rec.overlap_in_lane
    par = """  - name: inbound
    type: webhook
    concurrency: parallel
    process: note
"""
    home.remove("hook-expert")
    install_hook_expert(tmp_path / "par", triggers=par)
    rec2 = Recorder(hold_s=0.3)
    for _ in range(4):
        await accept(wall_store, spec(), {"contact_id": "same"}, "manual")
    async with running(Worker(wall_store, executor=rec2, capacity=8)):
        await wait_until(wall_store, "SELECT id FROM trigger_items WHERE status='done'", (),
                         lambda rows: len(rows) == 8)
    assert rec2.max_active == 4  # parallel: one lane per invocation


async def test_duplicate_within_the_window_is_skipped_across_restarts(
        tmp_path: Path, hook_home: Path) -> None:
    db = str(tmp_path / "d.db")
    s1 = await open_store(db)
    first = await accept(s1, spec(), {"event_id": "e-1", "contact_id": "c"}, "webhook")
    dup = await accept(s1, spec(), {"event_id": "e-1", "contact_id": "c"}, "webhook")
    await s1.close()
    s2 = await open_store(db)  # a restart: the seen keys are store state
    again = await accept(s2, spec(), {"event_id": "e-1", "contact_id": "other"}, "webhook")
    other = await accept(s2, spec(), {"event_id": "e-2", "contact_id": "c"}, "webhook")
    st = await statuses(s2)
    await s2.close()
    assert first["status"] == "queued"
    assert dup == {"id": dup["id"], "status": "skipped", "duplicate_of": first["id"]}
    assert again["status"] == "skipped" and again["duplicate_of"] == first["id"]
    assert other["status"] == "queued"
    assert sorted(st.values()) == ["queued", "queued", "skipped", "skipped"]


async def test_concurrent_duplicates_from_two_processes_accept_one(
        tmp_path: Path, hook_home: Path) -> None:
    db = str(tmp_path / "d.db")
    a, b = await open_store(db), await open_store(db)  # two writers, as two processes
    try:
        outs = await asyncio.gather(*[
            accept(s, spec(), {"event_id": "same", "contact_id": "c"}, "webhook")
            for s in (a, b) * 10])
    finally:
        await a.close()
        await b.close()
    assert sum(o["status"] == "queued" for o in outs) == 1
    assert sum(o["status"] == "skipped" for o in outs) == 19


async def test_dedupe_window_expires(tmp_path: Path, hook_home: Path, store: Store,
                                     clock: Any) -> None:
    reinstall(tmp_path, triggers="""  - name: inbound
    type: webhook
    dedupe_key: event_id
    dedupe_window: 10m
    concurrency: parallel
    process: note
""")
    first = await accept(store, spec(), {"event_id": "x"}, "webhook")
    clock.advance(599)
    assert (await accept(store, spec(), {"event_id": "x"}, "webhook"))["status"] == "skipped"
    clock.advance(2)
    later = await accept(store, spec(), {"event_id": "x"}, "webhook")
    assert later["status"] == "queued" and later["id"] != first["id"]


def test_bad_payloads_are_refused_before_anything_is_written(hook_home: Path) -> None:
    with pytest.raises(q.BadEvent, match="dedupe_key 'event_id'"):
        q.prepare(spec(), {"contact_id": "c"}, "webhook")
    with pytest.raises(q.BadEvent, match="concurrency_key 'contact_id'"):
        q.prepare(spec(), {"event_id": "e", "contact_id": {"nested": 1}}, "webhook")
    lax = q.prepare(spec("tick"), {}, "cron", strict=False)
    assert lax.lane == "hook-expert/tick"
    chat = q.prepare(spec("chat"), {"message_text": "urgent"}, "channel", strict=False)
    assert chat.lane == "hook-expert/chat" and "not in the payload" in chat.warning


def test_payload_mapping_and_the_gmail_preset(hook_home: Path) -> None:
    p = q.prepare(spec("mail"), {"messages": [{"id": "m-9", "from": "Sarah <Sarah@Acme.com>"}]},
                  "webhook")
    assert p.dedupe == "m-9"
    assert p.lane == "hook-expert/mail/key:sarah@acme.com"
    assert p.inputs == {"contact_id": "sarah@acme.com"}
    with pytest.raises(q.BadEvent, match="gmail"):
        q.prepare(spec("mail"), {"message": {"data": "%%%"}}, "webhook")


EXEC = """execution:
  timeout: {timeout}
  retry:
    max_attempts: {attempts}
    backoff: {backoff}
    delay: 300ms
  on_failure: {on_failure}
  resume_from_execution_log: true
"""


async def test_retry_then_dead_letter_then_operator_retry(
        tmp_path: Path, hook_home: Path, wall_store: Store) -> None:
    reinstall(tmp_path, extra=EXEC.format(timeout="1m", attempts=3, backoff="exponential",
                                          on_failure="dead_letter"))
    failing = {"on": True}
    rec = Recorder(hold_s=0.0, fail=lambda item: failing["on"])
    out = await accept(wall_store, spec(), {"event_id": "e", "contact_id": "c"}, "webhook")
    behind = await accept(wall_store, spec(), {"event_id": "f", "contact_id": "c"}, "webhook")
    async with running(Worker(wall_store, executor=rec)):
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                         (out["id"],), lambda r: r[0]["status"] == "dead_letter")
        # the lane was held while retrying: the item behind ran only after the dead letter
        # (it is claimed on the worker's next pass: wait for its start, then compare)
        for _ in range(600):
            if any(c[0] == behind["id"] for c in rec.calls):
                break
            await asyncio.sleep(0.05)
        starts = {c[0]: c[2] for c in rec.calls}
        assert [c[0] for c in rec.calls[:3]] == [out["id"]] * 3
        assert starts[behind["id"]] > rec.calls[2][2]
        gaps = [rec.calls[i + 1][2] - rec.calls[i][3] for i in range(2)]
        assert gaps[0] >= 0.29 and gaps[1] >= 0.59  # 300ms, then 600ms (exponential)
        # attempts after the first see the execution log of the earlier ones
        assert "EXPERT_EXECUTION_LOG" not in rec.envs[0]
        assert '"error": "boom"' in rec.envs[2]["EXPERT_EXECUTION_LOG"]
        dl = await views.dead_letters(wall_store)
        assert [d["id"] for d in dl] == [out["id"]] and dl[0]["error"] == "boom"
        failing["on"] = False
        await views.retry_dead_letter(wall_store, out["id"], "ops")
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                         (out["id"],), lambda r: r[0]["status"] == "done")
    with pytest.raises(Conflict):
        await views.retry_dead_letter(wall_store, out["id"], "ops")
    assert await views.dead_letters(wall_store) == []


async def test_escalate_abandon_drop_and_timeout(tmp_path: Path, hook_home: Path,
                                                wall_store: Store) -> None:
    reinstall(tmp_path, extra=EXEC.format(timeout="200ms", attempts=1, backoff="fixed",
                                          on_failure="escalate"))
    slow = Recorder(hold_s=5.0)
    out = await accept(wall_store, spec(), {"event_id": "e", "contact_id": "c"}, "webhook")
    async with running(Worker(wall_store, executor=slow)):
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                         (out["id"],), lambda r: r[0]["status"] == "escalated")
    item = await views.item(wall_store, out["id"])
    assert "timed out after 0.2s" in item["error"]
    assert [e["id"] for e in await views.escalations(wall_store)] == [out["id"]]
    ev = await wall_store.fetchone("SELECT payload FROM events WHERE entity_id=? AND"
                                   " type='trigger.failed'", (out["id"],))
    assert ev is not None and '"action":"escalate"' in ev["payload"].replace(" ", "")
    await views.resolve_escalation(wall_store, out["id"], "ops")
    assert await views.escalations(wall_store) == []

    for action, final in (("abandon", "abandoned"), ("dead_letter", "dead_letter")):
        reinstall(tmp_path / action, extra=EXEC.format(
            timeout="1m", attempts=1, backoff="fixed", on_failure=action))
        rec = Recorder(hold_s=0.0, fail=lambda item: True)
        o = await accept(wall_store, spec(), {"event_id": action, "contact_id": "c"},
                         "webhook")
        async with running(Worker(wall_store, executor=rec)):
            await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                             (o["id"],), lambda r, f=final: r[0]["status"] == f)
    dl = await views.dead_letters(wall_store)
    await views.drop_dead_letter(wall_store, dl[0]["id"], "ops", "not needed")
    assert (await views.item(wall_store, dl[0]["id"]))["status"] == "dropped"


async def test_two_workers_claim_each_item_once(tmp_path: Path, hook_home: Path) -> None:
    db = str(tmp_path / "w.db")
    a, b = await open_store(db), await open_store(db)
    rec = Recorder(hold_s=0.01)
    try:
        for i in range(60):
            await accept(a, spec(), {"event_id": f"e{i}", "contact_id": f"k{i % 6}"},
                         "webhook")
        async with running(Worker(a, executor=rec)), running(Worker(b, executor=rec)):
            await wait_until(a, "SELECT id FROM trigger_items WHERE status='done'", (),
                             lambda rows: len(rows) == 60)
    finally:
        await a.close()
        await b.close()
    assert len(rec.calls) == 60 and len({c[0] for c in rec.calls}) == 60
    assert not rec.overlap_in_lane


async def test_unknown_trigger_cannot_be_fired(hook_home: Path, wall_store: Store) -> None:
    with pytest.raises(Exception, match="no such trigger"):
        await views.fire(wall_store, "hook-expert", "nope", {}, by="ops")
    with pytest.raises(ValidationError, match="dedupe_key"):
        await views.fire(wall_store, "hook-expert", "inbound", {}, by="ops")
    assert await statuses(wall_store) == {}


async def test_an_item_claimed_by_a_dead_process_is_recovered_once(
        hook_home: Path, wall_store: Store) -> None:
    import socket

    dead = f"{socket.gethostname()}:999999:0#tdead"  # a pid that is not running
    fresh = await accept(wall_store, spec(), {"event_id": "a", "contact_id": "k1"}, "webhook")
    linked = await accept(wall_store, spec(), {"event_id": "b", "contact_id": "k2"},
                          "webhook")
    claimed = await wall_store.execute(lambda tx: q.claim_in(tx, dead, 10, ttl=3600))
    assert {c["id"] for c in claimed} == {fresh["id"], linked["id"]}
    # the dead process had started a run for `linked`, which then finished
    from clawtower.core.workflows.service import Workflows

    wf_file = Path(hook_home).parent / "one.lobster"
    wf_file.write_text("name: one\nsteps:\n  - id: a\n    command: echo done\n")
    env = await Workflows(wall_store, stderr=lambda s: None).run(
        str(wf_file), {}, on_start=lambda tx, rid: q.link_in(tx, linked["id"], rid, 1, dead))
    assert env["status"] == "ok"
    rec = Recorder(hold_s=0.0)
    async with running(Worker(wall_store, executor=rec)):
        await wait_until(wall_store, "SELECT status FROM trigger_items", (),
                         lambda r: [x["status"] for x in r] == ["done", "done"])
    assert [c[0] for c in rec.calls] == [fresh["id"]]  # the linked run was not started again
    ev = await wall_store.fetchall("SELECT payload FROM events WHERE type='trigger.claimed'"
                                   " ORDER BY seq")
    assert sum('"recovered":true' in e["payload"].replace(" ", "") for e in ev) == 2


async def test_a_trigger_whose_requires_tool_is_unbound_is_inactive(
        tmp_path: Path, hook_home: Path, wall_store: Store) -> None:
    import sys

    from clawtower.core.experts.bindings import write_binding

    reinstall(tmp_path, extra="requires:\n  tools: [feed]\n", triggers="""  - name: inbound
    type: webhook
    requires_tool: feed
    concurrency: parallel
    process: note
""")
    s = spec()
    assert s.inactive.startswith("requires_tool 'feed' is not bound")
    with pytest.raises(Conflict, match="inactive"):
        await views.fire(wall_store, "hook-expert", "inbound", {}, by="ops")
    assert [r["inactive"] for r in await views.overview(wall_store)] == [s.inactive]
    write_binding("hook-expert", "feed", {"type": "mcp", "command": sys.executable})
    assert spec().inactive == ""
    out = await views.fire(wall_store, "hook-expert", "inbound", {}, by="ops")
    assert out["status"] == "queued"


async def test_trigger_events_read_as_sentences(hook_home: Path, wall_store: Store) -> None:
    from clawtower.core.describe import event_summary

    out = await accept(wall_store, spec(), {"event_id": "e", "contact_id": "c"}, "webhook")
    await accept(wall_store, spec(), {"event_id": "e", "contact_id": "c"}, "webhook")
    async with running(Worker(wall_store, executor=Recorder(hold_s=0.0))):
        await wait_until(wall_store, "SELECT status FROM trigger_items WHERE id=?",
                         (out["id"],), lambda r: r[0]["status"] == "done")
    lines = [event_summary(e) for e in await wall_store.events_after(0)
             if e.type.startswith("trigger.")]
    assert lines[0] == "hook-expert/inbound webhook event queued"
    assert lines[1] == f"hook-expert/inbound duplicate 'e' skipped (first: {out['id']})"
    assert lines[2].startswith("attempt 1 claimed by ")
    assert lines[3].startswith("delivered to main: hook-expert: note (trigger inbound)")
