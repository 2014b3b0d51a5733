"""Reading commands on a `--db` with no file never create it (nor its folders): they answer
as on an empty store ("no tasks yet", `[]`, exit 0) and, for a path named by hand, a note on
stderr names it, so a mistyped `--db` is seen. `show ID` is still "no such ..." (exit 2, one
line). Store administration refuses a missing file (exit 2). Writing commands still create
the store; `events --follow` waits for it."""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, Run, child_env, max_seq, spec
from procs import stop

from clawtower.core import open_store


def note(db: Path) -> str:
    return f"clawtower: no store at {db} yet (nothing has written to it)\n"


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


# Every reading command that lists rather than naming an id.
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
    ("session", "list"),
    ("session", "tree"),
    ("agents", "spec", "list"),
    ("flow", "list"),
    ("flow", "list", "--json"),
    ("triggers", "list"),
    ("triggers", "history"),
    ("deadletter", "list"),
    ("acp", "runs"),
    ("memory", "list"),
    ("memory", "list", "--json"),
    ("memory", "search", "agent:a", "cat"),
    ("memory", "export", "agent:a", "--format", "md"),
    ("tools", "list"),  # built-ins only: a read (an MCP server's first listing writes pins)
]


def refusal(db: Path) -> str:
    return (f"clawtower: error: no store at {db} yet (nothing has written to it);"
            " `clawtower demo` or `clawtower task create SPEC` makes one, --db PATH picks"
            " another\n")


SHOWS = [("task", "show", "T-1"), ("task", "show", "T-1", "--json"), ("meeting", "show", "M-1"),
         ("meeting", "show", "M-1", "--json"), ("workflow", "show", "W-1"),
         ("workflow", "show", "W-1", "--json"), ("session", "show", "S-1"),
         ("flow", "show", "F-1"), ("memory", "show", "agent:a", "k")]
ADMIN = [("store", "verify"), ("store", "rebuild"), ("store", "info")]


@pytest.mark.parametrize("argv", LISTINGS, ids=" ".join)
def test_a_listing_on_a_missing_store_answers_empty_and_creates_nothing(
        run: Run, missing: Path, empty: Path, argv: tuple[str, ...]) -> None:
    want = run(*argv, "--db", empty)
    assert (want.code, want.err) == (0, "")
    r = run(*argv, "--db", missing)
    assert (r.code, r.out, r.err) == (0, want.out, note(missing))
    assert_absent(missing)


@pytest.mark.parametrize("argv", SHOWS, ids=" ".join)
def test_a_show_on_a_missing_store_is_not_found_in_one_line(
        run: Run, missing: Path, empty: Path, argv: tuple[str, ...]) -> None:
    want = run(*argv, "--db", empty)
    assert want.code == 2 and want.err.count("\n") == 1
    r = run(*argv, "--db", missing)
    assert (r.code, r.out, r.err) == (2, "", want.err.replace(str(empty), str(missing)))
    assert_absent(missing)


@pytest.mark.parametrize("argv", ADMIN, ids=" ".join)
def test_store_admin_on_a_missing_store_refuses(run: Run, missing: Path,
                                                argv: tuple[str, ...]) -> None:
    r = run(*argv, "--db", missing)
    assert (r.code, r.out, r.err) == (2, "", refusal(missing))
    assert_absent(missing)


def test_empty_answers_say_no_yet(run: Run, missing: Path) -> None:
    """The text answer of each listing on nothing: one line, `no ... yet`."""
    for argv, line in [
            (("task", "list"), "no tasks yet (`clawtower task create SPEC.yaml` makes one)"),
            (("approvals",), "no pending approvals yet"),
            (("events",), "no events yet"),
            (("meeting", "list"), "no meetings yet"),
            (("workflow", "list"), "no workflow runs yet"),
            (("session", "list"), "no sessions yet"),
            (("flow", "list"), "no flows yet"),
            (("triggers", "list"), "no triggers yet"),
            (("deadletter", "list"), "no dead-lettered invocations yet"),
            (("memory", "list"), "no memories yet"),
            (("expert", "list"), "no experts installed yet"),
            (("expert", "registry"), "no experts installed yet")]:
        r = run(*argv, "--db", missing)
        assert r.code == 0 and r.out.startswith(line) and r.out.count("\n") == 1, (argv, r)


