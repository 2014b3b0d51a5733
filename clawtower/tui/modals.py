"""Small modal screens: y/n confirmation, a reason prompt, a JSON answer to an input gate,
a memory correction, an edited message or instruction (going back), the `:` command
line."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.suggester import Suggester
from textual.widgets import Button, Input, Label, Static, TextArea

from clawtower.core.textsafe import safe, safe_line


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
        self.title_text = safe_line(title)  # titles and bodies quote untrusted text
        self.body_text = safe(body)
        self.yes_label = yes
        self.no_label = no
        self.destructive = destructive

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm"):
            yield Label(self.title_text, id="dialog-title", markup=False)
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


SHORT_ROWS = 32  # below this height a choice dialog shows its options one row each


class ChoiceScreen(ModalScreen[str | None]):
    """Pick one of a few options: its number key, or its button; esc picks nothing.
    Dismisses with the chosen option's key."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *[Binding(str(n), f"pick({n - 1})", f"Option {n}", show=False, id=f"choice.{n}")
          for n in range(1, 10)],
        Binding("up", "app.focus_previous", "Previous", show=False, id="choice.up"),
        Binding("down", "app.focus_next", "Next", show=False, id="choice.down"),
        Binding("escape", "cancel", "Cancel", id="choice.cancel"),
    ]

    def __init__(self, title: str, body: str, options: list[tuple[str, str]]) -> None:
        """`options`: (key returned, label shown), in the order of their number keys."""
        super().__init__()
        self.title_text = safe_line(title)  # titles and bodies quote untrusted text
        self.body_text = safe(body)
        self.options = options

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="choice"):
            yield Label(self.title_text, id="dialog-title", markup=False)
            if self.body_text:
                yield Static(self.body_text, id="dialog-body", markup=False)
            with Vertical(id="choice-options"):
                for n, (key, label) in enumerate(self.options, 1):
                    yield Button(f"{n}  {label}", id=f"choice-{key}", name=key)
            yield Label("a number or enter picks · esc cancels", id="dialog-hint")

    def on_mount(self) -> None:
        self.query(Button).first().focus()

    def on_resize(self) -> None:
        """A short terminal (24 rows) has no room for three-row buttons and the gaps
        between them: the options go one row each, so the last one stays on screen."""
        short = self.size.height < SHORT_ROWS
        self.set_class(short, "-short")
        for button in self.query(Button):
            button.compact = short

    def action_pick(self, index: int) -> None:
        if 0 <= index < len(self.options):
            self.dismiss(self.options[index][0])

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.name)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ReasonScreen(ModalScreen[str | None]):
    """Ask for a reason (e.g. why a rejection); enter submits, esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="reason.cancel"),
    ]

    def __init__(self, title: str, body: str = "", *, placeholder: str = "reason") -> None:
        super().__init__()
        self.title_text = safe_line(title)  # titles and bodies quote untrusted text
        self.body_text = safe(body)
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="reason"):
            yield Label(self.title_text, id="dialog-title", markup=False)
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
    """The `:` command line at the bottom of the screen: completes commands and ids (`right`
    accepts), and a hint line under it says what the command typed so far takes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="command.cancel"),
    ]

    def __init__(self, value: str = "", *, suggester: Suggester | None = None,
                 describe: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.initial = value
        self.suggester = suggester
        self.describe = describe

    def compose(self) -> ComposeResult:
        with Vertical(id="command-box"):
            yield Label(self._hint(self.initial), id="command-hint", markup=False)
            with Horizontal(id="command-line"):
                yield Label(":", id="command-prompt")
                yield Input(
                    self.initial,
                    placeholder="a command: approve, reject, task, unblock, retry, cancel,"
                                " meeting, stop, grant, workflow, theme, help, q (→ completes)",
                    suggester=self.suggester,
                    id="command-input",
                )

    def _hint(self, value: str) -> str:
        return self.describe(value) if self.describe else ""

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        self.query_one("#command-hint", Label).update(self._hint(event.value))

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
        self.title_text = safe_line(title)  # titles and bodies quote untrusted text
        self.prompt_text = safe(prompt)
        self.schema = schema or {}
        self.initial = initial
        self.check = check  # the receiver's own validation wording, when it has one

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="answer"):
            yield Label(self.title_text, id="dialog-title", markup=False)
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
        from jsonschema import Draft202012Validator  # here: the console paints without it

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


class MemoryEditScreen(ModalScreen[tuple[str, str] | None]):
    """Correct a memory: its content in a text area and why, in one dialog. ctrl+s saves
    (both must be filled in), esc cancels. Dismisses (content, reason)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Save", id="memory-edit.save"),
        Binding("escape", "cancel", "Cancel", id="memory-edit.cancel"),
    ]

    def __init__(self, title: str, content: str) -> None:
        super().__init__()
        self.title_text = safe_line(title)  # a memory's key and text are untrusted
        self.content = content

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="memory-edit"):
            yield Label(self.title_text, id="dialog-title", markup=False)
            yield TextArea(self.content, language=None, id="memory-content", soft_wrap=True,
                           show_line_numbers=False)
            yield Input(placeholder="why (recorded with your name)", id="memory-reason")
            yield Static("", id="answer-error", markup=False)
            yield Label("ctrl+s saves · esc cancels", id="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self) -> None:
        content = self.query_one(TextArea).text
        reason = self.query_one("#memory-reason", Input).value.strip()
        why = ("the content is empty" if not content.strip() else
               "say why (the reason is recorded)" if not reason else None)
        if why is not None:
            err = self.query_one("#answer-error", Static)
            err.update(why)
            err.add_class("shown")
            return
        self.dismiss((content, reason))

    @on(Input.Submitted, "#memory-reason")
    def _submit(self, event: Input.Submitted) -> None:
        self.action_save()

    def action_cancel(self) -> None:
        self.dismiss(None)


class EditTextScreen(ModalScreen[str | None]):
    """Edit a text before going back (a fork's new message, a rerun node's instruction):
    prefilled, ctrl+s continues with what is typed (empty too: the caller says what empty
    means in `hint`), esc cancels. Dismisses the text, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "save", "Continue", id="edit-text.save"),
        Binding("escape", "cancel", "Cancel", id="edit-text.cancel"),
    ]

    def __init__(self, title: str, body: str, text: str, *, hint: str) -> None:
        super().__init__()
        self.title_text = safe_line(title)  # titles and bodies quote untrusted text
        self.body_text = safe(body)
        self.text = text
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="memory-edit"):
            yield Label(self.title_text, id="dialog-title", markup=False)
            if self.body_text:
                yield Static(self.body_text, id="dialog-body", markup=False)
            yield TextArea(self.text, language=None, id="edit-text", soft_wrap=True,
                           show_line_numbers=False)
            yield Label(f"ctrl+s continues · esc cancels · {self.hint}", id="dialog-hint",
                        markup=False)

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    def action_save(self) -> None:
        self.dismiss(self.query_one(TextArea).text)

    def action_cancel(self) -> None:
        self.dismiss(None)
