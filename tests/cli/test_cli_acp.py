"""`clawtower acp ...` as a user runs it, against the real harnesses (skips without them):
agents probed, a prompt run in one process and its permission request answered from
another (`clawtower approve --always`), the rule listed and revoked; usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import CLAWTOWER, child_env, run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from acp_peers import CODEX, TSX, ZED_AGENT, need

WAIT_S = 120.0


def config(home: Path, workspace: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "clawtower.yaml"
    cfg.write_text(
        "acp_agents:\n"
        f"  zed-example:\n    command: {TSX}\n    args: [{ZED_AGENT}]\n"
        f"    cwd: {workspace}\n"
        f"  codex:\n    command: {CODEX}\n"
        "  broken:\n    command: /nonexistent/harness\n")
    return cfg


def test_agents_lists_and_probes(tmp_path: Path) -> None:
    need(TSX, ZED_AGENT, CODEX)
    home = tmp_path / "home"
    config(home, tmp_path)
    r = run_cli(["acp", "agents", "--json"], home, timeout=WAIT_S)
    assert r.returncode == 0, r.stderr
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert rows["zed-example"]["reachable"] and rows["zed-example"]["protocol_version"] == 1
    assert rows["codex"]["agent"]["name"] == "codex-acp"
    assert not rows["broken"]["reachable"] and "cannot start" in rows["broken"]["error"]
    plain = run_cli(["acp", "agents"], home, timeout=WAIT_S)
    assert "REACHABLE" in plain.stdout and "codex-acp 0.16.0" in plain.stdout


def test_run_answered_from_another_process(tmp_path: Path) -> None:
    need(TSX, ZED_AGENT)
    home = tmp_path / "home"
    ws = tmp_path / "ws"
    ws.mkdir()
    config(home, ws)
    proc = subprocess.Popen([str(CLAWTOWER), "acp", "run", "zed-example", "Improve it"],
                            env=child_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + WAIT_S
        pending: list[dict[str, object]] = []
        while time.monotonic() < deadline and not pending:
            r = run_cli(["approvals", "--json"], home)
            pending = json.loads(r.stdout) if r.returncode == 0 else []
            time.sleep(0.3)
        assert pending and pending[0]["kind"] == "acp_permission"
        ok = run_cli(["approve", str(pending[0]["id"]), "--always"], home)
        assert ok.returncode == 0, ok.stderr
        assert "answered allow (allow_once)" in ok.stdout and "rule" in ok.stdout
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "successfully updated the configuration" in out
    assert "[permission]" in err and "done (end_turn)" in err
    runs = json.loads(run_cli(["acp", "runs", "--json"], home).stdout)
    assert runs[0]["status"] == "done" and runs[0]["workspace"] == str(ws.resolve())
    show = run_cli(["acp", "show", runs[0]["id"]], home)
    assert "tool call_2: edit" in show.stdout and "-> allow by tester" in show.stdout
    rules = json.loads(run_cli(["acp", "rules", "--json"], home).stdout)
    assert [(x["harness"], x["tool_kind"], x["decision"]) for x in rules] == [
        ("zed-example", "edit", "allow")]
    # the next run is answered by the rule: it completes with nobody approving
    again = run_cli(["acp", "run", "zed-example", "Again", "--json"], home, timeout=WAIT_S)
    assert again.returncode == 0 and json.loads(again.stdout)["status"] == "done"
    rv = run_cli(["acp", "revoke", rules[0]["id"], "--reason", "too broad"], home)
    assert rv.returncode == 0
    assert json.loads(run_cli(["acp", "rules", "--json"], home).stdout) == []


@pytest.mark.parametrize("argv,code,words", [
    (["acp", "run", "nope", "hi"], 2, "acp agent 'nope': no such agent"),
    (["acp", "show", "acp-000000000000"], 2, "no such run"),
    (["acp", "revoke", "rule-x"], 2, "no such rule"),
    (["acp", "cancel", "acp-000000000000"], 2, "no such run"),
])
def test_errors_are_one_line(tmp_path: Path, argv: list[str], code: int, words: str) -> None:
    home = tmp_path / "home"
    config(home, tmp_path)
    run_cli(["acp", "revoke", "rule-x"], home)  # opens (creates) the store
    r = run_cli(argv, home)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr
