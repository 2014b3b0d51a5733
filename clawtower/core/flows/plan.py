"""Decompositions: the structured answer an agent gives when it splits a TASK, and its
validation before anything is dispatched (ids unique, agents known and allowed by the
sender's `policy.subagents`, no cycle, depth/width/size limits).

`policy.subagents` is the seed's `subagents.allowAgents`: `["*"]` lets the agent delegate to
any agent (itself included), a list to those names; unset, to any agent but itself (the
sessions' rule for spawning).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ValidationError
from ..sessions.specs import AgentSpec, may_spawn

ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_INSTRUCTION_CHARS = 20_000


class PlanRefused(ValidationError):
    """A decomposition that cannot be dispatched; the message is the reason."""


@dataclass(frozen=True)
class FlowLimits:
    max_depth: int = 6  # levels below the root
    max_width: int = 50  # subtasks in one decomposition
    max_nodes: int = 10_000  # tasks in one flow, root included

    def as_dict(self) -> dict[str, int]:
        return {"max_depth": self.max_depth, "max_width": self.max_width,
                "max_nodes": self.max_nodes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FlowLimits:
        return cls(**{k: int(v) for k, v in data.items()
                      if k in ("max_depth", "max_width", "max_nodes")})


class Subtask(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    agent: str
    instruction: str = Field(min_length=1, max_length=MAX_INSTRUCTION_CHARS)
    depends_on: list[str] = Field(default_factory=list)
    context: str = ""


def decision_schema(agents: list[str] | None, *, force_split: bool = False,
                    max_width: int = 50) -> dict[str, Any]:
    """The llm-task schema of a decision. `agents`: the names the agent may delegate to
    (an enum, so a constrained decoder can only name those); empty: it can only execute."""
    sub: dict[str, Any] = {
        "type": "object", "required": ["id", "agent", "instruction"],
        "properties": {
            "id": {"type": "string", "pattern": ID_RE.pattern},
            "agent": {"type": "string", **({"enum": agents} if agents else {})},
            # no maxLength: constrained decoders expand it into a grammar that long
            "instruction": {"type": "string", "minLength": 1},
            # a subtask can depend on its siblings only: at most width - 1 of them
            "depends_on": {"type": "array", "items": {"type": "string"},
                           "maxItems": max(0, max_width - 1)},
            "context": {"type": "string"}}}
    if force_split:
        return {"type": "object", "required": ["action", "subtasks"],
                "properties": {"action": {"const": "decompose"},
                               "subtasks": {"type": "array", "items": sub, "minItems": 1,
                                            "maxItems": max_width}}}
    if agents == []:
        return {"type": "object", "required": ["action"],
                "properties": {"action": {"const": "execute"}}}
    return {"type": "object", "required": ["action"],
            "properties": {"action": {"enum": ["execute", "decompose"]},
                           "subtasks": {"type": "array", "items": sub,
                                        "maxItems": max_width}}}


def allowed(sender: AgentSpec, target: str) -> bool:
    return may_spawn(sender.config.policy.subagents, sender.name, target)


def delegates(sender: AgentSpec, specs: Mapping[str, AgentSpec]) -> list[str]:
    """The agent names `sender` may delegate to, sorted."""
    return sorted(n for n in specs if allowed(sender, n))


def find_cycle(ids: list[str], deps: Mapping[str, list[str]]) -> list[str]:
    """A cycle among `ids` (first node repeated at the end), or [] if there is none."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in ids:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                state[node] = 1
                path.append(node)
            nxt = deps.get(node, [])
            if i < len(nxt):
                stack.append((node, i + 1))
                child = nxt[i]
                if state.get(child) == 1:
                    return [*path[path.index(child):], child]
                if not state.get(child):
                    stack.append((child, 0))
            else:
                state[node] = 2
                path.pop()
    return []


def validate(raw: Any, *, sender: AgentSpec, specs: Mapping[str, AgentSpec], depth: int,
             nodes: int, limits: FlowLimits) -> list[Subtask]:
    """The subtasks of `raw` (a list of dicts) once every rule holds; PlanRefused naming
    the first rule broken otherwise. `depth`: the splitting task's depth; `nodes`: tasks
    the flow has already."""
    if not isinstance(raw, list) or not raw:
        raise PlanRefused("a decomposition needs at least one subtask")
    if len(raw) > limits.max_width:
        raise PlanRefused(f"{len(raw)} subtasks: over the width limit of {limits.max_width}")
    if depth + 1 > limits.max_depth:
        raise PlanRefused(f"depth {depth + 1}: over the depth limit of {limits.max_depth}")
    if nodes + len(raw) > limits.max_nodes:
        raise PlanRefused(f"{nodes + len(raw)} tasks in the flow: over the limit of"
                          f" {limits.max_nodes}")
    subs: list[Subtask] = []
    for i, item in enumerate(raw):
        try:
            sub = Subtask.model_validate(item)
        except pydantic.ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise PlanRefused(f"subtask {i + 1}: {where}: {err['msg']}") from None
        if not ID_RE.match(sub.id):
            raise PlanRefused(f"subtask {i + 1}: id {sub.id!r} must be 1-64 letters, digits,"
                              " '_', '-' or '.'")
        subs.append(sub)
    seen: set[str] = set()
    for sub in subs:
        if sub.id in seen:
            raise PlanRefused(f"subtask id {sub.id!r} is used twice")
        seen.add(sub.id)
    for sub in subs:
        if sub.agent not in specs:
            raise PlanRefused(f"subtask {sub.id}: unknown agent {sub.agent!r}")
        if not allowed(sender, sub.agent):
            allow = sender.config.policy.subagents
            rule = ", ".join(allow) if allow else ("none" if allow == [] else
                                                   "any agent but itself")
            raise PlanRefused(f"subtask {sub.id}: agent {sender.name} may not delegate to"
                              f" {sub.agent} (policy.subagents: {rule})")
        for dep in sub.depends_on:
            if dep not in seen:
                raise PlanRefused(f"subtask {sub.id}: depends on unknown subtask {dep!r}")
    ids = [s.id for s in subs]
    cycle = find_cycle(ids, {s.id: list(s.depends_on) for s in subs})
    if cycle:
        raise PlanRefused(f"dependency cycle: {' -> '.join(cycle)}")
    return subs


__all__ = ["FlowLimits", "PlanRefused", "Subtask", "allowed", "decision_schema", "delegates",
           "find_cycle", "validate"]
