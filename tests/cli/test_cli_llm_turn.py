"""`clawtower llm ask --tools`: one turn of a configured agent with its allow-listed tools
(the simulator scripts the model; the built-in tools really run)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_helpers import Run

CONFIG = """\
agents:
  counter:
    system: You count words.
    tools: [text.*]
    budgets: {max_tool_rounds: ROUNDS, max_tokens: 5000, max_wall_s: 30}
    price: {prompt: 2.0, completion: 4.0}
  plain: {}
scripts:
  counter:
    turn:
      - tool_calls:
          - {name: text.count, arguments: {text: "one two three"}}
          - {name: clock.now, arguments: {}}
      - {text: "three words"}
"""


def config(tmp_path: Path, rounds: int = 2) -> Path:
    path = tmp_path / "clawtower.yaml"
    path.write_text(CONFIG.replace("ROUNDS", str(rounds)))
    return path


def test_a_turn_runs_allowed_tools_refuses_the_rest_and_records_everything(
        run: Run, db: Path, tmp_path: Path) -> None:
    r = run("--db", db, "llm", "ask", "--config", config(tmp_path), "--agent", "counter",
            "--tools", "Count: one two three")
    assert r.code == 0, r.err
    assert r.out == "three words\n"
    assert 'text.count {"text": "one two three"} -> {"characters": 13' in r.err
    assert "clock.now {} -> clock.now: not allowed for counter" in r.err and "[policy]" in r.err
    assert "completed after 1 tool round(s), 2 model call(s)" in r.err
    conn = sqlite3.connect(db)
    try:
        types = [t for (t,) in conn.execute("SELECT type FROM events ORDER BY seq")]
        usage = conn.execute("SELECT calls, cost_usd FROM usage WHERE subject='llm-ask'"
                             " AND agent='counter'").fetchone()
    finally:
        conn.close()
    assert types.count("turn.tool_called") == 2 and types.count("turn.tool_result") == 2
    assert "permission.refused" in types and types[-1] == "turn.finished"
    assert usage[0] == 2 and usage[1] > 0


def test_a_turn_that_exceeds_its_budget_is_exit_1_with_the_reason(
        run: Run, db: Path, tmp_path: Path) -> None:
    r = run("--db", db, "llm", "ask", "--config", config(tmp_path, rounds=0), "--agent",
            "counter", "--tools", "Count: one two three")
    assert r.code == 1
    assert "the turn stopped early (max_tool_rounds)" in r.err


def test_tools_for_an_agent_without_an_allow_list_is_exit_2(
        run: Run, db: Path, tmp_path: Path) -> None:
    r = run("--db", db, "llm", "ask", "--config", config(tmp_path), "--agent", "plain",
            "--tools", "x")
    assert r.code == 2 and "agent plain has no tools allow-list" in r.err
    assert not db.exists()
