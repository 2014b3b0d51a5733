"""The contract between the turn loop and the tool registry.

The turn loop only sees a `ToolBox`: the tool definitions one agent may see, and a call
that never raises for the model's mistakes (bad JSON, unknown or disallowed tool, a tool
that failed): those come back as an error result the model can read and recover from.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from ..agents.provider import ToolSpec


class ToolResult(BaseModel):
    """What a tool call gave back. `content` is the text shown to the model."""

    content: str
    structured: Any | None = None
    is_error: bool = False
    # why an error happened, for events and the console: policy, arguments, unknown, failed,
    # timeout, unpinned
    error_kind: str | None = None


class ToolBox(Protocol):
    """The tools of one agent, filtered by its allow-list and by pinning."""

    async def specs(self) -> list[ToolSpec]: ...

    async def resolve(self, name: str) -> str | ToolResult:
        """The concrete tool a call of `name` would run (a built-in, `<server>.<tool>` as its
        server lists it now, a session's spawn or memory tool), or a `policy` refusal when
        it is none the agent may run. The turn loop's gate decides the tier of that
        concrete tool for every call (core/agents/turns.py); nothing runs undecided."""
        ...

    async def call(self, name: str, arguments: str) -> ToolResult:
        """`arguments` is the JSON text the model sent. Policy and argument errors are
        results with is_error=True, never exceptions."""
        ...
