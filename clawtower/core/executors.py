"""Who runs an agent's work, as clawtower.yaml, a task spec and the CLI name it:
`builtin` (the turn loop on the agent's model) or `acp:<name>` (a coding harness of
clawtower.yaml's `acp_agents:`). Kept import-light: task specs and workflows load it."""

from __future__ import annotations

EXECUTOR_PATTERN = r"^(builtin|acp:[A-Za-z0-9._-]{1,64})$"

__all__ = ["EXECUTOR_PATTERN"]
