"""`clawtower expert ...` end to end in-process, on our acme fixture: install, bind, show,
prompt, validate (bindings reachable), compile, registry, update with SemVer safety, remove,
run to a confirm gate resumed with `workflow resume`; and `expert run` of a small package
whose abstract tool is bound to a real MCP peer (mcp-server-time)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clawtower.cli.main import main
from tests.helpers.mcp_peers import TIME, require

from .conftest import ACME

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
    code, out, _ = run(capsys, "expert", "list")  # nothing installed: says so (issue 27)
    assert code == 0 and out == "no experts installed yet (clawtower expert install DIR)\n"
    code, out, err = run(capsys, "expert", "install", str(ACME))
    assert code == 0 and "installed acme-support-expert 0.1.0" in out
    assert "warning" not in err
    code, out, _ = run(capsys, "expert", "install", str(ACME))
    assert code == 2
    code, out, _ = run(capsys, "expert", "list", "--json")
    assert [r["name"] for r in json.loads(out)] == ["acme-support-expert"]
    # unbound: validate names every missing binding and exits 2
    code, out, _ = run(capsys, "expert", "validate", "acme-support-expert")
    assert code == 2
    assert "bindings.yaml:tools.helpdesk: not bound (clawtower expert bind)" in out
    assert "bindings.yaml:tools.kb: not bound (clawtower expert bind)" in out
    for tool, ops in (("helpdesk", ["--op", "get_customer=lookup_customer"]), ("kb", [])):
        code, out, _ = run(capsys, "expert", "bind", "acme-support-expert", tool, "--mcp",
                           sys.executable, "--arg", str(SERVER), *ops)
        assert code == 0, out
    code, out, _ = run(capsys, "expert", "validate", "acme-support-expert")
    assert code == 0, out
    # a mapping onto a tool the server lacks is reported by name
    run(capsys, "expert", "bind", "acme-support-expert", "helpdesk", "--mcp", sys.executable,
        "--arg", str(SERVER), "--op", "get_customer=no_such_tool")
    code, out, _ = run(capsys, "expert", "validate", "acme-support-expert")
    assert code == 2
    assert ("bindings.yaml:tools.helpdesk.operations.get_customer: the server has no tool"
            " 'no_such_tool'") in out
    code, out, _ = run(capsys, "expert", "show", "acme-support-expert", "--json")
    shown = json.loads(out)
    assert shown["tools"]["helpdesk"] == "mcp helpdesk"
    assert shown["approval"]["manual"] == ["helpdesk.send_reply"]
    code, out, err = run(capsys, "expert", "prompt", "acme-support-expert")
    assert code == 0 and "## Tool Approval Policy" in out
    assert "Identity:" in err and "total:" in err
    code, out, _ = run(capsys, "expert", "compile", "acme-support-expert", "--out",
                       str(tmp_path / "out"))
    assert code == 0 and (tmp_path / "out" / "ticket-triage.lobster").exists()
    assert run(capsys, "expert", "compile", "acme-support-expert")[0] == 0
    code, out, _ = run(capsys, "expert", "bind", "acme-support-expert", "helpdesk", "--mcp",
                       sys.executable, "--arg", str(SERVER), "--op",
                       "get_customer=lookup_customer")
    assert code == 0 and "recompiled" in out and "ticket-triage.lobster" in out
    code, out, _ = run(capsys, "expert", "registry", "--json")
    reg = json.loads(out)
    assert reg[0]["outputs"] == ["reply drafts", "ticket classifications",
                                 "overdue-ticket reviews"]
    assert reg[0]["processes"]["ticket-triage"].startswith("Read, classify and answer")
    code, out, _ = run(capsys, "expert", "run", "acme-support-expert", "nope", "--db",
                       str(tmp_path / "x.db"))
    assert code == 2
    code, out, _ = run(capsys, "expert", "remove", "acme-support-expert")
    assert code == 0
    code, out, _ = run(capsys, "expert", "show", "acme-support-expert")
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
    shutil.copytree(ACME, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "v0.1.0")
    code, out, _ = run(capsys, "expert", "install", f"file://{repo}")
    assert code == 0, out
    _bump(repo, 'version: "0.1.0"', 'version: "0.1.1"', "patch")
    code, out, _ = run(capsys, "expert", "update", "acme-support-expert")
    assert code == 0 and "0.1.0 -> 0.1.1" in out
    _bump(repo, 'version: "0.1.1"', 'version: "1.0.0"', "major")
    code, _, err = run(capsys, "expert", "update", "acme-support-expert")
    assert code == 2 and "needs --force (version 0.1.1 -> 1.0.0 (major))" in err
    code, out, _ = run(capsys, "expert", "show", "acme-support-expert", "--json")
    assert json.loads(out)["version"] == "0.1.1"  # untouched
    code, out, _ = run(capsys, "expert", "update", "acme-support-expert", "--force")
    assert code == 0 and "-> 1.0.0" in out
    _bump(repo, "    - kb\n\nconcurrency", "    - kb\n    - slack\n\nconcurrency", "new tool")
    code, _, err = run(capsys, "expert", "update", "acme-support-expert")
    assert code == 2 and "tools added: slack" in err
    _bump(repo, 'expr: "30 7 * * 1-5"', 'expr: "30 8 * * 1-5"', "trigger moved")
    code, _, err = run(capsys, "expert", "update", "--all")
    assert code == 2 and "triggers changed: overdue_sweep" in err
    # a broken new version is refused whatever the flags, and nothing changes
    (repo / "orchestrator.md").unlink()
    _git(repo, "commit", "-qam", "broken")
    code, _, err = run(capsys, "expert", "update", "acme-support-expert", "--force")
    assert code == 2 and "orchestrator.md" in err
    code, out, _ = run(capsys, "expert", "show", "acme-support-expert", "--json")
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
    assert run(capsys, "expert", "install", str(ACME))[0] == 0
    code, out, _ = run(capsys, "expert", "learn", "acme-support-expert", "--scope",
                       "draft-reply", "--title", "Shorter drafts", "--observation",
                       "Drafts ran long", "--correction", "Keep to 100 words", "--db", db)
    assert code == 0 and "proposed: approval" in out
    approval = out.split("approval ")[1].split(" ")[0]
    code, out, _ = run(capsys, "expert", "learnings", "acme-support-expert", "--json",
                       "--db", db)
    assert json.loads(out) == {}
    assert run(capsys, "approve", approval, "--by", "ada", "--db", db)[0] == 0
    code, out, _ = run(capsys, "expert", "learnings", "acme-support-expert", "--json",
                       "--db", db)
    assert json.loads(out) == {"draft-reply": 1}
    code, out, _ = run(capsys, "expert", "learn", "acme-support-expert", "--scope", "nope",
                       "--title", "t", "--observation", "o", "--correction", "c", "--db", db)
    assert code == 2


def test_registry_file_and_session_state_reset(
        expert_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.core.experts import home
    from clawtower.core.experts.package import load_package

    assert run(capsys, "expert", "install", str(ACME))[0] == 0
    text = (expert_home / "EXPERTS.md").read_text()
    assert "## acme-support-expert" in text
    assert ("- **Outputs:** reply drafts, ticket classifications, overdue-ticket reviews"
            in text)
    assert "- **Process** `ticket-triage`: Read, classify and answer a newly opened support" \
           " ticket (trigger: ticket_opened)" in text
    ws = home.workspace("acme-support-expert")
    (ws / "state" / "queue.md").write_text("tickets we watch\n")
    (ws / "state" / "shift-notes.md").write_text("notes of the last shift\n")
    pkg = load_package(home.package_dir("acme-support-expert"))
    assert home.init_state(pkg) == []  # nothing is overwritten outside a new session
    assert home.init_state(pkg, new_session=True) == ["state/shift-notes.md"]
    assert (ws / "state" / "queue.md").read_text() == "tickets we watch\n"
    assert (ws / "state" / "shift-notes.md").read_text() == (
        ACME / "state" / "shift-notes.md").read_text()
    assert run(capsys, "expert", "remove", "acme-support-expert")[0] == 0
    assert "acme-support-expert" not in (expert_home / "EXPERTS.md").read_text()


def test_run_pauses_at_confirm_and_workflow_resume_completes_it(
        expert_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.core.experts.bindings import write_binding

    assert run(capsys, "expert", "install", str(ACME))[0] == 0
    log = tmp_path / "calls.jsonl"
    base = {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
            "env": {"SALES_MCP_CALLS": str(log)}}
    # the value hints (`inputs`) are written to bindings.yaml: `expert bind` sets tool names
    write_binding("acme-support-expert", "helpdesk", {**base, "operations": {
        "get_customer": {"tool": "lookup_customer"},
        "add_internal_note": {"inputs": {"note": "reasoning"}},
        "set_priority": {"inputs": {"reason": "reasoning"}}}})
    write_binding("acme-support-expert", "kb", dict(base))
    assert run(capsys, "expert", "validate", "acme-support-expert")[0] == 0
    db = str(tmp_path / "r.db")
    code, out, err = run(capsys, "expert", "run", "acme-support-expert", "overdue-sweep",
                         "--db", db)
    assert code == 0, out + err
    envelope = json.loads(out)
    assert envelope["status"] == "needs_approval"
    approval = envelope["requiresApproval"]["approvalId"]
    tools = [json.loads(x)["tool"] for x in log.read_text().splitlines()]
    assert tools == ["list_overdue"]
    code, out, err = run(capsys, "workflow", "resume", "--id", approval, "--approve", "yes",
                         "--by", "ada", "--db", db)
    assert code == 0, out + err
    assert json.loads(out)["status"] == "ok"
    tools = [json.loads(x)["tool"] for x in log.read_text().splitlines()]
    assert tools == ["list_overdue", "set_priority", "add_internal_note"]


def test_bind_maps_an_operations_arguments_and_inputs(
        expert_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clawtower.core.experts.bindings import OpBinding, bindings_path, load_bindings

    assert run(capsys, "expert", "install", str(ACME))[0] == 0
    code, _out, err = run(capsys, "expert", "bind", "acme-support-expert", "helpdesk", "--mcp",
                         sys.executable, "--arg", str(SERVER),
                         "--op", "get_customer=lookup_customer",
                         "--arg-map", "get_customer.email=address",
                         "--input-map", "get_customer.email=sender",
                         "--input-map", "list_tickets.status=queue")
    assert code == 0, err
    got = load_bindings(bindings_path("acme-support-expert"))["helpdesk"]
    assert got.operations == {
        "get_customer": OpBinding(tool="lookup_customer", args={"email": "address"},
                                  inputs={"email": "sender"}),
        "list_tickets": OpBinding(tool="list_tickets", inputs={"status": "queue"})}
    for bad in ("email=address", "get_customer.=x", ".email=x", "get_customer.email="):
        code, _, err = run(capsys, "expert", "bind", "acme-support-expert", "helpdesk",
                           "--mcp", sys.executable, "--arg-map", bad)
        assert code == 2 and f"--arg-map {bad!r}: expected OP.NAME=VALUE" in err, err
    # the refused binds changed nothing
    assert load_bindings(bindings_path("acme-support-expert"))["helpdesk"] == got


def test_show_in_text_mode_is_readable(expert_home: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27 item 9: one line per process, function, tool and tier, no JSON dicts."""
    assert run(capsys, "expert", "install", str(ACME))[0] == 0
    code, out, err = run(capsys, "expert", "show", "acme-support-expert")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("acme-support-expert 0.1.0  Support-desk expertise")
    assert "processes:" in lines and "functions:" in lines and "approval:" in lines
    assert "  ticket-triage: Read, classify and answer a newly opened support ticket" in lines
    assert ("  helpdesk: not bound (clawtower expert bind acme-support-expert helpdesk ...)"
            in lines)
    assert "  manual: helpdesk.send_reply" in lines
    assert lines[-2:] == ["problems:", "  (none)"]
    assert not any(ch in out for ch in "{}[]\"")