def test_graph_and_agents_never_open_a_store(run: Run, missing: Path, tmp_path: Path) -> None:
    flow = tmp_path / "f.lobster"
    flow.write_text("steps:\n  - id: a\n    run: echo hi\n")
    r = run("workflow", "graph", "--file", flow, "--db", missing)
    assert r.code == 0 and r.err == ""
    assert run("agents", "list").code == 0
    assert_absent(missing)


def test_default_db_is_not_created_by_a_read(run: Run, home: Path) -> None:
    """On the home's own store there is no typo to point out: the answer alone, exit 0."""
    r = run("task", "list", "--json")
    assert (r.code, r.json(), r.err) == (0, [], "")
    r = run("approvals")
    assert (r.code, r.out, r.err) == (0, "no pending approvals yet\n", "")
    r = run("task", "show", "T-1")
    assert (r.code, r.out, r.err) == (2, "", "clawtower: error: task 'T-1': no such task\n")
    assert not home.exists()


def test_triggers_list_right_after_expert_install(run: Run, home: Path) -> None:
    """Issue 27 item 4: the triggers of an installed expert list before anything ran."""
    from cli_helpers import ROOT

    r = run("expert", "install", ROOT / "tests" / "fixtures" / "acme-support-expert")
    assert r.code == 0, r.err
    r = run("triggers", "list")
    assert (r.code, r.err) == (0, "")
    assert "acme-support-expert/overdue_sweep: cron" in r.out
    assert "acme-support-expert/ticket_opened: webhook" in r.out
    assert not (home / "clawtower.db").exists()


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
    # a write refused for an unknown id creates nothing (issue 39): the store is made by
    # the first write that succeeds (test_cli_refused_fresh_home.py)
    for argv in (("approve", "A-1"), ("meeting", "stop", "M-1"), ("workflow", "cancel", "W-1")):
        db = tmp_path / argv[0] / "store.db"
        r = run(*argv, "--db", db)
        assert r.code == 2 and "no store at" not in r.err, argv
        assert_absent(db)


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


HOLD = """
import asyncio, sys
from clawtower.cli.stores import cli_store

async def main():
    async with cli_store(sys.argv[1], read_only=True) as store:
        print(store.path, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_a_read_killed_mid_way_leaves_its_empty_store_to_the_next_one(
        home: Path, missing: Path, tmp_path: Path) -> None:
    # a killed process cannot clean up: its throwaway folder (~0.7 MB) stayed in /tmp for
    # good; the next read removes it, and never the folder of a process still alive
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    old = tmp / "clawtower-empty-olderrelease"  # no lock in it: not ours to judge
    old.mkdir()
    env = {**child_env(home), "TMPDIR": str(tmp)}

    def hold() -> tuple[subprocess.Popen[str], Path]:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(missing)], env=env,
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        return proc, Path(proc.stdout.readline().strip()).parent

    def read() -> None:
        out = subprocess.run([str(CLAWTOWER), "task", "list", "--db", str(missing)], env=env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr

    killed, killed_folder = hold()
    alive, alive_folder = hold()
    try:
        assert killed_folder.parent == tmp and (killed_folder / "clawtower.db").exists()
        read()
        assert killed_folder.exists() and alive_folder.exists()  # both owners alive
        killed.kill()
        killed.wait(30)
        read()
        assert not killed_folder.exists()
        assert sorted(tmp.iterdir()) == sorted([old, alive_folder])
    finally:
        for proc in (killed, alive):
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    read()  # alive's is gone too now that it was killed
    assert list(tmp.iterdir()) == [old]
    assert_absent(missing)
