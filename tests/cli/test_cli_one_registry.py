"""One agent registry (issue 27, item 2): an agent of clawtower.yaml is usable by its name
wherever a spec is asked for; its spec is made on first use (an `agentspec.set` event,
source `config:<file>`) and `agents spec set` overrides it. An unknown name lists the
config's agents too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clawtower.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def test_a_config_agent_is_a_spec_on_first_use(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text("agents:\n  ada:\n    system: You are Ada.\n    tools: [clock.now]\n"
                   "    approval: {tools: {clock.now: confirm}}\n  ben: {}\n")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(cfg))
    db = str(tmp_path / "db.sqlite")
    code, out, err = run(capsys, "session", "new", "--agent", "ada", "--db", db)
    assert code == 0, err
    assert out.strip() == "S-1"
    code, out, err = run(capsys, "agents", "spec", "show", "ada", "--db", db, "--json")
    spec = json.loads(out)
    assert spec["source"] == f"config:{cfg}"
    assert spec["config"]["defaults"]["system_prompt"] == "You are Ada."
    assert spec["config"]["policy"]["approval"]["tools"] == {"clock.now": "confirm"}
    # made once: a second session reuses it
    code, out, err = run(capsys, "session", "new", "--agent", "ada", "--db", db)
    assert code == 0 and out.strip() == "S-2"
    code, out, err = run(capsys, "agents", "spec", "list", "--db", db, "--json")
    assert [s["name"] for s in json.loads(out)] == ["ada"]
    # a flow's root agent too
    code, out, err = run(capsys, "flow", "run", "ben", "check the logs", "--db", db)
    assert code == 0, err
    assert out.strip() == "F-1"
    # unknown: the config's agents are named
    code, out, err = run(capsys, "session", "new", "--agent", "cyd", "--db", db)
    assert code == 2 and err.count("\n") == 1
    assert "no such agent spec" in err and "clawtower.yaml has ada, ben" in err
