"""Tool-call approval tiers: which of an agent's tool calls run at once, wait for an
operator, or are only ever drafted.

    policy:
      approval:
        default: auto                 # auto | confirm | manual (for tools no rule names)
        tools:                        # glob -> tier; an exact name beats any glob, and a
          "crm.update_*": confirm     #   longer glob beats a shorter one
          "email.send": manual
        timeout_s: 3600               # an undecided call after this long -> on_timeout
        on_timeout: reject            # reject | escalate (escalate records it once and
                                      #   keeps waiting for a human)
        required_approver: alice      # optional
        require_different_approver: false

`auto` runs the call; `confirm` pauses the turn durably until an operator decides the
`tool_call` approval (core/sessions/gate.py); `manual` records a draft the model is told
about, and never runs it. The turn loop (core/agents/turns.py) asks `tier(name)` for every
call, with the concrete tool the call resolves to at that moment (never the list offered at
the turn's start), so the rule holds wherever an agent acts (issue 34).
"""

from __future__ import annotations

import fnmatch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Tier = Literal["auto", "confirm", "manual"]
TIERS: tuple[Tier, ...] = ("auto", "confirm", "manual")
GLOB_CHARS = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    return any(ch in GLOB_CHARS for ch in pattern)


class ToolApprovalPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default: Tier = "auto"
    tools: dict[str, Tier] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0, le=30 * 86400)
    on_timeout: Literal["reject", "escalate"] = "reject"
    required_approver: str | None = None
    require_different_approver: bool = False

    @field_validator("tools")
    @classmethod
    def _patterns(cls, v: dict[str, Tier]) -> dict[str, Tier]:
        if any(not k.strip() for k in v):
            raise ValueError("a tool pattern cannot be empty")
        return v

    def tier(self, name: str) -> Tier:
        """The tier of tool `name`: an exact rule, else the longest matching glob, else the
        default."""
        exact = self.tools.get(name)
        if exact is not None:
            return exact
        best: tuple[int, Tier] | None = None
        for pattern, tier in self.tools.items():
            if is_glob(pattern) and fnmatch.fnmatchcase(name, pattern) and (
                    best is None or len(pattern) > best[0]):
                best = (len(pattern), tier)
        return best[1] if best is not None else self.default

    def unmatched(self, names: list[str]) -> list[str]:
        """The rules that match none of `names` (a typo, or a tool the agent cannot see)."""
        return [p for p in self.tools
                if not any(fnmatch.fnmatchcase(n, p) or n == p for n in names)]


class TierGate:
    """The gate a turn asks (`core.agents.turns.ToolGate`): a policy's tier per tool; no
    policy means every call runs (`auto`)."""

    def __init__(self, policy: ToolApprovalPolicy | None) -> None:
        self.policy = policy

    def tier(self, name: str) -> Tier:
        return self.policy.tier(name) if self.policy is not None else "auto"


__all__ = ["TIERS", "Tier", "TierGate", "ToolApprovalPolicy", "is_glob"]
