"""A paused run outlives its process: a child pauses at a gate and is SIGKILLed; this process
resumes it from the store, at the paused step, without re-running earlier steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from clawtower.cli.workflow import _detail
from clawtower.core.store import open_store
from clawtower.core.workflows.service import Workflows

ROOT = Path(__file__).resolve().parent.parent

FLOW = """
steps:
  - id: first
    run: echo ran >> first.log; echo '{"n":1}'
  - id: slow
    run: sleep 60
    when: $first.json.n == 2
  - id: gate
    approval: "continue?"
  - id: last
    run: echo "after $first.json.n" >> last.log; cat first.log
"""

CHILD = textwrap.dedent("""
    import asyncio, json, os, sys, time
    sys.path.insert(0, {root!r})
    from clawtower.core.store import open_store
    from clawtower.core.workflows.service import Workflows

    async def main():
        store = await open_store({db!r})
        wf = Workflows(store, env=dict(os.environ), cwd={cwd!r}, stderr=lambda s: None)
        env = await wf.run({file!r})
        print(json.dumps(env), flush=True)
        time.sleep(120)  # never closes the store: killed here

    asyncio.run(main())
""")


def _child(tmp_path: Path, file: Path, db: Path) -> subprocess.Popen[str]:
    code = CHILD.format(root=str(ROOT), db=str(db), cwd=str(tmp_path), file=str(file))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)


async def test_resume_after_sigkill_from_another_process(tmp_path: Path) -> None:
    file = tmp_path / "flow.lobster"
    file.write_text(FLOW)
    db = tmp_path / "store.db"
    child = _child(tmp_path, file, db)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        envelope = json.loads(line)
        assert envelope["status"] == "needs_approval"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    store = await open_store(db)
    try:
        wf = Workflows(store, env=dict(os.environ), cwd=str(tmp_path), stderr=lambda s: None)
        token = envelope["requiresApproval"]["resumeToken"]
        done = await wf.resume(token=token, approve=True)
        assert done["status"] == "ok", done
        assert done["output"] == ["ran\n"]  # `first` ran exactly once, before the kill
        assert (tmp_path / "last.log").read_text() == "after 1\n"
        run = await wf.get((await wf.list())[0]["id"])
        assert [s["status"] for s in run["steps"]] == ["done", "skipped", "done", "done"]
        assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_run_killed_mid_step_can_be_cancelled(tmp_path: Path) -> None:
    file = tmp_path / "flow.lobster"
    file.write_text("steps:\n  - id: a\n    run: echo started; sleep 60\n")
    db = tmp_path / "store.db"
    child = _child(tmp_path, file, db)
    try:
        store = await open_store(db)
        try:
            import asyncio

            for _ in range(200):
                rows = await store.fetchall("SELECT status FROM workflow_steps")
                if rows:
                    break
                await asyncio.sleep(0.05)
            wf = Workflows(store, stderr=lambda s: None)
            [alive] = await wf.list()
            assert (alive["status"], alive["driver"]) == ("running", "alive")
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            run_id = alive["id"]
            # still `running` in the store, but known to have lost its process
            [gone] = await wf.list()
            assert (gone["status"], gone["driver"]) == ("running", "gone")
            run = await wf.get(run_id)
            assert (run["status"], run["driver"]) == ("running", "gone")
            assert f"orphaned: the process driving it is gone; `clawtower workflow recover" \
                   f" {run_id}` continues it" in _detail(run)
            await wf.cancel(run_id, by="ops", reason="its process died")
            run = await wf.get(run_id)
            assert (run["status"], run["driver"]) == ("cancelled", None)
        finally:
            await store.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
