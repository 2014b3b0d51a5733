"""Workflow runs as the console reads and drives them, through core's `Workflows` service
(no Textual here). Gates are decided here so the run continues in the console's process."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from clawtower.core.workflows.kinds import GATE_KINDS

if TYPE_CHECKING:  # the service loads on first use: the console paints before it (start-up)
    from clawtower.core import Store
    from clawtower.core.workflows.service import Workflows

RUN_LIMIT = 500


def _quiet(_text: str) -> None:
    """Retry notices go to the store as events; the console must not write to the terminal."""
APPROVAL_GATE = GATE_KINDS["approval"]
INPUT_GATE = GATE_KINDS["input"]
GATE_KIND_SET = frozenset(GATE_KINDS.values())

# What each status means to an operator, as a tone the theme colours.
RUN_TONE = {"running": "active", "paused": "waiting", "ok": "done", "failed": "failed",
            "cancelled": "idle"}
STEP_TONE = {"running": "active", "retrying": "active", "waiting": "waiting", "done": "done",
             "failed": "failed", "skipped": "idle", "cancelled": "idle", "pending": "dim"}


def run_status(run: dict[str, Any]) -> tuple[str, str]:
    """A run's status as the console says it, and its tone: one wording in the list and the
    detail ("waiting approval", not "paused" in one and the other in the other)."""
    status = str(run["status"])
    tone = RUN_TONE.get(status, "idle")
    if status == "paused":
        return f"waiting {run.get('gate_kind') or 'gate'}", tone
    if run.get("driver") == "gone":
        return "orphaned", "failed"
    return status, tone


# the services driving this console's runs, so quitting can hand them over
_LIVE: weakref.WeakSet[Workflows] = weakref.WeakSet()


def _service(store: Store, by: str) -> Workflows:
    """The service as the CLI builds it (LLM stages answer through the configured agents and
    record their usage on the run), quiet on the terminal."""
    from clawtower.core.workflows.service import Workflows

    service = Workflows(store, actor=by, stderr=_quiet)
    _LIVE.add(service)
    return service


def hand_over_all() -> None:
    """The console is quitting: its runs stop at their next step boundary and are left for
    any engine on the store (Workflows.hand_over)."""
    for service in list(_LIVE):
        service.hand_over()


async def list_runs(store: Store, limit: int = RUN_LIMIT) -> list[dict[str, Any]]:
    """Newest first."""
    from clawtower.core.workflows.service import Workflows

    return await Workflows(store).list(limit=limit)


async def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    """A run with its steps, the gate it waits at and what its LLM stages spent (`usage`),
    or None if there is no such run."""
    from clawtower.core import NotFound
    from clawtower.core.agents.usage import usage_for_subject
    from clawtower.core.workflows.service import Workflows

    try:
        run = await Workflows(store).get(run_id)
    except NotFound:
        return None
    run["usage"] = await usage_for_subject(store, run_id)
    return run


def input_problem(approval: dict[str, Any], response: Any) -> str | None:
    """Why an input gate would refuse `response` (the runner's own wording), or None."""
    from clawtower.core.workflows.ajv import validate_response

    ctx = approval.get("context") or {}
    schema = ctx.get("responseSchema")
    if schema is None:
        return None
    return validate_response(schema, response, str(ctx.get("step") or "input"))


async def decide_gate(store: Store, approval_id: str, approve: bool, *, by: str,
                      reason: str = "") -> dict[str, Any]:
    """Approve (the run continues here until it ends or pauses again) or reject (cancelled)."""
    service = _service(store, by)
    return await service.decide(approval_id, approve, by=by, reason=reason)


async def answer_gate(store: Store, approval_id: str, response: Any, *,
                      by: str) -> dict[str, Any]:
    """Answer an input gate; the run continues here."""
    return await _service(store, by).respond(approval_id, response, by=by)


async def start_run(store: Store, file: str, args: dict[str, Any] | None, *,
                    by: str) -> dict[str, Any]:
    """Run a workflow file until it ends or pauses; answers Lobster's envelope."""
    return await _service(store, by).run(file, args or {})


async def recover_run(store: Store, run_id: str, decision: str, *,
                      by: str) -> dict[str, Any]:
    """Settle a step its dead driver left interrupted (retry or skip); the run continues
    here until it ends or pauses again. Answers Lobster's envelope."""
    return await _service(store, by).recover(run_id, decision, by=by)


async def rerun_run(store: Store, run_id: str, step: str, *,
                    by: str) -> tuple[str, dict[str, Any]]:
    """A new run of `run_id` from `step` (core's `Workflows.rerun`), driven here until it
    ends or pauses; answers the new run's id and Lobster's envelope."""
    return await _service(store, by).rerun(run_id, step, by=by)


async def cancel_run(store: Store, run_id: str, *, by: str, reason: str = "") -> None:
    """Cancel a paused run: its gate is withdrawn."""
    await _service(store, by).cancel(run_id, by=by, reason=reason)
