"""Slash commands typed into a session (CLI `session send ID "/agent coder"`, the console's
input line): `/agents`, `/agent <id|name>`, `/models`, `/model <provider>/<model>`
(`/model default` clears the override), `/stop`, `/spawn [@agent] <task>`, `/continue` (a
turn stopped by max_tool_rounds goes on from where it stopped).

Every command goes through `Sessions`: the same checks, events and refusals as the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from .reads import executor_label
from .service import Sessions

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

COMMANDS = ("/agents", "/agent", "/models", "/model", "/stop", "/spawn", "/continue")


@dataclass
class CommandResult:
    text: str  # what to show the operator (one or more lines)
    data: Any = None  # the same as JSON-able data


def is_command(line: str) -> bool:
    return line.strip().startswith("/") and line.strip().split()[0] in COMMANDS


def complete(prefix: str) -> list[str]:
    """Completions for the console's input line."""
    return [c for c in COMMANDS if c.startswith(prefix.strip())]


async def run_command(sessions: Sessions, sid: str, line: str, *,
                      cfg: ClawtowerConfig | None = None, by: str = "operator"
                      ) -> CommandResult:
    head, _, rest = line.strip().partition(" ")
    rest = rest.strip()
    if head == "/agents":
        session = await sessions.get(sid)
        specs = await sessions.specs()
        lines = []
        for s in specs:
            mark = "*" if s.agent_id == session["agent_id"] else " "
            d = s.config.defaults
            tools = s.config.policy.tools
            lines.append(f"{mark} {s.name} ({s.agent_id}) "
                         f"{executor_label(d.model_dump(mode='json'))} tools: "
                         f"{'all' if tools is None else ','.join(tools) or 'none'}")
        return CommandResult("\n".join(lines) or "no agent specs",
                             [{**s.as_json(), "active": s.agent_id == session["agent_id"]}
                              for s in specs])
    if head == "/agent":
        if not rest:
            raise ValidationError("/agent: name an agent spec (id or name); /agents lists them")
        spec = await sessions.set_agent(sid, rest, by=by)
        return CommandResult(f"{sid}: agent is now {spec.name} ({spec.agent_id})",
                             spec.as_json())
    if head == "/models":
        session = await sessions.get(sid)
        models = sessions.models(cfg)
        current = (f"{session['provider_override']}/{session['model_override']}"
                   if session["model_override"] else None)
        lines = [f"{p}/{m}" + (" *" if f"{p}/{m}" == current else "")
                 for p, ms in models.items() for m in (ms or ["<any>"])]
        return CommandResult("\n".join(lines), {"models": models, "override": current})
    if head == "/model":
        if not rest:
            raise ValidationError("/model: give <provider>/<model> (or 'default');"
                                  " /models lists them")
        p, m = await sessions.set_model(sid, None if rest == "default" else rest, cfg=cfg,
                                        by=by)
        return CommandResult(f"{sid}: model override " + (f"{p}/{m}" if m else "cleared"),
                             {"provider": p, "model": m})
    if head == "/stop":
        stopped = await sessions.stop(sid, by=by, reason=rest)
        return CommandResult(f"stopped: {', '.join(stopped)}", stopped)
    if head == "/spawn":
        agent = None
        if rest.startswith("@"):
            agent, _, rest = rest[1:].partition(" ")
        out = await sessions.spawn(sid, rest.strip(), agent=agent, by=by)
        return CommandResult(f"{out['session']}: spawned ({out['agent']}, run {out['run_id']})",
                             out)
    if head == "/continue":
        out = await sessions.continue_task(sid, by=by)
        return CommandResult(f"{sid}: continuing after {out['rounds_done']} tool round(s)"
                             + (f" (job {out['job']})" if out["job"] else
                                " (after the running turn)"), out)
    raise ValidationError(f"{head}: unknown command (known: {', '.join(COMMANDS)})")


__all__ = ["COMMANDS", "CommandResult", "complete", "is_command", "run_command"]
