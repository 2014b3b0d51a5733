"""Bad input: exit 2, exactly one stderr line naming the file, field or id at fault, and the
store left as it was (same last event, same bytes). The one write allowed on a refusal is the
`permission.refused` event that records it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cli_helpers import ROOT, Run, StoreState, digest, max_seq, query, set_user_version, spec, state


def one_error_line(err: str, *needles: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert err.endswith("\n")
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert "Traceback" not in err
    return lines[0]


def test_cli_package_is_the_real_one() -> None:
    from clawtower import cli
    from clawtower.cli import main

    assert Path(cli.__file__).resolve() == ROOT / "clawtower" / "cli" / "__init__.py"
    assert callable(main.main)


@pytest.fixture
def settled(run: Run, seeded: Path) -> StoreState:
    """The seeded store after one more open/close, so its files are at rest."""
    assert run("task", "list", "--db", seeded).code == 0
    s = state(seeded)
    assert s.seq == 2
    return s


# ------------------------------------------------------------------------ spec files

BAD_SPECS = {
    "malformed-yaml": ("bad.yaml", "goal: x\nacceptance_criteria: [a b c\n  foo: : bar\n",
                       ["bad.yaml", "line 3", "invalid YAML"]),
    "json-syntax": ("bad.json", '{\n  "goal": "x",\n}\n', ["bad.json", "line 3", "invalid JSON"]),
    "missing-goal": ("nogoal.yaml", "title: no goal\noutputs: [a]\n",
                     ["nogoal.yaml", "field 'goal'", "required"]),
    "mistyped-field": ("num.yaml", "goal: x\nacceptance_criteria: 5\n",
                       ["num.yaml", "field 'acceptance_criteria'"]),
    "mistyped-nested": ("eff.yaml", "goal: x\nside_effects:\n  - kind: notify\n",
                        ["eff.yaml", "field 'side_effects.0.description'"]),
    "unknown-field": ("unk.yaml", "goal: x\ncolour: red\n",
                      ["unk.yaml", "field 'colour'", "unknown field"]),
    "a-list": ("list.yaml", "- goal: x\n", ["list.yaml", "a spec must be a mapping, got list"]),
    "a-scalar": ("scalar.yaml", "just words\n", ["scalar.yaml", "a spec must be a mapping"]),
    "empty": ("empty.yaml", "", ["empty.yaml", "a spec must be a mapping"]),
    "anchor": ("anchor.yaml", "goal: &g x\ntitle: *g\n", ["anchor.yaml", "line 1", "anchors"]),
    "not-utf8": ("latin.yaml", b"goal: caf\xe9\n", ["latin.yaml", "not UTF-8"]),
}


@pytest.mark.parametrize("case", BAD_SPECS, ids=list(BAD_SPECS))
def test_bad_spec_file(run: Run, seeded: Path, settled: StoreState, tmp_path: Path,
                       case: str) -> None:
    name, content, needles = BAD_SPECS[case]
    f = tmp_path / name
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content)
    r = run("task", "create", f, "--db", seeded)
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, *needles)
    assert state(seeded) == settled


def test_spec_file_missing_or_a_directory(run: Run, seeded: Path, settled: StoreState,
                                          tmp_path: Path) -> None:
    r = run("task", "create", tmp_path / "missing.yaml", "--db", seeded)
    assert r.code == 2
    one_error_line(r.err, "missing.yaml", "no such file")
    r = run("task", "create", tmp_path, "--db", seeded)
    assert r.code == 2
    one_error_line(r.err, str(tmp_path), "is a directory")
    assert state(seeded) == settled


def test_bad_spec_leaves_no_store_behind(run: Run, tmp_path: Path) -> None:
    f = tmp_path / "unk.yaml"
    f.write_text("goal: x\ncolour: red\n")
    fresh = tmp_path / "new" / "store.db"
    r = run("task", "create", f, "--db", fresh)
    assert r.code == 2
    one_error_line(r.err, "unk.yaml", "colour")
    assert not fresh.parent.exists()


def test_bad_spec_on_update_spec(run: Run, seeded: Path, settled: StoreState,
                                 tmp_path: Path) -> None:
    f = tmp_path / "nogoal.yaml"
    f.write_text("title: x\n")
    r = run("task", "update-spec", "T-2", f, "--db", seeded)
    assert r.code == 2
    one_error_line(r.err, "nogoal.yaml", "'goal'")
    assert state(seeded) == settled


# ------------------------------------------------------------------------ ids, phases, roles

BAD_COMMANDS = {
    "list-unknown-phase": (["task", "list", "--phase", "nope"], ["--phase", "'nope'"]),
    "transition-unknown-phase": (["task", "transition", "T-1", "finished", "--as",
                                  "orchestrator", "--reason", "r"], ["PHASE", "'finished'"]),
    "illegal-transition": (["task", "transition", "T-1", "completed", "--as", "orchestrator",
                            "--reason", "r"],
                           ["task 'T-1'", "spec_draft -> completed", "not a legal transition"]),
    "guard-refuses": (["task", "transition", "T-2", "spec_review", "--as", "orchestrator",
                       "--reason", "r"], ["task 'T-2'", "spec_draft -> spec_review",
                                          "the spec is not ready"]),
    "empty-reason": (["task", "transition", "T-1", "spec_review", "--as", "orchestrator",
                      "--reason", "  "], ["--reason"]),
    "unknown-role": (["task", "transition", "T-1", "spec_review", "--as", "wizard",
                      "--reason", "r"], ["--as", "'wizard'"]),
    "show-unknown-task": (["task", "show", "T-99"], ["'T-99'", "no such task"]),
    "show-json-unknown-task": (["task", "show", "T-99", "--json"], ["'T-99'"]),
    "transition-unknown-task": (["task", "transition", "T-99", "spec_review", "--as",
                                 "orchestrator", "--reason", "r"], ["'T-99'", "no such task"]),
    "review-unknown-task": (["task", "review", "T-99", "--as", "spec_reviewer", "--verdict",
                             "approved"], ["'T-99'"]),
    "update-unknown-task": (["task", "update-spec", "T-99", spec("01")], ["'T-99'"]),
    "review-wrong-phase": (["task", "review", "T-1", "--as", "spec_reviewer", "--verdict",
                            "approved"], ["task 'T-1'", "spec_draft"]),
    "review-bad-verdict": (["task", "review", "T-1", "--as", "spec_reviewer", "--verdict",
                            "lgtm"], ["--verdict", "'lgtm'"]),
    "approve-unknown": (["approve", "deadbeef"], ["'deadbeef'", "no such approval"]),
    "reject-unknown": (["reject", "deadbeef", "--reason", "no"], ["'deadbeef'"]),
    "approve-empty-by": (["approve", "deadbeef", "--by", " "], ["--by"]),
}


@pytest.mark.parametrize("case", BAD_COMMANDS, ids=list(BAD_COMMANDS))
def test_bad_command(run: Run, seeded: Path, settled: StoreState, case: str) -> None:
    argv, needles = BAD_COMMANDS[case]
    r = run(*argv, "--db", seeded)
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, *needles)
    assert state(seeded) == settled


def test_unknown_role_leaves_no_store_behind(run: Run, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    r = run("task", "review", "T-1", "--as", "boss", "--verdict", "approved", "--db", fresh)
    assert r.code == 2
    one_error_line(r.err, "--as", "'boss'")
    assert not fresh.exists()


def test_a_finding_is_needed_to_request_changes(run: Run, seeded: Path) -> None:
    run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "r",
        "--db", seeded)
    before = state(seeded)
    r = run("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "changes_requested",
            "--db", seeded)
    assert r.code == 2
    one_error_line(r.err, "--finding")
    assert state(seeded).seq == before.seq


USAGE = {
    "transition-without-as": (["task", "transition", "T-1", "spec_review", "--reason", "r"],
                              "--as"),
    "transition-without-reason": (["task", "transition", "T-1", "spec_review", "--as",
                                   "orchestrator"], "--reason"),
    "review-without-as": (["task", "review", "T-1", "--verdict", "approved"], "--as"),
    "review-without-verdict": (["task", "review", "T-1", "--as", "spec_reviewer"], "--verdict"),
    "task-without-action": (["task"], "ACTION"),
    "unknown-command": (["frobnicate"], "frobnicate"),
    "unknown-task-action": (["task", "delete", "T-1"], "delete"),
    "bad-after": (["events", "--after", "ten"], "--after"),
    "bad-risk": (["task", "review", "T-1", "--as", "quality_reviewer", "--verdict", "approve",
                  "--risk", "huge"], "--risk"),
    "approve-without-id": (["approve"], "id"),
}


@pytest.mark.parametrize("case", USAGE, ids=list(USAGE))
def test_usage_errors_are_one_line(run: Run, seeded: Path, settled: StoreState,
                                   case: str) -> None:
    argv, needle = USAGE[case]
    r = run(*argv, "--db", seeded)
    assert (r.code, r.out) == (2, "")
    line = one_error_line(r.err, needle)
    assert line.startswith("clawtower")
    assert "error:" in line
    assert state(seeded) == settled


# ------------------------------------------------------------------------ refused roles


@pytest.mark.parametrize("role", ["executor", "operator", "spec_reviewer"])
def test_role_that_may_not_transition_is_refused_and_recorded(run: Run, seeded: Path,
                                                              settled: StoreState,
                                                              role: str) -> None:
    r = run("task", "transition", "T-1", "spec_review", "--as", role, "--reason", "let me",
            "--by", "mallory", "--db", seeded)
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, "T-1", f"role {role} may not task.transition", "mallory")
    # the refusal itself is the one write: one event, nothing else moved
    assert max_seq(seeded) == settled.seq + 1
    assert query(seeded, "SELECT type, entity_id, actor, role FROM events WHERE seq=?",
                 (settled.seq + 1,)) == [("permission.refused", "T-1", "mallory", role)]
    t = run("task", "show", "T-1", "--json", "--db", seeded).json()
    assert (t["phase"], t["history"]) == ("spec_draft", [])
    (refusal,) = t["refusals"]
    assert (refusal["action"], refusal["role"]) == ("task.transition", role)
    assert "refused writes:" in run("task", "show", "T-1", "--db", seeded).out


def test_wrong_reviewer_role_is_refused_and_recorded(run: Run, seeded: Path) -> None:
    run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "r",
        "--db", seeded)
    before = max_seq(seeded)
    r = run("task", "review", "T-1", "--as", "executor", "--verdict", "approved",
            "--by", "builder", "--db", seeded)
    assert r.code == 2
    one_error_line(r.err, "T-1", "role executor may not review.spec")
    assert query(seeded, "SELECT type FROM events WHERE seq > ?", (before,)) == [
        ("permission.refused",)]
    assert run("task", "show", "T-1", "--json", "--db", seeded).json()["reviews"] == []


# ------------------------------------------------------------------------ approvals


def test_decided_approval_cannot_be_decided_again(run: Run, awaiting: tuple[Path, str]) -> None:
    db, approval = awaiting
    assert run("approve", approval, "--by", "alice", "--db", db).code == 0
    before = state(db)
    for argv in (["approve", approval], ["reject", approval, "--reason", "too late"],
                 ["approve", approval, "--by", "bob"]):
        r = run(*argv, "--db", db)
        assert (r.code, r.out) == (2, "")
        one_error_line(r.err, f"approval '{approval}'", "already decided: approved by alice at ")
    assert state(db).seq == before.seq


# ------------------------------------------------------------------------ unusable stores


def _commands(db: Path) -> list[list[str]]:
    return [["task", "list", "--db", str(db)], ["task", "create", spec("01"), "--db", str(db)],
            ["events", "--db", str(db)], ["approvals", "--db", str(db)],
            ["store", "verify", "--db", str(db)]]


def test_db_path_under_a_regular_file(run: Run, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("I am a file\n")
    db = blocker / "clawtower.db"
    for argv in _commands(db):
        r = run(*argv)
        assert (r.code, r.out) == (2, ""), argv
        one_error_line(r.err, str(db), "cannot create the store's folder")
    assert blocker.read_text() == "I am a file\n"


def test_db_of_a_newer_schema(run: Run, seeded: Path) -> None:
    set_user_version(seeded, 99)
    before = digest(seeded)
    for argv in _commands(seeded):
        r = run(*argv)
        assert (r.code, r.out) == (2, ""), argv
        one_error_line(r.err, str(seeded), "newer clawtower", "v99")
    assert digest(seeded) == before
    assert max_seq(seeded) == 2


def test_foreign_sqlite_file(run: Run, tmp_path: Path) -> None:
    db = tmp_path / "other.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    conn.close()
    before = digest(db)
    for argv in _commands(db):
        r = run(*argv)
        assert (r.code, r.out) == (2, ""), argv
        one_error_line(r.err, str(db), "not a clawtower store")
    assert digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


@pytest.mark.parametrize("content", [b"hello, I am notes\n" * 10, b"", b"\x00" * 100])
def test_text_file_as_db(run: Run, tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "notes.txt"
    db.write_bytes(content)
    r = run("task", "create", spec("01"), "--db", db)
    if content == b"":
        # an empty file is a new SQLite database: becoming a store is fine
        assert r.code == 0, r.err
        return
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, str(db), "not a clawtower store")
    assert db.read_bytes() == content


def test_directory_as_db(run: Run, tmp_path: Path) -> None:
    r = run("task", "list", "--db", tmp_path)
    assert r.code == 2
    one_error_line(r.err, str(tmp_path), "is a directory")


def test_demo_without_its_data(run: Run, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    monkeypatch.setenv("CLAWTOWER_DEMO_DIR", str(tmp_path / "nowhere"))
    r = run("demo", "--headless", "--speed", "0")
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, str(tmp_path / "nowhere"), "demo data not found")
    assert not (home / "clawtower.db").exists()


def test_empty_db_path(run: Run, tmp_path: Path) -> None:
    r = run("task", "list", "--db", "")
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, "--db", "empty")


@pytest.mark.parametrize("speed", ["-1", "nan", "inf"])
def test_demo_bad_speed_seeds_nothing(run: Run, home: Path, speed: str) -> None:
    r = run("demo", "--headless", "--speed", speed)
    assert (r.code, r.out) == (2, "")
    one_error_line(r.err, "--speed", speed)
    assert not (home / "clawtower.db").exists()


def test_serve_bad_agents_script_touches_nothing(run: Run, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    bad = tmp_path / "agents.yaml"
    bad.write_text("speed: fast\n")
    for script, needle in ((bad, "field 'speed'"), (tmp_path / "none.yaml", "no such file")):
        r = run("serve", "--until-idle", "--agents", script, "--db", db)
        assert (r.code, r.out) == (2, "")
        one_error_line(r.err, str(script), needle)
    assert not db.exists()
