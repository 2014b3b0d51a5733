"""The README's exit codes, each yielded by a real command (issue 27): 0 ok, 1 runtime
failure, 2 usage or validation (not found, conflict, a bad file), 130 interrupted; and the
one error style, `<kind> '<id>': ...`, in one line on stderr."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, Run, child_env, spec
from procs import stop


def test_0_ok(run: Run, db: Path) -> None:
    r = run("task", "create", spec("01"), "--db", db)
    assert (r.code, r.out, r.err) == (0, "T-1\n", "")
    r = run("approvals", "--db", db)
    assert (r.code, r.out) == (0, "no pending approvals yet\n")


def test_1_runtime_failure(run: Run, db: Path, tmp_path: Path) -> None:
    """A workflow whose step fails at run time: Lobster's envelope, exit 1."""
    flow = tmp_path / "fail.lobster"
    flow.write_text("steps:\n  - id: a\n    run: exit 3\n")
    r = run("workflow", "run", "--file", flow, "--db", db)
    assert r.code == 1
    assert '"type": "runtime_error"' in r.out and "workflow command failed (3)" in r.out


@pytest.mark.parametrize(("argv", "needle"), [
    (("task", "list", "--phaze", "x"), "(did you mean --phase?); usage: clawtower task list"),
    (("task", "create", "nope.yaml"), "nope.yaml: no such file"),
    (("task", "list", "--phase", "done"), "--phase: unknown phase 'done'"),
    (("task", "show", "T-99"), "task 'T-99': no such task"),
    (("task", "cancel", "T-1"), "task 'T-1': nothing to cancel"),
    (("workflow", "run", "--file", "nope.lobster"), ""),  # Lobster's parse_error: on stdout
])
def test_2_usage_or_validation(run: Run, db: Path, argv: tuple[str, ...], needle: str) -> None:
    assert run("task", "create", spec("01"), "--db", db).code == 0
    assert run("task", "cancel", "T-1", "--db", db).code == 0
    r = run(*argv, "--db", db)
    assert r.code == 2, (argv, r)
    if needle:
        assert r.err.count("\n") == 1 and needle in r.err, r.err
    else:
        assert '"type": "parse_error"' in r.out


def test_a_workflow_file_lobster_rejects_exits_as_lobster_does(run: Run, db: Path,
                                                               tmp_path: Path) -> None:
    """`workflow run|resume` keep Lobster's exit codes (README, Workflows): a step of no known
    kind is Lobster's runtime_error, exit 1, not the rest of the CLI's 2."""
    bad = tmp_path / "bad.lobster"
    bad.write_text("steps:\n  - id: a\n    nope: 1\n")
    r = run("workflow", "run", "--file", bad, "--db", db)
    assert r.code == 1 and '"type": "runtime_error"' in r.out and "requires run" in r.out


KINDS = r"(task|meeting|session|flow|workflow run|approval|trigger invocation|trigger|acp run" \
        r"|memory|expert|agent)"
ONE_STYLE = re.compile(rf"^clawtower: error: {KINDS} '[^']+': \S.*\n$")


@pytest.mark.parametrize("argv", [
    ("task", "show", "T-99"), ("task", "retry", "T-99"), ("meeting", "show", "M-9"),
    ("meeting", "stop", "M-9"), ("session", "show", "S-9"), ("session", "send", "S-9", "hi"),
    ("flow", "show", "F-9"), ("flow", "cancel", "F-9"), ("workflow", "show", "W-9"),
    ("workflow", "cancel", "W-9"), ("approve", "A-9"), ("reject", "A-9"),
    ("deadletter", "retry", "T-nope"), ("acp", "show", "acp-000000000000"),
    ("memory", "show", "agent:a", "k"), ("expert", "show", "nope"),
    ("triggers", "fire", "x", "y"), ("agents", "show", "nope"),
], ids=" ".join)
def test_not_found_has_one_style(run: Run, db: Path, argv: tuple[str, ...]) -> None:
    assert run("task", "create", spec("01"), "--db", db).code == 0
    r = run(*argv, "--db", db)
    assert r.code == 2 and ONE_STYLE.match(r.err), (argv, r.err)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_130_interrupted(home: Path, tmp_path: Path) -> None:
    db = tmp_path / "follow.db"
    env = child_env(home)
    assert subprocess.run([str(CLAWTOWER), "task", "create", spec("01"), "--db", str(db)],
                          env=env, capture_output=True, timeout=60).returncode == 0
    # ctrl+c as a terminal delivers it: SIGINT at its default. An ignored SIGINT is inherited
    # (a run started in the background by a non-interactive shell ignores it), and Python
    # then leaves it ignored: the CLI would rightly keep following (nohup semantics).
    proc = subprocess.Popen([str(CLAWTOWER), "events", "--follow", "--db", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    try:
        assert proc.stdout is not None
        assert "task.created" in proc.stdout.readline()  # it is following now
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert (proc.returncode, err) == (130, "clawtower: interrupted\n")
    finally:
        stop(proc, "`events --follow`")
