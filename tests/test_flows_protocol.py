"""Seed 003 (Clawflow): the protocol on scripted agents. Two-level chain, parallel fan-out,
recursion, a deep failure reaching the root (fail-fast, siblings cancelled), duplicate
delivery ignored, refused decompositions (unknown / forbidden agent, cycle, limits),
ready-set scheduling with context passed down, mailboxes and the store replay."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from flow_helpers import GatedBrain, counts, specs, sub, wait_status

from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.plan import FlowLimits
from clawtower.core.flows.service import Flows


async def run(store: Any, brain: Any, agent: str, text: str = "the job",
              limits: FlowLimits | None = None, **kw: Any) -> tuple[str, dict[str, Any]]:
    flows = Flows(store, limits)
    fid = await flows.start(agent, text)
    eng = FlowEngine(store, brain, **kw)
    await asyncio.wait_for(eng.run_flow(fid), 60)
    assert eng.errors == []
    return fid, await flows.get(fid)


def by_local(got: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"].split("/", 1)[1]: t for t in got["tasks"]}


async def test_two_level_chain_a_to_b(store: Any) -> None:
    await specs(store, {"A": ["B"], "B": []})
    brain = GatedBrain({"root": [sub("b", "B")]})
    fid, got = await run(store, brain, "A")
    assert got["flow"]["status"] == "done"
    assert got["flow"]["result"] == "root[b by B]"
    t = by_local(got)
    assert (t["root"]["mode"], t["root/b"]["mode"]) == ("synthesis", "execute")
    assert [k for k, _ in brain.seen] == ["decide", "decide", "work", "synth"]
    f = Flows(store)
    # B's TASK went A -> B and is archived once processed; B's REPLY went B -> A
    assert await f.mailbox("B", "inbox") == []
    arch = await f.mailbox("B", "archive")
    assert [(m["kind"], m["from_agent"], m["status"]) for m in arch] == [
        ("TASK", "A", "archived")]
    out = await f.mailbox("B", "outbox")
    assert [(m["kind"], m["to_agent"], m["body"]) for m in out] == [("REPLY", "A", "b by B")]
    a_out = await f.mailbox("A", "outbox")
    assert [(m["kind"], m["to_agent"]) for m in a_out] == [("TASK", "B"),
                                                          ("REPLY", "operator")]
    c = await counts(store, fid)
    assert set(c["sent"].values()) == {1} and set(c["replied"].values()) == {1}
    assert await store.verify_projections() == []


async def test_parallel_fan_out_dispatches_both_in_one_commit(store: Any) -> None:
    await specs(store, {"A": ["B", "C"], "B": [], "C": []})
    gate = asyncio.Event()
    brain = GatedBrain({"root": [sub("b", "B"), sub("c", "C")]}, gates={"b": gate, "c": gate})
    flows = Flows(store)
    fid = await flows.start("A", "two things")
    eng = FlowEngine(store, brain)
    task = asyncio.create_task(eng.run_flow(fid))

    async def both_running() -> bool:
        rows = await store.fetchall("SELECT status FROM flow_tasks WHERE parent_id=?",
                                    (f"{fid}/root",))
        return sorted(r["status"] for r in rows) == ["running", "running"]
    for _ in range(600):
        if await both_running():
            break
        await asyncio.sleep(0.05)
    assert await both_running(), "B and C run at the same time"
    sent = await store.fetchall("SELECT seq, ts FROM events WHERE type='flow.task_sent'"
                                " ORDER BY seq")
    decomposed = await store.fetchone("SELECT seq, ts FROM events WHERE"
                                      " type='flow.decomposed'")
    assert decomposed is not None and len(sent) == 3
    # both TASKs were written by the decomposition's own command: right after it (only the
    # two agents' session records between), in the same commit
    assert all(0 < r["seq"] - decomposed["seq"] <= 6 and r["ts"] == decomposed["ts"]
               for r in sent[1:])
    gate.set()
    row = await asyncio.wait_for(task, 60)
    assert row["status"] == "done" and row["result"] == "root[b by B, c by C]"


async def test_recursion_a_to_b_to_c(store: Any) -> None:
    await specs(store, {"A": ["B"], "B": ["C"], "C": []})
    brain = GatedBrain({"root": [sub("b", "B")], "b": [sub("c", "C")]})
    fid, got = await run(store, brain, "A")
    t = by_local(got)
    assert got["flow"]["result"] == "root[b[c by C]]"
    assert (t["root/b"]["mode"], t["root/b/c"]["depth"]) == ("synthesis", 2)
    # B coordinated its own sub-DAG: C's REPLY went to B, not to A
    out = await Flows(store).mailbox("C", "outbox")
    assert [(m["kind"], m["to_agent"]) for m in out] == [("REPLY", "B")]
    assert [t["task_id"] for t in got["tasks"]] == [f"{fid}/root", f"{fid}/root/b",
                                                   f"{fid}/root/b/c"]


async def test_ready_set_dispatches_dependents_with_their_inputs(store: Any) -> None:
    await specs(store, {"A": ["*"], "W": []})
    plan = [sub("x", "W"), sub("y", "W"), sub("z", "W", "x", "y"), sub("w", "W", "z")]
    brain = GatedBrain({"root": plan})
    _fid, got = await run(store, brain, "A")
    order = [tid.rsplit("/", 1)[1] for k, tid in brain.seen if k == "decide"]
    assert order[0] == "root" and set(order[1:3]) == {"x", "y"} and order[3:] == ["z", "w"]
    assert brain.contexts["z"]["inputs"] == {"x": "x by W", "y": "y by W"}
    assert brain.contexts["w"]["inputs"] == {"z": "z by W"}
    t = by_local(got)
    assert all(t[k]["waiting"] == 0 for k in ("root/x", "root/y", "root/z", "root/w"))
    assert got["flow"]["nodes"] == 5 and got["flow"]["done"] == 5
    assert got["flow"]["tokens"] == 4 * 3 + 5


async def test_deep_failure_reaches_the_root_and_cancels_siblings(store: Any) -> None:
    await specs(store, {"A": ["*"], "B": ["*"], "C": [], "S": []})
    never = asyncio.Event()  # the slow sibling never finishes by itself
    brain = GatedBrain({"root": [sub("b", "B"), sub("slow", "S"), sub("done", "S"),
                                 sub("after", "S", "b")],
                        "b": [sub("c", "C")]},
                       fail={"c": "disk full"}, gates={"slow": never, "c": asyncio.Event()})
    flows = Flows(store)
    fid = await flows.start("A", "the job")
    eng = FlowEngine(store, brain)
    task = asyncio.create_task(eng.run_flow(fid))
    # `done` finishes and `slow` is in flight when c fails
    await wait_status(store, f"{fid}/root/done", "done")
    await wait_status(store, f"{fid}/root/slow", "running")
    brain.gates["c"].set()
    flow = await asyncio.wait_for(task, 60)
    assert flow["status"] == "failed"
    assert flow["error"] == "subtask b (B) failed: subtask c (C) failed: disk full"
    t = by_local(await flows.get(fid))
    assert [t[k]["status"] for k in ("root", "root/b", "root/b/c")] == ["failed"] * 3
    assert t["root/slow"]["status"] == "cancelled"  # in flight: cancelled
    assert t["root/after"]["status"] == "cancelled"  # never dispatched
    assert t["root/done"]["status"] == "done" and t["root/done"]["result"] == "done by S"
    # the ERROR climbed level by level: C -> B, B -> A, A -> operator
    errs = await store.fetchall("SELECT from_agent, to_agent FROM flow_messages WHERE"
                                " kind='ERROR' ORDER BY seq")
    assert [(e["from_agent"], e["to_agent"]) for e in errs] == [
        ("C", "B"), ("B", "A"), ("A", "operator")]
    assert await flows.mailbox("S", "inbox") == []
    assert await store.verify_projections() == []


async def test_duplicate_delivery_is_ignored_and_recorded(store: Any) -> None:
    await specs(store, {"A": ["B", "C"], "B": [], "C": []})
    hold = asyncio.Event()
    brain = GatedBrain({"root": [sub("b", "B"), sub("c", "C", "b")]}, gates={"b": hold})
    flows = Flows(store)
    fid = await flows.start("A", "job")
    eng = FlowEngine(store, brain)
    task = asyncio.create_task(eng.run_flow(fid))
    b = f"{fid}/root/b"
    await wait_status(store, b, "running")
    # the same TASK message again, and a TASK with a new id for a task in progress
    dup = await flows.deliver(fid, "TASK", b, f"T:{b}", "do b")
    assert dup.ignored == "duplicate message id"
    again = await flows.deliver(fid, "TASK", b, "m-transport-7", "do b")
    assert again.ignored == f"task {b} is already running"
    # a TASK for a task whose dependencies are not done is not dispatched early
    early = await flows.deliver(fid, "TASK", f"{fid}/root/c", "m-early", "do c")
    assert early.ignored.endswith("waits on 1 dependencies")
    # a reply arriving from outside (a person answering for B) is applied once ...
    ok = await flows.deliver(fid, "REPLY", b, "m-human-1", "b by a human")
    assert ok.ignored == "" and [i.task_id for i in ok.items] == [f"{fid}/root/c"]
    # ... and its duplicate, and the engine's own late reply, are ignored
    dup_reply = await flows.deliver(fid, "REPLY", b, "m-human-1", "b by a human")
    assert dup_reply.ignored == "duplicate message id"
    hold.set()
    flow = await asyncio.wait_for(task, 60)
    assert flow["status"] == "done" and flow["result"] == "root[b by a human, c by C]"
    ignored = await store.fetchall("SELECT msg_id, reason FROM flow_ignored ORDER BY seq")
    assert [r["msg_id"] for r in ignored] == [f"T:{b}", "m-transport-7", "m-early",
                                              "m-human-1", f"R:{b}"]
    assert ignored[-1]["reason"] == f"task {b} is done"
    assert flow["ignored"] == 5
    c = await counts(store, fid)
    assert set(c["sent"].values()) == {1} and set(c["replied"].values()) == {1}
    arch = await flows.mailbox("B", "archive")
    assert [m["status"] for m in arch].count("ignored") >= 1


@pytest.mark.parametrize(("plan", "allow", "reason"), [
    ([sub("b", "Nobody")], ["*"], "subtask b: unknown agent 'Nobody'"),
    ([sub("b", "C")], ["B"], "subtask b: agent A may not delegate to C (policy.subagents: B)"),
    ([sub("b", "A")], None, "subtask b: agent A may not delegate to A (policy.subagents:"
                            " any agent but itself)"),
    ([sub("x", "B", "z"), sub("y", "B", "x"), sub("z", "B", "y")], ["*"],
     "dependency cycle: x -> z -> y -> x"),
    ([sub("x", "B"), sub("x", "C")], ["*"], "subtask id 'x' is used twice"),
    ([sub("x", "B", "q")], ["*"], "subtask x: depends on unknown subtask 'q'"),
    ([sub(f"s{i}", "B") for i in range(4)], ["*"], "4 subtasks: over the width limit of 3"),
])
async def test_refused_decomposition_names_the_reason(store: Any, plan: list[Any],
                                                      allow: list[str] | None,
                                                      reason: str) -> None:
    await specs(store, {"A": allow, "B": [], "C": []})
    brain = GatedBrain({"root": plan})
    fid, got = await run(store, brain, "A", limits=FlowLimits(max_width=3))
    assert got["flow"]["status"] == "failed"
    assert got["flow"]["error"] == f"decomposition refused: {reason}"
    assert [t["task_id"] for t in got["tasks"]] == [f"{fid}/root"]  # nothing dispatched
    refused = await store.fetchall("SELECT payload FROM events WHERE"
                                   " type='permission.refused'")
    assert [json.loads(r["payload"])["reason"] for r in refused] == [reason]


async def test_depth_limit_refuses_a_split_too_deep(store: Any) -> None:
    await specs(store, {"A": ["*"]})
    brain = GatedBrain({"root": [sub("l1", "A")], "l1": [sub("l2", "A")],
                        "l2": [sub("l3", "A")]})
    _, got = await run(store, brain, "A", limits=FlowLimits(max_depth=2))
    assert got["flow"]["error"] == ("subtask l1 (A) failed: subtask l2 (A) failed:"
                                    " decomposition refused: depth 3: over the depth limit"
                                    " of 2")


async def test_cancel_stops_a_running_flow(store: Any) -> None:
    await specs(store, {"A": ["B"], "B": []})
    brain = GatedBrain({"root": [sub("b", "B")]}, gates={"b": asyncio.Event()})
    flows = Flows(store)
    fid = await flows.start("A", "job")
    eng = FlowEngine(store, brain)
    task = asyncio.create_task(eng.run_flow(fid))
    await wait_status(store, f"{fid}/root/b", "running")
    await flows.cancel(fid, reason="not needed")
    brain.gates["b"].set()
    flow = await asyncio.wait_for(task, 60)
    assert flow["status"] == "cancelled" and flow["error"] == "not needed"
    assert (await flows.task(f"{fid}/root/b"))["status"] == "cancelled"
