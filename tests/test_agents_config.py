"""clawtower.yaml: providers and agents, where the file is looked for, and every error naming
the file and the field (and never quoting a key)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clawtower.core.agents.anthropic import AnthropicProvider
from clawtower.core.agents.config import (
    BUILTIN,
    ClawtowerConfig,
    config_from_data,
    load_agents,
    load_config,
)
from clawtower.core.agents.openai import OpenAIProvider
from clawtower.core.agents.provider import Usage
from clawtower.core.agents.simulator import Simulator
from clawtower.core.errors import ValidationError

FULL = """\
providers:
  local:
    kind: openai
    base_url: http://127.0.0.1:8000/v1
    models: [smollm2, other]
    timeout_s: 30
    retries: {max: 3, backoff_s: 0.25, max_backoff_s: 4}
    max_concurrency: 2
  claude:
    kind: anthropic
    base_url: https://api.anthropic.com
    api_key_env: ANTHROPIC_API_KEY
    models: [claude-sonnet-4-5]
    retries: 1
agents:
  ada:
    provider: local
    system: You are terse.
    tools: [clock.*, git.status]
    budgets: {max_tool_rounds: 3, max_tokens: 2000, max_wall_s: 60}
    price: {prompt: 0.15, completion: 0.60}
  cyd: {provider: claude, model: claude-sonnet-4-5, role: summarizer, max_output_tokens: 256}
  sim: {}
mcp_servers:
  time: {command: mcp-server-time}
