"""`llm.invoke` workflow stages through the configured agents: the built-in simulator with no
config, and the run's tokens and cost recorded as `agent.usage` events of the run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_helpers import Run

FLOW = """\
steps:
  - id: items
    run: echo '[1,2]'
  - id: ask
    stdin: $items.json
    pipeline: >-
      llm.invoke --prompt 'classify these' --output-schema
      '{"type":"object","properties":{"label":{"type":"string"}},"required":["label"]}'
"""


def test_an_llm_stage_answers_offline_and_its_usage_lands_on_the_run(
        run: Run, db: Path, tmp_path: Path) -> None:
    flow = tmp_path / "ask.lobster"
    flow.write_text(FLOW)
    r = run("--db", db, "workflow", "run", "--file", flow)
    assert r.code == 0, r.err
    env = r.json()
    assert env["ok"] and env["status"] == "ok"
    [answer] = env["output"]
    assert answer["kind"] == "llm.invoke"
    assert set(answer["output"]["data"]) == {"label"}  # valid against the schema
    conn = sqlite3.connect(db)
    try:
        [(run_id,)] = conn.execute("SELECT id FROM workflow_runs").fetchall()
        rows = conn.execute("SELECT subject, calls, prompt_tokens, completion_tokens FROM usage"
                            " WHERE subject=?", (run_id,)).fetchall()
    finally:
        conn.close()
    assert len(rows) == 1
    _subject, calls, prompt, completion = rows[0]
    assert calls == 1 and prompt > 0 and completion > 0
    assert answer["usage"] == {"promptTokens": prompt, "completionTokens": completion}


def test_approving_a_gate_continues_into_an_llm_stage(run: Run, db: Path,
                                                      tmp_path: Path) -> None:
    """`clawtower approve ID` runs the rest of the workflow in that process, LLM stages
    included (answered by the configured agents, usage recorded on the run)."""
    flow = tmp_path / "gated.lobster"
    flow.write_text(FLOW.replace("  - id: ask\n", "  - id: gate\n    approval: Ask?\n"
                                                  "  - id: ask\n"))
    r = run("--db", db, "workflow", "run", "--file", flow)
    gate = r.json()["requiresApproval"]["approvalId"]
    r = run("--db", db, "approve", gate, "--by", "carol")
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == "W-1: ok"
    conn = sqlite3.connect(db)
    try:
        (calls,) = conn.execute("SELECT calls FROM usage WHERE subject='W-1'").fetchone()
    finally:
        conn.close()
    assert calls == 1
