"""AgentSpec: what makes agents different (model defaults, tool/skill allow-lists, context
policy), stored as `agentspec.set` events and read from the `agent_specs` projection.

    defaults:       {provider, model, temperature, system_prompt, max_output_tokens, price,
                     first_tool_choice}
    policy:         {tools: [names/globs], skills: [names], subagents: [spec names],
                     approval: {default, tools: {glob: tier}, timeout_s, on_timeout, ...},
                     memory: [namespaces/globs] (core/memory/policy.py)}
    context_policy: {history_messages, announces, budgets: {max_tool_rounds, max_tokens,
                     max_wall_s}, recall: {enabled, namespaces, top_k, token_budget,
                     min_score, weights: {vector, keyword}}}

`policy.tools` / `policy.skills` absent (null) means no filtering (every tool / skill), as
the seed says; `[]` means none. `policy.subagents` absent means any other spec may be
spawned, never the spec itself (self-spawn is refused unless the spec lists its own name);
`["*"]` (the seed's `allowAgents: ["*"]`) means any spec, itself included. `may_spawn` is
that rule, for subagents and flow delegation alike.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ValidationError
from ..limits import NAME_RULE, is_name, printable
from ..memory.policy import RecallPolicy
from ..tools.approval import ToolApprovalPolicy

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

SIM_MODELS = ("sim-standard", "sim-strong")


class SpecPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: float = Field(default=0.0, ge=0)
    completion: float = Field(default=0.0, ge=0)


class SpecDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    provider: str | None = None
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    system_prompt: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    price: SpecPrice | None = None
    # force a tool on the first model call of a turn ("required" or a tool name): for small
    # models that do not pick tools by themselves
    first_tool_choice: str | None = None
    # an external coding harness over ACP runs the turns instead of a model: the name of
    # one of clawtower.yaml's `acp_agents`, or one inline {command, args, env, cwd, ...}
    acp: str | dict[str, Any] | None = None

    @field_validator("acp")
    @classmethod
    def _acp(cls, v: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(v, dict):
            from ..acp.config import harness_from_data

            harness_from_data(v, str(v.get("name") or "inline"), "acp")
        return v


class SpecPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str] | None = None
    skills: list[str] | None = None
    subagents: list[str] | None = None
    # tool-call tiers (auto | confirm | manual): see core/tools/approval.py
    approval: ToolApprovalPolicy | None = None
    # memory namespaces (globs) the spec may read and write; absent: its own agent:<name>
    memory: list[str] | None = None

    @field_validator("tools", "skills", "subagents", "memory")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and any(not x.strip() for x in v):
            raise ValueError("a name cannot be empty")
        return v


def may_spawn(allow: list[str] | None, own: str, target: str) -> bool:
    """Whether a spec named `own` with `policy.subagents` = `allow` may start `target`."""
    if allow is None:
        return target != own
    return "*" in allow or target in allow


class SpecBudgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tool_rounds: int = Field(default=8, ge=0, le=1000)
    max_tokens: int | None = Field(default=None, ge=1)
    max_wall_s: float = Field(default=300.0, gt=0, le=86400)


class ContextPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    history_messages: int = Field(default=40, ge=0, le=10_000)  # transcript messages sent
    announces: bool = True  # child announces as ephemeral context on the next turn
    recall: RecallPolicy = Field(default_factory=RecallPolicy)  # memories before a turn
    budgets: SpecBudgets = Field(default_factory=SpecBudgets)


class AgentSpecConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: SpecDefaults = Field(default_factory=SpecDefaults)
    policy: SpecPolicy = Field(default_factory=SpecPolicy)
    context_policy: ContextPolicy = Field(default_factory=ContextPolicy)


@dataclass(frozen=True)
class AgentSpec:
    agent_id: str
    name: str
    config: AgentSpecConfig
    source: str = ""
    updated_at: float = 0.0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AgentSpec:
        return cls(agent_id=row["agent_id"], name=row["name"],
                   config=AgentSpecConfig.model_validate_json(row["config_json"]),
                   source=row["source"], updated_at=row["updated_at"])

    def as_json(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "name": self.name, "source": self.source,
                "config": self.config.model_dump(mode="json"), "updated_at": self.updated_at}


def parse_config(data: Any, where: str) -> AgentSpecConfig:
    """Validate a spec config; errors name `where` and the field path."""
    try:
        return AgentSpecConfig.model_validate(data if data is not None else {})
    except pydantic.ValidationError as exc:
        from ..reader import schema_problem

        loc, msg = schema_problem(exc, AgentSpecConfig)
        raise ValidationError(f"{where}: field '{loc}': {msg}") from None


def check_name(name: str, where: str = "agent spec") -> str:
    """A spec's name: the one name rule (core/limits.py), and not 'ag-...' (agent ids are)."""
    if not is_name(name) or name.startswith("ag-"):
        raise ValidationError(f"{where}: name {printable(str(name), 80)!r} must be"
                              f" {NAME_RULE}, and not start with 'ag-' (agent ids do)")
    return name


