"""`clawtower llm task`: validated JSON on stdout, OpenClaw-worded failures (exit 1), bad files
named (exit 2), usage recorded under a subject; and one call to the real SmolLM2 server."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import Run

SCHEMA = {"type": "object", "required": ["name", "age"],
          "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}

AGENTS = """
speed: 0
agents:
  extractor: {role: executor, model: sim-standard}
  fixer: {role: executor, model: sim-standard}
  liar: {role: executor, model: sim-standard}
  rambler: {role: executor, model: sim-standard}
scripts:
  extractor:
    llm_task:
      - {answer: {name: Ada, age: 36}}
  fixer:
    llm_task:
      - {text: "```json\\n{\\"name\\": \\"Ada\\"}\\n```"}
      - {answer: {name: Ada, age: 36}}
  liar:
    llm_task:
      - {answer: {name: 7}}
  rambler:
    llm_task:
      - {text: "Sure! Ada is 36."}
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {"schema": tmp_path / "s.json", "input": tmp_path / "i.json",
           "agents": tmp_path / "agents.yaml"}
    out["schema"].write_text(json.dumps(SCHEMA))
    out["input"].write_text(json.dumps({"text": "Ada is 36"}))
    out["agents"].write_text(AGENTS)
    return out


def task(run: Run, files: dict[str, Path], agent: str, *extra: str | Path):
    return run("llm", "task", "--agent", agent, "--schema", files["schema"], "--input",
               files["input"], "--agents-file", files["agents"], *extra)


def test_prints_the_validated_json(run: Run, files: dict[str, Path]) -> None:
    r = task(run, files, "extractor", "--prompt", "Extract the person.")
    assert r.code == 0, r.err
    assert r.json() == {"name": "Ada", "age": 36}


def test_repaired_reply_and_details(run: Run, files: dict[str, Path]) -> None:
    r = task(run, files, "fixer", "--details")
    assert r.code == 0, r.err
    out = r.json()
    assert out["json"] == {"name": "Ada", "age": 36} and out["repaired"] is True
    assert out["calls"] == 2 and out["provider"] == "simulator" and out["model"] == "sim-standard"


def test_schema_mismatch_exit_1_openclaw_wording(run: Run, files: dict[str, Path]) -> None:
    r = task(run, files, "liar")
    assert r.code == 1 and r.out == ""
    assert ("clawtower: error: LLM JSON did not match schema: /: 'age' is a required property;"
            " /name: 7 is not of type 'string'") in r.err


def test_invalid_json_exit_1_openclaw_wording(run: Run, files: dict[str, Path]) -> None:
    r = task(run, files, "rambler")
    assert r.code == 1 and r.out == ""
    assert "clawtower: error: LLM returned invalid JSON\n" in r.err
    assert "Sure! Ada is 36." in r.err  # the last reply is shown


@pytest.mark.parametrize(("which", "content", "message"), [
    ("schema", None, "s.json: schema file not found"),
    ("schema", "{not json", "s.json: schema file: not valid JSON"),
    ("schema", "[1]", "s.json: schema file must hold a JSON object"),
    ("schema", '{"type": "banana"}', "s.json: invalid JSON Schema at /type"),
    ("input", None, "i.json: input file not found"),
    ("input", "{oops", "i.json: input file: not valid JSON"),
])
def test_bad_files_exit_2_naming_the_file(run: Run, files: dict[str, Path], which: str,
                                          content: str | None, message: str) -> None:
    if content is None:
        files[which].unlink()
    else:
        files[which].write_text(content)
    r = task(run, files, "extractor")
    assert r.code == 2 and r.out == ""
    assert message in r.err and str(files[which]) in r.err


def test_unknown_agent_and_missing_schema_option(run: Run, files: dict[str, Path]) -> None:
    r = task(run, files, "nobody")
    assert r.code == 2 and "agent 'nobody': no such agent" in r.err
    r = run("llm", "task", "--agent", "extractor")
    assert r.code == 2 and "--schema" in r.err


def test_usage_and_cost_recorded_under_a_subject(run: Run, files: dict[str, Path],
                                                 db: Path) -> None:
    files["agents"].write_text(AGENTS.replace(
        "  fixer: {role: executor, model: sim-standard}",
        "  fixer: {role: executor, model: sim-standard,"
        " price: {prompt: 1000000, completion: 1000000}}"))
    r = task(run, files, "fixer", "--subject", "wf-7", "--db", db, "--details")
    assert r.code == 0, r.err
    out = r.json()
    assert out["cost_usd"] == sum(out["usage"].values()) > 0  # $1 per token
    r = task(run, files, "extractor", "--db", db)
    assert r.code == 0, r.err
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT subject, agent, calls, cost_usd > 0 FROM usage"
                           " ORDER BY subject").fetchall()
    finally:
        con.close()
    assert rows == [("llm-task", "extractor", 1, 0), ("wf-7", "fixer", 2, 1)]


def test_real_smollm2(run: Run, files: dict[str, Path], llama: str) -> None:
    base = llama
    files["agents"].write_text(
        "providers:\n"
        f"  local: {{kind: openai, base_url: '{base}', timeout_s: 60, retries: 1}}\n"
        "agents:\n"
        "  small: {role: executor, provider: local, model: smollm2}\n")
    r = task(run, files, "small", "--prompt", "Extract the person's name and age.",
             "--max-tokens", "64", "--temperature", "0")
    assert r.code == 0, r.err
    out = r.json()
    assert isinstance(out["name"], str) and isinstance(out["age"], int)
