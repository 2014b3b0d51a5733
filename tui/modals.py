"""Small modal screens: y/n confirmation, a reason prompt, the `:` command line."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Static

COMMAND_WORDS = [
    "approve ", "reject ", "task ", "theme ", "tasks", "approvals", "meetings", "sessions",
    "filter ", "help", "quit", "q", "meeting ", "stop ", "grant ",
]


class ConfirmScreen(ModalScreen[bool]):
    """Yes/no. `y` confirms, `n` or `esc` declines; destructive asks start on No."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
        Binding("left,right", "app.focus_previous", "Switch", show=False, id="confirm.switch"),
    ]

    def __init__(self, title: str, body: str = "", *, yes: str = "Yes", no: str = "No",
                 destructive: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.body_text = body
        self.yes_label = yes
        self.no_label = no
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Label(self.title_text, id="dialog-title")
            if self.body_text:
                yield Static(self.body_text, id="dialog-body", markup=False)
            with Horizontal(id="dialog-buttons"):
                yield Button(f"{self.yes_label} (y)", id="yes",
                             variant="error" if self.destructive else "primary")
                yield Button(f"{self.no_label} (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no" if self.destructive else "#yes", Button).focus()

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class ReasonScreen(ModalScreen[str | None]):
    """Ask for a reason (e.g. why a rejection); enter submits, esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="reason.cancel"),
    ]

    def __init__(self, title: str, body: str = "", *, placeholder: str = "reason") -> None:
        super().__init__()
        self.title_text = title
        self.body_text = body
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="reason"):
            yield Label(self.title_text, id="dialog-title")
            if self.body_text:
                yield Static(self.body_text, id="dialog-body", markup=False)
            yield Input(placeholder=self.placeholder, id="reason")
            yield Label("enter to continue · esc to cancel", id="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if not value:
            self.notify("a reason is required", severity="warning")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class CommandLineScreen(ModalScreen[str | None]):
    """The `:` command line at the bottom of the screen."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="command.cancel"),
    ]

    def __init__(self, value: str = "") -> None:
        super().__init__()
        self.initial = value

    def compose(self) -> ComposeResult:
        with Horizontal(id="command-line"):
            yield Label(":", id="command-prompt")
            yield Input(
                self.initial,
                placeholder="approve ID · reject ID REASON · task ID · meeting A,B,C TOPIC · "
                            "theme NAME · q",
                suggester=SuggestFromList(COMMAND_WORDS, case_sensitive=False),
                id="command-input",
            )

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Submitted)
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
