"""`clawtower agents spec import --openclaw`: OpenClaw's agents (JSON5, both shapes) as agent
specs; what maps, what is listed as unmapped, idempotent re-import with a diff, and bad input
as one line naming the file and field with nothing written (core/sessions/openclaw.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import Run

CURRENT = """// an OpenClaw config as its docs write it: comments, unquoted keys, trailing commas
{
  gateway: {mode: "local", port: 18789},
  agents: {
    defaults: {model: {primary: "local/smollm2"}, workspace: "~/.openclaw/workspace",
               tools: {allow: ["read", "text.count"]}},
    entries: {
      main: {name: "Main", subagents: {allowAgents: ["helper"], maxConcurrent: 4}},
      helper: {model: "local/smollm2", workspace: "/srv/helper", tools: {allow: ["exec"],
               deny: ["browser"]}, subagents: {allowAgents: ["*"]}, thinkingDefault: "low"},
    },
  },
}
"""
OLDER = """{agents: {list: [
  {id: "coder", model: {primary: "local/smollm2", fallbacks: ["x/y"]}, workspace: "/w"},
  {id: "reviewer"},
]}}"""
CLAWTOWER_YAML = """providers:
  local:
    kind: openai
    base_url: http://127.0.0.1:9/v1
    models: [smollm2]
