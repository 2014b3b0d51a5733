"""`clawtower expert ...` end to end in-process: install, bind, show, prompt, validate
(bindings reachable), compile, registry, update with SemVer safety, remove; and `expert run`
of a small package whose abstract tool is bound to a real MCP peer (mcp-server-time)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from tests.helpers.mcp_peers import TIME, require

from .conftest import FIXTURE

SERVER = Path(__file__).resolve().parent.parent / "helpers" / "sales_mcp_server.py"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    return h


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def test_install_bind_validate_compile_registry_remove(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "expert", "install", str(FIXTURE))
    assert code == 0 and "installed radiant-sales-expert 0.1.0" in out
    assert "README.md:file: warning" in err
    code, out, _ = run(capsys, "expert", "install", str(FIXTURE))
    assert code == 2
    code, out, _ = run(capsys, "expert", "list", "--json")
    assert [r["name"] for r in json.loads(out)] == ["radiant-sales-expert"]
    # unbound: validate names every missing binding and exits 2
    code, out, _ = run(capsys, "expert", "validate", "radiant-sales-expert")
    assert code == 2
    assert "bindings.yaml:tools.crm: not bound (clawtower expert bind)" in out
    for tool, ops in (("crm", ["--op", "get_contact=find_contact"]), ("email", []),
                      ("calendar", [])):
        code, out, _ = run(capsys, "expert", "bind", "radiant-sales-expert", tool, "--mcp",
                           sys.executable, "--arg", str(SERVER), *ops)
        assert code == 0, out
    code, out, _ = run(capsys, "expert", "validate", "radiant-sales-expert")
    assert code == 0, out
    # a mapping onto a tool the server lacks is reported by name
    run(capsys, "expert", "bind", "radiant-sales-expert", "crm", "--mcp", sys.executable,
        "--arg", str(SERVER), "--op", "get_contact=no_such_tool")
    code, out, _ = run(capsys, "expert", "validate", "radiant-sales-expert")
    assert code == 2
    assert ("bindings.yaml:tools.crm.operations.get_contact: the server has no tool"
            " 'no_such_tool'") in out
    code, out, _ = run(capsys, "expert", "show", "radiant-sales-expert", "--json")
    shown = json.loads(out)
    assert shown["tools"]["crm"] == "mcp crm" and shown["approval"]["manual"] == [
        "email.send", "calendar.schedule_meeting"]
    code, out, err = run(capsys, "expert", "prompt", "radiant-sales-expert")
    assert code == 0 and "## Tool Approval Policy" in out
    assert "Identity:" in err and "total:" in err
    code, out, _ = run(capsys, "expert", "compile", "radiant-sales-expert", "--out",
                       str(tmp_path / "out"))
    assert code == 0 and (tmp_path / "out" / "inbound-email-triage.lobster").exists()
    assert run(capsys, "expert", "compile", "radiant-sales-expert")[0] == 0
    code, out, _ = run(capsys, "expert", "bind", "radiant-sales-expert", "crm", "--mcp",
                       sys.executable, "--arg", str(SERVER), "--op", "get_contact=find_contact")
    assert code == 0 and "recompiled" in out and "inbound-email-triage.lobster" in out
    code, out, _ = run(capsys, "expert", "registry", "--json")
    reg = json.loads(out)
    assert reg[0]["outputs"] == ["email drafts", "deal triage reports", "pipeline summaries"]
    assert reg[0]["processes"]["inbound-email-triage"].startswith("End-to-end")
    code, out, _ = run(capsys, "expert", "run", "radiant-sales-expert", "nope", "--db",
                       str(tmp_path / "x.db"))
    assert code == 2
    code, out, _ = run(capsys, "expert", "remove", "radiant-sales-expert")
    assert code == 0
    code, out, _ = run(capsys, "expert", "show", "radiant-sales-expert")
    assert code == 2


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, timeout=60, capture_output=True,
                   env={**os.environ, **GIT_ENV})


def _bump(repo: Path, old: str, new: str, msg: str) -> None:
    m = repo / "expert.yaml"
    m.write_text(m.read_text().replace(old, new))
    _git(repo, "commit", "-qam", msg)


def test_update_from_git_needs_force_for_breaking_changes(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("git") is None:
        pytest.skip("no git executable on PATH")
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "v0.1.0")
    code, out, _ = run(capsys, "expert", "install", f"file://{repo}")
    assert code == 0, out
    _bump(repo, 'version: "0.1.0"', 'version: "0.1.1"', "patch")
    code, out, _ = run(capsys, "expert", "update", "radiant-sales-expert")
    assert code == 0 and "0.1.0 -> 0.1.1" in out
    _bump(repo, 'version: "0.1.1"', 'version: "1.0.0"', "major")
    code, _, err = run(capsys, "expert", "update", "radiant-sales-expert")
    assert code == 2 and "needs --force (version 0.1.1 -> 1.0.0 (major))" in err
    code, out, _ = run(capsys, "expert", "show", "radiant-sales-expert", "--json")
    assert json.loads(out)["version"] == "0.1.1"  # untouched
    code, out, _ = run(capsys, "expert", "update", "radiant-sales-expert", "--force")
    assert code == 0 and "-> 1.0.0" in out
    _bump(repo, "    - calendar\n\nconcurrency", "    - calendar\n    - slack\n\nconcurrency",
          "new tool")
    code, _, err = run(capsys, "expert", "update", "radiant-sales-expert")
    assert code == 2 and "tools added: slack" in err
    _bump(repo, 'expr: "0 8 * * 1-5"', 'expr: "0 9 * * 1-5"', "trigger moved")
    code, _, err = run(capsys, "expert", "update", "--all")
    assert code == 2 and "triggers changed: opportunity_scan" in err
    # a broken new version is refused whatever the flags, and nothing changes
    (repo / "orchestrator.md").unlink()
    _git(repo, "commit", "-qam", "broken")
    code, _, err = run(capsys, "expert", "update", "radiant-sales-expert", "--force")
    assert code == 2 and "orchestrator.md" in err
    code, out, _ = run(capsys, "expert", "show", "radiant-sales-expert", "--json")
    assert json.loads(out)["version"] == "1.0.0"


CLOCK_MANIFEST = """spec: "1.0"
name: clock-expert
version: "1.0.0"
description: Tells the time somewhere
requires:
  tools: [clock]
