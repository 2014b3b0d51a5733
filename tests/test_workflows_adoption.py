"""A workflow run whose driver is killed (-9) mid-step is adopted and continues at that step.

Deterministic kill points: each step that matters waits on a hold file, the test kills the
driving `clawtower` process once the step is inside, then adopts the run (`workflow recover`,
the core API, or an engine's sweep). The random-timing version (>= 50 kill points) is the slow
test at the end (tests/workflows/killtrials.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clawtower.core import leases
from clawtower.core.agents.registry import AgentSet
from clawtower.core.engine import Engine
from clawtower.core.errors import Conflict
from clawtower.core.store import open_store
from clawtower.core.workflows.service import Workflows, lease_name
from tests.workflows.killtrials import LINES, run_trials

CLAWTOWER = str(Path(sys.executable).with_name("clawtower"))

# each step announces it is inside (touch in-X), then waits while hold-X exists
FLOW = """\
steps:
  - id: a
    run: touch in-a; while [ -f hold-a ]; do sleep 0.02; done; echo a >> out.txt
  - id: b
    x-idempotent: true
    run: >-
      touch in-b; while [ -f hold-b ]; do sleep 0.02; done;
      grep -qx b out.txt || echo b >> out.txt
  - id: gate
    approval: "go on?"
  - id: c
    run: echo c >> out.txt; touch in-c; while [ -f hold-c ]; do sleep 0.02; done
  - id: e
    run: echo e >> out.txt; cat out.txt
