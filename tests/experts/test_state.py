"""State files as projections of events (core/experts/state.py), on our acme package: a
state step's note becomes one `expert.state_noted` event (once, however often it syncs), the
file is the template (or an adopted base) plus the notes and is rebuilt identically from the
events, a new session drops the notes of `scope: session` files only, and `expert run` /
`expert state` keep the files current."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clawtower.cli.main import main
from clawtower.core.experts import home, state
from clawtower.core.store import open_store

from .conftest import ACME
from .test_run import bind_acme, workflows

QUEUE, SHIFT = "state/queue.md", "state/shift-notes.md"


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


async def noted(store: Any) -> list[dict[str, Any]]:
    rows = await store.fetchall("SELECT payload FROM events WHERE type='expert.state_noted'"
                                " ORDER BY seq")
    return [json.loads(r["payload"]) for r in rows]


async def test_state_notes_are_events_and_the_files_their_projection(
        expert_home: Path, tmp_path: Path) -> None:
    pkg = home.install(str(ACME))
    ws = home.workspace(pkg.name)
    bind_acme(pkg.name, tmp_path / "calls.jsonl")
    home.compile_all(pkg.name)
    legacy = (ACME / QUEUE).read_text() + "\n- 2026-11-01 09:00 UTC: appended directly once\n"
    (ws / QUEUE).write_text(legacy)  # what an earlier version left in the file
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        w = workflows(store, tmp_path)
        triage = home.compiled_dir(pkg.name) / "ticket-triage.lobster"
        for ticket in ("T-1", "T-2"):
            env = await w.run(str(triage), {"ticket_id": ticket})
            assert env["status"] == "ok", env
        assert (ws / QUEUE).read_text() == legacy  # the step itself writes no file
        assert await state.sync(store, pkg, ws) == {QUEUE: 2, SHIFT: 0}
        notes = await noted(store)
        assert [n["file"] for n in notes] == [QUEUE, QUEUE]
        assert [n["step_id"] for n in notes] == ["step_9_state", "step_9_state"]
        assert len({n["run_id"] for n in notes}) == 2
        text = (ws / QUEUE).read_text()
        assert text.startswith(legacy)  # adopted as the base, nothing lost
        assert text[len(legacy):] == "".join(f"\n- {n['at']} UTC: {n['note']}\n" for n in notes)
        # idempotent: syncing again records nothing new and writes the same text
        assert await state.sync(store, pkg, ws) == {QUEUE: 2, SHIFT: 0}
        assert len(await noted(store)) == 2
        # the file is a projection: deleted, it comes back identical from the events
        (ws / QUEUE).unlink()
        await state.sync(store, pkg, ws)
        assert (ws / QUEUE).read_text() == text
        # a session-scoped file: the confirm-gated sweep notes into shift-notes.md
        sweep = home.compiled_dir(pkg.name) / "overdue-sweep.lobster"
        env = await w.run(str(sweep), {})
        assert env["status"] == "needs_approval", env
        out = await w.decide(env["requiresApproval"]["approvalId"], True, by="ada")
        assert out["run_status"] == "ok"
        # (its "Read `state/queue.md`" line notes into queue.md too: compile treats every
        # line naming a state file as a write)
        assert await state.sync(store, pkg, ws) == {QUEUE: 3, SHIFT: 1}
        assert "UTC:" in (ws / SHIFT).read_text()
        text = (ws / QUEUE).read_text()
        # a new session: session-scoped notes dropped, persistent ones kept
        assert await state.sync(store, pkg, ws, reset=True) == {QUEUE: 3, SHIFT: 0}
        assert (ws / SHIFT).read_text() == (ACME / SHIFT).read_text()
        assert (ws / QUEUE).read_text() == text
        resets = await store.fetchall("SELECT payload FROM events WHERE"
                                      " type='expert.state_reset'")
        assert [json.loads(r["payload"])["files"] for r in resets] == [[SHIFT]]
    finally:
        await store.close()


def test_expert_run_and_state_commands_keep_the_files_current(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = home.install(str(ACME))
    bind_acme(pkg.name, tmp_path / "calls.jsonl")
    db = str(tmp_path / "cli.db")
    code = main(["expert", "run", pkg.name, "ticket-triage", "--input", "ticket_id=T-9",
                 "--db", db])
    out = capsys.readouterr()
    assert code == 0, out
    ws = home.workspace(pkg.name)
    assert "UTC:" in (ws / QUEUE).read_text()  # synced at the end of the run
    (ws / QUEUE).unlink()
    assert main(["expert", "state", pkg.name, "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {QUEUE: 1, SHIFT: 0}
    assert "UTC:" in (ws / QUEUE).read_text()
    # the run's session began in the commit that started it: its reset names the run
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        resets = [json.loads(r[0]) for r in conn.execute(
            "SELECT payload FROM events WHERE type='expert.state_reset'")]
        runs = [r[0] for r in conn.execute("SELECT id FROM workflow_runs")]
    finally:
        conn.close()
    assert [r["run_id"] for r in resets] == runs and len(runs) == 1
