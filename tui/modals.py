"""Small modal screens: y/n confirmation, a reason prompt, a JSON answer to an input gate,
the `:` command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from jsonschema import Draft202012Validator
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Input, Label, Static, TextArea

COMMAND_WORDS = [
    "approve ", "reject ", "task ", "theme ", "tasks", "approvals", "meetings", "sessions",
    "filter ", "help", "quit", "q", "meeting ", "stop ", "grant ", "workflow ", "workflows",
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


class JsonAnswerScreen(ModalScreen[Any]):
    """Answer an input gate: type JSON, checked against the gate's schema before it is sent.

    ctrl+s sends (only a valid answer leaves the dialog), esc cancels (dismisses None).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "send", "Send", id="answer.send"),
        Binding("escape", "cancel", "Cancel", id="answer.cancel"),
    ]

    def __init__(self, title: str, prompt: str, schema: dict[str, Any] | None,
                 initial: Any = None, *, check: Callable[[Any], str | None] | None = None
                 ) -> None:
        super().__init__()
        self.title_text = title
        self.prompt_text = prompt
        self.schema = schema or {}
        self.initial = initial
        self.check = check  # the receiver's own validation wording, when it has one

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="answer"):
            yield Label(self.title_text, id="dialog-title")
            if self.prompt_text:
                yield Static(self.prompt_text, id="dialog-body", markup=False)
            schema = Static(json.dumps(self.schema, indent=2), id="answer-schema", markup=False)
            schema.border_title = "Schema"
            yield schema
            text = "" if self.initial is None else json.dumps(self.initial, indent=2)
            yield TextArea(text, language=None, id="answer-json", soft_wrap=True,
                           show_line_numbers=False)
            yield Static("", id="answer-error", markup=False)
            yield Label("ctrl+s sends · esc cancels", id="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def problem(self, text: str) -> tuple[Any, str | None]:
        """(value, None) when `text` is JSON valid against the schema, else (None, why)."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        if self.check is not None:
            why = self.check(value)
            return (None, why) if why else (value, None)
        errors = sorted(Draft202012Validator(self.schema).iter_errors(value),
                        key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            where = "/" + "/".join(str(p) for p in first.absolute_path)
            more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
            return None, f"at {where}: {first.message}{more}"
        return value, None

    def action_send(self) -> None:
        value, why = self.problem(self.query_one(TextArea).text)
        err = self.query_one("#answer-error", Static)
        if why is not None:
            err.update(why)
            err.add_class("shown")
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)
