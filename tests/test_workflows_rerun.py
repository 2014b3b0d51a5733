"""Going back in a workflow run (issue 37): `rerun(W-1, STEP)` reuses the recorded outputs of
the steps before STEP (they do not run again: counted by the files their shell commands
append to) and runs from STEP on; every gate asks again, its approval naming the rerun, and
no approval of the origin lets an effect run again. Bad input: one line, nothing written."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from clawtower.core.approvals import Approvals
from clawtower.core.errors import Conflict, NotFound, ValidationError
from clawtower.core.workflows.service import Workflows

FLOW = """
name: deploy
args:
  who: {default: team}
steps:
  - id: prep
    run: echo x >> prep.count; echo '{"n":1}'
  - id: build
    run: echo x >> build.count; echo '{"who":"${who}"}'
  - id: gate
    approval: "Apply for ${who}?"
    stdin: $build.json
  - id: apply
    run: echo x >> apply.count; echo "applied $gate.approvedBy"
    when: $gate.approved
"""


@pytest.fixture
def wf(store: Any, tmp_path: Path) -> Workflows:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return Workflows(store, env=env, cwd=str(tmp_path), stderr=lambda s: None)


def counts(tmp_path: Path) -> dict[str, int]:
    return {n: len((tmp_path / f"{n}.count").read_text().splitlines())
            if (tmp_path / f"{n}.count").exists() else 0 for n in ("prep", "build", "apply")}


async def done_run(wf: Workflows, tmp_path: Path) -> str:
    (tmp_path / "wf.lobster").write_text(FLOW)
    env = await wf.run(str(tmp_path / "wf.lobster"))
    assert env["status"] == "needs_approval", env
    out = await wf.resume(approval_id=env["requiresApproval"]["approvalId"], approve=True,
                          approved_by="bob")
    assert out["status"] == "ok", out
    assert counts(tmp_path) == {"prep": 1, "build": 1, "apply": 1}
    return "W-1"


async def test_rerun_from_a_step_before_the_gate_reuses_earlier_outputs_and_asks_again(
        wf: Workflows, tmp_path: Path, store: Any) -> None:
    origin = await done_run(wf, tmp_path)
    before = await wf.get(origin)
    new, env = await wf.rerun(origin, "build", {"who": "ops"}, by="carol")
    assert new == "W-2" and env["status"] == "needs_approval", env
    assert counts(tmp_path) == {"prep": 1, "build": 2, "apply": 1}  # prep not run again
    assert env["requiresApproval"]["items"] == [{"who": "ops"}]
    [a] = await Approvals(store).pending()
    assert a["id"] == env["requiresApproval"]["approvalId"]
    assert "(rerun of W-1 from build)" in a["title"]
    assert a["context"]["rerun_of"] == {"origin": "W-1", "from_step": "build"}
    run = await wf.get(new)
    assert run["rerun_of"] == {"run": "W-1", "from_step": "build", "by": "carol"}
    assert [(s["id"], s["status"], s["reused"]) for s in run["steps"]] == [
        ("prep", "done", True), ("build", "done", False), ("gate", "waiting", False),
        ("apply", "pending", False)]
    assert run["steps"][0]["result"] == before["steps"][0]["result"]
    out = await wf.resume(approval_id=a["id"], approve=True, approved_by="dave")
    assert out["status"] == "ok" and "applied dave" in json.dumps(out["output"]), out
    assert counts(tmp_path) == {"prep": 1, "build": 2, "apply": 2}
    assert await wf.get(origin) == {**before, "cost": before["cost"]}  # untouched
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []
    assert (await wf.get(new))["steps"][0]["reused"] is True


async def test_rerun_after_an_approved_gate_asks_that_gate_again_before_any_effect(
        wf: Workflows, tmp_path: Path, store: Any) -> None:
    origin = await done_run(wf, tmp_path)
    new, env = await wf.rerun(origin, "apply", by="carol")
    assert env["status"] == "needs_approval", env  # W-1's approval does not carry over
    assert counts(tmp_path) == {"prep": 1, "build": 1, "apply": 1}  # nothing ran
    [a] = await Approvals(store).pending()
    assert a["subject"] == new and "(rerun of W-1 from apply)" in a["title"]
    assert a["context"]["step"] == "gate"
    out = await wf.resume(approval_id=a["id"], approve=True, approved_by="erin")
    assert out["status"] == "ok", out
    assert counts(tmp_path) == {"prep": 1, "build": 1, "apply": 2}
    assert "applied erin" in json.dumps(out["output"])
    # rejected: the effect never runs again
    _, env = await wf.rerun(origin, "apply")
    await wf.resume(approval_id=env["requiresApproval"]["approvalId"], approve=False,
                    approved_by="erin")
    assert counts(tmp_path)["apply"] == 2
    assert await store.verify_projections() == []
    await store.rebuild_projections()
    assert await store.verify_projections() == []


async def test_bad_reruns_write_nothing(wf: Workflows, tmp_path: Path, store: Any) -> None:
    (tmp_path / "bad.lobster").write_text(
        "steps:\n  - id: first\n    run: exit 3\n  - id: second\n    run: echo x >> s\n")
    env = await wf.run(str(tmp_path / "bad.lobster"))
    assert env["ok"] is False
    last = await store.last_seq()
    for call, error, match in (
            (wf.rerun("W-9", "second"), NotFound, "W-9"),
            (wf.rerun("W-1", "nope"), ValidationError,
             r"--from nope: no such step \(its steps: first, second\)"),
            (wf.rerun("W-1", "second"), Conflict,
             "step first before it has no recorded output")):
        with pytest.raises(error, match=match):
            await call
    assert await store.last_seq() == last
    assert not (tmp_path / "s").exists()


async def test_a_run_in_flight_is_refused_and_the_cli_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.cli.main import main
    from clawtower.core.store import open_store

    db = str(tmp_path / "w.db")
    (tmp_path / "wf.lobster").write_text(FLOW)
    store = await open_store(db)
    try:
        wf = Workflows(store, cwd=str(tmp_path), stderr=lambda s: None)
        await done_run(wf, tmp_path)
        running = await wf.enqueue(str(tmp_path / "wf.lobster"))  # started, nobody drives it
    finally:
        await store.close()

    def cli(*argv: str) -> int:
        return main([*argv, "--db", db])

    capsys.readouterr()
    for argv, says in ((("workflow", "rerun", running, "--from", "build"), "still in flight"),
                       (("workflow", "rerun", "W-1", "--from", "nope"), "no such step"),
                       (("workflow", "rerun", "W-7", "--from", "build"), "W-7")):
        assert await asyncio.to_thread(cli, *argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert await asyncio.to_thread(cli, "workflow", "rerun", "W-1", "--from", "build",
                                       "--args-json", '{"who": "cli"}') == 0
    finally:
        os.chdir(cwd)
    captured = capsys.readouterr()
    assert "W-3: rerun of W-1 from step build" in captured.err
    assert json.loads(captured.out)["status"] == "needs_approval"
    assert await asyncio.to_thread(cli, "workflow", "show", "W-3") == 0
    out = capsys.readouterr().out
    assert "rerun of W-1 from step build" in out and "prep (reused)" in out
    assert await asyncio.to_thread(cli, "store", "verify") == 0
