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


def test_a_command_without_its_action_lists_the_actions(run: Run) -> None:
    r = run("memory")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "ACTION (one of: list, show, search, put, forget" in r.err
    assert "usage: clawtower memory" in r.err
    r = run("agents", "spec")
    assert r.code == 2 and "(one of: list, show, set, import)" in r.err
    # a missing argument that is not the action is not followed by the actions
    r = run("memory", "search")
    assert r.code == 2 and "one of:" not in r.err
