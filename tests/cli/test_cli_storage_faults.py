"""Commands meeting a storage fault (issue 40). A command that runs the engine
(`flow run --wait`) waits through a full disk, says why it waits and goes on once the disk
has room; a command that writes once, or drives work in the foreground without the engine
(`workflow run`), says the cause in one line naming the store (never a secondary error from
the rollback) and exits 1, leaving nothing half-written and its work resumable. The full
disk is SQLite's own SQLITE_FULL, chosen by the drill ($CLAWTOWER_DRILL_DISK_FULL)."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from full_disk import fill
from procs import ROOT, child_env

from clawtower.core.store.faults import DRILL_ENV

CLAWTOWER = Path(sys.executable).with_name("clawtower")
FLOWS = ROOT / "examples" / "flows" / "agents.yaml"


def _lines(stream, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def test_flow_run_wait_waits_through_a_full_disk_and_finishes_once(tmp_path: Path) -> None:
    flag = tmp_path / "disk-full"
    env = child_env(CLAWTOWER_HOME=str(tmp_path / "home"), CLAWTOWER_OPERATOR="tester",
                    **{DRILL_ENV: str(flag)})
    for agent, subs in (("lead", "researcher,writer"), ("researcher", "fetcher"),
                        ("writer", ""), ("fetcher", "")):
        subprocess.run([str(CLAWTOWER), "agents", "spec", "set", agent, "--subagents", subs],
                       env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [str(CLAWTOWER), "flow", "run", "lead", "Write a briefing on the Q3 numbers",
         "--wait", "--config", str(FLOWS)], env=env, cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: queue.Queue[str] = queue.Queue()
    err: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, out), daemon=True).start()
    threading.Thread(target=_lines, args=(proc.stderr, err), daemon=True).start()
    try:
        assert "F-1: started" in err.get(timeout=120)
        flag.touch()  # the disk fills while its first turns run
        said = err.get(timeout=120)
        assert "disk full since" in said and "the work is kept" in said, said
        time.sleep(0.5)  # a few held retries
        assert proc.poll() is None  # it waits; it did not fail the flow
        flag.unlink()
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = "".join(iter_queue(err))
    assert code == 0, rest
    assert "writable again" in rest
    shown = subprocess.run([str(CLAWTOWER), "flow", "show", "F-1"], env=env, text=True,
                           capture_output=True, check=True).stdout
    assert "status: done" in shown and "tasks: 6/6 done" in shown, shown
    verify = subprocess.run([str(CLAWTOWER), "store", "verify"], env=env, text=True,
                            capture_output=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def iter_queue(q: queue.Queue[str]):
    while True:
        try:
            yield q.get_nowait()
        except queue.Empty:
            return


@pytest.mark.parametrize("command", [
    ["workflow", "run", str(ROOT / "examples" / "workflows" / "release.lobster")],
    ["session", "new", "--agent", "ada"],
])
def test_a_foreground_command_on_a_full_disk_says_so_in_one_line_and_exits_1(
        tmp_path: Path, command: list[str]) -> None:
    flag = tmp_path / "disk-full"
    env = child_env(CLAWTOWER_HOME=str(tmp_path / "home"), CLAWTOWER_OPERATOR="tester",
                    **{DRILL_ENV: str(flag)})
    subprocess.run([str(CLAWTOWER), "task", "list"], env=env, check=True,
                   capture_output=True)  # the store exists, then the disk fills
    assert fill(tmp_path / "home" / "clawtower.db", flag) > 0
    r = subprocess.run([str(CLAWTOWER), *command], env=env, cwd=tmp_path, text=True,
                       capture_output=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "clawtower.db: cannot write: disk full" in lines[0], lines[0]
    assert "rollback" not in lines[0] and "no transaction" not in lines[0]
    flag.unlink()
    verify = subprocess.run([str(CLAWTOWER), "store", "verify"], env=env, text=True,
                            capture_output=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    runs = subprocess.run([str(CLAWTOWER), "workflow", "list", "--json"], env=env,
                          text=True, capture_output=True, check=True).stdout
    assert '"failed"' not in runs  # a storage fault is never the run's failure