"""


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    p = tmp_path / "clawtower.yaml"
    p.write_text(CLAWTOWER_YAML)
    return p


def _write(tmp_path: Path, text: str, name: str = "openclaw.json") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _specs(run: Run, db: Path) -> dict[str, dict]:
    return {s["name"]: s for s in run("agents", "spec", "list", "--json", "--db", db).json()}


def test_both_shapes_map_model_tools_subagents_and_list_the_rest(
        run: Run, db: Path, tmp_path: Path, cfg: Path) -> None:
    cur = _write(tmp_path, CURRENT)
    r = run("agents", "spec", "import", "--openclaw", cur, "--config", cfg, "--db", db, "--json")
    assert r.code == 0, r.err
    out = r.json()
    by = {a["name"]: a for a in out["agents"]}
    assert {a["status"] for a in out["agents"]} == {"new"}
    specs = _specs(run, db)
    main, helper = specs["main"]["config"], specs["helper"]["config"]
    # the defaults' model and tools under `main`; the entry's own over them for `helper`
    assert (main["defaults"]["provider"], main["defaults"]["model"]) == ("local", "smollm2")
    assert main["policy"]["tools"] == ["text.count"]  # `read`: no clawtower tool of that name
    assert main["policy"]["subagents"] == ["helper"]
    assert helper["policy"]["tools"] == []  # still a restriction: none of it maps
    assert helper["policy"]["subagents"] == ["*"]
    assert specs["main"]["source"] == f"openclaw:{cur}"
    assert "agents.entries.main.name" in by["main"]["unmapped"]
    assert "agents.entries.main.subagents.maxConcurrent" in by["main"]["unmapped"]
    assert "agents.entries.helper.tools.deny" in by["helper"]["unmapped"]
    assert "agents.entries.helper.thinkingDefault" in by["helper"]["unmapped"]
    assert any(u.startswith("agents.entries.helper.workspace") for u in by["helper"]["unmapped"])
    assert any(u.startswith("agents.defaults.tools.allow[0] ('read'") for u in out["unmapped"])
    assert "agents.defaults.workspace" in out["unmapped"]
    assert "gateway (not agent config)" in out["unmapped"]

    old = _write(tmp_path, OLDER, "old.json5")
    r = run("agents", "spec", "import", "--openclaw", old, "--config", cfg, "--db", db)
    assert r.code == 0, r.err
    assert "coder: new" in r.out and "not mapped: agents.list[0].model.fallbacks" in r.out
    specs = _specs(run, db)
    assert specs["coder"]["config"]["defaults"]["model"] == "smollm2"
    assert specs["reviewer"]["config"]["policy"]["subagents"] == ["reviewer"]  # itself only


def test_reimport_is_idempotent_and_shows_a_diff(run: Run, db: Path, tmp_path: Path,
                                                 cfg: Path) -> None:
    cur = _write(tmp_path, CURRENT)
    args = ("agents", "spec", "import", "--openclaw", cur, "--config", cfg, "--db", db)
    assert run(*args).code == 0
    events = sqlite3.connect(db).execute("SELECT count(*) FROM events").fetchone()[0]
    again = run(*args, "--json").json()
    assert {a["status"] for a in again["agents"]} == {"unchanged"}
    assert sqlite3.connect(db).execute("SELECT count(*) FROM events").fetchone()[0] == events
    cur.write_text(CURRENT.replace('allowAgents: ["helper"]', 'allowAgents: ["*"]'))
    r = run(*args)
    assert r.code == 0
    assert "main: changed" in r.out and "helper: unchanged" in r.out
    assert "-  - helper" in r.out and "+  - '*'" in r.out
    assert _specs(run, db)["main"]["config"]["policy"]["subagents"] == ["*"]


def test_gateway_runs_the_agents_on_openclaw_and_lifts_the_model_check(
        run: Run, db: Path, tmp_path: Path) -> None:
    cur = _write(tmp_path, CURRENT)
    token = _write(tmp_path, "t0ken\n", "gw.token")
    r = run("agents", "spec", "import", "--openclaw", cur, "helper", "--db", db,
            "--gateway", "ws://127.0.0.1:18789", "--token-file", token)
    assert r.code == 0, r.err
    assert "not mapped: agents.entries.helper.model ('local/smollm2'" in r.out
    specs = _specs(run, db)
    assert list(specs) == ["helper"]  # only the agent named
    acp = specs["helper"]["config"]["defaults"]["acp"]
    assert acp["openclaw"] == {"url": "ws://127.0.0.1:18789", "token_file": str(token),
                               "agent": "helper", "command": "openclaw"}
    assert acp["cwd"] == "/srv/helper"  # the agent's workspace
    assert "t0ken" not in json.dumps(specs)  # the token stays in its file


@pytest.mark.parametrize(("text", "args", "message"), [
    (None, (), "no such OpenClaw config file"),
    ("{agents: {entries: {a: {}}}", (), "line 1: not valid JSON5 (Unexpected end of input"),
    ("[1, 2]", (), "must be a JSON5 object, not an array"),
    ("{agents: {entries: []}}", (), "field 'agents.entries': must be an object, not an array"),
    ("{agents: {entries: {a: {model: 3}}}}", (),
     "field 'agents.entries.a.model': must be \"provider/model\""),
    ("{agents: {entries: {a: {tools: {allow: 'read'}}}}}", (),
     "field 'agents.entries.a.tools.allow': must be an array of names, not a string"),
    ("{agents: {list: [{name: 'x'}]}}", (), "field 'agents.list[0].id': must be the agent's id"),
    ("{agents: {entries: {a: {}}, list: [{id: 'a'}]}}", (),
     "field 'agents.list[0]': agent id 'a' is also agents.entries.a"),
    ("{agents: {}}", (), "field 'agents': no agents"),
    ("{agents: {entries: {a: {}, b: {}}}}", ("zz",), "agent 'zz': not in agents.entries"),
    ("{agents: {entries: {a: {model: 'anthropic/claude-x'}, b: {}}}}", (),
     "field 'agents.entries.a.model': 'anthropic/claude-x' maps to no provider of"),
])
def test_bad_input_is_one_line_naming_file_and_field_and_writes_nothing(
        run: Run, db: Path, tmp_path: Path, cfg: Path, text: str | None,
        args: tuple[str, ...], message: str) -> None:
    p = tmp_path / "openclaw.json"
    if text is not None:
        p.write_text(text)
    r = run("agents", "spec", "import", "--openclaw", p, *args, "--config", cfg, "--db", db)
    assert r.code == 2, (r.out, r.err)
    line = r.err.strip()
    assert "\n" not in line and "Traceback" not in line
    assert str(p) in line and message in line, line
    if db.exists():  # nothing half imported: b (valid) is not there either
        assert run("agents", "spec", "list", "--json", "--db", db).json() == []


def test_gateway_options_are_checked(run: Run, db: Path, tmp_path: Path) -> None:
    cur = _write(tmp_path, CURRENT)
    r = run("agents", "spec", "import", "--openclaw", cur, "--gateway", "ws://h:1", "--db", db)
    assert r.code == 2 and "--gateway and --token-file go together" in r.err
    r = run("agents", "spec", "import", "--openclaw", cur, "--gateway", "http://h:1",
            "--token-file", cur, "--db", db)
    assert r.code == 2 and "openclaw.url: the Gateway's WebSocket URL" in r.err
    r = run("agents", "spec", "import", "--gateway", "ws://h:1", "--db", db)
    assert r.code == 2 and "go with --openclaw" in r.err