def close_matches(word: str, candidates: list[str]) -> str:
    near = difflib.get_close_matches(word, candidates, n=3, cutoff=0.5)
    if near:
        return f"did you mean {', '.join(near)}?"
    return f"known: {', '.join(sorted(candidates)) or 'none'}"


def from_agent_config(cfg: ClawtowerConfig, name: str) -> AgentSpecConfig:
    """A spec from an agent of clawtower.yaml (`agents spec import`)."""
    a = cfg.agent(name)
    price = SpecPrice(prompt=a.price.prompt, completion=a.price.completion) \
        if a.price is not None else None
    spec = AgentSpecConfig(
        defaults=SpecDefaults(provider=a.provider, model=a.model, temperature=a.temperature,
                              system_prompt=a.system or None,
                              max_output_tokens=a.max_output_tokens, price=price),
        policy=SpecPolicy(tools=list(a.tools), approval=a.approval),
        context_policy=ContextPolicy(budgets=SpecBudgets(
            max_tool_rounds=a.budgets.max_tool_rounds, max_tokens=a.budgets.max_tokens,
            max_wall_s=a.budgets.max_wall_s)))
    if a.executor and a.executor.startswith("acp:"):  # a harness runs its turns
        spec.defaults = spec.defaults.model_copy(update={"acp": a.executor[4:]})
    return spec


def known_models(cfg: ClawtowerConfig | None) -> dict[str, list[str]]:
    """provider -> models, for `/models` and `/model` validation. The simulator always."""
    out: dict[str, list[str]] = {"simulator": list(SIM_MODELS)}
    if cfg is not None:
        for name, p in sorted(cfg.providers.items()):
            out[name] = list(p.models)
    return out


def check_model(ref: str, cfg: ClawtowerConfig | None) -> tuple[str, str]:
    """`provider/model` -> (provider, model), checked against the config's providers."""
    provider, slash, model = ref.partition("/")
    models = known_models(cfg)
    if not slash or not provider or not model:
        raise ValidationError(f"model {ref!r}: expected <provider>/<model>, e.g."
                              " simulator/sim-standard")
    if provider not in models:
        raise ValidationError(f"model {ref!r}: unknown provider {provider!r} ("
                              f"{close_matches(provider, list(models))})")
    listed = models[provider]
    if listed and model not in listed:
        raise ValidationError(f"model {ref!r}: provider {provider} has no model {model!r}"
                              f" ({close_matches(model, listed)})")
    return provider, model


__all__ = ["AgentSpec", "AgentSpecConfig", "ContextPolicy", "SpecBudgets", "SpecDefaults",
           "SpecPolicy", "SpecPrice", "check_model", "check_name", "close_matches",
           "from_agent_config", "known_models", "parse_config"]
