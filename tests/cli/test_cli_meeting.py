"""`clawtower meeting run|list|show|stop|grant`: results, minutes, bad input writes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cli_helpers import ROOT, Run, run_cli

FAST = "seed: 3\nspeed: 0\nagents:\n  a: {role: participant}\n  b: {role: participant}\n" \
       "  c: {role: participant}\nscripts:\n  a: {meeting: [{stance: AGREE}]}\n" \
       "  b: {meeting: [{stance: DISAGREE}]}\n  c: {meeting: [{stance: AGREE}]}\n"


@pytest.fixture
def fast(tmp_path: Path) -> Path:
    p = tmp_path / "agents.yaml"
    p.write_text(FAST)
    return p


def test_run_with_the_built_in_cast(run: Run, db: Path, home: Path) -> None:
    r = run("meeting", "run", "--topic", "Adopt the cache?", "--agents", "ada,ben,cyd",
            "--db", db)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].endswith(": Adopt the cache? (ada, ben, cyd)")
    assert lines[1] == "round 1: NO (ada DISAGREE, ben NEUTRAL, cyd AGREE)"
    assert lines[2] == "round 2: FULL (ada AGREE, ben AGREE, cyd AGREE)"
    assert lines[3].startswith("result: FULL (consensus) after 2 round(s)")
    mid = lines[0].split(":")[0]
    minutes = home / "minutes" / f"{mid}.md"
    assert lines[4] == f"minutes: {minutes}" and minutes.exists()
    listed = run("meeting", "list", "--json", "--db", db).json()
    assert [(m["id"], m["result"]) for m in listed] == [(mid, "FULL")]
    shown = run("meeting", "show", mid, "--json", "--db", db).json()
    assert len(shown["rounds"]) == 2 and shown["rounds"][0]["replies"][0]["stance"]
    text = run("meeting", "show", mid, "--db", db)
    assert text.code == 0 and "round 2: FULL" in text.out and "ada: AGREE" in text.out


def test_no_consensus_still_exits_0(run: Run, db: Path, fast: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # --minutes-dir must be under the current dir or the home
    r = run("meeting", "run", "--topic", "t", "--agents", "a,b,c", "--agents-file", fast,
            "--max-rounds", "3", "--summary-tokens", "32", "--minutes-dir", tmp_path / "m",
            "--db", db)
    assert r.code == 0, r.err
    assert "result: NO (max_rounds) after 3 round(s)" in r.out
    assert str(tmp_path / "m") in r.out
    assert len(list((tmp_path / "m").glob("*.md"))) == 1


def test_agents_yaml_in_home_is_used(run: Run, db: Path, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(FAST)
    r = run("meeting", "run", "--topic", "t", "--agents", "a,b", "--max-rounds", "1",
            "--db", db)
    assert r.code == 0, r.err
    assert "round 1: NO (a AGREE, b DISAGREE)" in r.out


@pytest.mark.parametrize(("agents", "topic", "message"), [
    ("ada", "t", "needs at least 2 agents, got 1 (ada)"),
    ("ada,zed", "t", "unknown agent zed"),
    ("ada,ben", "  ", "the topic is empty"),
    (",", "t", "needs at least 2 agents, got 0"),
])
def test_bad_input_exits_2_and_writes_nothing(run: Run, db: Path, agents: str, topic: str,
                                              message: str) -> None:
    r = run("meeting", "run", "--topic", topic, "--agents", agents, "--db", db)
    assert r.code == 2 and r.out == ""
    assert len(r.err.splitlines()) == 1 and message in r.err
    assert not db.exists()


def test_bad_numbers_and_files(run: Run, db: Path, tmp_path: Path) -> None:
    r = run("meeting", "run", "--topic", "t", "--agents", "ada,ben", "--max-rounds", "0",
            "--db", db)
    assert r.code == 2 and "--max-rounds" in r.err and not db.exists()
    r = run("meeting", "run", "--topic", "t", "--agents", "ada,ben", "--agents-file",
            tmp_path / "missing.yaml", "--db", db)
    assert r.code == 2 and len(r.err.splitlines()) == 1 and not db.exists()
    r = run("meeting", "grant", "m", "0", "--db", db)
    assert r.code == 2 and "N: must be between 1 and 100" in r.err and not db.exists()


def test_show_stop_grant_unknown_and_ended(run: Run, db: Path, fast: Path) -> None:
    # a stop (a write) makes the store first: a read of a missing store fails on its own
    for args in (("stop", "nope"), ("grant", "nope", "2"), ("show", "nope")):
        r = run("meeting", *args, "--db", db)
        assert r.code == 2 and "meeting 'nope': no such meeting" in r.err, args
    r = run("meeting", "run", "--topic", "t", "--agents", "a,b", "--agents-file", fast,
            "--max-rounds", "1", "--db", db)
    mid = r.out.split(":")[0]
    for args in (("stop", mid), ("grant", mid, "2")):
        r = run("meeting", *args, "--db", db)
        assert r.code == 2 and "already ended" in r.err, args
    assert run("meeting", "list", "--db", db).code == 0


def test_stop_and_grant_from_another_process(run: Run, db: Path, tmp_path: Path,
                                             home: Path) -> None:
    slow = tmp_path / "slow.yaml"
    slow.write_text(FAST.replace("speed: 0", "speed: 1\ndelay_ms: [300, 300]"))
    import subprocess

    from cli_helpers import CLAWTOWER, child_env

    proc = subprocess.Popen(
        [str(CLAWTOWER), "meeting", "run", "--topic", "t", "--agents", "a,b,c",
         "--agents-file", str(slow), "--max-rounds", "1", "--db", str(db)],
        env=child_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        mid = ""
        for _ in range(200):
            listed = run("meeting", "list", "--json", "--db", db) if db.exists() else None
            if listed is not None and listed.code == 0 and listed.json():
                mid = listed.json()[0]["id"]
                break
            asyncio.run(asyncio.sleep(0.05))
        assert mid
        g = run("meeting", "grant", mid, "5", "--db", db)
        assert g.code == 0 and "now at most 6" in g.out, g.err
        s = run("meeting", "stop", mid, "--reason", "enough", "--db", db)
        assert s.code == 0, s.err
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "result: NO (stopped)" in out and "enough" in out
    shown = run("meeting", "show", mid, "--json", "--db", db).json()
    assert shown["reason"] == "stopped" and shown["max_rounds"] == 6
    assert len(shown["rounds"]) < 6


def test_run_as_a_user_would(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = run_cli(["meeting", "run", "--topic", "Ship it?", "--agents", "ada,ben,cyd",
                 "--agents-file", str(ROOT / "examples" / "demo" / "agents.yaml")], home)
    assert p.returncode == 0, p.stderr
    assert "result: FULL (consensus) after 2 round(s)" in p.stdout
    assert (home / "minutes").is_dir()


def test_clawtower_yaml_in_home_wins_over_agents_yaml(run: Run, db: Path, home: Path) -> None:
    """The project config names the cast for meetings and the engine (agents.yaml stays the
    console's simulator script)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "agents.yaml").write_text(FAST)
    (home / "clawtower.yaml").write_text(FAST.replace("a: {role", "x: {role")
                                         .replace("b: {role", "y: {role"))
    r = run("meeting", "run", "--topic", "t", "--agents", "a,b", "--max-rounds", "1",
            "--db", db)
    assert r.code == 2 and "unknown agent a" in r.err
    r = run("meeting", "run", "--topic", "t", "--agents", "x,y", "--max-rounds", "1",
            "--db", db)
    assert r.code == 0, r.err


def test_serve_refuses_a_bad_project_config_before_the_store(run: Run, db: Path,
                                                              home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "clawtower.yaml").write_text("providers:\n  p: {kind: openai}\n")
    r = run("serve", "--until-idle", "--db", db)
    assert r.code == 2 and "clawtower.yaml" in r.err
    assert not db.exists()


SLOW_ROUND_TWO = (
    "seed: 3\nspeed: 1\ndelay_ms: [0, 0]\nagents:\n  a: {role: participant}\n"
    "  b: {role: participant}\n  c: {role: participant}\nscripts:\n"
    "  a: {meeting: [{stance: AGREE}, {stance: AGREE}]}\n"
    "  b: {meeting: [{stance: DISAGREE}, {stance: AGREE, delay_ms: 4000}]}\n"
    "  c: {meeting: [{stance: AGREE}, {stance: AGREE, delay_ms: 4000}]}\n")


def _killed_in_round_two(tmp_path: Path, db: Path, home: Path) -> None:
    """A `meeting run` killed (kill -9) once a has replied in round 2."""
    import contextlib
    import os
    import signal
    import sqlite3
    import subprocess
    import time

    from cli_helpers import CLAWTOWER, child_env, query

    agents = tmp_path / "slow.yaml"
    agents.write_text(SLOW_ROUND_TWO)
    proc = subprocess.Popen(
        [str(CLAWTOWER), "meeting", "run", "--topic", "Ship?", "--agents", "a,b,c",
         "--agents-file", str(agents), "--db", str(db)],
        env=child_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(sqlite3.OperationalError):  # not created yet
                if db.exists() and query(db, "SELECT 1 FROM meeting_replies WHERE round=2"
                                             " AND agent='a'"):
                    break
            time.sleep(0.05)
        else:
            pytest.fail("round 2 never started")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_kill_9_then_resume(tmp_path: Path, db: Path, home: Path) -> None:
    """A `meeting run` killed in round 2 shows as orphaned; `meeting resume` finishes it:
    round 1 is not asked again and a's round-2 reply is kept."""
    import json

    from cli_helpers import query

    _killed_in_round_two(tmp_path, db, home)
    listed = run_cli(["meeting", "list", "--json", "--db", str(db)], home)
    (m,) = json.loads(listed.stdout)
    assert (m["status"], m["orphaned"]) == ("running", True)
    table = run_cli(["meeting", "list", "--db", str(db)], home)
    assert " orphaned " in table.stdout
    fast = tmp_path / "fast.yaml"  # the resumed process's own agents: nobody is slow now
    fast.write_text(SLOW_ROUND_TWO.replace(", delay_ms: 4000", ""))
    r = run_cli(["meeting", "resume", m["id"], "--agents-file", str(fast), "--db", str(db)],
                home)
    assert r.returncode == 0, r.stderr
    assert f"{m['id']}: adopted; continuing" in r.stdout
    assert "result: FULL (consensus) after 2 round(s)" in r.stdout
    replies = query(db, "SELECT round, agent, count(*) FROM meeting_replies GROUP BY 1, 2")
    assert sorted(replies) == [(1, "a", 1), (1, "b", 1), (1, "c", 1), (2, "a", 1),
                               (2, "b", 1), (2, "c", 1)]
    again = run_cli(["meeting", "resume", m["id"], "--db", str(db)], home)
    assert again.returncode == 2 and "already ended" in again.stderr


def test_serve_until_idle_finishes_an_orphaned_meeting(tmp_path: Path, db: Path,
                                                       home: Path) -> None:
    """Issue 35: the engine adopts the orphaned meeting, and `--until-idle` waits for it."""
    import json

    _killed_in_round_two(tmp_path, db, home)
    fast = tmp_path / "fast.yaml"
    fast.write_text(SLOW_ROUND_TWO.replace(", delay_ms: 4000", ""))
    r = run_cli(["serve", "--until-idle", "--agents", str(fast), "--db", str(db)], home,
                timeout=120)
    assert r.returncode == 0, r.stderr
    (m,) = json.loads(run_cli(["meeting", "list", "--json", "--db", str(db)], home).stdout)
    assert m["status"] != "running", m
