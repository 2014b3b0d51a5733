"""Tokens and cost: what every model call records, and how to read the totals back.

Every model call made through the turn loop or llm-task appends one `agent.usage` event whose
entity id is the SUBJECT the call was made for (a task, meeting, session or workflow run id);
a turn's final call rides in its `turn.finished` instead (`usage`, `usage_subject`), summed
the same way (a session job's turn: that `turn.finished` is folded into its
`turnjob.finished`, `turn`, issue 36).
The `usage` projection sums them per (subject, agent, model); the queries below total that
table by subject or by agent. Cost is in US dollars, computed when the call is made from the
agent's `Price` (0 when no price is known), and stored in the event, so a later price change
never rewrites history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the totals and their format load without the event models (start-up)
    from ..events import NewEvent
    from ..store.interface import Store
    from .provider import Usage


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens, prompt and completion."""

    prompt_per_mtok: float = 0.0
    completion_per_mtok: float = 0.0

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.prompt_per_mtok
                + usage.completion_tokens * self.completion_per_mtok) / 1_000_000

    @property
    def known(self) -> bool:
        return self.prompt_per_mtok > 0 or self.completion_per_mtok > 0


@dataclass
class UsageRecorder:
    """Appends one `agent.usage` event per model call (nothing when `store` is None)."""

    store: Store | None
    subject: str
    agent: str
    price: Price | None = None
    actor_role: str = "agent"

    def cost(self, usage: Usage) -> float:
        return self.price.cost(usage) if self.price is not None else 0.0

    def event(self, model: str, purpose: str, usage: Usage, *,
              estimated: bool = False) -> tuple[NewEvent, float]:
        """The `agent.usage` event of one call and its cost, for a caller that appends it
        together with other events (one commit)."""
        from ..events import AgentUsage, NewEvent

        cost = self.cost(usage)
        return NewEvent(
            entity_id=self.subject, actor=self.agent, role=self.actor_role,
            payload=AgentUsage(agent=self.agent, model=model, purpose=purpose,
                               prompt_tokens=usage.prompt_tokens,
                               completion_tokens=usage.completion_tokens,
                               cost_usd=cost, estimated=estimated)), cost

    async def record(self, model: str, purpose: str, usage: Usage, *,
                     estimated: bool = False) -> float:
        """Record one call; returns its cost. `estimated`: the provider reported no usage
        and the figures were counted locally."""
        event, cost = self.event(model, purpose, usage, estimated=estimated)
        if self.store is not None:
            await self.store.append([event])
        return cost


@dataclass(frozen=True)
class UsageTotals:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_json(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "tokens": self.tokens,
                "cost_usd": self.cost_usd}


def _totals(row: dict[str, Any] | None) -> UsageTotals:
    if not row or row.get("calls") is None:
        return UsageTotals()
    return UsageTotals(calls=int(row["calls"] or 0), prompt_tokens=int(row["p"] or 0),
                       completion_tokens=int(row["c"] or 0), cost_usd=float(row["cost"] or 0))


_SUM = ("sum(calls) AS calls, sum(prompt_tokens) AS p, sum(completion_tokens) AS c,"
        " sum(cost_usd) AS cost")


async def usage_for_subject(store: Store, subject: str) -> UsageTotals:
    """Everything spent on one task, meeting, session or workflow run."""
    return _totals(await store.fetchone(f"SELECT {_SUM} FROM usage WHERE subject=?", (subject,)))


async def usage_by_agent(store: Store, subject: str | None = None) -> dict[str, UsageTotals]:
    """Totals per agent, for one subject or over everything."""
    where, params = ("WHERE subject=?", (subject,)) if subject is not None else ("", ())
    rows = await store.fetchall(
        f"SELECT agent, {_SUM} FROM usage {where} GROUP BY agent ORDER BY agent", params)
    return {str(r["agent"]): _totals(r) for r in rows}


async def usage_by_subject(store: Store) -> dict[str, UsageTotals]:
    """Totals per subject, over everything."""
    rows = await store.fetchall(
        f"SELECT subject, {_SUM} FROM usage GROUP BY subject ORDER BY subject")
    return {str(r["subject"]): _totals(r) for r in rows}


def format_usage(t: UsageTotals) -> str:
    """One compact line: "3 calls · 1,234 tok (1,000 in / 234 out) · $0.0012"."""
    if t.calls == 0:
        return "no model calls"
    cost = f" · ${t.cost_usd:.4f}" if t.cost_usd > 0 else ""
    return (f"{t.calls} call{'s' if t.calls != 1 else ''} · {t.tokens:,} tok"
            f" ({t.prompt_tokens:,} in / {t.completion_tokens:,} out){cost}")


__all__ = ["Price", "UsageRecorder", "UsageTotals", "format_usage", "usage_by_agent",
           "usage_by_subject", "usage_for_subject"]
