"""Agents with real providers, from one YAML file.

The simulator's script format (see simulator.py) plus an optional `providers:` map; an agent
names its provider with `provider:` and its model with `model:`:

    providers:
      local:
        kind: openai                 # an OpenAI-compatible chat-completions endpoint
        base_url: http://127.0.0.1:8000/v1
        api_key_env: LOCAL_LLM_KEY   # the NAME of the variable holding the key (optional)
        timeout_s: 60
        retries: 2
        max_concurrency: 4
    agents:
      ada:    {role: participant, provider: local, model: smollm2}
      scribe: {role: summarizer,  provider: local, model: smollm2}

Without `providers:` the file is a plain simulator script. The provider "simulator" always
exists (it plays the agents whose provider is not given).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ValidationError
from ..safe_yaml import load_file
from .openai import OpenAIProvider
from .provider import Provider
from .registry import AgentSet
from .simulator import Simulator, script_from_data


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["openai"]
    base_url: str = Field(min_length=1)
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout_s: float = Field(default=60.0, gt=0)
    retries: int = Field(default=2, ge=0, le=10)
    max_concurrency: int = Field(default=4, ge=1, le=256)


def build_provider(name: str, config: ProviderConfig) -> Provider:
    return OpenAIProvider(name, config.base_url, config.api_key_env, config.timeout_s,
                          config.retries, config.max_concurrency)


def agents_from_data(data: Any, path: str | Path) -> AgentSet:
    data = dict(data or {}) if isinstance(data, dict) else data
    raw_providers = data.pop("providers", None) if isinstance(data, dict) else None
    script = script_from_data(data, path)
    if not isinstance(raw_providers, dict | None):
        raise ValidationError(f"{path}: field 'providers': must be a mapping of name -> provider")
    providers: dict[str, Provider] = {}
    for name, raw in (raw_providers or {}).items():
        if name == "simulator":
            raise ValidationError(f"{path}: field 'providers.simulator': the name is reserved")
        try:
            cfg = ProviderConfig.model_validate(raw)
        except pydantic.ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise ValidationError(
                f"{path}: field 'providers.{name}{'.' + loc if loc else ''}': {err['msg']}"
            ) from None
        providers[str(name)] = build_provider(str(name), cfg)
    sim = Simulator(script)
    providers["simulator"] = sim
    for agent_name, agent in sim.script.agents.items():
        if agent.provider not in providers:
            raise ValidationError(
                f"{path}: field 'agents.{agent_name}.provider': unknown provider"
                f" {agent.provider!r} (known: {', '.join(sorted(providers))})")
    return AgentSet(agents=dict(sim.script.agents), providers=providers)


def load_agents(path: str | Path) -> AgentSet:
    """An AgentSet from a simulator script or a file with real `providers:`."""
    return agents_from_data(load_file(path), path)


__all__ = ["ProviderConfig", "agents_from_data", "build_provider", "load_agents"]
