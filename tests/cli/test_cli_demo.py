"""`clawtower demo --headless --speed 0`, then the operator's part: approve, serve, verify.

The demo runs once per module (a few seconds: at speed 0 it waits out no retry backoff);
tests that change its store work on a copy.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import OPERATOR, SPECS, Run, max_seq, query, run_cli

# one xdist worker (--dist loadgroup) runs these: one headless demo (the module's fixture)
pytestmark = pytest.mark.xdist_group("cli-demo")


@dataclass
class Demo:
    home: Path
    proc: subprocess.CompletedProcess[str]
    db: Path
    approval: str

    def phases(self) -> dict[str, tuple[str, int]]:
        """The summary table: id -> (phase, attempts)."""
        out: dict[str, tuple[str, int]] = {}
        for line in self.proc.stdout.split("Demo summary\n", 1)[1].splitlines()[1:]:
            if not line.strip():
                break
            tid, phase, att = line.split()[:3]
            out[tid] = (phase, int(att))
        return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    home = tmp_path_factory.mktemp("demo") / "home"
    proc = run_cli(["demo", "--headless", "--speed", "0"], home, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"approve with: clawtower approve (\w+)\n", proc.stdout)
    assert m, proc.stdout
    return Demo(home, proc, home / "clawtower.db", m.group(1))


@pytest.fixture
def demo_copy(demo: Demo, tmp_path: Path) -> Demo:
    """A private copy of the demo's home (the store is closed: no WAL to carry over)."""
    home = tmp_path / "home"
    shutil.copytree(demo.home, home)
    return Demo(home, demo.proc, home / demo.db.name, demo.approval)


def test_demo_uses_the_default_store_of_every_command(demo: Demo) -> None:
    assert demo.proc.stdout.startswith(f"clawtower demo: seeded 6 tasks into {demo.db}\n")
    assert demo.proc.stderr == ""
    assert f"events: {max_seq(demo.db)}   store: {demo.db}" in demo.proc.stdout
    # what the demo tells you to type works as typed: no --db needed anywhere
    assert "--db" not in demo.proc.stdout
    r = run_cli(["approvals", "--json"], demo.home)
    assert r.returncode == 0 and [a["id"] for a in json.loads(r.stdout)] == [demo.approval]
    r = run_cli(["task", "list"], demo.home)
    assert r.returncode == 0 and r.stdout.count("\nT-") == 6, r.stdout


def test_a_second_demo_replaces_only_its_own_store(demo_copy: Demo) -> None:
    d = demo_copy
    before = max_seq(d.db)
    r = run_cli(["demo", "--headless", "--speed", "0"], d.home, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"clawtower demo: replaced the earlier demo's store at {d.db}"
                               f" ({before} events)\n")
    assert query(d.db, "SELECT count(*) FROM tasks") == [(6,)]


def test_the_demo_refuses_a_store_it_did_not_make(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / "clawtower.db"
    r = run_cli(["task", "create", str(SPECS / "01-csv-export.yaml")], home)
    assert r.returncode == 0, r.stderr
    before = db.read_bytes()
    r = run_cli(["demo", "--headless", "--speed", "0"], home)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (f"clawtower: error: demo: {db} holds a store the demo did not make (1"
                        f" events, the first by {OPERATOR!r}); {db} is left untouched. Run the"
                        " demo on another store: `clawtower demo --db PATH` (then give every"
                        " command the same --db), or set CLAWTOWER_HOME=DIR for a fresh home\n")
    assert db.read_bytes() == before
    # --db picks another store, and the demo's hints then carry it
    other = tmp_path / "elsewhere" / "demo.db"
    r = run_cli(["demo", "--headless", "--speed", "0", "--db", str(other)], home, timeout=120)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"approve with: clawtower approve \w+ --db {re.escape(str(other))}\n",
                     r.stdout), r.stdout
    assert db.read_bytes() == before


