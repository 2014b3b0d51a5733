"""The README's input-gate example, run as typed against `examples/workflows/review.lobster`
(issue 39, trap 4): the gate's envelope carries an `approvalId` so `resume --id` works, and a
refused answer names every schema error on one line, Lobster's first."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from clawtower.core.workflows.ajv import validate_response

ROOT = Path(__file__).resolve().parents[1]
REVIEW = ROOT / "examples" / "workflows" / "review.lobster"


def _workflow_lines() -> list[str]:
    """The shell lines of the README's "## Workflows" section that use review.lobster or an
    input gate's answer, comments dropped."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Workflows (Lobster-compatible)", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines()
            if line.startswith("clawtower ") and ("review.lobster" in line
                                                  or "--response-json" in line)]


def _sh(line: str, home: Path) -> subprocess.CompletedProcess[str]:
    bindir = str(Path(sys.executable).parent)  # the project venv, as if activated
    env = {**os.environ, "CLAWTOWER_HOME": str(home), "VIRTUAL_ENV": str(Path(bindir).parent),
           "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")}
    env.pop("CLAWTOWER_DB", None)
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_readme_input_gate_works_as_typed(tmp_path: Path) -> None:
    run, resume = _workflow_lines()
    assert "examples/workflows/review.lobster" in run and "--id ID" in resume
    r = _sh(run, tmp_path)
    assert r.returncode == 0, r.stderr
    env: dict[str, Any] = json.loads(r.stdout)
    assert env["status"] == "needs_input"
    gate = env["requiresInput"]
    assert re.fullmatch(r"[0-9a-f]{8}", gate.get("approvalId", "")), gate  # like an approval
    r = _sh(resume.replace("--id ID", f"--id {shlex.quote(gate['approvalId'])}"), tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    done = json.loads(r.stdout)
    assert done["ok"] is True and done["status"] == "ok", done
    answer = json.loads(shlex.split(resume.split("--response-json", 1)[1])[0])
    assert done["output"] == [f"published '{answer['title']}' for {answer['audience']}\n"]


def _review_schema() -> Any:
    return yaml.safe_load(REVIEW.read_text(encoding="utf-8"))["steps"][1]["input"][
        "responseSchema"]


def test_a_refused_answer_names_every_error_on_one_line() -> None:
    why = validate_response(_review_schema(), {"title": "v2", "audience": "all"}, "review")
    assert why == (
        "Workflow input step review response failed schema validation at /title: must NOT have"
        " fewer than 3 characters; also at /audience: must be equal to one of the allowed"
        " values")
    # one error: Lobster's words alone, as the differential corpus has them
    assert validate_response(_review_schema(), {"title": "ok title", "audience": 1},
                             "review") == (
        "Workflow input step review response failed schema validation at /audience: must be"
        " string; also at /audience: must be equal to one of the allowed values")
    assert validate_response(_review_schema(), {"audience": "users"}, "review") == (
        "Workflow input step review response failed schema validation at /: must have"
        " required property 'title'")


def test_a_refused_answer_on_the_cli_is_one_parse_error_line(tmp_path: Path) -> None:
    run, _ = _workflow_lines()
    gate = json.loads(_sh(run, tmp_path).stdout)["requiresInput"]
    r = _sh(f"clawtower workflow resume --id {gate['approvalId']} --response-json"
            " '{\"title\": \"v2\", \"audience\": \"all\"}'", tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["type"] == "parse_error"
    assert "\n" not in err["message"]
    assert "at /title: must NOT have fewer than 3" in err["message"]
    assert "also at /audience: must be equal to one of the allowed values" in err["message"]
