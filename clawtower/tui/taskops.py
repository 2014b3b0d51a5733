"""The console's task commands: open a task's detail, and the operator's unblock, retry and
cancel, each confirmed where it is destructive and sent through core's one API (`Tasks.command`)
in a worker. `ClawtowerApp` inherits these; screens reach them through `tui.protocol`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.app import App

from clawtower.core.errors import ClawError
from clawtower.core.tasks.phases import UNBLOCK_MENU

from .modals import ChoiceScreen, ConfirmScreen
from .model import ConsoleModel

if TYPE_CHECKING:
    from clawtower.core import Store


class TaskActions(App[int]):
    """The app sets `model`, `store` and `operator`."""

    model: ConsoleModel
    store: Store | None
    operator: str

    def open_task(self, task_id: str) -> None:
        self.call_later(self._open_task, task_id)

    async def _open_task(self, task_id: str) -> None:
        if task_id not in self.model.tasks:
            self.notify(f"task {task_id!r}: no such task", severity="error")
            return
        from .screens.task_detail import TaskDetailScreen  # its first use loads it

        if self.current_mode != "tasks":
            await self.switch_mode("tasks")
        while isinstance(self.screen, TaskDetailScreen):
            await self.pop_screen()
        await self.push_screen(TaskDetailScreen(task_id))

    # ------------------------------------------------------------------ operator commands

    def _task_for(self, task_id: str, command: str) -> dict[str, Any] | None:
        """The task row, or None after saying why `command` cannot apply to it."""
        t = self.model.tasks.get(task_id)
        if t is None:
            self.notify(f"task {task_id!r}: no such task", severity="error")
            return None
        phase = str(t["phase"])
        if command in ("unblock", "retry") and phase != "circuit_open":
            self.notify(f"{task_id} is {phase.replace('_', ' ')}: nothing to {command} (only a"
                        " task whose circuit is open is blocked)", severity="warning")
            return None
        if command == "cancel" and phase in ("completed", "failed"):
            self.notify(f"{task_id} already ended {phase}: nothing to cancel",
                        severity="warning")
            return None
        return t

    def request_unblock(self, task_id: str) -> None:
        """`u`: pick one of the open circuit's unblock options; abandoning asks to confirm."""
        t = self._task_for(task_id, "unblock")
        if t is None:
            return
        options = [(word, f"{word} → {phase.value}: {what}")
                   for word, phase, what in UNBLOCK_MENU]

        def chosen(word: str | None) -> None:
            if word is None:
                return
            if word != "abandon":
                self.command_task(task_id, "unblock", choice=word)
                return
            self.push_screen(ConfirmScreen(
                f"Abandon {task_id}?", f"{t['title']}\n\nThe task ends failed.\n\n"
                f"By {self.operator}.", yes="Abandon", no="Keep it", destructive=True),
                lambda ok: self.command_task(task_id, "unblock", choice=word) if ok else None)

        self.push_screen(ChoiceScreen(
            f"Unblock {task_id}", f"{t['title']}\n\n{t['phase_reason']}\n\n"
            f"The orchestrator executes your choice; recorded as {self.operator}'s.",
            options), chosen)

    def request_cancel_task(self, task_id: str) -> None:
        """`x`: confirm (focus on No), then cancel the task: it ends failed."""
        t = self._task_for(task_id, "cancel")
        if t is None:
            return
        pending = self.model.pending_for(task_id)
        extra = f"\n\nIts pending approval {pending['id']} is withdrawn." if pending else ""

        def done(ok: bool | None) -> None:
            if ok:
                self.command_task(task_id, "cancel")

        self.push_screen(ConfirmScreen(
            f"Cancel task {task_id}?", f"{t['title']}\n\nIt is "
            f"{str(t['phase']).replace('_', ' ')}; it ends failed.{extra}\n\n"
            f"By {self.operator}.", yes="Cancel task", no="Keep it", destructive=True), done)

    def command_task(self, task_id: str, command: str, *, choice: str | None = None,
                     reason: str = "") -> None:
        """Send an operator command (unblock, retry, cancel) through core's one API."""
        self.run_worker(self._command_task(task_id, command, choice, reason),
                        group="task-ops")

    async def _command_task(self, task_id: str, command: str, choice: str | None,
                            reason: str) -> None:
        if self.store is None:
            return
        from clawtower.core import Tasks

        try:
            r = await Tasks(self.store).command(task_id, command, by=self.operator,
                                                choice=choice, reason=reason or "from the console")
        except ClawError as exc:
            self.notify(str(exc), title=f"{command}: not done", severity="error")
            return
        self.notify(f"{task_id}: {r['from'].replace('_', ' ')} → {r['to'].replace('_', ' ')}",
                    title=f"{command} by {self.operator}")


__all__ = ["TaskActions"]