def test_the_demo_refuses_its_store_once_someone_else_added_to_it(demo_copy: Demo) -> None:
    d = demo_copy
    r = run_cli(["task", "create", str(SPECS / "01-csv-export.yaml")], d.home)
    assert r.returncode == 0, r.stderr
    seq = max_seq(d.db)
    r = run_cli(["demo", "--headless", "--speed", "0"], d.home)
    assert r.returncode == 2
    assert "is an earlier demo's store, but 1 task(s) or run(s) in it were created by" \
        " someone else" in r.stderr
    assert max_seq(d.db) == seq


def test_the_demo_never_replaces_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "clawtower.db").write_text("my notes\n")
    r = run_cli(["demo", "--headless", "--speed", "0"], home)
    assert r.returncode == 2 and "is not a clawtower store" in r.stderr
    assert (home / "clawtower.db").read_text() == "my notes\n"


def test_demo_summary_tells_the_story(demo: Demo) -> None:
    phases = demo.phases()
    assert len(phases) == 6
    by_phase: dict[str, list[str]] = {}
    for tid, (phase, _) in phases.items():
        by_phase.setdefault(phase, []).append(tid)
    assert by_phase["completed"], phases
    assert len(by_phase["circuit_open"]) == 1
    assert len(by_phase["spec_draft"]) == 1
    assert len(by_phase["awaiting_approval"]) == 1
    # a retry: some completed task needed a second attempt
    assert any(phases[t][1] == 2 for t in by_phase["completed"]), phases
    (doomed,) = by_phase["circuit_open"]
    assert phases[doomed][1] == 3
    assert f"{doomed} opened its circuit: attempt 1: " in demo.proc.stdout
    (vague,) = by_phase["spec_draft"]
    assert f"{vague} waits in spec_draft: acceptance_criteria[0]: too weak to test" \
        in demo.proc.stdout
    assert "Waiting for you in Approvals:" in demo.proc.stdout
    assert f"  {demo.approval}  " in demo.proc.stdout


def test_demo_store_matches_the_summary(demo: Demo) -> None:
    rows = dict(query(demo.db, "SELECT id, phase FROM tasks"))
    assert rows == {t: p for t, (p, _) in demo.phases().items()}
    assert query(demo.db, "SELECT id, status FROM approvals") == [(demo.approval, "pending")]
    retried = query(demo.db, "SELECT count(*) FROM events WHERE type='retry.scheduled'")
    assert retried[0][0] >= 1


