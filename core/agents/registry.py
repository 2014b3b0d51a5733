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
