"""`clawtower task ...` happy paths: create, list, show, transition, review."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import OPERATOR, SPECS, Run, max_seq, query, spec


def test_create_every_example_prints_its_id(run: Run, db: Path) -> None:
    files = sorted(SPECS.glob("*.yaml"))
    assert len(files) == 6
    for n, f in enumerate(files, 1):
        r = run("task", "create", f, "--db", db)
        assert (r.code, r.out, r.err) == (0, f"T-{n}\n", "")
    rows = run("task", "list", "--json", "--db", db).json()
    assert [t["id"] for t in rows] == [f"T-{n}" for n in range(1, 7)]
    assert {t["phase"] for t in rows} == {"spec_draft"}
    assert rows[0]["title"] == "CSV export of invoices"
    created = query(db, "SELECT entity_id, actor, role FROM events WHERE type='task.created'")
    assert created == [(f"T-{n}", OPERATOR, "operator") for n in range(1, 7)]


def test_create_json_prints_the_task(run: Run, db: Path) -> None:
    r = run("task", "create", spec("01"), "--json", "--db", db)
    assert r.code == 0
    t = r.json()
    assert (t["id"], t["phase"], t["spec_ok"]) == ("T-1", "spec_draft", 1)
    assert t["spec"]["goal"].startswith("Let accountants")


def test_create_accepts_a_json_spec(run: Run, db: Path, tmp_path: Path) -> None:
    f = tmp_path / "spec.json"
    f.write_text('{"goal": "Ship it", "outputs": ["a.py"],'
                 ' "acceptance_criteria": ["the build passes on CI"]}')
    r = run("task", "create", f, "--db", db)
    assert (r.code, r.out) == (0, "T-1\n")
    assert run("task", "show", "T-1", "--json", "--db", db).json()["title"] == "Ship it"


def test_db_option_before_or_after_the_command(run: Run, db: Path) -> None:
    assert run("--db", db, "task", "create", spec("01")).out == "T-1\n"
    assert run("task", "--db", db, "list", "--json").json()[0]["id"] == "T-1"
    assert run("task", "list", "--db", db, "--json").json()[0]["id"] == "T-1"


def test_default_db_lives_in_clawtower_home(run: Run, home: Path) -> None:
    assert run("task", "create", spec("01")).out == "T-1\n"
    assert max_seq(home / "clawtower.db") == 1


def test_list_table_and_phase_filter(run: Run, seeded: Path) -> None:
    r = run("task", "list", "--db", seeded)
    assert r.code == 0
    lines = r.out.splitlines()
    assert lines[0].split() == ["ID", "PHASE", "ATT", "TITLE"]
    assert lines[1].split()[:3] == ["T-1", "spec_draft", "0"]
    assert "CSV export of invoices" in lines[1]
    assert "Make the dashboard better" in lines[2]
    run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "go",
        "--db", seeded)
    review = run("task", "list", "--phase", "spec_review", "--json", "--db", seeded).json()
    assert [t["id"] for t in review] == ["T-1"]
    draft = run("task", "list", "--phase", "spec_draft", "--db", seeded).out.splitlines()
    assert len(draft) == 2 and draft[1].startswith("T-2 ")
    assert run("task", "list", "--phase", "completed", "--json", "--db", seeded).json() == []
    header_only = run("task", "list", "--phase", "completed", "--db", seeded)
    assert (header_only.code, len(header_only.out.splitlines())) == (0, 1)


def test_transition_as_orchestrator(run: Run, seeded: Path) -> None:
    r = run("task", "transition", "T-1", "spec_review", "--as", "orchestrator",
            "--reason", "spec looks complete", "--by", "ops-bot", "--db", seeded)
    assert (r.code, r.out, r.err) == (0, "T-1: spec_draft -> spec_review\n", "")
    t = run("task", "show", "T-1", "--json", "--db", seeded).json()
    assert t["phase"] == "spec_review"
    (h,) = t["history"]
    assert (h["from_phase"], h["to_phase"], h["actor"], h["role"], h["reason"]) == (
        "spec_draft", "spec_review", "ops-bot", "orchestrator", "spec looks complete")
    # without --by the operator's name is the actor
    run("task", "transition", "T-1", "spec_draft", "--as", "orchestrator", "--reason", "back",
        "--db", seeded)
    t = run("task", "show", "T-1", "--json", "--db", seeded).json()
    assert t["history"][-1]["actor"] == OPERATOR


def test_spec_review_findings_reference_files(run: Run, seeded: Path) -> None:
    db = seeded
    run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "go",
        "--db", db)
    r = run("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "changes_requested",
            "--finding", "src/export/csv.py:41: dates are written in local time",
            "--finding", "the spec never says which time zone",
            "--by", "checker", "--db", db)
    assert r.code == 0, r.err
    assert r.out == f"T-1: review recorded (event {max_seq(db)})\n"
    t = run("task", "show", "T-1", "--json", "--db", db).json()
    (rev,) = t["reviews"]
    assert (rev["kind"], rev["stage"], rev["verdict"], rev["reviewer"]) == (
        "spec", "spec_review", "changes_requested", "checker")
    assert rev["findings"] == [
        {"ref": "src/export/csv.py:41", "text": "dates are written in local time"},
        {"ref": None, "text": "the spec never says which time zone"},
    ]
    text = run("task", "show", "T-1", "--db", db).out
    assert "reviews:" in text
    assert "spec_review attempt 0: changes requested by checker" in text
    assert "- src/export/csv.py:41: dates are written in local time" in text
    # changes requested: the orchestrator may not move it on, only back to spec_draft
    refused = run("task", "transition", "T-1", "execution_ready", "--as", "orchestrator",
                  "--reason", "ship", "--db", db)
    assert refused.code == 2
    assert "no approving spec review" in refused.err
    run("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "approved", "--db", db)
    r = run("task", "transition", "T-1", "execution_ready", "--as", "orchestrator",
            "--reason", "approved", "--db", db)
    assert (r.code, r.out) == (0, "T-1: spec_review -> execution_ready\n")


def test_show_has_history_reviews_attempts_artifacts_approvals(
        run: Run, awaiting: tuple[Path, str]) -> None:
    db, approval = awaiting
    t = run("task", "show", "T-1", "--json", "--db", db).json()
    assert t["phase"] == "awaiting_approval"
    assert [(h["from_phase"], h["to_phase"]) for h in t["history"]] == [
        ("spec_draft", "spec_review"), ("spec_review", "execution_ready"),
        ("execution_ready", "executing"), ("executing", "spec_gate"),
        ("spec_gate", "quality_gate"), ("quality_gate", "awaiting_approval")]
    assert [(r["kind"], r["verdict"]) for r in t["reviews"]] == [
        ("spec", "approved"), ("spec", "approved"), ("quality", "approve")]
    assert t["reviews"][-1]["details"]["risk"] == "medium"
    assert t["reviews"][-1]["details"]["test_gaps"] == ["no load test"]
    (att,) = t["attempt_records"]
    assert (att["n"], att["status"], att["heartbeats"]) == (1, "succeeded", 1)
    (art,) = t["artifacts"]
    assert (art["name"], art["uri"], art["attempt"]) == ("notes.md", "file:///tmp/notes.md", 1)
    (eff,) = t["side_effects"]
    assert (eff["kind"], eff["status"]) == ("notify", "planned")
    (ap,) = t["approvals"]
    assert (ap["id"], ap["status"], ap["kind"]) == (approval, "pending", "task_side_effect")

    text = run("task", "show", "T-1", "--db", db).out
    for section in ("history:", "reviews:", "attempts:", "artifacts:", "side effects:",
                    "approvals:"):
        assert f"\n{section}\n" in text, section
    assert "quality_gate -> awaiting_approval" in text
    assert "#1 succeeded on default, 1 heartbeat(s)" in text
    assert "attempt 1: notes.md  file:///tmp/notes.md" in text
    assert f"{approval} pending" in text
    assert "risk medium; maintainability: fine; test gaps: no load test" in text


def test_weak_spec_is_created_but_stays_in_draft(run: Run, db: Path) -> None:
    r = run("task", "create", spec("05"), "--db", db)
    assert (r.code, r.out, r.err) == (0, "T-1\n", "")
    t = run("task", "show", "T-1", "--json", "--db", db).json()
    assert (t["phase"], t["spec_ok"]) == ("spec_draft", 0)
    assert t["spec_problems"] == [
        "acceptance_criteria[0]: too weak to test: 'it works'",
        "acceptance_criteria[1]: too weak to test: 'looks good'"]
    text = run("task", "show", "T-1", "--db", db).out
    assert "phase: spec_draft" in text and "spec ok: False" in text
    assert "reason: acceptance_criteria[0]: too weak to test: 'it works';" \
           " acceptance_criteria[1]: too weak to test: 'looks good'" in text
    # the orchestrator cannot push it on either: the reasons are the refusal
    before = max_seq(db)
    r = run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "try",
            "--db", db)
    assert r.code == 2
    assert r.err.count("\n") == 1 and "the spec is not ready" in r.err and "T-1" in r.err
    assert max_seq(db) == before


def test_update_spec_makes_a_draft_ready(run: Run, seeded: Path, tmp_path: Path) -> None:
    f = tmp_path / "better.yaml"
    f.write_text("goal: Improve the dashboard.\noutputs: [src/dashboard/]\n"
                 "acceptance_criteria:\n  - the dashboard loads in under one second\n")
    r = run("task", "update-spec", "T-2", f, "--db", seeded)
    assert (r.code, r.out) == (0, "T-2: spec updated; ready for review\n")
    r = run("task", "transition", "T-2", "spec_review", "--as", "orchestrator",
            "--reason", "fixed", "--db", seeded)
    assert r.code == 0, r.err


@pytest.mark.parametrize("verdict", ["approve", "rework"])
def test_quality_review(run: Run, awaiting: tuple[Path, str], verdict: str) -> None:
    # the task has left quality_gate: a quality review is refused with the phase named
    db, _ = awaiting
    r = run("task", "review", "T-1", "--as", "quality_reviewer", "--verdict", verdict,
            "--finding", "x", "--db", db)
    assert r.code == 2
    assert r.err == ("clawtower: error: task 'T-1': is in awaiting_approval;"
                     " quality reviews are taken in quality_gate\n")


def test_operator_commands_unblock_retry_cancel(run: Run, seeded: Path) -> None:
    """An operator unblocks, retries or cancels with typed commands; no `--as orchestrator`."""
    db = seeded
    ok = lambda *a: run(*a, "--db", db)  # noqa: E731
    assert ok("task", "transition", "T-1", "spec_review", "--as", "orchestrator",
              "--reason", "ready").code == 0
    r = ok("task", "retry", "T-1")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("clawtower: error: task 'T-1': nothing to retry: it is in spec_review,"
                     " not circuit_open\n")
    assert ok("task", "review", "T-1", "--as", "spec_reviewer", "--verdict", "approved").code == 0
    for phase in ("execution_ready", "circuit_open"):
        assert ok("task", "transition", "T-1", phase, "--as", "orchestrator",
                  "--reason", "stuck").code == 0
    r = ok("task", "unblock", "T-1", "later")
    assert (r.code, r.out) == (2, "")
    assert "CHOICE: unknown unblock choice 'later' (known: execution_ready, retry," in r.err
    r = ok("task", "unblock", "T-1", "revise", "--reason", "the spec was wrong", "--by", "ann")
    assert (r.code, r.out, r.err) == (0, "T-1: circuit_open -> spec_draft (unblock by ann)\n", "")
    r = ok("task", "cancel", "T-2", "--reason", "duplicate")
    assert (r.code, r.out) == (0, f"T-2: spec_draft -> failed (cancel by {OPERATOR})\n")
    t = ok("task", "show", "T-2", "--json").json()
    assert t["phase_reason"] == f"cancel by {OPERATOR}: duplicate"
    r = ok("task", "cancel", "T-2")
    assert (r.code, r.err) == (2, "clawtower: error: task 'T-2': nothing to cancel: it already"
                                  " ended failed\n")
    r = ok("events", "--entity", "T-1")
    assert "task.commanded       T-1        ann(operator)  unblock -> spec_draft: the spec" \
        in r.out
    r = ok("task", "retry", "T-9")
    assert (r.code, r.err) == (2, "clawtower: error: task 'T-9': no such task\n")
