"""`clawtower tools list|call`: built-ins, MCP servers from clawtower.yaml, pinning through
`clawtower approve`, agents' allow-lists, bad input. The real mcp-server-time where needed
(skips with the reason when it is not installed)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import Run, run_cli
from mcp_peers import EVERYTHING, TIME, require


def _config(home: Path, *, time: bool = True, everything: bool = False,
            agents: str = "") -> Path:
    home.mkdir(parents=True, exist_ok=True)
    lines = ["mcp_servers:"]
    if time:
        lines.append(f"  time: {{command: '{TIME}'}}")
    if everything:
        lines.append(f"  everything: {{command: '{EVERYTHING}', args: [stdio], pin: auto}}")
    if not time and not everything:
        lines = ["mcp_servers: {}"]
    path = home / "clawtower.yaml"
    path.write_text("\n".join(lines) + "\n" + agents)
    return path


def test_list_builtins_without_a_config(run: Run, db: Path) -> None:
    r = run("tools", "list", "--db", db)
    assert (r.code, r.err) == (0, f"clawtower: no store at {db} yet (nothing has written to it)\n")
    assert not db.exists()  # built-ins only: a read, which creates no store
    header, *rows = r.out.splitlines()
    assert header.split() == ["NAME", "SOURCE", "STATUS", "DESCRIPTION"]
    assert [row.split()[:3] for row in rows] == [["clock.now", "builtin", "pinned"],
                                                 ["json.query", "builtin", "pinned"],
                                                 ["text.count", "builtin", "pinned"]]
    data = run("tools", "list", "--json", "--db", db).json()
    assert data["errors"] == {} and data["tools"][0]["name"] == "clock.now"
    assert data["tools"][0]["input_schema"]["properties"]["timezone"]["type"] == "string"


def test_call_a_builtin(run: Run, db: Path) -> None:
    r = run("tools", "call", "text.count", "--args", '{"text": "a b c"}', "--db", db)
    assert (r.code, r.err) == (0, "")
    assert json.loads(r.out) == {"characters": 5, "lines": 1, "words": 3}
    r = run("tools", "call", "text.count", "--args", '{"text": "a"}', "--json", "--db", db)
    assert r.json()["structured"]["characters"] == 1 and r.json()["is_error"] is False


def test_bad_input_exits_2_naming_it_and_writes_nothing(run: Run, db: Path) -> None:
    r = run("tools", "call", "clock.now", "--args", "{nope", "--db", db)
    assert r.code == 2 and r.err.startswith("clawtower: error: --args: not valid JSON")
    r = run("tools", "call", "clock.now", "--args", "[1]", "--db", db)
    assert (r.code, r.err) == (2, "clawtower: error: --args: must be a JSON object, got an array\n")
    assert not db.exists()  # checked before the store is opened
    r = run("tools", "call", "clock.nope", "--db", db)
    assert r.code == 2 and r.err.startswith("clawtower: error: clock.nope: no such tool")
    r = run("tools", "call", "clock.now", "--args", '{"timezone": 1}', "--db", db)
    assert r.code == 2 and "clock.now: invalid arguments: timezone: 1 is not of type" in r.err
    r = run("tools", "call", "--db", db)
    assert r.code == 2 and "NAME" in r.err


def test_bad_config_exits_2_naming_the_field(run: Run, db: Path, home: Path) -> None:
    home.mkdir(parents=True)
    (home / "clawtower.yaml").write_text("mcp_servers:\n  x: {command: a, pin: maybe}\n")
    r = run("tools", "list", "--db", db)
    assert r.code == 2
    assert r.err.startswith(f"clawtower: error: {home / 'clawtower.yaml'}: field"
                            " 'mcp_servers.x.pin'")


def test_time_call_refuses_until_pinned_then_runs(run: Run, db: Path, home: Path) -> None:
    require("time")
    _config(home)
    r = run("tools", "list", "--db", db)
    assert r.code == 0, r.err
    rows = {line.split()[0]: line.split() for line in r.out.splitlines()[1:]}
    assert rows["time.get_current_time"][1:3] == ["mcp:time", "pending"]
    approval = rows["time.get_current_time"][3].strip("()")
    r = run("tools", "call", "time.get_current_time", "--args", '{"timezone":"UTC"}',
            "--db", db)
    assert r.code == 1 and r.out == ""
    assert r.err == ("clawtower: error: time.get_current_time: the tool definition is not"
                     f" pinned yet; approval requested (approval {approval}:"
                     f" `clawtower approve {approval}`)\n")
    (a,) = [x for x in run("approvals", "--json", "--db", db).json()
            if x["subject"] == "tool:time.get_current_time"]
    assert (a["id"], a["kind"]) == (approval, "tool_pin")
    assert run("approve", approval, "--db", db).code == 0
    r = run("tools", "call", "time.get_current_time", "--args", '{"timezone":"UTC"}',
            "--db", db)
    assert (r.code, r.err) == (0, "")
    out = json.loads(r.out)
    assert out["timezone"] == "UTC" and out["datetime"].endswith("+00:00")
    listed = {t["name"]: t for t in run("tools", "list", "--json", "--db", db).json()["tools"]}
    assert listed["time.get_current_time"]["status"] == "pinned"
    assert listed["time.convert_time"]["status"] == "pending"
    assert run("store", "verify", "--db", db).code == 0


def test_pin_asks_again_after_a_rejection(run: Run, db: Path, home: Path) -> None:
    require("time")
    _config(home)
    assert run("tools", "list", "--db", db).code == 0
    (a,) = [x for x in run("approvals", "--json", "--db", db).json()
            if x["subject"] == "tool:time.get_current_time"]
    r = run("tools", "pin", "time.get_current_time", "--db", db)
    assert (r.code, r.err) == (2, f"clawtower: error: tool 'time.get_current_time': a pin approval"
                                  f" already waits: {a['id']} (`clawtower approve {a['id']}`)\n")
    assert run("reject", a["id"], "--reason", "not now", "--db", db).code == 0
    r = run("tools", "pin", "time.get_current_time", "--db", db)
    assert r.code == 0, r.err
    (b,) = [x for x in run("approvals", "--json", "--db", db).json()
            if x["subject"] == "tool:time.get_current_time"]
    assert b["id"] != a["id"]
    assert r.out == (f"time.get_current_time: pin requested (approval {b['id']}); approve it"
                     f" with `clawtower approve {b['id']}` or in the console (mode 2)\n")
    assert run("approve", b["id"], "--db", db).code == 0
    r = run("tools", "call", "time.get_current_time", "--args", '{"timezone":"UTC"}',
            "--db", db)
    assert r.code == 0, r.err
    r = run("tools", "pin", "nope.tool", "--db", db)
    assert r.code == 2 and "tool 'nope.tool': no such tool" in r.err
    assert run("store", "verify", "--db", db).code == 0


def test_time_call_through_the_installed_console_script(tmp_path: Path, home: Path) -> None:
    """`clawtower tools call time.get_current_time --args '{"timezone":"UTC"}'`, as a user runs
    it: a real process, the real mcp-server-time, pinned through `clawtower approve`."""
    require("time")
    _config(home)
    r = run_cli(["tools", "call", "time.get_current_time", "--args", '{"timezone":"UTC"}'], home)
    assert r.returncode == 1 and "clawtower approve " in r.stderr
    approval = r.stderr.rsplit("clawtower approve ", 1)[1].split("`")[0]
    assert run_cli(["approve", approval], home).returncode == 0
    r = run_cli(["tools", "call", "time.get_current_time", "--args", '{"timezone":"UTC"}'], home)
    assert (r.returncode, r.stderr) == (0, "")
    assert json.loads(r.stdout)["timezone"] == "UTC"


def test_agent_allow_list(run: Run, db: Path, home: Path) -> None:
    require("time")
    _config(home, agents="agents:\n  ada: {tools: ['clock.*', 'time.get_current_time']}\n"
                         "  bob: {}\n")
    r = run("tools", "list", "--agent", "ada", "--db", db)
    assert r.code == 0, r.err
    assert [line.split()[0] for line in r.out.splitlines()[1:]] == [
        "clock.now", "time.get_current_time"]
    assert run("tools", "list", "--agent", "bob", "--db", db).out == "no tools allowed for bob\n"
    r = run("tools", "call", "json.query", "--args", '{"document": 1}', "--agent", "ada",
            "--db", db)
    assert r.code == 2
    assert r.err == ("clawtower: error: json.query: not allowed for ada (not in its tool"
                     " allow-list); the call was not made\n")
    r = run("tools", "list", "--agent", "nobody", "--db", db)
    assert r.code == 2 and "agent 'nobody': no such agent" in r.err


def test_progress_goes_to_stderr(run: Run, db: Path, home: Path) -> None:
    require("everything")
    _config(home, time=False, everything=True)
    r = run("tools", "call", "everything.trigger-long-running-operation",
            "--args", '{"duration": 0.2, "steps": 2}', "--db", db)
    assert r.code == 0, r.err
    assert "Long running operation completed" in r.out
    assert r.err.splitlines() == [
        "everything.trigger-long-running-operation: progress 1/2",
        "everything.trigger-long-running-operation: progress 2/2"]


def test_a_server_that_cannot_start(run: Run, db: Path, home: Path) -> None:
    home.mkdir(parents=True)
    (home / "clawtower.yaml").write_text("mcp_servers:\n  ghost: {command: /no/such/server}\n")
    r = run("tools", "list", "--db", db)
    assert r.code == 1
    assert "clock.now" in r.out
    assert r.err == ("clawtower: error: mcp server 'ghost': cannot start '/no/such/server':"
                     " No such file or directory\n")
    r = run("tools", "call", "ghost.x", "--db", db)
    assert r.code == 1 and r.err.startswith("clawtower: error: mcp server 'ghost': cannot start")
    # as a user sees it: one line on stderr, not also a log record
    p = run_cli(["tools", "list"], home)
    assert p.returncode == 1
    assert p.stderr == ("clawtower: error: mcp server 'ghost': cannot start '/no/such/server':"
                        " No such file or directory\n")
