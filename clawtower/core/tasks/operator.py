"""Operator commands on a task: unblock (with a choice), retry, cancel.

Only the orchestrator moves phases. An operator does not: they issue a typed command,
recorded as a `task.commanded` event with the operator as actor, and the orchestrator executes
it in the same write transaction with its own transition (actor orchestrator, the command and
its author in the reason), through the same legality table and evidence guards as every other
move. So the log reads in causal order (the command, then the move it caused), nothing waits
for an engine to be running, and a command that no longer applies (a task already unblocked by
someone else) is refused as a Conflict with nothing written. The console and the CLI both call
this one API (`Tasks.command`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from .. import events as ev
from ..errors import Conflict, ValidationError
from ..events import NewEvent
from ..store.interface import WriteTx
from .commands import check_permission, load_task, transition
from .permissions import Action, Role
from .phases import TERMINAL, UNBLOCK_CHOICES, UNBLOCK_MENU, Phase

ORCHESTRATOR = "orchestrator"


class Command(StrEnum):
    UNBLOCK = "unblock"  # a circuit_open task: the operator picks one of its unblock options
    RETRY = "retry"  # a circuit_open task: a fresh attempt budget (unblock execution_ready)
    CANCEL = "cancel"  # any unfinished task: it ends failed; a pending approval is withdrawn


def parse_command(value: str, field: str = "command") -> Command:
    try:
        return Command(value)
    except ValueError:
        known = ", ".join(c.value for c in Command)
        raise ValidationError(f"{field}: unknown command {value!r} (known: {known})") from None


def parse_choice(value: str, field: str = "CHOICE") -> Phase:
    try:
        return UNBLOCK_CHOICES[value.strip().lower()]
    except KeyError:
        known = ", ".join(UNBLOCK_CHOICES)
        raise ValidationError(f"{field}: unknown unblock choice {value!r} (known: {known})"
                              ) from None


def target_phase(task: dict[str, Any], command: Command, choice: Phase | None) -> Phase:
    """Where `command` takes `task`, or a Conflict saying why it does not apply now."""
    tid, phase = task["id"], Phase(task["phase"])
    if command in (Command.UNBLOCK, Command.RETRY):
        if phase != Phase.CIRCUIT_OPEN:
            raise Conflict(f"task {tid!r}: nothing to {command.value}: it is in {phase.value},"
                           " not circuit_open")
        if command == Command.RETRY:
            return Phase.EXECUTION_READY
        if choice is None:
            raise ValidationError(f"task {tid!r}: unblock needs a choice"
                                  f" ({', '.join(w for w, _, _ in UNBLOCK_MENU)})")
        return choice
    if phase in TERMINAL:
        raise Conflict(f"task {tid!r}: nothing to cancel: it already ended {phase.value}")
    return Phase.FAILED


def command_task(tx: WriteTx, task_id: str, command: Command, *, by: str,
                 role: Role = Role.OPERATOR, choice: Phase | None = None,
                 reason: str = "") -> dict[str, Any]:
    """Record `by`'s command and execute it as the orchestrator, in one transaction."""
    if not by.strip():
        raise ValidationError("--by: an operator command needs the operator's name")
    if not check_permission(tx, by, role, Action.TASK_COMMAND, task_id):
        return {}
    task = load_task(tx, task_id)
    dst = target_phase(task, command, choice)
    reason = reason.strip()
    tx.emit(NewEvent(entity_id=task_id, actor=by, role=role.value, payload=ev.TaskCommanded(
        command=command.value, to_phase=dst.value, reason=reason)))
    why = f"{command.value} by {by}" + (f": {reason}" if reason else "")
    moved = transition(tx, task_id, dst, why, ORCHESTRATOR, Role.ORCHESTRATOR)
    return {**moved, "command": command.value, "by": by}


__all__ = ["UNBLOCK_CHOICES", "UNBLOCK_MENU", "Command", "command_task", "parse_choice",
           "parse_command", "target_phase"]
