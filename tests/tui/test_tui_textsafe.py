"""Hostile text in the console (through Textual's pilot): what Rich and Textual strip by
themselves (BEL, BS, CR... but not ESC, C1 or bidi controls), the visible escapes the
console's screens draw instead, and the last-line guard on what reaches the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import Static
from tui_helpers import SIZE, until

from clawtower.core.textsafe import is_safe
from clawtower.tui.app import ClawtowerApp
from clawtower.tui.render import install_terminal_guard
from clawtower.tui.screens.sessions import SessionsScreen

ESC = "\x1b"
HOSTILE = (f"a{ESC}[31mred{ESC}[0m\a {ESC}]0;owned\a back\b\b c1\x9b31m "
           "bidi\u202eevil\u202c \u2066iso\u2069 zw\u200dj\u200b")
RAW = [ESC + "[31mred", ESC + "]0;owned", "\a", "\b", "\x9b", "\u202e", "\u202c", "\u2066",
       "\u2069", "\u200d", "\u200b"]


def terminal_output(app: App[Any]) -> str:
    """What the app would write to the terminal for a full repaint of its screen."""
    update = app.screen._compositor.render_update(full=True)
    assert update is not None
    return str(update.render_segments(app.console))


def segment_texts(app: App[Any]) -> list[str]:
    update = app.screen._compositor.render_update(full=True)
    return [seg.text for line in getattr(update, "strips", []) for strip in line
            for seg in strip]


class Bare(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(HOSTILE, markup=False, id="plain")
        yield Static(Text(HOSTILE), id="rich")


async def test_rich_and_textual_strip_bel_and_backspace_but_not_esc_c1_or_bidi() -> None:
    app = Bare()
    async with app.run_test(size=(120, 6)):
        texts = "".join(segment_texts(app))
    assert "\a" not in texts and "\b" not in texts  # Rich's strip_control_codes
    for raw in (ESC + "[31mred", "\x9b", "\u202e", "\u2066", "\u200d"):
        assert raw in texts, raw  # still there: widgets must not rely on Rich for these


async def test_the_guard_keeps_raw_controls_off_the_terminal_whoever_drew_them() -> None:
    install_terminal_guard()
    app = Bare()
    async with app.run_test(size=(120, 6)):
        out = terminal_output(app)
    for raw in RAW:
        assert raw not in out, repr(raw)
    assert "red" in out and "evil" in out  # the text itself is still shown


@pytest.fixture
def hostile_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> str:
    """A session titled and written to with the corpus, answered by the simulator."""
    from clawtower.cli.main import main

    monkeypatch.setenv("CLAWTOWER_HOME", str(tmp_path / "home"))
    db = str(tmp_path / "store.db")
    assert main(["session", "new", "--title", HOSTILE, "--db", db]) == 0
    assert main(["session", "send", "S-1", HOSTILE, "--db", db]) == 0
    capsys.readouterr()
    return db


async def test_sessions_mode_shows_hostile_text_as_visible_escapes(hostile_db: str) -> None:
    app = ClawtowerApp(hostile_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        screen = app.screen
        assert isinstance(screen, SessionsScreen)
        await until(pilot, lambda: screen.detail is not None and screen.detail["id"] == "S-1")
        await pilot.pause(0.1)
        texts = segment_texts(app)
        out = terminal_output(app)
    drawn = "".join(texts)
    # the title (session list and header) and the transcript: escapes, before layout
    assert "\\x1b[31mred" in drawn and "<U+202E>evil" in drawn and "<U+200D>" in drawn
    assert all(is_safe(t) for t in texts), [t for t in texts if not is_safe(t)][:3]
    for raw in RAW:
        assert raw not in out, repr(raw)


async def test_modals_and_toasts_show_hostile_text_and_never_read_it_as_markup(
        hostile_db: str) -> None:
    from clawtower.tui.modals import ConfirmScreen

    app = ClawtowerApp(hostile_db, run_engine=False, operator="alice")
    async with app.run_test(size=SIZE) as pilot:
        await app.wait_loaded()
        app.push_screen(ConfirmScreen(f"[b]x[/b] {HOSTILE}", f"body {HOSTILE}"))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        app.notify(f"[@click=app.quit]clickme[/] {HOSTILE}", title="t\u202eitle")
        await pilot.pause(0.3)
        texts = segment_texts(app)
        out = terminal_output(app)
        toasts = list(app._notifications)
    drawn = "".join(texts)
    assert "[b]x[/b]" in drawn  # the title is text, not markup
    assert drawn.count("<U+202E>evil") >= 2  # title and body
    [toast] = toasts  # a toast is never markup either (no [@click=...] actions)
    assert toast.markup is False and "<U+202E>evil" in toast.message
    assert "<U+202E>" in toast.title and is_safe(toast.message)
    assert all(is_safe(t) for t in texts), [t for t in texts if not is_safe(t)][:3]
    for raw in RAW:
        assert raw not in out, repr(raw)
