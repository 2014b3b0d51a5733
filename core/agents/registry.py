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
        """How fast this set's world runs against real time: the simulator's `speed` when
        every agent is simulated (the demo's `--speed`; 0 = instant), else 1. Retry backoffs
        scale with it, so a simulated flaky task does not wait out real seconds."""
        sims = [p for p in self.providers.values() if isinstance(p, Simulator)]
        if not sims or len(sims) != len(self.providers) or any(
                a.provider not in self.providers for a in self.agents.values()):
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
