"""Each hostile input the hardening issue found, as a test that would have caught it: exit
1 or 2, one stderr line naming the field or file, no traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, Run, child_env, max_seq, query, spec


def one_line(err: str, *needles: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def store(run: Run, db: Path) -> Path:
    assert run("task", "create", spec("01"), "--db", db).code == 0
    return db


# --------------------------------------------------------------- non-UTF-8 argv, real bytes


BAD = b"\xff\xfeT-1"
NOT_UTF8 = [
    ([b"approve", BAD], "ID"),
    ([b"reject", BAD, b"--reason", b"x"], "ID"),
    ([b"task", b"show", BAD], "ID"),
    ([b"workflow", b"show", BAD], "ID"),
    ([b"events", b"--entity", BAD], "--entity"),
    ([b"workflow", b"run", b"--file", b"x.lobster", b"--args-json", b'{"a": "\xff"}'],
     "--args-json"),
    ([b"tools", b"call", b"clock.now", b"--args", b'{"a": "\xc3"}'], "--args"),
    ([b"task", b"review", b"T-1", b"--as", b"spec_reviewer", b"--verdict", b"approved",
      b"--finding", b"caf\xe9"], "--finding"),
]


@pytest.mark.parametrize(("argv", "field"), NOT_UTF8, ids=lambda a: str(a)[:40])
def test_non_utf8_arguments_from_a_real_process(store: Path, home: Path,
                                                argv: list[bytes], field: str) -> None:
    before = max_seq(store)
    p = subprocess.run([bytes(CLAWTOWER), *argv, b"--db", bytes(store)], env=child_env(home),
                       capture_output=True, timeout=60)
    err = p.stderr.decode("utf-8")  # what we print is always UTF-8
    assert p.returncode == 2, err
    one_line(err, f"clawtower: error: {field}: not valid UTF-8 (byte 0x")
    assert max_seq(store) == before


# --------------------------------------------------------------- numbers and sizes


@pytest.mark.parametrize("after", [str(2**64), "-1", "9" * 40])
def test_events_after_is_capped(run: Run, store: Path, after: str) -> None:
    r = run("events", "--after", after, "--db", store)
    assert r.code == 2
    one_line(r.err, "--after: must be at least 0")  # one range helper: no int64 limits
    assert "9223372036854775807" not in r.err


def test_task_create_from_dev_zero_reads_at_most_the_cap(run: Run, db: Path) -> None:
    t0 = time.monotonic()
    r = run("task", "create", "/dev/zero", "--db", db)
    assert time.monotonic() - t0 < 10  # bounded: it stops after 1 MiB
    assert r.code == 2
    one_line(r.err, "/dev/zero: larger than 1048576 bytes")
    assert not db.exists()


def test_a_fifo_is_refused_without_waiting_for_a_writer(run: Run, db: Path,
                                                        tmp_path: Path) -> None:
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    r = run("task", "create", fifo, "--db", db)
    assert r.code == 2
    one_line(r.err, str(fifo), "not a regular file")


def test_llm_ask_reads_at_most_the_cap_from_stdin(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    p = subprocess.run([str(CLAWTOWER), "llm", "ask", "--agent", "ada", "-", "--db", str(db)],
                       input="x" * 50_000, env=child_env(home), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    one_line(p.stderr, "TEXT (stdin): longer than 20000 characters")
    assert not db.exists()


def test_meeting_grant_is_capped(run: Run, db: Path) -> None:
    r = run("meeting", "grant", "M-1", str(10**9), "--db", db)
    assert r.code == 2
    one_line(r.err, "N: must be between 1 and 100")


# --------------------------------------------------------------- JSON


def test_duplicate_keys_are_refused_everywhere(run: Run, db: Path, tmp_path: Path) -> None:
    spec_json = tmp_path / "dup.json"
    spec_json.write_text('{"goal": "a", "goal": "b"}')
    r = run("task", "create", spec_json, "--db", db)
    assert r.code == 2
    one_line(r.err, str(spec_json), "duplicate key 'goal'")
    spec_yaml = tmp_path / "dup.yaml"
    spec_yaml.write_text("goal: a\ntitle: t\ngoal: b\n")
    r = run("task", "create", spec_yaml, "--db", db)
    assert r.code == 2
    one_line(r.err, str(spec_yaml), "line 3", "duplicate key 'goal'")
    r = run("tools", "call", "clock.now", "--args", '{"a": 1, "a": 2}', "--db", db)
    assert r.code == 2
    one_line(r.err, "--args: duplicate key 'a'")
    flow = tmp_path / "f.lobster"
    flow.write_text("steps:\n  - id: a\n    run: echo hi\n")
    r = run("workflow", "run", "--file", flow, "--args-json", '{"v": 1, "v": 2}', "--db", db)
    assert r.code == 2 and r.json()["error"] == {
        "type": "parse_error", "message": "run --args-json: duplicate key 'v'"}
    r = run("workflow", "graph", "--file", flow, "--args-json", '{"v": 1, "v": 2}')
    assert r.code == 2
    one_line(r.err, "--args-json: duplicate key 'v'")
    assert not db.exists()


@pytest.mark.parametrize("value", ["[1, 2]", '"text"', "3", "null"])
def test_args_json_must_be_an_object(run: Run, db: Path, tmp_path: Path, value: str) -> None:
    flow = tmp_path / "f.lobster"
    flow.write_text("steps:\n  - id: a\n    run: echo hi\n")
    r = run("workflow", "run", "--file", flow, "--args-json", value, "--db", db)
    assert r.code == 2
    assert r.json()["error"]["message"].startswith("run --args-json: must be a JSON object")
    assert not db.exists()


# --------------------------------------------------------------- workflow files


def _no_runs(db: Path) -> None:
    assert not db.exists() or query(db, "SELECT count(*) FROM workflow_runs") == [(0,)]


def test_retry_without_end_is_refused_before_the_run(run: Run, db: Path,
                                                     tmp_path: Path) -> None:
    flow = tmp_path / "r.lobster"
    flow.write_text("steps:\n  - id: a\n    run: 'false'\n    retry: {max: 1000000000}\n")
    t0 = time.monotonic()
    r = run("workflow", "run", "--file", flow, "--db", db)
    assert time.monotonic() - t0 < 30
    assert r.code == 1
    assert r.json()["error"]["message"] == ("Workflow step a retry.max must be at most 100"
                                            " (MAX_RETRY_ATTEMPTS)")
    _no_runs(db)


def test_sub_workflow_cycle_is_refused_before_any_step(run: Run, db: Path,
                                                       tmp_path: Path) -> None:
    (tmp_path / "a.lobster").write_text("steps:\n  - id: mark\n    run: touch ran\n"
                                        "  - id: child\n    workflow: b.lobster\n")
    (tmp_path / "b.lobster").write_text("steps:\n  - id: back\n    workflow: ./a.lobster\n")
    r = run("workflow", "run", "--file", tmp_path / "a.lobster", "--db", db)
    assert r.code == 1
    msg = r.json()["error"]["message"]
    assert "creates a cycle" in msg and "a.lobster" in msg, msg
    assert not (tmp_path / "ran").exists() and not Path("ran").exists()
    _no_runs(db)


def test_unknown_step_reference_is_refused_before_any_step(run: Run, db: Path,
                                                           tmp_path: Path) -> None:
    flow = tmp_path / "u.lobster"
    flow.write_text("steps:\n  - id: mark\n    run: touch ran\n  - id: use\n"
                    "    stdin: $mrak.stdout\n    run: cat\n")
    r = run("workflow", "run", "--file", flow, "--db", db)
    assert r.code == 1
    assert r.json()["error"]["message"] == "Unknown step reference: mrak.stdout"
    assert not Path("ran").exists()
    _no_runs(db)


def test_path_errors_name_the_file(run: Run, db: Path, tmp_path: Path) -> None:
    r = run("workflow", "run", "--file", tmp_path, "--db", db)
    assert r.code == 2
    assert r.json()["error"]["message"] == f"Workflow path is not a file: {tmp_path}"
    r = run("task", "create", tmp_path, "--db", db)
    assert r.code == 2
    one_line(r.err, str(tmp_path), "is a directory")
    assert not db.exists()


# --------------------------------------------------------------- paths that write


def test_minutes_dir_is_confined(run: Run, db: Path, tmp_path: Path, home: Path) -> None:
    for where in ("/etc", "/", str(tmp_path.parent)):
        r = run("meeting", "run", "--topic", "t", "--agents", "ada,ben", "--minutes-dir",
                where, "--db", db)
        assert r.code == 2, r.err
        one_line(r.err, "--minutes-dir", "outside the current directory and $CLAWTOWER_HOME")
    afile = home / "afile"
    afile.parent.mkdir(parents=True, exist_ok=True)
    afile.write_text("x")
    r = run("meeting", "run", "--topic", "t", "--agents", "ada,ben", "--minutes-dir", afile,
            "--db", db)
    assert r.code == 2
    one_line(r.err, "--minutes-dir", "is not a directory")
    assert not db.exists()


# --------------------------------------------------------------- the last resort


def test_an_unexpected_exception_is_one_line_and_exit_1(run: Run, db: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from clawtower.cli import approvals

    async def boom(args: object) -> int:
        raise RuntimeError("a bug\nwith two lines")

    monkeypatch.setattr(approvals, "cmd_approvals", boom)
    r = run("approvals", "--db", db)
    assert r.code == 1
    one_line(r.err, "clawtower: internal error: RuntimeError: a bug\\nwith two lines")


def test_messages_quoting_user_text_stay_one_line(run: Run, store: Path) -> None:
    r = run("task", "show", "T-1\u2028x", "--db", store)
    assert r.code == 2
    one_line(r.err, "ID: contains a control character")
    r = run("approvals", "--db", store, "--bogus\udcff")
    assert r.code == 2
    one_line(r.err, "unrecognized arguments: --bogus\\xff")
