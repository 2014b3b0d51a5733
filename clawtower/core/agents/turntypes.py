"""The turn loop's values (core/agents/turns.py): what a turn is given (its budget, a
resume point, a cancel handle, the steering state) and what it returns (`TurnResult` with
its tool records), apart from the loop so that the session, task and flow layers that hold
them do not read the loop to find them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from ..tools.types import ToolResult
from .provider import ChatMessage, ToolCall, Usage

if TYPE_CHECKING:
    from ..events import NewEvent

StopReason = Literal["completed", "max_tool_rounds", "max_tokens", "max_wall_clock",
                     "cancelled", "error", "awaiting_approval"]


class ToolGate(Protocol):
    """Names the approval tier (auto | confirm | manual) of the concrete tool a call
    resolves to; the turn loop asks it for every call as the call is about to run, and
    refuses a call it cannot answer for (an exception, or any other value)."""

    def tier(self, name: str) -> str: ...


@dataclass
class TurnResume:
    """Where a paused turn goes on: `pending` are the calls of the interrupted round not
    yet run (the first one is the decided call), `decided` yields that call's result (runs
    it once when approved; a policy message when rejected), `rounds` the rounds already
    made (budgets count on from there)."""

    pending: list[ToolCall]
    decided: Callable[[ToolCall], Awaitable[ToolResult]]
    rounds: int = 0


@dataclass(frozen=True)
class TurnBudget:
    """Per-turn limits; None means unlimited (max_tool_rounds is always bounded)."""

    max_tool_rounds: int = 8
    max_tokens: int | None = None
    max_wall_s: float | None = 300.0

    def as_json(self) -> dict[str, Any]:
        return {"max_tool_rounds": self.max_tool_rounds, "max_tokens": self.max_tokens,
                "max_wall_s": self.max_wall_s}

    @classmethod
    def of(cls, budgets: Any) -> TurnBudget:
        """From an agent's `budgets:` (core/agents/config.py Budgets, or any object with the
        same three attributes)."""
        return cls(max_tool_rounds=int(budgets.max_tool_rounds),
                   max_tokens=budgets.max_tokens, max_wall_s=budgets.max_wall_s)


class CancelHandle:
    """Cancel a running turn from anywhere in the same event loop."""

    def __init__(self) -> None:
        self.reason = ""
        self._cancelled = False
        self._task: asyncio.Task[Any] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self, reason: str = "cancelled") -> None:
        if self._cancelled:
            return
        self._cancelled = True
        self.reason = reason
        try:
            current = asyncio.current_task()
        except RuntimeError:
            current = None
        # From inside the turn (a hook, a text callback) the loop stops at its next check;
        # from anywhere else the turn's task is interrupted at once, even mid-call.
        if self._task is not None and self._task is not current and not self._task.done():
            self._task.cancel(msg=f"turn cancelled: {reason}")


@dataclass
class TurnState:
    """What the steering hook sees at a safe boundary (read it; do not mutate messages)."""

    turn_id: str
    subject: str
    agent: str
    model: str
    rounds: int  # tool rounds completed
    model_calls: int
    tool_calls: int
    usage: Usage
    elapsed_s: float
    messages: list[ChatMessage]


SteeringHook = Callable[[TurnState], Awaitable[list[ChatMessage]]]
# At a safe boundary, one commit (issue 36: the steer p50): append the round's last records
# (the first argument), take what was sent meanwhile and record its `turn.steered` (built
# by the third argument from the injected messages) in that same commit; returns the
# messages to inject (none: the records are appended all the same).
BoundaryHook = Callable[[list["NewEvent"], TurnState, Callable[[list[ChatMessage]], "NewEvent"]],
                        Awaitable[list[ChatMessage]]]
TextCallback = Callable[[str], None]


class ToolRecord(BaseModel):
    round: int
    call: ToolCall
    result: ToolResult


class TurnResult(BaseModel):
    turn_id: str
    stop_reason: StopReason
    text: str  # the final answer; on an early stop, the last text the model produced
    messages: list[ChatMessage]  # the whole conversation, input included
    rounds: int
    model_calls: int
    tools: list[ToolRecord] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    error: str = ""
    pending: list[ToolCall] = Field(default_factory=list)  # awaiting_approval: undecided calls

    @property
    def completed(self) -> bool:
        return self.stop_reason == "completed"
