"""A killed test run leaves nothing behind (issue 27): a child pytest run with an xdist
worker holds a PostgreSQL server (pgserver detaches it), a child in its own session without
the run's environment (an MCP server, an ACP agent) and a daemon; SIGKILL of the run stops
them all within seconds and removes the server's folder (tests/helpers/reaper.py).
scripts/kill-test-run.py does the same with the llama.cpp server too, several times."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import HELPERS, ROOT, child_env


def _started(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2:].split()[19])


def kill_a_run(tmp_path: Path, workers: int, llama: bool = False,
               timeout: float = 15) -> dict[str, object]:
    """Start a held run (`workers`: its xdist workers, 0 for none), SIGKILL its pytest
    process; what it held and what is left of it."""
    held_file = tmp_path / "held.json"
    env = child_env(CLAWTOWER_HELD=str(held_file), CLAWTOWER_HELD_LLAMA="1" if llama else "0")
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "-p", "no:cacheprovider",
         str(HELPERS / "held_servers.py")], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not held_file.exists():
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the held run did not start its servers"
            time.sleep(0.1)
        held = json.loads(held_file.read_text())
        pids = {name: (pid, _started(pid)) for name, pid in held["pids"].items()}
        assert all(started is not None for _, started in pids.values()), pids
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        killed = time.monotonic()
        while time.monotonic() - killed < timeout:
            left = [name for name, (pid, started) in pids.items() if _started(pid) == started]
            folders = [f for f in held["folders"] if Path(f).exists()]
            if not left and not folders:
                break
            time.sleep(0.1)
        return {"held": sorted(pids), "left": left, "folders_left": folders,
                "seconds": round(time.monotonic() - killed, 1)}
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if run.stdout:
            run.stdout.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_a_killed_run_leaves_no_server_behind(tmp_path: Path, workers: int) -> None:
    """0: the process holding the servers is killed; 1: the run's controller is killed and
    its xdist worker, holding the servers, must go too."""
    out = kill_a_run(tmp_path, workers)
    assert out["held"] == ["daemon", "postgres", "pytest-worker", "scrubbed-child"], out
    assert out["left"] == [] and out["folders_left"] == [], out
