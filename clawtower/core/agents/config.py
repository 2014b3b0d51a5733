"""The project config (`clawtower.yaml`) and agents files: one format, one loader.

    providers:
      local:
        kind: openai                   # openai (chat completions) | anthropic (Messages)
        base_url: http://127.0.0.1:8000/v1
        api_key_env: LOCAL_LLM_KEY     # the NAME of the variable holding the key (optional)
        models: [smollm2]              # the first is the default of agents naming none
        timeout_s: 60
        retries: {max: 2, backoff_s: 0.5, max_backoff_s: 30}   # or just `retries: 2`
        max_concurrency: 4             # calls in flight at once, per provider
    agents:
      ada:
        provider: local                # default: simulator
        model: smollm2                 # default: the provider's first model
        role: participant              # what the task protocol / meetings use it for
        system: You are terse.
        tools: [clock.*, git.status]   # allow-list: tool names or globs (none by default)
        budgets: {max_tool_rounds: 8, max_tokens: 20000, max_wall_s: 300}
        price: {prompt: 0.15, completion: 0.60}   # US dollars per 1M tokens
        max_output_tokens: 512         # per model call
        temperature: 0.2
    mcp_servers: {...}                 # read by core/tools/config.py
    memory: {embeddings: {...}}        # hybrid recall: core/memory/config.py
    telemetry: {otlp_endpoint: ...}    # live trace export: core/traces/config.py
    seed: 7                            # the simulator's script keys (see simulator.py):
    scripts: {...}                     #   seed, speed, delay_ms, scripts

Where: `--config FILE`, else $CLAWTOWER_CONFIG, else $CLAWTOWER_HOME/clawtower.yaml, else the
older $CLAWTOWER_HOME/agents.yaml; without any file the built-in simulator cast plays. A plain
simulator script (an agents file for `meeting run --agents-file`) is a config file too.

A key never goes in the file: `api_key_env` holds a variable's NAME, a value that looks like
a key is refused, and so are fields such as `api_key`. Errors name the file and the field
path and never quote the offending value. The provider "simulator" always exists.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal, get_args

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..config import config_path, home
from ..errors import ValidationError
from ..executors import EXECUTOR_PATTERN
from ..memory.config import MemoryConfig, memory_config
from ..safe_yaml import load_file
from ..tools.approval import ToolApprovalPolicy
from ..traces.config import TelemetryConfig, telemetry_config
from .provider import Provider, Usage
from .registry import AgentSet
from .simulator import AgentDef, SimScript, Simulator, script_from_data
from .usage import Price

SIMULATOR = "simulator"
SIM_MODEL = "sim-standard"
BUILTIN = "(built-in simulator)"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# what API keys look like (prefixes of the big vendors), or a long mixed-case-and-digit token
KEY_LIKE = re.compile(r"^(sk|pk|rk|ak|xai|gsk|ghp|gho|ghs|github_pat|hf|glpat|AIza)[-_]?"
                      r"[A-Za-z0-9]{8,}|^sk-")
SECRET_FIELDS = frozenset({"api_key", "apikey", "key", "token", "secret", "password",
                           "authorization", "auth"})
ROLES: tuple[str, ...] = get_args(AgentDef.model_fields["role"].annotation)


def looks_like_a_key(value: str) -> bool:
    if KEY_LIKE.search(value):
        return True
    has_digit = any(c.isdigit() for c in value)
    has_lower = any(c.islower() for c in value)
    return len(value) >= 32 or (len(value) >= 20 and has_digit and has_lower
                                and "_" not in value)


class Retries(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max: int = Field(default=2, ge=0, le=10)
    backoff_s: float = Field(default=0.5, ge=0, le=60)
    max_backoff_s: float = Field(default=30.0, ge=0, le=600)


class ProviderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["openai", "anthropic"]
    base_url: str = Field(min_length=1)
    api_key_env: str | None = None
    models: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    retries: Retries = Field(default_factory=Retries)
    max_concurrency: int = Field(default=4, ge=1, le=256)

    @field_validator("api_key_env")
    @classmethod
    def _a_name_not_a_key(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if looks_like_a_key(v):  # never echo it: the message must not carry the key
            raise ValueError("looks like a literal API key; a key never goes in the file:"
                             " export it in an environment variable and put that variable's"
                             " NAME here (e.g. ANTHROPIC_API_KEY)")
        if not ENV_NAME.match(v):
            raise ValueError("must be the NAME of an environment variable (letters, digits"
                             " and _, not starting with a digit), never the key itself")
        return v

    @field_validator("retries", mode="before")
    @classmethod
    def _retries_int(cls, v: Any) -> Any:
        return {"max": v} if isinstance(v, int) and not isinstance(v, bool) else v

    @field_validator("models")
    @classmethod
    def _models(cls, v: list[str]) -> list[str]:
        if any(not m.strip() for m in v):
            raise ValueError("a model name cannot be empty")
        return v

    @model_validator(mode="after")
    def _url(self) -> ProviderConfig:
        if not re.match(r"^https?://[^/\s]", self.base_url):
            raise ValueError("base_url: must be an http:// or https:// URL")
        parts = urllib.parse.urlsplit(self.base_url)
        if "@" in parts.netloc or parts.query or parts.fragment:
            # errors quote the URL: a key in it would leak (and it is no place for one)
            raise ValueError("base_url: no user:password@, query or fragment; name the key's"
                             " variable in api_key_env")
        return self


class Budgets(BaseModel):
    """Per turn (core/agents/turns.py): tool rounds, tokens (prompt + completion over every
    model call of the turn) and wall-clock seconds."""

    model_config = ConfigDict(extra="forbid")
    max_tool_rounds: int = Field(default=8, ge=0, le=1000)
    max_tokens: int | None = Field(default=None, ge=1)
    max_wall_s: float = Field(default=300.0, gt=0, le=86400)


class PriceConfig(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    prompt: float = Field(default=0.0, ge=0)
    completion: float = Field(default=0.0, ge=0)


class AgentConfig(BaseModel):
    """One agent. After loading, `model` is always set (the provider's default filled in)."""

    model_config = ConfigDict(extra="forbid")
    role: str = "participant"
    provider: str = SIMULATOR
    model: str = ""
    escalation_model: str | None = None
    # who runs this agent's work: "builtin" (the turn loop on `provider`) or "acp:<name>" (a
    # harness of `acp_agents:`). The executor agent's choice runs tasks' implementation
    # steps; a session/flow agent's (through `agents spec import`) runs its turns.
    executor: str | None = Field(default=None, pattern=EXECUTOR_PATTERN)
    system: str = ""
    tools: list[str] = Field(default_factory=list)
    budgets: Budgets = Field(default_factory=Budgets)
    price: PriceConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    # tool-call tiers (auto | confirm | manual), as an agent spec's policy.approval
    approval: ToolApprovalPolicy | None = None

    @field_validator("role")
    @classmethod
    def _role(cls, v: str) -> str:
        if v not in ROLES:
            raise ValueError(f"unknown role {v!r} (known: {', '.join(ROLES)})")
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: list[str]) -> list[str]:
        if any(not t.strip() for t in v):
            raise ValueError("a tool name or glob cannot be empty")
        return v

    def allows(self, tool: str) -> bool:
        """Whether the allow-list lets this agent see and call `tool` (names or globs)."""
        return any(fnmatchcase(tool, pattern) for pattern in self.tools)

    @property
    def unit_price(self) -> Price | None:
        if self.price is None:
            return None
        return Price(self.price.prompt, self.price.completion)

    def cost(self, usage: Usage) -> float:
        """US dollars for one call's usage (0 without a price)."""
        p = self.unit_price
        return p.cost(usage) if p is not None else 0.0

    def agent_def(self) -> AgentDef:
        return AgentDef.model_validate({"role": self.role, "model": self.model,
                                        "escalation_model": self.escalation_model,
                                        "provider": self.provider, "executor": self.executor,
                                        "max_output_tokens": self.max_output_tokens})


