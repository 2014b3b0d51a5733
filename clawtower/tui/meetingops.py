"""The console's meetings: start one in this app's loop (a worker whose events go to the store),
ask a running one to stop, grant it more rounds. `ClawtowerApp` inherits these; screens reach
them through `tui.protocol`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual.app import App

from clawtower.core.errors import ClawError

from . import meetingdata
from .modals import ConfirmScreen
from .model import ConsoleModel

if TYPE_CHECKING:
    from clawtower.core import AgentSet, Store


class MeetingActions(App[int]):
    """The app sets `model`, `store`, `operator`, `agents`, `pending_meeting` and
    `_meeting_tasks`."""

    model: ConsoleModel
    store: Store | None
    operator: str
    agents: AgentSet
    pending_meeting: str | None
    _meeting_tasks: set[asyncio.Task[Any]]

    def agent_set(self) -> AgentSet:
        return self.agents

    def start_meeting(self, participants: list[str], topic: str,
                      max_rounds: int | None = None, *, show: bool = True) -> None:
        """Run a meeting in this app's loop (a worker); its events go to the store. `show`
        switches to mode 3."""
        self.run_worker(self._start_meeting(participants, topic, max_rounds, show),
                        group="meetings", exit_on_error=False)

    async def _start_meeting(self, participants: list[str], topic: str,
                             max_rounds: int | None, show: bool = True) -> None:
        if self.store is None:
            return
        import pydantic

        from clawtower.core import MeetingConfig

        kw: dict[str, Any] = {"max_rounds": max_rounds} if max_rounds else {}
        try:
            config = MeetingConfig(topic=topic, participants=participants, **kw)
            mid, task = await meetingdata.start(self.store, self.agent_set(), config)
        except (ClawError, pydantic.ValidationError) as exc:
            self.notify(str(exc).splitlines()[0] if isinstance(exc, pydantic.ValidationError)
                        else str(exc), title="Meeting not started", severity="error")
            return
        self._meeting_tasks.add(task)
        task.add_done_callback(self._meeting_tasks.discard)
        self.pending_meeting = mid
        self.notify(f"{mid}: {topic}", title="Meeting started")
        if show and self.current_mode != "meetings":
            await self.switch_mode("meetings")
        try:
            outcome = await task
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the meeting failed; the console stays up
            self.notify(f"{mid}: {exc}", title="Meeting failed", severity="error", timeout=15)
            return
        result = getattr(outcome, "result", "")
        result = getattr(result, "value", result)
        reason = getattr(outcome, "reason", "")
        self.notify(f"{mid}: {result} ({reason})", title="Meeting ended")

    def request_stop_meeting(self, meeting_id: str) -> None:
        """`s`: confirm (focus on No), then ask the meeting to stop."""
        m = self.model.meeting(meeting_id)
        if m is None or m.get("status") != "running":
            self.notify(f"meeting {meeting_id!r}: not running", severity="error")
            return

        def done(ok: bool | None) -> None:
            if ok:
                self.stop_meeting(meeting_id)

        how = ("Its process is gone: it ends now, with reason 'stopped'." if m.get("orphaned")
               else "The round under way finishes first; the meeting then ends with reason"
                    " 'stopped'.")
        self.push_screen(ConfirmScreen(
            f"Stop meeting {meeting_id}?",
            f"{m['topic']}\n\n{how}\n\nRequested by {self.operator}.", yes="Stop",
            destructive=True), done)

    def stop_meeting(self, meeting_id: str, reason: str = "") -> None:
        self.run_worker(self._stop_meeting(meeting_id, reason), group="meeting-ops")

    async def _stop_meeting(self, meeting_id: str, reason: str) -> None:
        if self.store is None:
            return
        try:
            now = await meetingdata.request_stop(self.store, meeting_id, by=self.operator,
                                                 reason=reason)
        except ClawError as exc:
            self.notify(str(exc), title="Not stopped", severity="error")
            return
        self.notify(f"{meeting_id}: stopped by {self.operator} (its process was gone)" if now
                    else f"{meeting_id}: stop requested by {self.operator}", title="Meeting")

    def grant_rounds(self, meeting_id: str, n: int = 1) -> None:
        self.run_worker(self._grant_rounds(meeting_id, n), group="meeting-ops")

    async def _grant_rounds(self, meeting_id: str, n: int) -> None:
        if self.store is None:
            return
        try:
            new_max = await meetingdata.grant_rounds(self.store, meeting_id, n, by=self.operator)
        except ClawError as exc:
            self.notify(str(exc), title="No rounds granted", severity="error")
            return
        self.notify(f"{meeting_id}: +{n} round(s), at most {new_max} now", title="Meeting")


__all__ = ["MeetingActions"]
