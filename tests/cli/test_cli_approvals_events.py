"""`approvals`, `approve`, `reject`, `events` and `store` in process."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from cli_helpers import OPERATOR, Run, max_seq, query, spec

from clawtower.core.store.schema import LATEST_VERSION


def test_approvals_list_and_json(run: Run, awaiting: tuple[Path, str]) -> None:
    db, approval = awaiting
    r = run("approvals", "--db", db)
    assert r.code == 0
    header, row = r.out.splitlines()
    assert header.split() == ["ID", "KIND", "STATUS", "SUBJECT", "ASKED", "BY", "WHEN", "WHAT"]
    assert row.split()[:5] == [approval, "task_side_effect", "pending", "T-1", OPERATOR]
    assert "side effect(s) of 'Publish the release notes'" in row
    (a,) = run("approvals", "--json", "--db", db).json()
    assert (a["id"], a["status"], a["subject"], a["kind"]) == (
        approval, "pending", "T-1", "task_side_effect")
    assert a["context"]["effects"][0]["kind"] == "notify"
    assert "notify: Post the notes to #customers -> chat://customers" in a["preview"]


def test_no_pending_approvals(run: Run, seeded: Path) -> None:
    assert run("approvals", "--db", seeded).out == "no pending approvals yet\n"
    assert run("approvals", "--json", "--db", seeded).json() == []


def test_approve_by_a_named_operator(run: Run, awaiting: tuple[Path, str]) -> None:
    db, approval = awaiting
    r = run("approve", approval, "--by", "alice", "--reason", "looks right", "--db", db)
    assert (r.code, r.err) == (0, "")
    assert r.out == (f"{approval}: approved by alice (task_side_effect T-1)\n"
                     "T-1: ready to resume; no engine runs now: `clawtower serve` (or"
                     " `clawtower serve --until-idle`) or the console performs its side"
                     " effects\n")  # says what moves it on
    assert run("approvals", "--json", "--db", db).json() == []
    assert run("approvals", "--db", db).out == "no pending approvals yet\n"
    (a,) = run("approvals", "--all", "--json", "--db", db).json()
    assert (a["status"], a["decided_by"], a["reason"]) == ("approved", "alice", "looks right")
    # the task's phase follows the decision in the same commit, by the orchestrator's rule
    last = max_seq(db)
    assert query(db, "SELECT type, actor, role FROM events WHERE seq>=? ORDER BY seq",
                 (last - 1,)) == [("approval.decided", "alice", "operator"),
                                  ("task.transitioned", "orchestrator", "orchestrator")]
    assert query(db, "SELECT phase FROM tasks WHERE id='T-1'") == [("ready_to_resume",)]
    # the effects still have to run before it completes
    r = run("task", "transition", "T-1", "completed", "--as", "orchestrator", "--reason", "done",
            "--db", db)
    assert r.code == 2
    assert "1 approved side effect(s) not done yet" in r.err
    text = run("task", "show", "T-1", "--db", db).out
    assert f"{approval} approved by alice" in text


def test_reject_with_a_reason(run: Run, awaiting: tuple[Path, str]) -> None:
    db, approval = awaiting
    r = run("reject", approval, "--reason", "not before the launch", "--db", db)
    assert (r.code, r.err) == (0, "")
    assert r.out == (f"{approval}: rejected by {OPERATOR} (task_side_effect T-1)\n"
                     "T-1: failed (its side effects were refused)\n")
    t = run("task", "show", "T-1", "--json", "--db", db).json()
    (a,) = t["approvals"]
    assert (a["status"], a["decided_by"], a["reason"]) == (
        "rejected", OPERATOR, "not before the launch")
    # rejected: the task failed with the decision, in its commit; it cannot resume
    assert t["phase"] == "failed"
    r = run("task", "transition", "T-1", "ready_to_resume", "--as", "orchestrator",
            "--reason", "try", "--db", db)
    assert r.code == 2
    assert "failed -> ready_to_resume is not a legal transition" in r.err
    lines = run("events", "--db", db).out.splitlines()
    assert lines[-2].split()[3:5] == ["approval.decided", approval]
    assert lines[-2].endswith(f"rejected by {OPERATOR}: not before the launch")
    assert lines[-1].split()[3:5] == ["task.transitioned", "T-1"]
    assert f"approval {approval} rejected by {OPERATOR}: not before the launch" in lines[-1]


def test_events_text_json_after_and_entity(run: Run, seeded: Path) -> None:
    db = seeded
    run("task", "transition", "T-1", "spec_review", "--as", "orchestrator", "--reason", "ready",
        "--db", db)
    text = run("events", "--db", db)
    assert text.code == 0
    lines = text.out.splitlines()
    assert len(lines) == 3
    assert lines[0].split()[0] == "1" and "task.created" in lines[0]
    assert lines[1].endswith("created: Make the dashboard better (spec incomplete)")
    assert lines[2].endswith("spec_draft -> spec_review: ready")
    assert f"{OPERATOR}(orchestrator)" in lines[2]

    events = [json.loads(ln) for ln in run("events", "--json", "--db", db).out.splitlines()]
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert [e["type"] for e in events] == ["task.created", "task.created", "task.transitioned"]
    assert events[2]["payload"]["to_phase"] == "spec_review"
    assert set(events[0]) >= {"seq", "ts", "type", "entity_id", "actor", "role", "payload"}

    after = run("events", "--json", "--after", "1", "--db", db).out.splitlines()
    assert [json.loads(ln)["seq"] for ln in after] == [2, 3]
    assert run("events", "--json", "--after", "3", "--db", db).out == ""
    assert run("events", "--after", "99", "--db", db).code == 0
    t1 = run("events", "--json", "--entity", "T-1", "--db", db).out.splitlines()
    assert [json.loads(ln)["seq"] for ln in t1] == [1, 3]


def test_events_page_through_more_than_a_batch(run: Run, db: Path) -> None:
    import asyncio

    from clawtower.core import NewEvent, open_store
    from clawtower.core.events import AgentUsage

    async def fill() -> None:
        store = await open_store(db)
        try:
            await store.append([NewEvent(entity_id="x", actor="sim", role="system",
                                         payload=AgentUsage(agent="sim", model="m", purpose="p",
                                                            prompt_tokens=1,
                                                            completion_tokens=1))
                                for _ in range(1203)])
        finally:
            await store.close()

    asyncio.run(fill())
    out = run("events", "--json", "--db", db).out.splitlines()
    assert [json.loads(ln)["seq"] for ln in out] == list(range(1, 1204))


def test_store_verify_rebuild_info(run: Run, awaiting: tuple[Path, str]) -> None:
    db, _ = awaiting
    r = run("store", "verify", "--db", db)
    assert (r.code, r.out) == (0, "projections match the log\n")
    n = max_seq(db)
    # damage a projection behind the store's back: verify says so and exits 1
    conn = sqlite3.connect(db)
    conn.execute("UPDATE tasks SET phase='completed' WHERE id='T-1'")
    conn.commit()
    conn.close()
    r = run("store", "verify", "--db", db)
    assert r.code == 1
    assert r.out.splitlines() == ["tasks: 1 live rows vs 1 replayed; 1 only live, 1 only replayed",
                                  "1 projection(s) differ from the log"]
    r = run("store", "rebuild", "--db", db)
    assert (r.code, r.out) == (0, f"rebuilt projections from {n} events\n")
    assert run("task", "show", "T-1", "--json", "--db", db).json()["phase"] == "awaiting_approval"
    assert run("store", "verify", "--db", db).out == "projections match the log\n"
    info = run("store", "info", "--db", db).out.splitlines()
    assert info[:3] == [f"store: {db}", f"schema: v{LATEST_VERSION}", f"events: {n}"]
    assert max_seq(db) == n  # rebuilding rewrites projections, never the log


def test_created_from_spec_records_its_source(run: Run, db: Path) -> None:
    run("task", "create", spec("01"), "--db", db)
    t = run("task", "show", "T-1", "--json", "--db", db).json()
    assert t["source"] == spec("01")
