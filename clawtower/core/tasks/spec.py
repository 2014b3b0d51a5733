"""The task spec (seed 000 §1) and the check that keeps weak specs in spec_draft."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ValidationError
from ..executors import EXECUTOR_PATTERN
from ..safe_yaml import load_file


class PlannedEffect(BaseModel):
    """A side effect declared ahead of time; it runs only after an operator approves it."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field(min_length=1, max_length=64)
    description: str = Field(min_length=1, max_length=2000)
    target: str = ""


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(default=None, max_length=200)
    goal: str = Field(min_length=1, max_length=4000)
    scope_in: list[str] = Field(default_factory=list)
    scope_out: list[str] = Field(default_factory=list)
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    risks: list[str] = Field(default_factory=list)
    side_effects: list[PlannedEffect] = Field(default_factory=list)
    # who may approve the side effects (default: any operator), and whether the operator
    # who created the task may approve them
    required_approver: str | None = Field(default=None, min_length=1, max_length=100)
    require_different_approver: bool = False
    labels: list[str] = Field(default_factory=list)
    # who runs the implementation step: "builtin" (the executor agent), "acp:<name>" (a
    # harness of clawtower.yaml's acp_agents); unset: the engine's default
    executor: str | None = Field(default=None, pattern=EXECUTOR_PATTERN)

    @field_validator("scope_in", "scope_out", "inputs", "outputs", "risks", "labels",
                     "acceptance_criteria", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def display_title(self) -> str:
        if self.title:
            return self.title
        first = self.goal.strip().splitlines()[0]
        return first if len(first) <= 80 else first[:77] + "..."


_VAGUE = re.compile(
    r"^(it\s+)?(works?|done|ok(ay)?|good|fine|looks good|as expected|tbd|todo|n/?a|"
    r"should work|be fast|be good|no bugs|better|correct(ly)?)\.?$",
    re.IGNORECASE,
)
_PLACEHOLDER = re.compile(r"\b(TBD|TODO|FIXME|XXX)\b|\?\?\?")


def spec_problems(spec: TaskSpec) -> list[str]:
    """Reasons the spec is not ready for review. Empty list = ready."""
    problems: list[str] = []
    if not spec.acceptance_criteria:
        problems.append("acceptance_criteria: missing (at least one testable criterion needed)")
    for i, crit in enumerate(spec.acceptance_criteria):
        text = crit.strip()
        if _VAGUE.match(text) or len(text.split()) < 3:
            problems.append(f"acceptance_criteria[{i}]: too weak to test: {text!r}")
        elif _PLACEHOLDER.search(text):
            problems.append(f"acceptance_criteria[{i}]: placeholder left in: {text!r}")
    if not spec.outputs:
        problems.append("outputs: missing (what the task produces)")
    return problems


def parse_spec(data: Any, source: str) -> TaskSpec:
    if not isinstance(data, dict):
        raise ValidationError(f"{source}: a spec must be a mapping, got {type(data).__name__}")
    try:
        return TaskSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        from ..reader import schema_problem

        where, msg = schema_problem(exc, TaskSpec)
        loc = where or "(root)"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ValidationError(f"{source}: field '{loc}': {msg}{more}") from None


def load_spec(path: str | Path) -> TaskSpec:
    return parse_spec(load_file(path), str(path))