"""


def _wait(pred: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Dir:
    def __init__(self, root: Path, flow: str = FLOW) -> None:
        self.root = root
        self.db = root / "store.db"
        self.flow = root / "flow.lobster"
        self.flow.write_text(flow)

    def hold(self, *steps: str) -> None:
        for s in steps:
            (self.root / f"hold-{s}").touch()

    def release(self, step: str) -> None:
        (self.root / f"hold-{step}").unlink()

    def inside(self, step: str) -> bool:
        return (self.root / f"in-{step}").exists()

    def lines(self) -> list[str]:
        out = self.root / "out.txt"
        return out.read_text().split() if out.exists() else []

    def start(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen([CLAWTOWER, *argv, "--db", str(self.db)], cwd=self.root,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def cli(self, *argv: str) -> tuple[int, Any, str]:
        p = self.start(*argv)
        out, err = p.communicate(timeout=120)
        try:
            parsed: Any = json.loads(out)
        except ValueError:
            parsed = out
        return p.returncode, parsed, err

    def kill_when(self, proc: subprocess.Popen[str], step: str) -> None:
        """SIGKILL the driver once `step` is inside its command; reap it (its pid is gone)."""
        _wait(lambda: self.inside(step) or proc.poll() is not None, what=f"step {step}")
        assert proc.poll() is None, proc.communicate()
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        (self.root / f"in-{step}").unlink()

    def kill_inside(self, step: str, *argv: str) -> None:
        """Drive `argv` until `step` is inside its command, SIGKILL the driver there, then
        release the step (its own process died with the driver)."""
        self.hold(step)
        self.kill_when(self.start(*argv), step)
        self.release(step)

    def run_row(self) -> dict[str, Any]:
        code, run, err = self.cli("workflow", "show", "W-1", "--json")
        assert code == 0, err
        assert isinstance(run, dict)
        return run


def _events(d: Dir, kind: str) -> list[dict[str, Any]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{d.db}?mode=ro", uri=True)
    try:
        return [json.loads(p) for (p,) in conn.execute(
            "SELECT payload FROM events WHERE type=? ORDER BY seq", (kind,))]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # the file exists, its schema is not committed yet
            return []
        raise
    finally:
        conn.close()


def test_an_unmarked_step_killed_mid_flight_waits_for_the_operator(tmp_path: Path) -> None:
    d = Dir(tmp_path)
    # the step's own process dies with its driver: releasing it writes nothing
    d.kill_inside("a", "workflow", "run", str(d.flow))
    time.sleep(0.3)
    assert d.lines() == []
    code, env, err = d.cli("workflow", "recover", "W-1")
    assert code == 0, err
    assert env["status"] == "needs_operator"
    op = env["requiresOperator"]
    assert op["stepId"] == "a" and op["choices"] == ["retry", "skip", "cancel"]
    assert op["reason"].startswith("step a was interrupted when the process driving the run"
                                   " died") and "x-idempotent: true" in op["reason"]
    run = d.run_row()
    assert (run["status"], run["gate"]["kind"], run["gate"]["step"]) == (
        "paused", "interrupted", "a")
    assert [s["status"] for s in run["steps"]][:2] == ["interrupted", "pending"]
    # nobody adopts a run waiting for its operator
    code, _, err = d.cli("workflow", "recover", "W-1")
    assert code == 2 and "waits for the operator" in err
    # the line is missing: the operator retries; the run goes on to its gate
    code, env, err = d.cli("workflow", "recover", "W-1", "--retry")
    assert code == 0 and env["status"] == "needs_approval", (env, err)
    code, env, err = d.cli("workflow", "resume", "--id", env["requiresApproval"]["approvalId"],
                           "--approve", "yes")
    assert code == 0 and env["status"] == "ok", (env, err)
    assert sorted(d.lines()) == sorted(["a", "b", "c", "e"])
    [recovered] = _events(d, "workflow.recovered")
    assert recovered["decision"] == "retry"


def test_a_step_marked_safe_to_repeat_runs_again_on_adoption(tmp_path: Path) -> None:
    d = Dir(tmp_path)
    d.kill_inside("b", "workflow", "run", str(d.flow))
    code, env, err = d.cli("workflow", "recover", "W-1")
    assert code == 0 and env["status"] == "needs_approval", (env, err)
    [adopted] = _events(d, "workflow.adopted")
    assert (adopted["step_id"], adopted["index"], adopted["rerun"]) == ("b", 1, True)
    assert adopted["previous_owner"] and adopted["owner"] != adopted["previous_owner"]
    assert d.lines() == ["a", "b"]  # a ran once, before the kill; b once, on adoption
    # a step's start is its own event, or rides in the result before it (issue 24.2)
    starts = [e["step_id"] for e in _events(d, "workflow.step_started")] + [
        e["next"]["step_id"] for e in _events(d, "workflow.step_finished") if e.get("next")]
    assert starts.count("a") == 1 and starts.count("b") == 2


def test_an_approval_stays_approved_when_its_driver_dies(tmp_path: Path) -> None:
    d = Dir(tmp_path)
    code, env, _ = d.cli("workflow", "run", str(d.flow))
    assert env["status"] == "needs_approval"
    d.kill_inside("c", "workflow", "resume", "--id", env["requiresApproval"]["approvalId"],
                  "--approve", "yes")
    code, env, err = d.cli("workflow", "recover", "W-1")
    assert env["status"] == "needs_operator" and env["requiresOperator"]["stepId"] == "c"
    run = d.run_row()
    gate = next(s for s in run["steps"] if s["id"] == "gate")
    assert gate["status"] == "done" and gate["result"]["approved"] is True
    # c had written its line before the kill: the operator skips it; no second approval
    assert d.lines().count("c") == 1
    code, env, err = d.cli("workflow", "recover", "W-1", "--skip")
    assert code == 0 and env["status"] == "ok", (env, err)
    assert d.lines() == ["a", "b", "c", "e"]
    # asked once: the gate's approvals item rides in its pause (issue 24.2)
    assert [bool(e["asked"]) for e in _events(d, "workflow.paused")] == [True]
    assert _events(d, "approval.requested") == []
    run = d.run_row()
    assert next(s for s in run["steps"] if s["id"] == "c")["status"] == "skipped"


# The step's background child waits for `go` (not for a time: beside another suite the
# adopter's own start took longer than a 1.5 s sleep) and leaves its pid in bg.pid.
BACKGROUND = ("(while [ ! -f go ]; do sleep 0.02; done; echo late >> out.txt) &"
              " echo $! > bg.pid; touch in-bg; wait")


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped is not: this container's pid 1 may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize("how", ["shell", "sub-workflow", "pipeline exec"])
def test_the_adopter_ends_what_the_step_left_in_its_process_group(tmp_path: Path,
                                                                   how: str) -> None:
    if how == "sub-workflow":
        (tmp_path / "child.lobster").write_text(f"steps:\n  - id: inner\n    run: {BACKGROUND}\n")
        d = Dir(tmp_path, "steps:\n  - id: bg\n    workflow: child.lobster\n")
    elif how == "pipeline exec":
        d = Dir(tmp_path, f"steps:\n  - id: bg\n    pipeline: >-\n      exec --shell"
                          f" '{BACKGROUND}'\n")
    else:
        d = Dir(tmp_path, f"steps:\n  - id: bg\n    run: {BACKGROUND}\n")
    driver = d.start("workflow", "run", str(d.flow))
    _wait(lambda: bool(d.db.exists() and [e for e in _events(d, "workflow.step_spawned")
                                          if e["step_id"] == "bg"]),
          what="the step's process group recorded under the top-level step")
    d.kill_when(driver, "bg")
    child = int((tmp_path / "bg.pid").read_text())
    assert _alive(child)  # the driver is gone; the step's group lives on
    code, env, err = d.cli("workflow", "recover", "W-1")
    assert env["status"] == "needs_operator", (env, err)
    _wait(lambda: not _alive(child), what="the adopter to end the step's background child")
    (tmp_path / "go").touch()
    assert d.lines() == []
    code, env, _ = d.cli("workflow", "recover", "W-1", "--cancel")
    assert code == 0 and env["status"] == "cancelled"
    assert d.run_row()["status"] == "cancelled"


def test_a_run_with_a_live_driver_is_not_adopted(tmp_path: Path) -> None:
    d = Dir(tmp_path)
    d.hold("a")
    driver = d.start("workflow", "run", str(d.flow))
    try:
        _wait(lambda: d.inside("a"), what="step a")
        code, _, err = d.cli("workflow", "recover", "W-1")
        assert code == 2 and "'W-1': driven by" in err and "lease until" in err, err
        code, _, err = d.cli("workflow", "recover", "W-1", "--retry")
        assert code == 2 and "no interrupted step waits" in err, err
        code, _, err = d.cli("workflow", "recover", "W-9")
        assert code == 2 and "'W-9': no such run" in err
        d.release("a")
        out, _ = driver.communicate(timeout=120)
        assert json.loads(out)["status"] == "needs_approval"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()


def test_a_step_start_is_committed_before_its_process_runs(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1])\n"
        "print(c.execute(\"SELECT count(*) FROM events WHERE type='workflow.step_started'\")"
        ".fetchone()[0])\n")
    d = Dir(tmp_path, f"steps:\n  - id: probe\n    run: {sys.executable} probe.py store.db\n")
    code, env, err = d.cli("workflow", "run", str(d.flow))
    assert code == 0, (env, err)
    assert env["output"] == [1]  # its own start was already visible to another connection


async def test_an_engine_adopts_a_run_whose_driver_died(tmp_path: Path) -> None:
    d = Dir(tmp_path)
    d.hold("b")
    driver = d.start("workflow", "run", str(d.flow))
    await asyncio.to_thread(d.kill_when, driver, "b")
    store = await open_store(d.db)
    engine = Engine(store, AgentSet.simulated(), lease_ttl_s=1.0,
                    workflows=Workflows(store, cwd="/", stderr=lambda _t: None))
    task = asyncio.create_task(engine.run())
    try:
        wf = Workflows(store, stderr=lambda _t: None)
        assert (await wf.list())[0]["driver"] == "gone"
        for _ in range(1200):  # b runs again, in the engine (it waits on its hold file)
            if d.inside("b"):
                break
            await asyncio.sleep(0.05)
        assert d.inside("b"), engine.adoption_errors
        [run] = await wf.list()
        assert (run["status"], run["driver"]) == ("running", "alive")  # the engine drives it
        d.release("b")
        for _ in range(1200):
            row = await store.fetchone("SELECT status FROM workflow_runs WHERE id='W-1'")
            if row and row["status"] == "paused":
                break
            await asyncio.sleep(0.05)
        assert row is not None and row["status"] == "paused", engine.adoption_errors
        assert d.lines() == ["a", "b"]  # in the run's own cwd, not the engine's ("/")
        assert await store.verify_projections() == []  # the new events replay to the same
    finally:
        engine.stop()
        await task
        await store.close()


async def _taken_over_mid_step(store: Any, tmp_path: Path, steps: str,
                               ttl: float) -> None:
    """Drive a run whose first step is running when another process takes its lease (as
    after a stall past the TTL); the first driver must give up with 'adopted'."""
    flow = tmp_path / "flow.lobster"
    flow.write_text(steps)
    first = Workflows(store, cwd=str(tmp_path), stderr=lambda _t: None, lease_ttl_s=ttl)
    running = asyncio.create_task(first.run(str(flow)))
    for _ in range(400):
        if await store.fetchone("SELECT 1 AS x FROM workflow_steps WHERE status='running'"):
            break
        await asyncio.sleep(0.02)
    assert await store.execute(lambda tx: leases._acquire(
        tx, lease_name("W-1"), "elsewhere:1:1#x", 60, holder_gone=lambda _o: True))
    envelope = await asyncio.wait_for(running, 30)
    assert envelope["ok"] is False and "another process adopted it" in \
        envelope["error"]["message"]


async def test_a_driver_whose_run_was_adopted_stops_without_writing(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "store.db")
    try:
        await _taken_over_mid_step(store, tmp_path, "steps:\n  - id: slow\n    run: sleep 2;"
                                   " echo slow >> out.txt\n  - id: after\n    run: echo"
                                   " after >> out.txt\n", ttl=0.6)
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id='W-1'")
        assert run is not None and run["status"] == "running"  # left to its new driver
        assert not (tmp_path / "out.txt").exists()  # its step's process group was killed
        with pytest.raises(Conflict):
            await Workflows(store, stderr=lambda _t: None).adopt("W-1")
    finally:
        await store.close()


@pytest.mark.slow
def test_random_kill_points_over_run_and_resume() -> None:
    """>= 50 random SIGKILLs of the driving command: every run completes, each line once."""
    with tempfile.TemporaryDirectory() as tmp:
        figures = run_trials(30, 11, Path(tmp))
    assert figures.failures == []
    assert figures.kill_points >= 50
    assert figures.completed == figures.trials == 30
    assert figures.duplicate_lines == 0 and figures.missing_lines == 0
    assert figures.reasons_naming_step == figures.paused_with_reason
    assert len(LINES) == 6


def test_where_an_adopted_run_goes_on() -> None:
    from clawtower.core.workflows.adoption import _plan

    steps: list[dict[str, Any]] = [
        {"id": "a", "run": "echo a"}, {"id": "g", "approval": True},
        {"id": "m", "run": "echo m", "x-idempotent": True}, {"id": "u", "run": "echo u"}]

    def row(status: str, result: Any = None, error: str | None = None) -> dict[str, Any]:
        return {"status": status, "result": result, "error": error}

    done = row("done", "{}")
    assert _plan(steps, {}, set()).index == 0  # nothing had started
    assert vars(_plan(steps, {"a": done}, set())) == {"index": 1, "step_id": None,
                                                      "rerun": False, "fail": None}
    # started, no result: a gate runs again, a marked step runs again, others wait
    assert vars(_plan(steps, {"a": done, "g": row("running")}, set()))["rerun"] is True
    got = _plan(steps, {"a": done, "g": done, "m": row("running")}, set())
    assert (got.index, got.step_id, got.rerun) == (2, "m", True)
    got = _plan(steps, {"a": done, "g": done, "m": done, "u": row("running")}, set())
    assert (got.index, got.step_id, got.rerun) == (3, "u", False)
    # between two attempts of its retry: the file allows another one
    assert _plan(steps, {"a": row("retrying")}, set()).rerun is True
    # a step that had failed the run (on_error stop) fails it; skip_rest ends it
    assert _plan(steps, {"a": row("failed", None, "boom")}, set()).fail == "boom"
    assert _plan(steps, {"a": row("failed", "{}", "x")}, {"a"}).index == 4
    assert _plan(steps, {"a": row("failed", "{}", "x")}, set()).index == 1  # continue
    assert _plan(steps, {s["id"]: done for s in steps}, set()).index == 4


HANDOVER = """\
steps:
  - id: a
    run: touch in-a; while [ -f hold-a ]; do sleep 0.02; done; echo a >> out.txt
  - id: b
    run: echo b >> out.txt
