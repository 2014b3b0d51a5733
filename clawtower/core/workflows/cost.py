"""A run's spend and its `cost_limit`, as Lobster counts them.

Lobster bills every step output item that carries `model` and `usage` (whatever step printed
it), priced by a built-in table merged with `LOBSTER_LLM_PRICING_JSON`, and checks the limit
after every step: `action: stop` fails the run ("Cost limit exceeded: ..."), `warn` writes a
warning. clawtower does the same, and adds what its own `llm.invoke` / `llm_task.invoke` stages
spend, priced by the answering agent (core/agents): those items are marked when they are made
so they are not billed a second time from the table. A gate does not reset the spend: a resumed
run starts from what the paused one recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .load import js_to_number

# US dollars per million tokens: Lobster 2026.9.13's table (core/cost_tracker.js).
DEFAULT_PRICING: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.6),
    "gpt-4-turbo": (10.0, 30.0),
    "gpt-3.5-turbo": (0.5, 1.5),
    "claude-opus-4-20250514": (15.0, 75.0),
    "claude-sonnet-4-5-20250514": (3.0, 15.0),
    "claude-haiku-3-5": (0.8, 4.0),
    "gemini-1.5-pro": (1.25, 5.0),
    "gemini-1.5-flash": (0.075, 0.3),
}
INVALID_PRICING_WARNING = (
    "[WARN] Ignoring invalid LOBSTER_LLM_PRICING_JSON; custom LLM pricing must be a JSON object"
    " whose model entries have finite non-negative input and output rates.\n")


class CostLimitExceeded(Exception):
    """`cost_limit.action: stop` tripped: the run fails, whatever the step's on_error says."""


@dataclass
class CostLine:
    """One billed record: a priced output item, or an agent's model call."""

    step_id: str
    model: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    source: str = "priced"  # priced (Lobster's table) | agent (clawtower's agent price)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def js_fixed(value: float, digits: int) -> str:
    """JavaScript's Number.prototype.toFixed (halves round away from zero on the exact value)."""
    quant = Decimal(1).scaleb(-digits)
    return str(Decimal(value).quantize(quant, rounding=ROUND_HALF_UP))


def _tokens(value: Any) -> int:
    try:
        n = float(0 if value is None else value)
    except (TypeError, ValueError):
        return 0
    return 0 if not math.isfinite(n) or n < 0 else math.floor(n)