def test_approve_then_serve_completes_the_task_once(demo_copy: Demo) -> None:
    d = demo_copy
    db = str(d.db)
    journal = d.home / "clawtower.effects.jsonl"
    assert not journal.exists()
    (subject,) = query(d.db, "SELECT subject FROM approvals WHERE id=?", (d.approval,))[0]

    r = run_cli(["approve", d.approval, "--db", db], d.home)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (f"{d.approval}: approved by {OPERATOR} (task_side_effect {subject})\n"
                        f"{subject}: ready to resume; no engine runs now: `clawtower serve`"
                        " (or `clawtower serve --until-idle`) or the console performs its"
                        " side effects\n")
    assert query(d.db, "SELECT phase FROM tasks WHERE id=?", (subject,)) == [
        ("ready_to_resume",)]  # the decision moved it, in its own commit

    r = run_cli(["serve", "--until-idle", "--db", db], d.home, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "lease.acquired" not in r.stdout  # machinery only with --verbose (issue 27)
    moves = [ln.split(None, 6)[3:] for ln in r.stdout.splitlines() if "task.transitioned" in ln]
    assert [(m[1], m[3].split(":")[0]) for m in moves] == [
        (subject, "ready_to_resume -> completed")]
    show = json.loads(run_cli(["task", "show", subject, "--json", "--db", db], d.home).stdout)
    assert show["phase"] == "completed"
    assert {e["status"] for e in show["side_effects"]} == {"done"}
    effects = [json.loads(ln) for ln in journal.read_text().splitlines()]
    assert [e["kind"] for e in effects] == ["notify", "deploy"]
    assert len({e["idem_key"] for e in effects}) == 2

    # a second engine run has nothing left to do: the journal is not written again
    seq = max_seq(d.db)
    r = run_cli(["serve", "--until-idle", "--db", db], d.home, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(journal.read_text().splitlines()) == 2
    phases = dict(query(d.db, "SELECT id, phase FROM tasks"))
    assert phases[subject] == "completed"
    assert sorted(phases.values()).count("circuit_open") == 1
    assert sorted(phases.values()).count("spec_draft") == 1
    assert query(d.db, "SELECT count(*) FROM events WHERE seq > ? AND type='task.transitioned'",
                 (seq,)) == [(0,)]

    r = run_cli(["store", "verify", "--db", db], d.home)
    assert (r.returncode, r.stdout) == (0, "projections match the log\n")
    n = max_seq(d.db)
    r = run_cli(["store", "rebuild", "--db", db], d.home)
    assert (r.returncode, r.stdout) == (0, f"rebuilt projections from {n} events\n")
    assert run_cli(["store", "verify", "--db", db], d.home).returncode == 0
    assert dict(query(d.db, "SELECT id, phase FROM tasks")) == phases


def test_demo_unblock_hint_works(demo_copy: Demo) -> None:
    d = demo_copy
    (doomed,) = query(d.db, "SELECT id FROM tasks WHERE phase='circuit_open'")[0]
    hint = f"clawtower task unblock {doomed} retry|revise|abandon --reason '...'\n"
    assert hint in d.proc.stdout
    r = run_cli(["task", "unblock", doomed, "retry", "--reason", "staging is back"], d.home)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == f"{doomed}: circuit_open -> execution_ready (unblock by {OPERATOR})\n"
    # executed by the orchestrator, commanded by the operator: no `--as orchestrator`
    rows = query(d.db, "SELECT type, actor, role FROM events WHERE entity_id=?"
                 " ORDER BY seq DESC LIMIT 2", (doomed,))
    assert rows == [("task.transitioned", "orchestrator", "orchestrator"),
                    ("task.commanded", OPERATOR, "operator")]
    r = run_cli(["task", "unblock", doomed, "abandon"], d.home)
    assert r.returncode == 2
    assert r.stderr == (f"clawtower: error: task '{doomed}': nothing to unblock: it is in"
                        " execution_ready, not circuit_open\n")


def test_show_circuit_and_retry_from_the_demo(demo: Demo, run: Run) -> None:
    phases = demo.phases()
    (doomed,) = [t for t, (p, _) in phases.items() if p == "circuit_open"]
    text = run("task", "show", doomed, "--db", demo.db).out
    assert "\ncircuit open:\n  failure: attempt 1: cannot reach the staging database;" in text
    assert "  attempts: 3\n" in text
    assert "    - execution_ready: retry with a fresh attempt budget\n" in text
    assert "#3 failed on sim-strong (escalated)" in text
    (retried,) = [t for t, (p, n) in phases.items() if p == "completed" and n == 2
                  and "retrying" in run("task", "show", t, "--db", demo.db).out]
    t = run("task", "show", retried, "--json", "--db", demo.db).json()
    assert [a["status"] for a in t["attempt_records"]] == ["failed", "succeeded"]
    assert [r["attempt"] for r in t["retries"]] == [1]
    assert t["usage"], "simulated agents record their token usage"


def test_demo_at_speed_zero_retries_at_once(demo: Demo) -> None:
    """`--speed 0`: the flaky and doomed tasks retry without waiting out the real backoff
    (issue 27: T-3 waited ~3 s of backoffs); the retries are still recorded."""
    rows = query(demo.db, "SELECT entity_id, ts, json_extract(payload, '$.not_before')"
                 " FROM events WHERE type='retry.scheduled' ORDER BY seq")
    assert len(rows) == 3, rows  # T-2 once, T-3 twice
    assert all(not_before == ts for _, ts, not_before in rows), rows
