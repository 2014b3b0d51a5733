"""Mode 2: every pending decision with its context; `a` approves, `r` rejects."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from ..commands import mode_help
from ..model import Delta
from ..render import Palette, approval_renderable
from ..rowlist import RowList
from ..views import ApprovalList, EventLog, ModeBar
from .base import ConsoleScreen, count_label


class ApprovalsScreen(ConsoleScreen):
    """Mode 2: pending decisions with their context; `a` approves, `r` rejects."""

    HELP = mode_help(
        "**Approvals**: every pending decision, one list. `a` approves, `r` rejects "
        "(asks a reason); `enter` opens the task. A coding harness's permission request "
        "(ACP): `A` always allows, `R` always rejects (remembered; `clawtower acp rules`).",
        ("approve", "reject", "task"))

    MODE = "approvals"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("A", "decide_always(True)", "Always allow", show=False,
                tooltip="An ACP permission request: allow, and remember it for this"
                        " harness, workspace and tool kind"),
        Binding("R", "decide_always(False)", "Always reject", show=False,
                tooltip="An ACP permission request: reject, and remember it"),
    ]

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Vertical(id="body"):
            with Horizontal(id="approvals-pane"):
                approvals = ApprovalList(id="approvals")
                approvals.border_title = "Pending approvals"
                yield approvals
                with VerticalScroll(id="approval-detail") as scroll:
                    scroll.border_title = "Details"
                    yield Static(id="approval-body")
            log = EventLog(id="events")
            log.border_title = "Events"
            yield log
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(ApprovalList).focus()

    def sync(self) -> None:
        self.query_one(EventLog).load(self.capp.model.events)
        self._approvals()
        super().sync()

    def apply(self, delta: Delta) -> None:
        if delta.approvals_changed:
            self._approvals()
        if delta.events:
            self.query_one(EventLog).load(self.capp.model.events)
        super().apply(delta)

    def _approvals(self) -> None:
        lst = self.query_one(ApprovalList)
        lst.load(self.capp.model.approvals)
        self.update_titles()
        self._filter_subtitle(lst)
        self._show(lst.cursor_key)
        self.refresh_bindings()

    def update_titles(self) -> None:
        lst = self.query_one(ApprovalList)
        lst.border_title = (f"Pending approvals · "
                            f"{count_label(lst, len(self.capp.model.approvals))}")

    @on(RowList.Highlighted, "#approvals")
    def _highlighted(self, event: RowList.Highlighted) -> None:
        self._show(event.key)

    @on(RowList.Selected, "#approvals")
    def _selected(self, event: RowList.Selected) -> None:
        a = self.capp.model.approval(str(event.key))
        if a is not None and a["subject"] in self.capp.model.tasks:
            self.capp.open_task(a["subject"])

    def _show(self, key: Any) -> None:
        body = self.query_one("#approval-body", Static)
        a = self.capp.model.approval(str(key)) if key is not None else None
        if a is None:
            body.update(Text("Select a pending item to see what it would do.", style="dim"))
            return
        body.update(approval_renderable(Palette(self.app), a, keys=True))

    def unavailable(self, action: str) -> str | None:
        if action in ("approve", "reject") and self.query_one(ApprovalList).cursor_key is None:
            return ("nothing waits for a decision" if not self.capp.model.approvals else
                    "no approval selected")
        return None

    def action_approve(self) -> None:
        key = self.query_one(ApprovalList).cursor_key
        if key is not None:
            self.capp.request_approve(str(key))

    def action_decide_always(self, allow: bool) -> None:
        """`A` / `R`: an ACP harness's request answered, and remembered (`clawtower acp
        rules` lists and revokes it); other kinds have no "always"."""
        key = self.query_one(ApprovalList).cursor_key
        a = self.capp.model.approval(str(key)) if key is not None else None
        if a is None:
            return
        if a["kind"] != "acp_permission":
            self.notify("only an ACP permission request can be answered 'always'",
                        severity="warning")
            return
        self.capp.decide(str(key), approve=allow, always=True,
                         reason="always (from the console)")

    def action_reject(self) -> None:
        key = self.query_one(ApprovalList).cursor_key
        if key is not None:
            self.capp.request_reject(str(key))
