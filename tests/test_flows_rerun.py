"""Going back in a flow (issue 37): `flow rerun F-1/root/NODE` reuses every reply not
downstream of NODE and runs NODE, its dependents and the syntheses above them again; the
rest is not run again (the brain sees only what reruns), the log of the new flow grows with
the rerun nodes, not the flow, and a store with reruns verifies and rebuilds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from flow_helpers import GatedBrain, counts, specs, sub

from clawtower.core.errors import Conflict, NotFound, ValidationError
from clawtower.core.flows.engine import FlowEngine
from clawtower.core.flows.rerun import rerun_flow
from clawtower.core.flows.service import Flows

# root -> a, b (after a), c; a -> a1, a2 (after a1); c -> c1
PLANS = {"root": [sub("a", "B"), sub("b", "W", "a"), sub("c", "B")],
         "a": [sub("a1", "W"), sub("a2", "W", "a1")], "c": [sub("c1", "W")]}


async def drive(store: Any, brain: GatedBrain, fid: str) -> dict[str, Any]:
    eng = FlowEngine(store, brain)
    await asyncio.wait_for(eng.run_flow(fid), 60)
    assert eng.errors == []
    return await Flows(store).get(fid)


def local(got: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"].split("/", 1)[1]: t for t in got["tasks"]}


async def origin(store: Any) -> str:
    await specs(store, {"A": ["B", "W"], "B": ["W"], "W": []})
    fid = await Flows(store).start("A", "the job")
    got = await drive(store, GatedBrain(PLANS), fid)
    assert got["flow"]["status"] == "done"
    return fid


async def test_rerun_of_a_leaf_reuses_the_rest(store: Any) -> None:
    fid = await origin(store)
    before = await Flows(store).get(fid)
    new = await rerun_flow(store, f"{fid}/root/a/a1", "do a1 better", by="alice")
    brain = GatedBrain(PLANS)
    got = await drive(store, brain, new)
    assert got["flow"]["status"] == "done"
    # ran again: a1, a2 (after a1), the synthesis of a, b (after a), the root's synthesis
    assert sorted(brain.seen) == sorted([
        ("decide", f"{new}/root/a/a1"), ("work", f"{new}/root/a/a1"),
        ("decide", f"{new}/root/a/a2"), ("work", f"{new}/root/a/a2"),
        ("synth", f"{new}/root/a"), ("decide", f"{new}/root/b"), ("work", f"{new}/root/b"),
        ("synth", f"{new}/root")])
    t = local(got)
    assert t["root/c"]["mode"] == t["root/c/c1"]["mode"] == "reused"
    assert t["root/c"]["result"] == local(before)["root/c"]["result"]
    assert t["root/a/a1"]["instruction"] == "do a1 better"
    assert t["root/a/a1"]["mode"] == "execute" and t["root"]["status"] == "done"
    c = await counts(store, new)  # TASKs sent: only the rerun nodes
    assert set(c["sent"]) == {f"{new}/root/a/a1", f"{new}/root/a/a2", f"{new}/root/b"}
    assert await Flows(store).get(fid) == before  # the origin is untouched
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []


async def test_rerun_of_a_node_with_a_subtree_decides_again(store: Any) -> None:
    fid = await origin(store)
    new = await rerun_flow(store, f"{fid}/root/c")
    brain = GatedBrain(PLANS)
    got = await drive(store, brain, new)
    assert got["flow"]["status"] == "done"
    ran = {task for _, task in brain.seen}
    assert ran == {f"{new}/root/c", f"{new}/root/c/c1", f"{new}/root"}
    t = local(got)
    assert {k for k, v in t.items() if v["mode"] == "reused"} == {
        "root/a", "root/a/a1", "root/a/a2", "root/b"}
    assert await store.verify_projections() == []


async def test_bad_reruns_write_nothing(store: Any) -> None:
    fid = await origin(store)
    running = await Flows(store).start("A", "another job")
    last = await store.last_seq()
    for node, instruction, error, match in (
            ("F-9/root", None, NotFound, "F-9"),
            (f"{fid}/root/zz", None, NotFound, "no node"),
            (f"{running}/root", None, Conflict, "still in flight"),
            (f"{fid}/root/a", " ", ValidationError, "--instruction is empty")):
        with pytest.raises(error, match=match):
            await rerun_flow(store, node, instruction)
    assert await store.last_seq() == last


async def test_the_rerun_command_writes_o_rerun_nodes_events(store: Any) -> None:
    await specs(store, {"A": ["B", "W"], "B": ["W"], "W": []})
    wide = {"root": [sub(f"s{i}", "B") for i in range(40)],
            **{f"s{i}": [sub(f"s{i}.{j}", "W") for j in range(5)] for i in range(40)}}
    fid = await Flows(store).start("A", "the job")
    assert (await drive(store, GatedBrain(wide), fid))["flow"]["nodes"] == 241
    last = await store.last_seq()
    new = await rerun_flow(store, f"{fid}/root/s7/s7.3")
    written = await store.fetchall("SELECT type FROM events WHERE seq > ?", (last,))
    # the rerun (one event with the tree), the leaf's TASK, its agent's session (+ link)
    assert sorted(r["type"] for r in written) == [
        "flow.rerun", "flow.session_linked", "flow.task_sent", "session.created"]
    brain = GatedBrain(wide)
    got = await drive(store, brain, new)
    assert got["flow"]["status"] == "done" and got["flow"]["nodes"] == 241
    assert {t for _, t in brain.seen} == {f"{new}/root/s7/s7.3", f"{new}/root/s7",
                                          f"{new}/root"}


async def test_cli_flow_rerun_and_show(tmp_path: Any, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    from pathlib import Path

    from clawtower.cli.main import main

    db = str(tmp_path / "f.db")
    cfg = str(Path(__file__).resolve().parents[1] / "examples" / "flows" / "agents.yaml")

    def cli(*argv: str) -> int:
        return main([*argv, "--db", db])

    for name, subs in (("lead", "researcher,writer"), ("researcher", "fetcher"),
                       ("writer", ""), ("fetcher", "")):
        assert await asyncio.to_thread(cli, "agents", "spec", "set", name, "--subagents",
                                       subs) == 0
    assert await asyncio.to_thread(cli, "flow", "run", "lead", "Q3 briefing", "--wait",
                                   "--config", cfg) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(cli, "flow", "rerun", "F-1/root/research/sales",
                                   "--instruction", "again", "--wait", "--config", cfg) == 0
    assert "F-2: rerun of F-1/root/research/sales" in capsys.readouterr().err
    assert await asyncio.to_thread(cli, "flow", "show", "F-2") == 0
    out = capsys.readouterr().out
    assert "rerun of F-1/root/research/sales" in out
    assert "costs [done, reused]" in out and "outline [done, reused]" in out
    assert "sales [done]" in out and "draft [done]" in out
    # a session of a flow is not forked: the flow is rerun
    sid = (await asyncio.to_thread(cli, "session", "list", "--json"), capsys.readouterr())[1]
    import json

    flow_session = next(s["id"] for s in json.loads(sid.out)
                        if s["created_by"].startswith("flow:"))
    assert await asyncio.to_thread(cli, "session", "fork", flow_session, "--at", "1") == 2
    assert "flow rerun" in capsys.readouterr().err
    assert await asyncio.to_thread(cli, "flow", "rerun", "F-1/root/zz") == 2
    assert "no node" in capsys.readouterr().err
    assert await asyncio.to_thread(cli, "store", "verify") == 0
