"""What the tool registry needs of an MCP server without the MCP SDK: its error and its
progress notifications. `core/tools/mcp.py` (the SDK's client) re-exports them; the registry
imports that module only when a server is configured, so a process without MCP servers never
loads the SDK (~0.5 s of imports; start-up: BENCHMARKS.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..errors import ClawError


class McpServerError(ClawError):
    """A server-level fault (cannot start, crashed, timed out). The message names the server.
    `kind` is one of: start, crashed, timeout, unknown, protocol."""

    def __init__(self, server: str, kind: str, message: str) -> None:
        super().__init__(f"mcp server {server!r}: {message}")
        self.server = server
        self.kind = kind


@dataclass(frozen=True)
class ToolProgress:
    """A progress notification from a running tool call."""

    tool: str  # <server>.<tool>
    progress: float
    total: float | None
    message: str | None


ProgressFn = Callable[[ToolProgress], Awaitable[None] | None]

__all__ = ["McpServerError", "ProgressFn", "ToolProgress"]