def build_provider(name: str, config: ProviderConfig) -> Provider:
    # Imported here: httpx (and, through it, rich and click) costs ~0.2 s at start-up, which
    # every CLI command would pay for nothing when no HTTP provider is configured.
    from .anthropic import AnthropicProvider
    from .openai import OpenAIProvider

    cls: type[AnthropicProvider] | type[OpenAIProvider] = (
        AnthropicProvider if config.kind == "anthropic" else OpenAIProvider)
    return cls(name, config.base_url, config.api_key_env, config.timeout_s, config.retries.max,
               config.max_concurrency, backoff_s=config.retries.backoff_s,
               max_backoff_s=config.retries.max_backoff_s)


@dataclass
class ClawtowerConfig:
    """A loaded config: providers, agents, the simulator's script, and `mcp_servers` raw (for
    core/tools/config.py). Providers are built on first use, one instance (and so one
    concurrency limit) per name."""

    path: Path | None  # None: the built-in simulator cast
    providers: dict[str, ProviderConfig]
    agents: dict[str, AgentConfig]
    script: SimScript
    mcp_servers: Any = None
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    _built: dict[str, Provider] = field(default_factory=dict, repr=False)

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else BUILTIN

    def agent(self, name: str) -> AgentConfig:
        try:
            return self.agents[name]
        except KeyError:
            raise ValidationError(
                f"agent {name!r}: no such agent in {self.source}"
                f" (known: {', '.join(sorted(self.agents))})"
            ) from None

    def provider(self, name: str) -> Provider:
        if name not in self._built:
            if name == SIMULATOR:
                self._built[name] = Simulator(self.script)
            elif name in self.providers:
                self._built[name] = build_provider(name, self.providers[name])
            else:
                raise ValidationError(f"{self.source}: unknown provider {name!r}")
        return self._built[name]

    def provider_for(self, agent: str) -> Provider:
        return self.provider(self.agent(agent).provider)

    def agent_set(self) -> AgentSet:
        """The agents and providers as the engine and meetings take them."""
        names = {a.provider for a in self.agents.values()} | {SIMULATOR}
        return AgentSet(agents={n: a.agent_def() for n, a in self.agents.items()},
                        providers={n: self.provider(n) for n in sorted(names)})


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(x) for x in loc)


