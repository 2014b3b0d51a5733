"""Issue 24: the REPLYs of turns that end together are one store command
(`core.flows.replies.complete_many`). The batch must project what the same replies commit
one by one (`service.complete`), re-read after a reply that ends its flow, and a failing
reply must fail no other (the engine then commits each alone)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from flow_helpers import specs, sub

from clawtower.core.errors import NotFound
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.replies import Reply, complete_many
from clawtower.core.flows.service import Flows, Outcome, complete, decompose
from clawtower.core.store import open_store

# columns that hold a sequence number or a commit time: the batch orders its events
# differently (both replies, then the dispatch), the rows are otherwise the same
ORDERING = {"seq", "last_seq", "at", "ts", "processed_at", "dispatched_at", "started_at",
            "ended_at", "updated_at", "created_at"}
TABLES = {"flows": "id", "flow_tasks": "task_id", "flow_messages": "msg_id",
          "session_messages": "msg_id", "flow_ignored": "msg_id"}
PLAN = [sub("x", "W"), sub("y", "W"), sub("z", "W", "x", "y"), sub("v", "W", "x")]


async def rows(store: Any) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for table, key in TABLES.items():
        got = await store.fetchall(f"SELECT * FROM {table} ORDER BY {key}")
        out[table] = [{k: v for k, v in r.items() if k not in ORDERING} for r in got]
    return out


async def decomposed(store: Any, plan: list[dict[str, Any]]) -> tuple[str, str]:
    await specs(store, {"A": ["*"], "W": []})
    fid = await Flows(store).start("A", "the job")
    root = f"{fid}/root"
    await store.execute(lambda tx: decompose(tx, root, plan))
    return fid, root


@pytest.mark.both_backends
async def test_a_batch_projects_what_the_replies_commit_one_by_one(
        store: Any, tmp_path: Path) -> None:
    one = await open_store(tmp_path / "one-by-one.db")
    try:
        _, root = await decomposed(one, PLAN)
        singles: list[Outcome] = []
        for local in ("x", "y"):
            tid = f"{root}/{local}"
            singles.append(await one.execute(
                lambda tx, tid=tid: complete(tx, tid, True, f"{tid} done", "execute", 2)))
        _, root_b = await decomposed(store, PLAN)
        assert root_b == root
        batch = await store.execute(lambda tx: complete_many(tx, [
            Reply(f"{root}/x", f"{root}/x done", "execute", 2),
            Reply(f"{root}/y", f"{root}/y done", "execute", 2)]))
        assert await rows(store) == await rows(one)
        assert await store.verify_projections() == []
    finally:
        await one.close()
    # x unblocked v, x and y together z: dispatched with the same inputs either way
    alone = sorted((i.local_id, str(i.context)) for o in singles for i in o.items)
    together = sorted((i.local_id, str(i.context)) for o in batch for i in o.items)
    assert alone == together == [
        ("v", str({"inputs": {"x": f"{root}/x done"}})),
        ("z", str({"inputs": {"x": f"{root}/x done", "y": f"{root}/y done"}}))]
    assert batch[0].items == [] and len(batch[1].items) == 2


async def test_the_batch_queues_the_synthesis_of_the_coordinator_it_emptied(
        store: Any) -> None:
    _, root = await decomposed(store, [sub("x", "W"), sub("y", "W")])
    outs = await store.execute(lambda tx: complete_many(tx, [
        Reply(f"{root}/x", "x", "execute"), Reply(f"{root}/y", "y", "execute")]))
    assert [(i.kind, i.task_id) for i in outs[-1].items] == [("synth", root)]
    row = await store.fetchone("SELECT status, open_children FROM flow_tasks WHERE"
                               " task_id=?", (root,))
    assert row == {"status": "synthesizing", "open_children": 0}


async def test_a_reply_after_its_flow_ended_in_the_batch_is_ignored(store: Any) -> None:
    await specs(store, {"A": ["*"], "W": []})
    flows = Flows(store)
    ended = await flows.start("A", "one step")
    other, root = await decomposed(store, [sub("x", "W"), sub("y", "W")])
    outs = await store.execute(lambda tx: complete_many(tx, [
        Reply(f"{ended}/root", "all done", "execute"),
        Reply(f"{root}/x", "x", "execute"),
        Reply(f"{ended}/root", "again", "execute")]))
    assert [o.finished for o in outs] == ["done", "", ""]
    assert outs[2].ignored == f"task {ended}/root is done"
    assert (await flows.get(ended))["flow"]["result"] == "all done"
    got = {t["task_id"]: t["status"] for t in (await flows.get(other))["tasks"]}
    assert got == {root: "waiting", f"{root}/x": "done", f"{root}/y": "dispatched"}
    ignored = await store.fetchall("SELECT flow_id, task_id FROM flow_ignored")
    assert ignored == [{"flow_id": ended, "task_id": f"{ended}/root"}]
    assert await store.verify_projections() == []


async def test_an_unknown_task_in_a_batch_fails_only_its_own_reply(store: Any) -> None:
    _, root = await decomposed(store, [sub("x", "W"), sub("y", "W")])
    with pytest.raises(NotFound):
        await store.execute(lambda tx: complete_many(tx, [
            Reply(f"{root}/x", "x", "execute"), Reply(f"{root}/nope", "?", "execute")]))
    engine = FlowEngine(store, brain=None)  # type: ignore[arg-type]
    good, bad = await asyncio.gather(
        engine._reply(Reply(f"{root}/x", "x", "execute")),
        engine._reply(Reply(f"{root}/nope", "?", "execute")), return_exceptions=True)
    assert isinstance(good, Outcome) and good.ignored == ""
    assert isinstance(bad, NotFound)
    row = await store.fetchone("SELECT status, result FROM flow_tasks WHERE task_id=?",
                               (f"{root}/x",))
    assert row == {"status": "done", "result": "x"}


async def test_a_reply_whose_turn_was_cancelled_still_commits(store: Any) -> None:
    _, root = await decomposed(store, [sub("x", "W"), sub("y", "W")])
    engine = FlowEngine(store, brain=None)  # type: ignore[arg-type]
    waiting = asyncio.create_task(engine._reply(Reply(f"{root}/x", "x", "execute")))
    await asyncio.sleep(0)  # queued in this pass of the loop
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    while engine._committing or engine._replies:
        await asyncio.sleep(0.01)
    row = await store.fetchone("SELECT status, result FROM flow_tasks WHERE task_id=?",
                               (f"{root}/x",))
    assert row == {"status": "done", "result": "x"}
