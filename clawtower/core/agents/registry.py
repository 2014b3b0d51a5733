"""Which agent plays which role, and which provider serves it."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ValidationError
from .provider import Provider
from .simulator import AgentDef, SimScript, Simulator


@dataclass
class AgentSet:
    agents: dict[str, AgentDef]
    providers: dict[str, Provider] = field(default_factory=dict)

    @classmethod
    def simulated(cls, script: SimScript | None = None) -> AgentSet:
        sim = Simulator(script)
        return cls(agents=dict(sim.script.agents), providers={"simulator": sim})

    def time_scale(self) -> float:
        """How a retry's backoff scales: the simulator's `speed` (at most 1) when every agent
        is simulated and its script says `backoff_follows_speed` (the demo's agents, so
        `--speed 0` waits out no real seconds), else 1 (the retry policy as it is)."""
        sims = [p for p in self.providers.values() if isinstance(p, Simulator)]
        if not sims or len(sims) != len(self.providers) or any(
                a.provider not in self.providers for a in self.agents.values()) or not all(
                s.script.backoff_follows_speed for s in sims):
            return 1.0
        return min(1.0, max(0.0, min(s.script.speed for s in sims)))

    def for_role(self, role: str) -> tuple[str, AgentDef]:
        for name, agent in sorted(self.agents.items()):
            if agent.role == role:
                return name, agent
        raise ValidationError(f"agents: no agent plays the role {role!r}")

    def provider(self, agent: AgentDef) -> Provider:
        try:
            return self.providers[agent.provider]
        except KeyError:
            raise ValidationError(f"agents: unknown provider {agent.provider!r}") from None