def _first(usage: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if usage.get(key) is not None:
            return usage[key]
    return None


def billable_tokens(usage: Mapping[str, Any]) -> tuple[int, int]:
    """(input, output) under any spelling providers use; everything else costs nothing."""
    return (_tokens(_first(usage, "inputTokens", "input_tokens", "prompt_tokens")),
            _tokens(_first(usage, "outputTokens", "output_tokens", "completion_tokens")))


def _rate(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and value >= 0)


def pricing_from_env(env: Mapping[str, str],
                     stderr: Callable[[str], None]) -> dict[str, tuple[float, float]]:
    """The built-in table merged with LOBSTER_LLM_PRICING_JSON (a warning if that is bad)."""
    table = dict(DEFAULT_PRICING)
    raw = env.get("LOBSTER_LLM_PRICING_JSON")
    if not raw:
        return table
    try:
        parsed = json.loads(raw)
    except ValueError:
        stderr(INVALID_PRICING_WARNING)
        return table
    if not isinstance(parsed, dict) or not all(
            model.strip() and isinstance(e, dict) and _rate(e.get("input"))
            and _rate(e.get("output")) for model, e in parsed.items()):
        stderr(INVALID_PRICING_WARNING)
        return table
    table.update({m: (float(e["input"]), float(e["output"])) for m, e in parsed.items()})
    return table


def parse_limit(raw: Any) -> tuple[float, str] | None:
    """A loaded workflow's `cost_limit` as (max_usd, action); None without one."""
    if not isinstance(raw, dict):
        return None
    return js_to_number(raw.get("max_usd")), str(raw.get("action") or "warn")


class CostTracker:
    """The spend of one run (a sub-workflow has its own, like in Lobster)."""

    def __init__(self, env: Mapping[str, str], stderr: Callable[[str], None],
                 limit: tuple[float, str] | None = None,
                 parent: CostTracker | None = None) -> None:
        self.pricing = pricing_from_env(env, stderr)
        self.stderr = stderr
        self.limit = limit
        self.parent = parent
        self.lines: list[CostLine] = []
        self.unsaved: list[CostLine] = []  # lines not yet written with a step event
        self._warned: set[str] = set()
        # items an agent already billed, kept alive so their ids cannot be reused
        self._billed: dict[int, Any] = parent._billed if parent is not None else {}

    # ------------------------------------------------------------------ billing

    def restore(self, lines: list[CostLine]) -> None:
        """Spend the paused run recorded before this process took over."""
        self.lines.extend(lines)

    def charge_agent(self, step_id: str, model: str, usage: Mapping[str, Any], cost_usd: float,
                     item: Any = None) -> None:
        """A model call made by one of clawtower's LLM stages (enclosing runs pay it too);
        `item` is the output it produced, never billed again from the price table."""
        inp, out = billable_tokens({"inputTokens": usage.get("promptTokens"),
                                    "outputTokens": usage.get("completionTokens")})
        line = CostLine(step_id, model, inp, out, max(0.0, cost_usd), "agent")
        tracker: CostTracker | None = self
        while tracker is not None:
            tracker.lines.append(line)
            tracker.unsaved.append(line)
            tracker = tracker.parent
        if item is not None:
            self._billed[id(item)] = item

    def track(self, step_id: str, result: Mapping[str, Any] | None) -> None:
        """Bill the output items of a step's result that carry `usage` (Lobster's rule)."""
        if not result:
            return
        data = result.get("json")
        if not isinstance(data, dict | list):
            return
        for item in data if isinstance(data, list) else [data]:
            if not isinstance(item, dict) or id(item) in self._billed:
                continue
            usage = item.get("usage")
            if not isinstance(usage, dict):
                continue
            model = item.get("model")
            key = model if isinstance(model, str) and model.strip() else None
            rates = self.pricing.get(key) if key is not None else None
            if rates is None:
                self._warn_unknown(key or "<missing>")
            inp, out = billable_tokens(usage)
            p_in, p_out = rates or (0.0, 0.0)
            line = CostLine(step_id, key, inp, out, (inp * p_in + out * p_out) / 1_000_000)
            self.lines.append(line)
            self.unsaved.append(line)

    def take_unsaved(self) -> list[dict[str, Any]]:
        """The lines to write with the step event being recorded now (a resumed run restores
        them from there)."""
        out = [line.as_dict() for line in self.unsaved]
        self.unsaved.clear()
        return out

    # ------------------------------------------------------------------ the limit

    @property
    def total_usd(self) -> float:
        return total_usd(self.lines)

    def check(self) -> None:
        """After each step: stop raises CostLimitExceeded, warn writes Lobster's warning."""
        if self.limit is None:
            return
        max_usd, action = self.limit
        total = self.total_usd
        if total <= max_usd:
            return
        if action == "stop":
            raise CostLimitExceeded(f"Cost limit exceeded: ${js_fixed(total, 4)} >"
                                    f" ${js_fixed(max_usd, 2)} limit")
        self.stderr(f"[WARN] Cost ${js_fixed(total, 4)} exceeds limit ${js_fixed(max_usd, 2)}\n")

    def summary(self) -> dict[str, Any]:
        return summarize(self.lines, self.limit)

    def _warn_unknown(self, model: str) -> None:
        if model in self._warned:
            return
        self._warned.add(model)
        self.stderr(f"[WARN] No LLM pricing configured for model {json.dumps(model)}; recording"
                    " zero cost. Set LOBSTER_LLM_PRICING_JSON to enable cost_limit enforcement"
                    " for this model.\n")


def total_usd(lines: list[CostLine]) -> float:
    """Lobster's estimatedCostUsd: the sum rounded (Math.round) to a millionth of a dollar."""
    return math.floor(sum(line.cost_usd for line in lines) * 1_000_000 + 0.5) / 1_000_000


def summarize(lines: list[CostLine], limit: tuple[float, str] | None) -> dict[str, Any]:
    """What `workflow show` and the console print about a run's spend."""
    total = total_usd(lines)
    return {"input_tokens": sum(line.input_tokens for line in lines),
            "output_tokens": sum(line.output_tokens for line in lines),
            "cost_usd": total,
            "limit_usd": limit[0] if limit else None,
            "limit_action": limit[1] if limit else None,
            "lines": [line.as_dict() for line in lines]}


def describe_cost(summary: Mapping[str, Any] | None) -> str | None:
    """One line for a run's spend (`workflow show`, the console); None with nothing to say."""
    if not summary or (not summary.get("lines") and summary.get("limit_usd") is None):
        return None
    text = f"${summary['cost_usd']:.4f}"
    if summary.get("limit_usd") is not None:
        over = summary["cost_usd"] > summary["limit_usd"]
        text += (f" {'over' if over else 'of'} the ${summary['limit_usd']:.2f} limit"
                 f" ({summary.get('limit_action') or 'warn'})")
    return (f"{text}, {summary['input_tokens']:,} tokens in /"
            f" {summary['output_tokens']:,} out")


def line_from(raw: Mapping[str, Any]) -> CostLine:
    """A stored line back (a malformed one costs nothing rather than poisoning the total)."""
    try:
        cost = float(raw.get("cost_usd") or 0)
    except (TypeError, ValueError):
        cost = 0.0
    model = raw.get("model")
    return CostLine(str(raw.get("step_id") or "?"), model if isinstance(model, str) else None,
                    _tokens(raw.get("input_tokens")), _tokens(raw.get("output_tokens")),
                    cost if math.isfinite(cost) and cost > 0 else 0.0,
                    "agent" if raw.get("source") == "agent" else "priced")


# The run whose step is executing: clawtower's LLM stages charge their calls to it.
CURRENT_COST: ContextVar[CostTracker | None] = ContextVar("clawtower_workflow_cost",
                                                          default=None)

__all__ = ["CURRENT_COST", "DEFAULT_PRICING", "CostLimitExceeded", "CostLine", "CostTracker",
           "billable_tokens", "describe_cost", "js_fixed", "line_from", "parse_limit",
           "pricing_from_env", "summarize"]
