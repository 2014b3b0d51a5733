"""CLI test fixtures: an isolated CLAWTOWER_HOME, an in-process runner of `cli.main.main`,
and stores seeded through the CLI itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import OPERATOR, Result, Run, executor_attempt, spec


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    monkeypatch.setenv("CLAWTOWER_OPERATOR", OPERATOR)
    monkeypatch.delenv("CLAWTOWER_DEMO_DIR", raising=False)
    return h


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """`run("task", "list", "--db", db)`: main() in this process; argparse exits become codes."""
    from clawtower.cli.main import main

    def call(*argv: str | Path) -> Result:
        capsys.readouterr()
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return call


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def seeded(run: Run, db: Path) -> Path:
    """T-1 (csv export, ready spec) and T-2 (vague spec) in spec_draft."""
    for n, name in enumerate(("01", "05"), 1):
        r = run("task", "create", spec(name), "--db", db)
        assert (r.code, r.out) == (0, f"T-{n}\n"), r.err
    return db


@pytest.fixture
def awaiting(run: Run, db: Path) -> tuple[Path, str]:
    """T-1 driven through every phase up to awaiting_approval, the orchestrator's and the
    reviewers' writes made with the CLI. Returns the store and the pending approval's id."""
    ok = lambda *a: _ok(run(*a, "--db", db))  # noqa: E731
    ok("task", "create", spec("04"))
    ok("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "ready")
    ok("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "approved")
    ok("task", "transition", "T-1", "execution_ready", "--as", "orchestrator", "--reason", "ok")
    ok("task", "transition", "T-1", "executing", "--as", "orchestrator", "--reason", "go")
    executor_attempt(db, "T-1", 1)
    ok("task", "transition", "T-1", "spec_gate", "--as", "orchestrator", "--reason", "done")
    ok("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "approved")
    ok("task", "transition", "T-1", "quality_gate", "--as", "orchestrator", "--reason", "spec ok")
    ok("task", "review", "T-1", "--as", "quality_reviewer", "--verdict", "approve",
       "--risk", "medium", "--maintainability", "fine", "--test-gap", "no load test")
    ok("task", "transition", "T-1", "awaiting_approval", "--as", "orchestrator",
       "--reason", "effects need a human")
    pending = run("approvals", "--json", "--db", db).json()
    assert len(pending) == 1
    return db, pending[0]["id"]


def _ok(r: Result) -> Result:
    assert r.code == 0, r.err
    return r
