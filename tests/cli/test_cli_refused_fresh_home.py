"""A command refused for bad input on a fresh home (absent, or an empty folder) leaves the
home exactly as it was: no store file, no -wal/-shm, no folders (issue 39, trap 9). The
store is created by the first write that succeeds, never by one that is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Run

# (argv, the usual exit code): an unknown id, agent, trigger, tool or package
REFUSED = [
    (("approve", "deadbeef"), 2),
    (("reject", "deadbeef"), 2),
    (("flow", "run", "nobody", "do x"), 2),
    (("session", "send", "S-9", "hi"), 2),
    (("session", "steer", "S-9", "hi"), 2),
    (("expert", "install", "nosuch"), 2),
    (("expert", "run", "nosuch", "x"), 2),
    (("task", "cancel", "T-9"), 2),
    (("task", "retry", "T-9"), 2),
    (("task", "show", "T-9"), 2),
    (("task", "create", "nosuch.yaml"), 2),
    (("meeting", "stop", "M-9"), 2),
    (("meeting", "grant", "M-9", "1"), 2),
    (("meeting", "show", "M-9"), 2),
    (("deadletter", "retry", "I-abc"), 2),
    (("deadletter", "drop", "T-abc"), 2),
    (("triggers", "fire", "nobody", "t"), 2),
    (("triggers", "auth", "nobody", "t", "--token", "x"), 2),
    (("tools", "pin", "nosuch"), 2),
    (("acp", "cancel", "x"), 2),
]


def listing(home: Path) -> list[str]:
    """Every file and folder under the home's parent (the home itself included)."""
    return sorted(str(p.relative_to(home.parent)) for p in home.parent.rglob("*"))


@pytest.mark.parametrize("fresh", ["absent", "empty"])
@pytest.mark.parametrize(("argv", "code"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_refused_command_leaves_a_fresh_home_as_it_was(
        run: Run, home: Path, fresh: str, argv: tuple[str, ...], code: int) -> None:
    if fresh == "empty":
        home.mkdir()
    before = listing(home)
    r = run(*argv)
    assert r.code == code, (r.out, r.err)
    assert listing(home) == before, r.err


def test_a_write_on_a_fresh_home_still_creates_the_store(run: Run, home: Path) -> None:
    r = run("memory", "put", "shared:notes", "k", "v")
    assert r.code == 0, r.err
    assert (home / "clawtower.db").exists()
    r = run("memory", "show", "shared:notes", "k")
    assert r.code == 0 and "v" in r.out, r.err
    assert run("store", "verify").code == 0