def _field_error(path: str | Path, prefix: str, exc: pydantic.ValidationError,
                 model: type[pydantic.BaseModel]) -> ValidationError:
    from ..reader import schema_problem

    loc, msg = schema_problem(exc, model)
    where = ".".join(x for x in (prefix, loc) if x)
    if msg.startswith("unknown field") and loc.rpartition(".")[2].lower() in SECRET_FIELDS:
        msg = ("a literal key is refused: export the key in an environment variable and name"
               " that variable in api_key_env")
    return ValidationError(f"{path}: field '{where}': {msg}")


def config_from_data(data: Any, path: str | Path) -> ClawtowerConfig:
    """Validate a loaded file (`path` names it in errors)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: must be a mapping of keys (providers, agents, ...)")
    rest = dict(data)
    raw_providers = rest.pop("providers", None)
    mcp_servers = rest.pop("mcp_servers", None)
    rest.pop("acp_agents", None)  # read by core/acp/config.py
    raw_memory = rest.pop("memory", None)
    raw_telemetry = rest.pop("telemetry", None)
    raw_agents = rest.pop("agents", None)
    if not isinstance(raw_providers, dict | None):
        raise ValidationError(f"{path}: field 'providers': must be a mapping of name -> provider")
    if not isinstance(raw_agents, dict | None):
        raise ValidationError(f"{path}: field 'agents': must be a mapping of name -> agent")
    providers: dict[str, ProviderConfig] = {}
    for name, raw in (raw_providers or {}).items():
        if name == SIMULATOR:
            raise ValidationError(f"{path}: field 'providers.{SIMULATOR}': the name is reserved")
        try:
            providers[str(name)] = ProviderConfig.model_validate(raw)
        except pydantic.ValidationError as exc:
            raise _field_error(path, f"providers.{name}", exc, ProviderConfig) from None
    agents: dict[str, AgentConfig] = {}
    for name, raw in (raw_agents or {}).items():
        try:
            agents[str(name)] = AgentConfig.model_validate(raw if raw is not None else {})
        except pydantic.ValidationError as exc:
            raise _field_error(path, f"agents.{name}", exc, AgentConfig) from None
    # the simulator's part (seed, speed, delay_ms, scripts; unknown keys refused there)
    script = script_from_data({**rest, "agents": {n: a.agent_def().model_dump()
                                                  for n, a in agents.items()}}, path,
                              ("providers", "mcp_servers", "acp_agents", "memory", "telemetry"))
    if not agents:  # no agents: the built-in cast
        agents = {n: AgentConfig(role=d.role, model=d.model, provider=d.provider,
                                 escalation_model=d.escalation_model)
                  for n, d in script.agents.items()}
    for name, agent in agents.items():
        agents[name] = _resolve_model(path, name, agent, providers)
    memory = memory_config(raw_memory, str(path), providers)
    script = script.model_copy(update={"agents": {n: a.agent_def() for n, a in agents.items()}})
    return ClawtowerConfig(path=Path(path) if path != BUILTIN else None, providers=providers,
                           agents=agents, script=script, mcp_servers=mcp_servers,
                           memory=memory, telemetry=telemetry_config(raw_telemetry, str(path)))


def _resolve_model(path: str | Path, name: str, agent: AgentConfig,
                   providers: dict[str, ProviderConfig]) -> AgentConfig:
    if agent.provider == SIMULATOR:
        return agent if agent.model else agent.model_copy(update={"model": SIM_MODEL})
    cfg = providers.get(agent.provider)
    if cfg is None:
        known = ", ".join(sorted([*providers, SIMULATOR]))
        raise ValidationError(f"{path}: field 'agents.{name}.provider': unknown provider"
                              f" {agent.provider!r} (known: {known})")
    for fld in ("model", "escalation_model"):
        value = getattr(agent, fld)
        if value and cfg.models and value not in cfg.models:
            raise ValidationError(
                f"{path}: field 'agents.{name}.{fld}': {value!r} is not one of provider"
                f" {agent.provider}'s models ({', '.join(cfg.models)})")
    if agent.model:
        return agent
    if not cfg.models:
        raise ValidationError(f"{path}: field 'agents.{name}.model': required, as provider"
                              f" {agent.provider} lists no models")
    return agent.model_copy(update={"model": cfg.models[0]})


def load_config(path: str | Path | None = None) -> ClawtowerConfig:
    """The project config: `path` (e.g. --config), else $CLAWTOWER_CONFIG, else
    $CLAWTOWER_HOME/clawtower.yaml, else $CLAWTOWER_HOME/agents.yaml; the built-in simulator
    cast when there is no file at all."""
    p, asked = config_path(path)
    if not p.exists():
        if asked:
            raise ValidationError(f"{p}: no such config file")
        legacy = home() / "agents.yaml"  # the agents file `serve` and `meeting run` default to
        if legacy.exists():
            return config_from_data(load_file(legacy), legacy)
        return config_from_data({}, BUILTIN)
    return config_from_data(load_file(p), p)


def agents_from_data(data: Any, path: str | Path) -> AgentSet:
    return config_from_data(data, path).agent_set()


def load_agents(path: str | Path) -> AgentSet:
    """An AgentSet from an agents file or a clawtower.yaml (the same format)."""
    return config_from_data(load_file(path), path).agent_set()


__all__ = [
    "AgentConfig", "Budgets", "ClawtowerConfig", "PriceConfig", "ProviderConfig", "Retries",
    "agents_from_data", "build_provider", "config_from_data", "load_agents", "load_config",
    "looks_like_a_key",
]
