"""Issue 35: `serve --until-idle` never exits with a queued, ready item. A workflow run
started for whichever engine adopts it (`Workflows.enqueue`) runs to its end first (the
other protocols: tests/test_engine_workers.py, tests/triggers/test_until_idle.py,
tests/cli/test_cli_flow.py, tests/cli/test_cli_session.py, tests/cli/test_cli_demo.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

from procs import child_env

from clawtower.core.store import open_store
from clawtower.core.workflows.service import Workflows

CLAWTOWER = Path(sys.executable).with_name("clawtower")


async def _enqueue(db: Path, folder: Path) -> str:
    path = folder / "steps.lobster"
    body = "".join(f"  - id: s{i}\n    pipeline: json\n    x-idempotent: true\n"
                   for i in range(3))
    path.write_text(f"name: load\nsteps:\n{body}")
    store = await open_store(str(db))
    try:
        return await Workflows(store, cwd=str(folder), stderr=lambda _t: None).enqueue(
            str(path))
    finally:
        await store.close()


def test_serve_until_idle_runs_an_enqueued_workflow_run(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    run_id = asyncio.run(_enqueue(db, tmp_path))
    r = subprocess.run([str(CLAWTOWER), "serve", "--until-idle", "--db", str(db)],
                       capture_output=True, text=True, timeout=180,
                       env=child_env(CLAWTOWER_HOME=str(tmp_path / "home")))
    assert r.returncode == 0, r.stderr
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (status,) = conn.execute("SELECT status FROM workflow_runs WHERE id=?",
                                 (run_id,)).fetchone()
    finally:
        conn.close()
    assert status == "ok", r.stdout + r.stderr


def test_sigterm_during_until_idle_is_a_clean_stop(tmp_path: Path) -> None:
    """A signal while `--until-idle` waits for work in flight: exit 0, as a plain `serve`."""
    import signal
    import time

    db = tmp_path / "s.db"
    path = tmp_path / "slow.lobster"
    path.write_text("steps:\n  - id: slow\n    run: touch in-slow; sleep 30\n")

    async def enqueue() -> None:
        store = await open_store(str(db))
        try:
            await Workflows(store, cwd=str(tmp_path), stderr=lambda _t: None).enqueue(
                str(path))
        finally:
            await store.close()

    asyncio.run(enqueue())
    proc = subprocess.Popen([str(CLAWTOWER), "serve", "--until-idle", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=child_env(CLAWTOWER_HOME=str(tmp_path / "home")))
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "in-slow").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "in-slow").exists(), "the step never started"
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
