"""Tools the models may call: built-in tools and MCP servers' tools, behind one registry that
enforces each agent's allow-list and the pinned (approved) tool definitions."""

from .types import ToolBox, ToolResult

__all__ = ["ToolBox", "ToolResult"]
