"""Reading commands on a `--db` with no file never create it: a listing answers as an empty
store does plus one note on stderr, an id asked for fails as an unknown id does (naming the
missing path). Writing commands still create the store."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, Run, child_env, max_seq, spec
from procs import stop

from core import open_store


def note(db: Path) -> str:
    return f"clawtower: no store at {db} yet (nothing has run with this --db)\n"


@pytest.fixture
def missing(tmp_path: Path) -> Path:
    """A mistyped --db: neither the file nor its folder exists."""
    return tmp_path / "typo" / "store.db"


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    """A store that exists and holds nothing: what a missing one must answer like."""
    path = tmp_path / "empty.db"

    async def make() -> None:
        await (await open_store(path)).close()

    asyncio.run(make())
    return path


def assert_absent(db: Path) -> None:
    assert not db.exists()
    assert not db.parent.exists()  # open_store would also have made the folder
    assert not list(db.parent.parent.glob(f"{db.name}*"))


# Every reading command that lists (or checks) rather than naming an id.
LISTINGS = [
    ("task", "list"),
    ("task", "list", "--json"),
    ("task", "list", "--phase", "spec_draft"),
    ("approvals",),
    ("approvals", "--json"),
    ("approvals", "--all"),
    ("approvals", "--all", "--json"),
    ("events",),
    ("events", "--json"),
    ("events", "--entity", "T-1"),
    ("meeting", "list"),
    ("meeting", "list", "--json"),
    ("workflow", "list"),
    ("workflow", "list", "--json"),
    ("store", "verify"),
    ("store", "rebuild"),
]


@pytest.mark.parametrize("argv", LISTINGS, ids=" ".join)
def test_listing_on_a_missing_store_answers_empty_and_creates_nothing(
        run: Run, missing: Path, empty: Path, argv: tuple[str, ...]) -> None:
    expected = run(*argv, "--db", empty)
    assert (expected.code, expected.err) == (0, "")
    r = run(*argv, "--db", missing)
    assert (r.code, r.out, r.err) == (0, expected.out, note(missing))
    assert_absent(missing)


@pytest.mark.parametrize("argv", [
    ("task", "list", "--json"), ("approvals", "--json"), ("approvals", "--all", "--json"),
    ("meeting", "list", "--json"), ("workflow", "list", "--json"),
], ids=" ".join)
def test_json_listing_on_a_missing_store_is_an_empty_list(
        run: Run, missing: Path, argv: tuple[str, ...]) -> None:
    r = run(*argv, "--db", missing)
    assert r.code == 0 and r.json() == []
    assert r.err.splitlines() == [note(missing).rstrip("\n")]
    assert_absent(missing)


def test_store_info_on_a_missing_store(run: Run, missing: Path, empty: Path) -> None:
    want = run("store", "info", "--db", empty).out.splitlines()
    r = run("store", "info", "--db", missing)
    assert (r.code, r.err) == (0, note(missing))
    assert r.out.splitlines() == [f"store: {missing}", *want[1:3], "size: 0 bytes"]
    assert_absent(missing)


SHOWS = [
    (("task", "show", "T-1"), "task 'T-1': no such task"),
    (("task", "show", "T-1", "--json"), "task 'T-1': no such task"),
    (("meeting", "show", "M-1"), "meeting M-1: no such meeting"),
    (("meeting", "show", "M-1", "--json"), "meeting M-1: no such meeting"),
    (("workflow", "show", "W-1"), "workflow run W-1: no such run"),
    (("workflow", "show", "W-1", "--json"), "workflow run W-1: no such run"),
]


@pytest.mark.parametrize(("argv", "unknown"), SHOWS, ids=lambda a: " ".join(a)
                         if isinstance(a, tuple) else "")
def test_show_on_a_missing_store_fails_like_an_unknown_id(
        run: Run, missing: Path, empty: Path, argv: tuple[str, ...], unknown: str) -> None:
    today = run(*argv, "--db", empty)
    assert (today.code, today.out, today.err) == (2, "", f"clawtower: error: {unknown}\n")
    r = run(*argv, "--db", missing)
    assert (r.code, r.out) == (today.code, "")
    assert r.err == (f"clawtower: error: {unknown}; no store at {missing} yet"
                     " (nothing has run with this --db)\n")
    assert_absent(missing)


def test_graph_and_agents_never_open_a_store(run: Run, missing: Path, tmp_path: Path) -> None:
    flow = tmp_path / "f.lobster"
    flow.write_text("steps:\n  - id: a\n    run: echo hi\n")
    r = run("workflow", "graph", "--file", flow, "--db", missing)
    assert r.code == 0 and r.err == ""
    assert run("agents", "list").code == 0
    assert_absent(missing)


def test_default_db_is_not_created_by_a_read(run: Run, home: Path) -> None:
    r = run("task", "list", "--json")
    assert (r.code, r.out) == (0, "[]\n")
    assert r.err == note(home / "clawtower.db")
    assert not home.exists()


def test_an_existing_store_gets_no_note(run: Run, db: Path) -> None:
    assert run("task", "create", spec("01"), "--db", db).code == 0
    for argv in (("task", "list"), ("approvals",), ("events",), ("meeting", "list"),
                 ("workflow", "list"), ("store", "verify"), ("task", "show", "T-1")):
        r = run(*argv, "--db", db)
        assert (r.code, r.err) == (0, ""), argv
    r = run("task", "show", "T-9", "--db", db)
    assert (r.code, r.err) == (2, "clawtower: error: task 'T-9': no such task\n")


def test_a_read_then_a_write_creates_the_store(run: Run, missing: Path) -> None:
    assert run("task", "list", "--db", missing).code == 0
    assert_absent(missing)
    r = run("task", "create", spec("01"), "--db", missing)
    assert (r.code, r.out) == (0, "T-1\n")
    assert max_seq(missing) == 1
    r = run("task", "list", "--json", "--db", missing)
    assert [t["id"] for t in r.json()] == ["T-1"] and r.err == ""


def test_writing_commands_still_create_the_store(run: Run, tmp_path: Path) -> None:
    ask = tmp_path / "ask" / "store.db"
    r = run("llm", "ask", "--agent", "ada", "Ship on Friday?", "--db", ask)
    assert r.code == 0 and ask.exists() and max_seq(ask) > 0
    assert "no store at" not in r.err
    # a write that names an unknown id still opens (and so creates) the store, as before
    for argv in (("approve", "A-1"), ("meeting", "stop", "M-1"), ("workflow", "cancel", "W-1")):
        db = tmp_path / argv[0] / "store.db"
        r = run(*argv, "--db", db)
        assert r.code == 2 and "no store at" not in r.err and db.exists(), argv


def _reader(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)


def test_events_follow_waits_for_the_store_instead_of_creating_it(run: Run, home: Path,
                                                                    tmp_path: Path) -> None:
    db = tmp_path / "later" / "store.db"
    proc = subprocess.Popen([str(CLAWTOWER), "events", "--follow", "--json", "--db", str(db)],
                            env=child_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == note(db)  # the note comes before any waiting
        time.sleep(0.5)
        assert proc.poll() is None and not db.exists() and not db.parent.exists()
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
        assert run("task", "create", spec("01"), "--db", db).code == 0
        first = json.loads(lines.get(timeout=30))
        assert (first["seq"], first["type"], first["entity_id"]) == (1, "task.created", "T-1")
    finally:
        stop(proc, "`events --follow`")
