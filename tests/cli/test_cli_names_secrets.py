"""Issue 34, part 5: a name is checked wherever one is made from user input (operators,
specs from OpenClaw: the one name rule of core/limits.py, no `.`/`..`); an empty token or
secret is refused, never read as "make a random one"; errors name the option at fault and
the range that applies. Every refusal is one stderr line, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Run

CLAWTOWER_YAML = """providers:
  local:
    kind: openai
    base_url: http://127.0.0.1:9/v1
    models: [smollm2]
"""


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# -- operator names ----------------------------------------------------------------------

@pytest.mark.parametrize("by", ["../x", "..", ".", "a/b", "al ice", "x" * 65])
def test_console_web_refuses_a_by_that_is_not_a_name(
        run: Run, db: Path, home: Path, by: str) -> None:
    r = run("console", "--web", "--by", by, "--port", "0", "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and line.startswith("clawtower: error: --by:"), line
    assert "is not a name" in line
    assert r.out == "" and not db.exists()
    assert not (home / "console-tokens.yaml").exists()


def test_console_web_refuses_a_bad_operator_from_the_environment(
        run: Run, db: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWTOWER_OPERATOR", "../x")
    r = run("console", "--web", "--port", "0", "--db", db)
    assert r.code == 2 and "$CLAWTOWER_OPERATOR: '../x' is not a name" in _one_line(r.err)
    assert not db.exists() and not (home / "console-tokens.yaml").exists()


@pytest.mark.parametrize("argv", [["approve", "deadbeef"], ["reject", "deadbeef",
                                                               "--reason", "no"]])
def test_approve_and_reject_refuse_a_by_that_is_not_a_name(
        run: Run, seeded: Path, argv: list[str]) -> None:
    from cli_helpers import state

    before = state(seeded)
    r = run(*argv, "--by", "../x", "--db", seeded)
    assert r.code == 2 and _one_line(r.err).startswith("clawtower: error: --by:")
    assert state(seeded) == before


@pytest.mark.parametrize("value, says", [
    ("", "$CLAWTOWER_OPERATOR: set but empty"),  # CLAWTOWER_OPERATOR=$WHO, WHO unset
    ("..", "$CLAWTOWER_OPERATOR: '..' is not a name"),
])
def test_a_bad_or_empty_operator_variable_refuses_before_anything_is_written(
        run: Run, seeded: Path, monkeypatch: pytest.MonkeyPatch, value: str,
        says: str) -> None:
    from cli_helpers import state

    before = state(seeded)
    monkeypatch.setenv("CLAWTOWER_OPERATOR", value)
    r = run("task", "cancel", "T-1", "--reason", "r", "--db", seeded)
    assert r.code == 2 and says in _one_line(r.err)
    assert state(seeded) == before


@pytest.mark.parametrize("name", ["../x", "..", "a b"])
def test_a_trigger_name_that_is_not_a_name_is_refused_at_install(
        run: Run, tmp_path: Path, name: str) -> None:
    from core.experts import home as experts
    from tests.helpers.hook_expert import write_hook_expert

    pkg = write_hook_expert(tmp_path, triggers=f"  - name: '{name}'\n    type: webhook\n"
                                               "    process: note\n")
    r = run("expert", "install", pkg)
    assert r.code == 2 and f"triggers[0].name: '{name}' is not a name" in r.err, r.err
    assert not (experts.experts_dir() / "hook-expert").exists()


# -- OpenClaw agent ids ---------------------------------------------------------------

@pytest.mark.parametrize("text, field", [
    ("{agents: {entries: {'.': {}}}}", "agents.entries.."),
    ("{agents: {entries: {'..': {}, ok: {}}}}", "agents.entries..."),
    ("{agents: {list: [{id: 'ok'}, {id: '..'}]}}", "agents.list[1]"),
    ("{agents: {list: [{id: '.'}]}}", "agents.list[0]"),
])
def test_openclaw_ids_dot_and_dotdot_are_refused(
        run: Run, db: Path, tmp_path: Path, text: str, field: str) -> None:
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(CLAWTOWER_YAML)
    oc = tmp_path / "openclaw.json"
    oc.write_text(text)
    r = run("agents", "spec", "import", "--openclaw", oc, "--config", cfg, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and str(oc) in line and f"field '{field}'" in line, line
    assert "name '.'" in line or "name '..'" in line, line
    assert not db.exists() or run("agents", "spec", "list", "--json", "--db", db
                                  ).json() == []