"""


async def test_a_stopping_driver_hands_its_run_over_at_the_next_step(tmp_path: Path) -> None:
    """hand_over: the step under way finishes, the next one is not started here; the run is
    left running with its lease free (nothing failed), and another driver runs the rest."""
    d = Dir(tmp_path, HANDOVER)
    d.hold("a")
    store = await open_store(d.db)
    try:
        first = Workflows(store, cwd=str(tmp_path), stderr=lambda _t: None)
        running = asyncio.create_task(first.run(str(d.flow)))
        await asyncio.to_thread(_wait, lambda: d.inside("a"), 60, "step a")
        first.hand_over()
        d.release("a")
        envelope = await asyncio.wait_for(running, 60)
        assert (envelope["ok"], envelope["status"]) == (True, "handed_over")
        assert d.lines() == ["a"]
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id='W-1'")
        assert run is not None and run["status"] == "running"
        assert await Workflows(store, stderr=lambda _t: None).adoptable() == ["W-1"]
        done = await Workflows(store, stderr=lambda _t: None).adopt("W-1")
        assert done["status"] == "ok" and d.lines() == ["a", "b"]  # b ran once, elsewhere
        types = [t for (t,) in await asyncio.to_thread(_types, d.db)]
        assert "workflow.failed" not in types and types.count("workflow.step_started") == 2
    finally:
        await store.close()


async def test_a_stopping_engine_leaves_a_step_still_running_interrupted_not_failed(
        tmp_path: Path) -> None:
    """Engine.stop hands runs over; a step still running after handover_s is cancelled (its
    group killed) and the run is left as a kill -9 leaves it: interrupted, for an adopter
    to settle by the repeat rule, never recorded failed."""
    d = Dir(tmp_path, HANDOVER)
    d.hold("a")
    store = await open_store(d.db)
    try:
        wf = Workflows(store, cwd=str(tmp_path), stderr=lambda _t: None)
        await wf.enqueue(str(d.flow))
        engine = Engine(store, AgentSet.simulated(), lease_ttl_s=1.0, handover_s=0.5,
                        workflows=Workflows(store, cwd="/", stderr=lambda _t: None))
        task = asyncio.create_task(engine.run())
        await asyncio.to_thread(_wait, lambda: d.inside("a"), 60, "step a in the engine")
        engine.stop()
        await asyncio.wait_for(task, 30)
        run = await store.fetchone("SELECT status FROM workflow_runs WHERE id='W-1'")
        assert run is not None and run["status"] == "running"
        env = await Workflows(store, stderr=lambda _t: None).adopt("W-1")
        assert env["status"] == "needs_operator" and env["requiresOperator"]["stepId"] == "a"
        types = [t for (t,) in await asyncio.to_thread(_types, d.db)]
        assert "workflow.failed" not in types
    finally:
        d.release("a")
        await store.close()


def _types(db: Path) -> list[tuple[str]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT type FROM events WHERE entity='workflow' ORDER BY seq"
                            ).fetchall()
    finally:
        conn.close()


async def test_a_stalled_driver_cannot_record_a_result_after_losing_its_run(
        tmp_path: Path) -> None:
    """The step's result is fenced by the lease in its own commit: taken over while the
    step ran (its renewer not due for 20 s), the old driver records nothing for it."""
    store = await open_store(tmp_path / "store.db")
    try:
        await _taken_over_mid_step(store, tmp_path, "steps:\n  - id: slow\n    run: sleep 1\n"
                                   "  - id: after\n    run: echo x\n", ttl=60)
        finished = await store.fetchall("SELECT seq FROM events WHERE"
                                        " type='workflow.step_finished'")
        assert finished == []
    finally:
        await store.close()
