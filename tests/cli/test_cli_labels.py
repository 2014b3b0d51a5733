"""Issue 39, trap 8: errors and labels that mislead. Each test names what a first-hour user
saw wrong and what the CLI says now."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import Run


def test_unknown_agent_on_a_fresh_home_names_the_builtin_cast(run: Run, db: Path,
                                                              home: Path) -> None:
    r = run("session", "new", "--agent", "nobody", "--db", db)
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "clawtower.yaml has" not in r.err
    assert "the built-in simulator cast has ada, ben" in r.err
    assert f"no clawtower.yaml at {home / 'clawtower.yaml'}" in r.err
