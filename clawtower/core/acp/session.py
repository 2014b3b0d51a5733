"""A session turn run by an ACP harness: the session runner hands it the turn's inputs,
it runs one `session/prompt` (core.acp.bridge) and answers as a turn does (TurnResult),
so the job finishes, replies, backlogs and announces exactly like a model's turn.

The harness is started per turn (nothing of it outlives a turn), so the prompt carries the
conversation's recent messages before the turn's own. The run's subject is the session:
its tool calls, plans, diffs and permission requests are found by session id.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..agents.turns import CancelHandle, StopReason, TurnResult
from ..errors import ValidationError
from ..events import NewEvent
from ..store.interface import Store
from .config import HarnessConfig, harness, harness_from_data

if TYPE_CHECKING:  # the ACP SDK loads with the first ACP turn (start-up: BENCHMARKS.md)
    from .bridge import RunOutcome
    from .client import TextSink

ACP_PROVIDER = "acp"  # a turn job's provider when a harness runs it (model: its name)
HISTORY_CHARS = 8000


def harness_name(ref: str | dict[str, Any]) -> str:
    return ref if isinstance(ref, str) else str(ref.get("name") or "inline")


def resolve(ref: str | dict[str, Any], config_path: Path | None) -> HarnessConfig:
    """A spec's `defaults.acp`: a configured harness by name, or one inline."""
    if isinstance(ref, dict):
        return harness_from_data(ref, harness_name(ref), "agent spec: defaults.acp")
    if config_path is None:
        raise ValidationError(f"acp agent {ref!r}: no clawtower.yaml to find it in (declare"
                              " it under `acp_agents:`)")
    return harness(ref, config_path)


def prompt_of(history: list[dict[str, Any]], focus: str) -> str:
    """The turn's prompt: earlier messages (clipped, oldest dropped first), then the
    turn's own."""
    earlier = [m for m in history if m["text"] != focus]
    lines: list[str] = []
    used = 0
    for m in reversed(earlier):
        line = f"{m['role']}: {m['text']}"
        if used + len(line) > HISTORY_CHARS:
            break
        lines.insert(0, line)
        used += len(line)
    if not lines:
        return focus
    return "Conversation so far:\n" + "\n".join(lines) + "\n\nNow:\n" + focus


_STOPS: dict[str, StopReason] = {"done": "completed", "cancelled": "cancelled"}


async def run_acp_turn(store: Store, ref: str | dict[str, Any], config_path: Path | None, *,
                       session_id: str, turn_id: str, agent: str,
                       history: list[dict[str, Any]], focus: str, cancel: CancelHandle,
                       on_text: TextSink | None = None) -> TurnResult:
    from .bridge import AcpTurn

    h = resolve(ref, config_path)
    turn = AcpTurn(store, h, prompt_of(history, focus), subject=session_id,
                   actor=f"acp:{h.name}", on_text=on_text)
    await store.append([NewEvent(entity_id=turn_id, actor=agent, role="agent",
                                 payload=ev.TurnStarted(subject=session_id, agent=agent,
                                                        model=f"acp/{h.name}", budget={}))])

    async def watch() -> None:  # the session's stop (CancelHandle) -> session/cancel
        while not cancel.cancelled:
            await asyncio.sleep(0.05)
        turn.cancel(cancel.reason or "cancelled")

    watcher = asyncio.create_task(watch())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        out: RunOutcome = await turn.run()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    stop: StopReason = _STOPS.get(out.status, "max_wall_clock" if out.stop_reason == "timeout"
                                  else "error")
    tools = await store.fetchone("SELECT count(*) AS n FROM acp_tool_calls WHERE run_id=?",
                                 (out.run_id,))
    n_tools = int(tools["n"]) if tools is not None else 0
    error = out.error and f"{out.error} (acp run {out.run_id})"
    await store.append([NewEvent(entity_id=turn_id, actor=agent, role="agent",
                                 payload=ev.TurnFinished(
                                     stop_reason=stop, rounds=0, model_calls=1,
                                     tool_calls=n_tools, prompt_tokens=0,
                                     completion_tokens=0, cost_usd=0.0,
                                     text=out.text[:2000], error=error[:2000]))])
    return TurnResult(turn_id=turn_id, stop_reason=stop, text=out.text, messages=[],
                      rounds=0, model_calls=1, elapsed_s=loop.time() - t0, error=error)


__all__ = ["ACP_PROVIDER", "harness_name", "prompt_of", "resolve", "run_acp_turn"]
