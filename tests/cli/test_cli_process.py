"""The real `clawtower` console script in child processes: exit codes end to end, stderr,
the default store under $CLAWTOWER_HOME, `events --follow` across processes."""

from __future__ import annotations

import json
import queue
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import (
    CLAWTOWER,
    Run,
    child_env,
    max_seq,
    query,
    run_cli,
    set_user_version,
    spec,
    state,
)
from procs import stop


def test_console_script_is_installed() -> None:
    assert CLAWTOWER.is_file(), f"{CLAWTOWER}: run `pip install -e .` in the venv"


def test_create_list_show_end_to_end(home: Path) -> None:
    r = run_cli(["task", "create", spec("01")], home)
    assert (r.returncode, r.stdout, r.stderr) == (0, "T-1\n", "")
    db = home / "clawtower.db"
    assert max_seq(db) == 1
    r = run_cli(["task", "list", "--json"], home)
    assert r.returncode == 0
    assert [t["id"] for t in json.loads(r.stdout)] == ["T-1"]
    r = run_cli(["task", "transition", "T-1", "spec_review", "--as", "orchestrator",
                 "--reason", "ready"], home)
    assert (r.returncode, r.stdout) == (0, "T-1: spec_draft -> spec_review\n")
    r = run_cli(["task", "show", "T-1", "--json", "--db", str(db)], home)
    t = json.loads(r.stdout)
    assert t["history"][0]["to_phase"] == "spec_review"


def _one_line(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_bad_input_exit_2_end_to_end(home: Path, tmp_path: Path) -> None:
    assert run_cli(["task", "create", spec("01")], home).returncode == 0
    db = home / "clawtower.db"
    assert run_cli(["task", "list"], home).returncode == 0  # settle the files
    before = state(db)

    bad = tmp_path / "bad.yaml"
    bad.write_text("goal: x\nacceptance_criteria: [a b c\n  foo: : bar\n")
    _one_line(run_cli(["task", "create", str(bad)], home), str(bad), "line 3")
    _one_line(run_cli(["task", "show", "T-42"], home), "'T-42'")
    _one_line(run_cli(["task", "transition", "T-1", "spec_review", "--reason", "r"], home),
              "--as")
    _one_line(run_cli(["task", "transition", "T-1", "completed", "--as", "orchestrator",
                       "--reason", "r"], home), "T-1", "spec_draft", "completed")
    _one_line(run_cli(["approve", "cafebabe"], home), "'cafebabe'")
    assert state(db) == before

    _one_line(run_cli(["task", "transition", "T-1", "spec_review", "--as", "executor",
                       "--reason", "r"], home), "T-1", "role executor may not")
    assert max_seq(db) == before.seq + 1
    assert query(db, "SELECT type FROM events WHERE seq=?", (before.seq + 1,)) == [
        ("permission.refused",)]


def test_unusable_store_exit_2_end_to_end(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _one_line(run_cli(["task", "list", "--db", str(blocker / "c.db")], home),
              str(blocker / "c.db"))
    newer = tmp_path / "newer.db"
    assert run_cli(["task", "create", spec("01"), "--db", str(newer)], home).returncode == 0
    set_user_version(newer, 99)
    _one_line(run_cli(["task", "list", "--db", str(newer)], home), str(newer), "newer")
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all\n" * 20)
    _one_line(run_cli(["events", "--db", str(text)], home), str(text), "not a clawtower store")
    assert text.read_text() == "not a database at all\n" * 20


def test_runtime_error_exits_1(home: Path) -> None:
    db = home / "clawtower.db"
    assert run_cli(["task", "create", spec("01")], home).returncode == 0
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM tasks")
    conn.commit()
    conn.close()
    r = run_cli(["store", "verify"], home)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == "1 projection(s) differ from the log"
    assert run_cli(["store", "rebuild"], home).returncode == 0
    assert run_cli(["store", "verify"], home).stdout == "projections match the log\n"


def _reader(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)


def _next_line(lines: queue.Queue[str], timeout: float = 15) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no output from `events --follow` within {timeout} s")


def test_events_follow_prints_another_process_write(home: Path, run: Run) -> None:
    db = home / "clawtower.db"
    assert run("task", "create", spec("01")).code == 0
    proc = subprocess.Popen([str(CLAWTOWER), "events", "--follow", "--json", "--after", "0"],
                            env=child_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        first = json.loads(_next_line(lines))
        assert (first["seq"], first["entity_id"]) == (1, "T-1")
        time.sleep(0.3)  # the follower is now waiting for changes
        assert lines.empty()
        # this test process is "another process" to the follower
        assert run("task", "create", spec("02"), "--db", db).code == 0
        second = json.loads(_next_line(lines))
        assert (second["seq"], second["type"], second["entity_id"]) == (2, "task.created", "T-2")
        assert proc.poll() is None  # still following
    finally:
        code = stop(proc, "`events --follow`")
    assert code != 0
    assert max_seq(db) == 2


def test_closed_pipe_is_not_an_error(home: Path, run: Run) -> None:
    """`clawtower events | head -1`: the reader going away is a normal end, not a trace."""
    import asyncio

    from clawtower.core import NewEvent, open_store
    from clawtower.core.events import AgentUsage

    db = home / "clawtower.db"

    async def fill() -> None:
        store = await open_store(db)
        try:
            await store.append([NewEvent(entity_id="x", actor="sim", role="system",
                                         payload=AgentUsage(agent="sim", model="m",
                                                            purpose="p" * 300, prompt_tokens=1,
                                                            completion_tokens=1))
                                for _ in range(2000)])
        finally:
            await store.close()

    asyncio.run(fill())
    for argv in (["events", "--json"], ["events"]):
        proc = subprocess.Popen([str(CLAWTOWER), *argv], env=child_env(home),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=30) == 0
        assert err == b""


def test_serve_runs_until_terminated(home: Path, run: Run) -> None:
    assert run("task", "create", spec("01")).code == 0
    proc = subprocess.Popen([str(CLAWTOWER), "serve"], env=child_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        assert _next_line(lines).startswith(f"clawtower: engine on {home / 'clawtower.db'}")
        # the built-in simulator picks the task up: wait until it has moved
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if "task.transitioned" in _next_line(lines):
                break
        else:
            pytest.fail("serve moved no task")
        assert proc.poll() is None
    finally:
        code = stop(proc, "serve", timeout=15)
    assert code == 0
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    assert run("store", "verify").out == "projections match the log\n"
