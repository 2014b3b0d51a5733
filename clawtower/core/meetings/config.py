"""A meeting's input and outcome, and the check of its input against the agents: what the
CLI, the console and the service validate before a coordinator runs (coordinator.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..agents.registry import AgentSet
from ..errors import ValidationError
from .consensus import MIN_AGENTS, Consensus
from .stance import Stance


class MeetingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str
    participants: list[str]
    max_rounds: int = Field(default=5, ge=1, le=100)
    summary_tokens: int = Field(default=500, ge=16, le=32_000)
    agent_timeout_s: float = Field(default=60.0, gt=0)
    meeting_timeout_s: float = Field(default=600.0, gt=0)
    summarizer: str | None = None  # an agent name; default: the summarizer role, else the first
    # What each agent is given: the rolling summary, or (a baseline for the token benchmark)
    # the whole transcript of every earlier reply.
    history: Literal["rolling", "full"] = "rolling"


class MeetingOutcome(BaseModel):
    meeting_id: str
    result: Consensus
    reason: str  # consensus | max_rounds | timeout | stopped
    rounds: int
    detail: str
    stances: dict[str, Stance]



def validate(config: MeetingConfig, agents: AgentSet) -> tuple[list[str], str]:
    """Check a meeting's input; return (participants, summarizer). Raises ValidationError."""
    topic = config.topic.strip()
    if not topic:
        raise ValidationError("meeting: the topic is empty")
    names = [n.strip() for n in config.participants if n.strip()]
    if len(set(names)) != len(names):
        raise ValidationError(f"meeting: an agent is named twice in {', '.join(names)}")
    if len(names) < MIN_AGENTS:
        raise ValidationError(
            f"meeting: needs at least {MIN_AGENTS} agents, got {len(names)}"
            + (f" ({', '.join(names)})" if names else "")
        )
    unknown = [n for n in names if n not in agents.agents]
    if unknown:
        raise ValidationError(
            f"meeting: unknown agent {', '.join(unknown)}"
            f" (known: {', '.join(sorted(agents.agents)) or 'none'})"
        )
    summarizer = config.summarizer
    if summarizer is None:
        roles = [n for n, a in sorted(agents.agents.items()) if a.role == "summarizer"]
        summarizer = roles[0] if roles else names[0]
    if summarizer not in agents.agents:
        raise ValidationError(f"meeting: unknown summarizer agent {summarizer}")
    for name in {*names, summarizer}:
        agents.provider(agents.agents[name])  # an unknown provider is bad input too
    return names, summarizer


__all__ = ["MeetingConfig", "MeetingOutcome", "validate"]