policy:
  approval:
    default: auto
components:
  orchestrator: orchestrator.md
  persona: [persona/identity.md]
  functions: [functions/say-time.md]
  processes: [processes/tell-time.md]
  tools: [tools/clock.yaml]
"""
CLOCK_TOOL = """name: clock
description: Wall clock
operations:
  - name: now
    description: The current time in a time zone
    input:
      type: object
      properties:
        timezone: {type: string}
    output:
      type: object
      properties:
        timezone: {type: string}
        datetime: {type: string}
"""
SAY = """---
name: say-time
description: Say the time in words
inputs:
  - name: datetime
    type: string
outputs:
  - name: sentence
    type: string
---
Say the time in one sentence.
"""
TELL = """---
name: tell-time
description: Look up the time and say it
inputs:
  - name: timezone
    type: string
tools: [clock]
functions: [say-time]
---
- [ ] Read the clock with `clock.now`.
- [ ] Apply `say-time` to the datetime.
"""


def test_run_binds_an_abstract_tool_to_a_real_mcp_peer(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require("time")
    pkg = tmp_path / "clock"
    for rel, text in {"expert.yaml": CLOCK_MANIFEST, "README.md": "# Clock\n",
                      "orchestrator.md": "Tell the time.\n",
                      "persona/identity.md": "You keep time.\n", "functions/say-time.md": SAY,
                      "processes/tell-time.md": TELL, "tools/clock.yaml": CLOCK_TOOL}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    assert run(capsys, "expert", "validate", str(pkg))[0] == 0
    assert run(capsys, "expert", "install", str(pkg))[0] == 0
    code, out, _ = run(capsys, "expert", "bind", "clock-expert", "clock", "--mcp", str(TIME),
                       "--op", "now=get_current_time")
    assert code == 0, out
    assert run(capsys, "expert", "validate", "clock-expert")[0] == 0
    db = str(tmp_path / "c.db")
    code, out, err = run(capsys, "expert", "run", "clock-expert", "tell-time", "--input",
                         "timezone=Australia/Sydney", "--db", db)
    assert code == 0, out + err
    envelope = json.loads(out)
    assert envelope["status"] == "ok"
    code, out, _ = run(capsys, "workflow", "show", "W-1", "--json", "--db", db)
    run_info = json.loads(out)
    clock = next(s for s in run_info["steps"] if s["id"] == "clock_now")
    assert clock["result"]["json"]["timezone"] == "Australia/Sydney"
    assert clock["result"]["json"]["datetime"][:2] == "20"


def test_learn_confirm_then_approve_then_learnings(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.db")
    assert run(capsys, "expert", "install", str(FIXTURE))[0] == 0
    code, out, _ = run(capsys, "expert", "learn", "radiant-sales-expert", "--scope",
                       "compose-response", "--title", "Shorter drafts", "--observation",
                       "Drafts ran long", "--correction", "Keep to 3 paragraphs", "--db", db)
    assert code == 0 and "proposed: approval" in out
    approval = out.split("approval ")[1].split(" ")[0]
    code, out, _ = run(capsys, "expert", "learnings", "radiant-sales-expert", "--json",
                       "--db", db)
    assert json.loads(out) == {}
    assert run(capsys, "approve", approval, "--by", "ada", "--db", db)[0] == 0
    code, out, _ = run(capsys, "expert", "learnings", "radiant-sales-expert", "--json",
                       "--db", db)
    assert json.loads(out) == {"compose-response": 1}
    code, out, _ = run(capsys, "expert", "learn", "radiant-sales-expert", "--scope", "nope",
                       "--title", "t", "--observation", "o", "--correction", "c", "--db", db)
    assert code == 2


def test_registry_file_and_session_state_reset(
        expert_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from core.experts import home
    from core.experts.package import load_package

    assert run(capsys, "expert", "install", str(FIXTURE))[0] == 0
    text = (expert_home / "EXPERTS.md").read_text()
    assert "## radiant-sales-expert" in text
    assert "- **Outputs:** email drafts, deal triage reports, pipeline summaries" in text
    assert "- **Process** `inbound-email-triage`: End-to-end handling of an inbound sales" \
           " email (trigger: new_email)" in text
    ws = home.workspace("radiant-sales-expert")
    (ws / "state" / "pipeline.md").write_text("deals we know\n")
    (ws / "state" / "session-notes.md").write_text("notes of the last session\n")
    pkg = load_package(home.package_dir("radiant-sales-expert"))
    assert home.init_state(pkg) == []  # nothing is overwritten outside a new session
    assert home.init_state(pkg, new_session=True) == ["state/session-notes.md"]
    assert (ws / "state" / "pipeline.md").read_text() == "deals we know\n"
    assert (ws / "state" / "session-notes.md").read_text() == (
        FIXTURE / "state" / "session-notes.md").read_text()
    assert run(capsys, "expert", "remove", "radiant-sales-expert")[0] == 0
    assert "radiant-sales-expert" not in (expert_home / "EXPERTS.md").read_text()
