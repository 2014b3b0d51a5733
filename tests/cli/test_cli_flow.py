"""`clawtower flow ...` end to end (in-process main()) on the simulator with the scripted
decompositions of examples/flows/agents.yaml: run --wait, list/show/mailbox with --json,
show --markdown (the seed's task.md), export (the seed's files), cancel, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import ROOT, Run

SCRIPT = ROOT / "examples" / "flows" / "agents.yaml"


@pytest.fixture(autouse=True)
def instant(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "clawtower.yaml").write_text(SCRIPT.read_text().replace("speed: 0.2", "speed: 0"))


def agents(run: Run, db: Path) -> None:
    for name, subs in (("lead", "researcher,writer"), ("researcher", "fetcher"),
                       ("writer", ""), ("fetcher", "")):
        assert run("agents", "spec", "set", name, "--subagents", subs, "--db", db).code == 0


def test_run_wait_show_list_mailbox(run: Run, db: Path) -> None:
    agents(run, db)
    r = run("flow", "run", "lead", "Write a briefing on the Q3 numbers", "--wait", "--db", db)
    assert r.code == 0, r.err
    assert r.out.strip() == ("Briefing ready: revenue up 12%, costs flat; the board page is"
                             " attached.")
    assert "F-1 · done · 6/6 tasks done" in r.err
    rows = run("flow", "list", "--json", "--db", db).json()
    assert [(x["id"], x["status"], x["nodes"]) for x in rows] == [("F-1", "done", 6)]
    got = run("flow", "show", "F-1", "--json", "--db", db).json()
    assert [t["local_id"] for t in got["tasks"]] == ["root", "research", "sales", "costs",
                                                    "outline", "draft"]
    draft = got["tasks"][-1]
    assert '"inputs"' in draft["context"] and "sales 4.2M (+12%)" in draft["context"]
    text = run("flow", "show", "F-1", "--db", db).out
    assert "└ sales [done] fetcher" in text and "6/6 done" in text
    inbox = run("flow", "mailbox", "fetcher", "--json", "--db", db).json()
    assert inbox == []
    arch = run("flow", "mailbox", "fetcher", "--box", "archive", "--json", "--db", db).json()
    assert [(m["kind"], m["from_agent"], m["task_id"]) for m in arch] == [
        ("TASK", "researcher", "F-1/root/research/sales"),
        ("TASK", "researcher", "F-1/root/research/costs")]
    out = run("flow", "mailbox", "researcher", "--box", "outbox", "--db", db).out
    assert "REPLY" in out and "TASK" in out


def test_markdown_and_export_follow_the_seed_layout(run: Run, db: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    agents(run, db)
    assert run("flow", "run", "lead", "briefing", "--wait", "--db", db).code == 0
    md = run("flow", "show", "F-1/root/research", "--markdown", "--db", db).out
    assert md.startswith("# Task F-1/root/research")
    assert "## DAG" in md and "| sales | fetcher | - | done |" in md
    assert "2/2 subtasks done" in md and "## Synthesis" in md
    monkeypatch.chdir(tmp_path)
    r = run("flow", "export", "F-1", "out", "--db", db)
    assert r.code == 0, r.err
    task_md = tmp_path / "out" / "researcher" / "tasks" / "F-1--root--research" / "task.md"
    assert task_md.read_text().startswith("# Task F-1/root/research")
    inbox = list((tmp_path / "out" / "fetcher" / "mailbox" / "archive").iterdir())
    assert len(inbox) == 2 and all("-TASK-" in p.name for p in inbox)
    sent = sorted((tmp_path / "out" / "fetcher" / "mailbox" / "outbox").iterdir())
    assert "kind: \"REPLY\"" in sent[0].read_text()
    assert (tmp_path / "out" / "fetcher" / "mailbox" / "inbox").is_dir()
    outside = run("flow", "export", "F-1", "/etc/flows", "--db", db)
    assert outside.code == 2 and "outside the current directory" in outside.err


def test_run_without_wait_then_work_and_cancel(run: Run, db: Path) -> None:
    agents(run, db)
    r = run("flow", "run", "lead", "briefing", "--db", db)
    assert (r.code, r.out.strip()) == (0, "F-1")
    assert run("flow", "show", "F-1", "--json", "--db", db).json()["flow"]["status"] == \
        "running"
    w = run("flow", "work", "--until-idle", "--db", db)
    assert w.code == 0, w.err
    assert run("flow", "show", "F-1", "--json", "--db", db).json()["flow"]["status"] == "done"
    assert run("flow", "run", "lead", "second", "--db", db).out.strip() == "F-2"
    c = run("flow", "cancel", "F-2", "--reason", "not needed", "--db", db)
    assert c.code == 0
    got = run("flow", "show", "F-2", "--json", "--db", db).json()
    assert (got["flow"]["status"], got["flow"]["error"]) == ("cancelled", "not needed")
    again = run("flow", "cancel", "F-2", "--db", db)
    assert again.code == 2 and "already cancelled" in again.err


def test_bad_input_is_one_line_exit_2(run: Run, db: Path) -> None:
    agents(run, db)
    for argv, needle in (
        (["flow", "run", "nobody", "x"], "no such agent spec"),
        (["flow", "run", "lead", "  "], "TASK is empty"),
        (["flow", "run", "lead", "x", "--context", "[1]"], "must be a JSON object"),
        (["flow", "run", "lead", "x", "--max-depth", "0"], "--max-depth"),
        (["flow", "show", "F-9"], "'F-9': no such flow"),
        (["flow", "mailbox", "lead", "--box", "attic"], "invalid choice"),
    ):
        r = run(*argv, "--db", db)
        assert r.code == 2, (argv, r.err)
        assert needle in r.err and r.err.count("\n") == 1, (argv, r.err)


def test_refused_decomposition_fails_the_flow_with_exit_1(run: Run, db: Path,
                                                          home: Path) -> None:
    agents(run, db)
    # a forbidden agent: the allowed agents are an enum of the decision schema, so the
    # llm-task step refuses it (after its one repair attempt), naming the agents allowed
    assert run("agents", "spec", "set", "lead", "--subagents", "writer", "--db", db).code == 0
    r = run("flow", "run", "lead", "briefing", "--wait", "--db", db)
    assert r.code == 1 and r.err.count("clawtower: error:") == 1
    assert ("/subtasks/0/agent: 'researcher' is not one of ['writer']") in r.err
    # a cycle passes the schema; the engine's validation refuses it, naming the cycle
    (home / "clawtower.yaml").write_text(
        "speed: 0\nscripts:\n  root:\n    llm_task:\n      - answer:\n"
        "          action: decompose\n          subtasks:\n"
        "            - {id: a, agent: writer, instruction: x, depends_on: [b]}\n"
        "            - {id: b, agent: writer, instruction: y, depends_on: [a]}\n")
    r = run("flow", "run", "lead", "briefing", "--wait", "--db", db)
    assert r.code == 1
    assert "flow 'F-2': failed: decomposition refused: dependency cycle: a -> b -> a" in r.err


def test_serve_drives_a_flow_started_without_wait(run: Run, db: Path) -> None:
    agents(run, db)
    assert run("flow", "run", "lead", "briefing", "--db", db).out.strip() == "F-1"
    r = run("serve", "--until-idle", "--db", db)
    assert r.code == 0, r.err
    got = run("flow", "show", "F-1", "--json", "--db", db).json()
    assert got["flow"]["status"] == "done" and got["flow"]["done"] == 6


def test_a_flow_session_refuses_outside_sends(run: Run, db: Path) -> None:
    """Issue 22 item 6: the flow's sessions belong to it."""
    agents(run, db)
    assert run("flow", "run", "lead", "briefing", "--db", db).code == 0  # left running
    sessions = run("session", "list", "--json", "--db", db).json()
    owned = [s for s in sessions if s["created_by"] == "flow:F-1"]
    assert owned and all(s["channel"] == "agent" for s in owned)
    sid = owned[0]["id"]
    before = len(run("session", "show", sid, "--json", "--db", db).json()["messages"])
    r = run("session", "send", sid, "hello", "--no-wait", "--db", db)
    assert r.code != 0 and r.err.strip().splitlines() == [
        f"clawtower: error: {sid} belongs to flow F-1; use clawtower flow ..."], r.err
    after = run("session", "show", sid, "--json", "--db", db).json()
    assert len(after["messages"]) == before and after["pending"] == []
    refusals = run("events", "--json", "--db", db)
    assert refusals.code == 0 and "belongs to flow F-1" in refusals.out


def test_executor_bad_input_is_one_line_exit_2(run: Run, db: Path) -> None:
    agents(run, db)
    r = run("flow", "run", "lead", "x", "--executor", "acp:nope", "--db", db)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "--executor: acp agent 'nope': no such agent" in r.err
    r = run("flow", "run", "lead", "x", "--executor", "claude", "--db", db)
    assert r.code == 2 and "is not builtin or acp:NAME" in r.err
    assert run("flow", "list", "--json", "--db", db).json() == []  # nothing written
    ok = run("flow", "run", "lead", "x", "--executor", "builtin", "--wait", "--db", db)
    assert ok.code == 0, ok.err