"""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    monkeypatch.delenv("CLAWTOWER_CONFIG", raising=False)
    return home


def write(tmp_path: Path, text: str, name: str = "clawtower.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def test_full_config(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, FULL))
    ada, cyd, sim = cfg.agent("ada"), cfg.agent("cyd"), cfg.agent("sim")
    assert (ada.provider, ada.model, ada.role) == ("local", "smollm2", "participant")
    assert ada.system == "You are terse."
    assert (ada.budgets.max_tool_rounds, ada.budgets.max_tokens, ada.budgets.max_wall_s) == (
        3, 2000, 60)
    assert ada.allows("clock.now") and ada.allows("git.status")
    assert not ada.allows("git.commit") and not sim.allows("clock.now")  # none by default
    assert ada.cost(Usage(prompt_tokens=1_000_000, completion_tokens=500_000)) == \
        pytest.approx(0.45)
    assert sim.cost(Usage(prompt_tokens=10, completion_tokens=10)) == 0.0
    assert (cyd.model, cyd.role, cyd.max_output_tokens) == ("claude-sonnet-4-5", "summarizer",
                                                            256)
    assert (sim.provider, sim.model) == ("simulator", "sim-standard")
    local = cfg.provider_for("ada")
    assert isinstance(local, OpenAIProvider)
    assert (local.retries, local.backoff_s, local.max_backoff_s, local.max_concurrency,
            local.timeout_s) == (3, 0.25, 4, 2, 30)
    claude = cfg.provider_for("cyd")
    assert isinstance(claude, AnthropicProvider) and claude.api_key_env == "ANTHROPIC_API_KEY"
    assert claude.retries == 1
    assert cfg.provider("local") is local  # one instance, one semaphore, per provider
    assert isinstance(cfg.provider_for("sim"), Simulator)
    assert cfg.mcp_servers == {"time": {"command": "mcp-server-time"}}
    team = cfg.agent_set()
    assert team.agents["ada"].model == "smollm2" and team.provider(team.agents["ada"]) is local


def test_where_the_file_is_looked_for(tmp_path: Path, _home: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    builtin = load_config()  # no file anywhere: the simulator cast
    assert builtin.path is None and builtin.source == BUILTIN
    assert {"ada", "ben", "cyd", "scribe", "builder"} <= set(builtin.agents)
    assert all(a.provider == "simulator" for a in builtin.agents.values())
    _home.mkdir()
    (_home / "agents.yaml").write_text("agents: {old: {role: executor}}\n")
    assert set(load_config().agents) == {"old"}  # the older default agents file
    (_home / "clawtower.yaml").write_text("agents: {zed: {}}\n")
    assert set(load_config().agents) == {"zed"}
    other = write(tmp_path, "agents: {yan: {}}\n", "other.yaml")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(other))
    assert set(load_config().agents) == {"yan"}
    flag = write(tmp_path, "agents: {xia: {}}\n", "flag.yaml")
    assert set(load_config(flag).agents) == {"xia"}  # --config beats the variable
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ValidationError, match=r"gone\.yaml: no such config file"):
        load_config()


@pytest.mark.parametrize(("text", "match"), [
    ("providers: {x: {kind: grpc, base_url: 'http://h'}}\n", "'providers.x.kind'"),
    ("providers: {x: {kind: openai}}\n", "'providers.x.base_url'"),
    ("providers: {x: {kind: openai, base_url: 'ftp://h'}}\n",
     "'providers.x': base_url: must be an http"),
    ("providers: {x: {kind: openai, base_url: 'https://u:sk-abc@h/v1'}}\n",
     "'providers.x': base_url: no user:password@, query or fragment"),
    ("providers: {x: {kind: openai, base_url: 'https://h/v1?key=abc'}}\n",
     "'providers.x': base_url: no user:password@"),
    ("providers: {x: {kind: openai, base_url: 'http://h', retries: {max: 99}}}\n",
     "'providers.x.retries.max'"),
    ("providers: {x: {kind: openai, base_url: 'http://h', retries: {tries: 2}}}\n",
     "'providers.x.retries.tries': unknown field (known: backoff_s, max, max_backoff_s)"),
    ("providers: {x: {kind: openai, base_url: 'http://h', max_concurrency: 0}}\n",
     "'providers.x.max_concurrency'"),
    ("providers: {x: {kind: openai, base_url: 'http://h', api_key_env: 'MY KEY'}}\n",
     "'providers.x.api_key_env': must be the NAME of an environment variable"),
    ("providers: {simulator: {kind: openai, base_url: 'http://h'}}\n", "reserved"),
    ("providers: [a]\n", "'providers': must be a mapping"),
    ("agents: {ada: {provider: nowhere}}\n", "'agents.ada.provider': unknown provider 'nowhere'"),
    ("agents: {ada: {role: boss}}\n", "'agents.ada.role': unknown role 'boss'"),
    ("agents: {ada: {budgets: {max_tool_rounds: -1}}}\n", "'agents.ada.budgets.max_tool_rounds'"),
    ("agents: {ada: {budgets: {rounds: 2}}}\n", "'agents.ada.budgets.rounds': unknown field"),
    ("agents: {ada: {modle: x}}\n", "'agents.ada.modle': unknown field (did you mean 'model'?)"),
    ("agents: {ada: {price: {prompt: -1}}}\n", "'agents.ada.price.prompt'"),
    ("agents: {ada: {tools: ['']}}\n", "'agents.ada.tools'"),
    ("agents: {ada: {prompt: hi}}\n", "'agents.ada.prompt': unknown field"),
    ("providers: {x: {kind: openai, base_url: 'http://h'}}\nagents: {ada: {provider: x}}\n",
     "'agents.ada.model': required, as provider x lists no models"),
    ("providers: {x: {kind: openai, base_url: 'http://h', models: [a, b]}}\n"
     "agents: {ada: {provider: x, model: c}}\n",
     "'agents.ada.model': 'c' is not one of provider x's models \\(a, b\\)"),
    ("colour: blue\n", "'colour': unknown field (known: acp_agents, agents"),
    ("provders: {}\n", "'provders': unknown field (did you mean 'providers'?)"),
    ("scripts: {t: {dance: []}}\n", "'scripts.t.dance': unknown purpose"),
    ("- a\n- b\n", "must be a mapping"),
])
def test_errors_name_the_file_and_the_field(tmp_path: Path, text: str, match: str) -> None:
    f = write(tmp_path, text)
    with pytest.raises(ValidationError) as exc:
        load_config(f)
    assert match in str(exc.value) or re.search(match, str(exc.value)), str(exc.value)
    assert str(exc.value).startswith(f"{f}: ")
    assert exc.value.exit_code == 2


KEY = "sk-ant-api03-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk"


@pytest.mark.parametrize("text", [
    f"providers: {{x: {{kind: anthropic, base_url: 'http://h', api_key_env: '{KEY}'}}}}\n",
    f"providers: {{x: {{kind: openai, base_url: 'http://h', api_key_env: {KEY[7:]}}}}}\n",
    "providers: {x: {kind: openai, base_url: 'http://h', api_key_env: 3f9a8b7c6d5e4f3a2b1c0d9e}}\n",
])
def test_a_literal_key_in_api_key_env_is_refused_without_quoting_it(tmp_path: Path,
                                                                     text: str) -> None:
    with pytest.raises(ValidationError) as exc:
        load_config(write(tmp_path, text))
    message = str(exc.value)
    assert "'providers.x.api_key_env': looks like a literal API key" in message
    assert KEY not in message and KEY[7:] not in message and "3f9a8b7c" not in message


@pytest.mark.parametrize("field", ["api_key", "token", "key"])
def test_a_key_field_is_refused_without_quoting_it(tmp_path: Path, field: str) -> None:
    text = f"providers: {{x: {{kind: openai, base_url: 'http://h', {field}: '{KEY}'}}}}\n"
    with pytest.raises(ValidationError) as exc:
        load_config(write(tmp_path, text))
    message = str(exc.value)
    assert f"'providers.x.{field}': a literal key is refused" in message
    assert "api_key_env" in message and KEY not in message


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "my_key",
                                  "LLM_KEY_2", "HF_TOKEN"])
def test_ordinary_variable_names_are_accepted(name: str) -> None:
    cfg = config_from_data({"providers": {"x": {"kind": "openai", "base_url": "http://h",
                                                "api_key_env": name}}}, "f.yaml")
    assert cfg.providers["x"].api_key_env == name


def test_agents_files_still_load_the_same(tmp_path: Path) -> None:
    """A simulator script with real `providers:` (meeting run --agents-file) is unchanged."""
    f = write(tmp_path, "seed: 3\nspeed: 0\nproviders:\n"
                        "  local: {kind: openai, base_url: 'http://127.0.0.1:9/v1', retries: 1}\n"
                        "agents:\n"
                        "  ada: {role: participant, provider: local, model: smollm2}\n"
                        "  scribe: {role: summarizer}\n"
                        "scripts:\n  ada: {meeting: [{stance: AGREE}]}\n", "agents.yaml")
    team = load_agents(f)
    assert team.agents["ada"].model == "smollm2" and team.agents["scribe"].model == "sim-standard"
    assert isinstance(team.provider(team.agents["ada"]), OpenAIProvider)
    sim = team.provider(team.agents["scribe"])
    assert isinstance(sim, Simulator) and sim.script.seed == 3 and sim.script.speed == 0
    assert "ada" in sim.script.scripts
    plain = load_agents(write(tmp_path, "seed: 1\n", "plain.yaml"))
    assert set(plain.providers) == {"simulator"} and "ada" in plain.agents


def test_a_config_file_works_as_an_agents_file(tmp_path: Path) -> None:
    team = load_agents(write(tmp_path, FULL))
    assert set(team.providers) == {"local", "claude", "simulator"}
    assert team.agents["cyd"].role == "summarizer"


def test_unknown_agent_names_the_config_and_the_known_agents(tmp_path: Path) -> None:
    cfg: ClawtowerConfig = load_config(write(tmp_path, FULL))
    with pytest.raises(ValidationError, match=r"agent 'bob': no such agent in .*clawtower\.yaml"
                                              r" \(known: ada, cyd, sim\)"):
        cfg.agent("bob")
