"""The answers the workflows API gives and the values it reads back: Lobster's tool-mode
envelopes (plain dicts, key order as Lobster prints them), clawtower's `needs_operator` one,
and the small parsers of stored values. Apart from the service so the fronts that only print
an envelope (the CLI) and the service's own parts (adoption, reads) share them without it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .jsvalues import to_json


def ok_envelope(status: str, output: list[Any], requires_approval: Any = None,
                requires_input: Any = None) -> dict[str, Any]:
    return {"protocolVersion": 1, "ok": True, "status": status, "output": output,
            "requiresApproval": requires_approval, "requiresInput": requires_input}


def error_envelope(kind: str, message: str) -> dict[str, Any]:
    return {"protocolVersion": 1, "ok": False, "error": {"type": kind, "message": message}}


def exit_code(envelope: Mapping[str, Any]) -> int:
    """Lobster's: 0 ok/paused/cancelled, 2 parse_error, 1 any other error."""
    if envelope.get("ok"):
        return 0
    return 2 if envelope.get("error", {}).get("type") == "parse_error" else 1


def render(envelope: Mapping[str, Any]) -> str:
    """The envelope exactly as Lobster prints it (JSON.stringify(envelope, null, 2))."""
    return to_json(envelope, indent=2)


def normalize_args(value: Any) -> dict[str, Any]:
    """What `Object.entries` makes of a parsed --args-json value."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list):
        return {str(i): v for i, v in enumerate(value)}
    if isinstance(value, str):
        return {str(i): ch for i, ch in enumerate(value)}
    return {}


def file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _loads(text: str | None, default: Any = None) -> Any:
    return default if text is None else json.loads(text)


def operator_envelope(run_id: str, step_id: str, reason: str) -> dict[str, Any]:
    """A run that waits for the operator after a crash (clawtower's own status: Lobster has
    no adoption)."""
    return {"protocolVersion": 1, "ok": True, "status": "needs_operator", "output": [],
            "requiresApproval": None, "requiresInput": None,
            "requiresOperator": {"type": "interrupted_step", "runId": run_id,
                                 "stepId": step_id, "reason": reason,
                                 "choices": ["retry", "skip", "cancel"]}}


def _lost(run_id: str) -> dict[str, Any]:
    return error_envelope("runtime_error", f"workflow run {run_id}: another process adopted it"
                          " (this one stalled past its lease); it drives the run from here")
