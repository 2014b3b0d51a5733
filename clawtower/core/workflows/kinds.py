"""The approval kinds a workflow gate files in the one approvals list. A leaf module: what
only reads the list (the console's first paint, its approvals mode) needs these names, not the
runner that decides them."""

from __future__ import annotations

GATE_KINDS = {"approval": "workflow_approval", "input": "workflow_input"}

__all__ = ["GATE_KINDS"]
