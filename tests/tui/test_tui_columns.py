"""Columns sized by their content (issue 27, item 7): a fitted column takes its widest cell,
the flexible one (a title) the rest; narrow lists leave out low-value columns; the meeting
tables fall back to one glyph per stance instead of cutting words; announces show what the
child said; the rolling summary is one entry per round."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from textual.app import App, ComposeResult

from clawtower.tui.columns import Column
from clawtower.tui.screens.meetings import stance_table, summary_renderable
from clawtower.tui.screens.sessions import SessionList
from clawtower.tui.views import ApprovalList


class Pal:
    """The styles a renderer asks for, all plain (what is shown is the point here)."""

    def __call__(self, name: str, extra: str = "") -> str:
        return extra

    def tone(self, tone: str | None, extra: str = "") -> str:
        return extra


def approval(n: int, kind: str, title: str) -> dict[str, Any]:
    return {"id": f"{n:08x}", "kind": kind, "subject": f"T-{n}", "title": title,
            "requested_at": 1.8e9 + n, "seq": n}


class ListApp(App[None]):
    CSS = "ApprovalList, SessionList { height: 1fr; }"

    def __init__(self, lst: Any) -> None:
        super().__init__()
        self.lst = lst

    def compose(self) -> ComposeResult:
        yield self.lst

    def get_theme_variable_defaults(self) -> dict[str, str]:
        from clawtower.tui.themes import variable_defaults

        return variable_defaults(None)


def line(lst: Any, y: int) -> str:
    return lst.render_line(y).text.rstrip()


async def test_fitted_kind_whole_and_title_gets_the_rest() -> None:
    lst = ApprovalList()
    app = ListApp(lst)
    title = "W-1: approve the release of version 2.4 to every customer"
    async with app.run_test(size=(84, 8)) as pilot:
        lst.load([approval(1, "task_side_effect", "T-1: 2 side effect(s)"),
                  approval(2, "workflow_approval", title)])
        await pilot.pause()
        header, row = line(lst, 0), line(lst, 2)
        assert "workflow_approval " in row  # 17 cells: the old fixed 16 cut it
        widths = lst._column_widths(lst.scrollable_content_region.width)
        kind, subject, title_w = widths[1], widths[2], widths[3]
        assert kind == len("workflow_approval") and subject == len("Subject")
        assert title_w == 84 - 8 - kind - subject - 8 - 4  # every other cell, gaps included
        assert header.split()[:4] == ["ID", "Kind", "Subject", "Title"]
        # the longest kind leaves: the column narrows again
        lst.load([approval(1, "task_side_effect", "T-1: 2 side effect(s)")])
        await pilot.pause()
        assert lst._column_widths(lst.scrollable_content_region.width)[1] == len(
            "task_side_effect")


async def test_narrow_list_leaves_out_columns_not_the_title() -> None:
    lst = SessionList()
    app = ListApp(lst)
    row = {"id": "S-1", "depth": 0, "status": "idle", "result": None, "agent": "lead",
           "tokens": 1555, "cost_usd": 0.01, "title": "Release review of the week"}
    async with app.run_test(size=(40, 8)) as pilot:
        lst.set_rows([("S-1", 1, row)])
        await pilot.pause()
        assert "Cost" not in line(lst, 0) and "Tokens" not in line(lst, 0)
        assert "Release rev" in line(lst, 1)
    wide = SessionList()
    async with ListApp(wide).run_test(size=(100, 8)) as pilot:
        wide.set_rows([("S-1", 1, row)])
        await pilot.pause()
        assert "Cost" in line(wide, 0) and "$0.0100" in line(wide, 1)
        assert "Release review of the week" in line(wide, 1)


def test_column_defaults_keep_fixed_widths() -> None:
    assert Column("x", width=7).fit == 0 and Column("x").hide_below == 0


def render(renderable: Any, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


MEETING = {
    "status": "running", "participants": ["ada", "ben", "cyd"],
    "rounds": [
        {"round": 1, "consensus": "NO", "summary": "ada for, ben against",
         "replies": [{"agent": "ada", "stance": "AGREE", "status": "ok"},
                     {"agent": "ben", "stance": "DISAGREE", "status": "ok"},
                     {"agent": "cyd", "stance": "NEUTRAL", "status": "ok"}]},
        {"round": 2, "consensus": None,
         "summary": "ben comes round Earlier: ada for, ben against",
         "replies": [{"agent": "ada", "stance": "DISAGREE", "status": "timeout"}]},
    ],
}


def test_stance_table_words_when_they_fit_glyphs_when_not() -> None:
    wide = render(stance_table(Pal(), MEETING), 80)  # type: ignore[arg-type]
    assert "disagree (timeout)" in wide and "✗" not in wide
    narrow = render(stance_table(Pal(), MEETING), 30)  # type: ignore[arg-type]
    assert "disa…" not in narrow and "neutr…" not in narrow
    ada = next(x for x in narrow.splitlines() if x.startswith("ada"))
    assert ada.split() == ["ada", "✓", "✗*"]  # agree, then disagree and timed out
    assert "✓ agree" in narrow  # the legend says what the glyphs are


def test_rolling_summary_is_one_entry_per_round_without_nesting() -> None:
    text = render(summary_renderable(Pal(), MEETING), 60)  # type: ignore[arg-type]
    lines = [x for x in text.splitlines() if x.strip()]
    assert lines == ["R1  ada for, ben against", "R2  ben comes round"]


def test_triggers_table_drops_columns_at_80_not_the_names() -> None:
    from clawtower.tui.screens.triggers import triggers_table

    rows = [{"expert": "incident-desk", "trigger": "alert_fired", "type": "webhook",
             "inactive": False, "last_fired": None, "next_fire": None, "mode": "serial",
             "queue": {"(serial)": {"paused": 1}}, "last": None, "auth_failures_1h": 0,
             "auth_throttled_1h": 0},
            {"expert": "incident-desk", "trigger": "morning_review", "type": "cron",
             "inactive": False, "last_fired": None, "next_fire": None, "mode": "serial",
             "queue": {}, "last": None}]
    wide = render(triggers_table(Pal(), rows), 140)  # type: ignore[arg-type]
    assert "incident-desk/morning_review" in wide and "Auth fails 1h" in wide
    narrow = render(triggers_table(Pal(), rows), 60)  # type: ignore[arg-type]
    assert "Auth fails" not in narrow and "…" not in narrow
    assert "incident-desk/" in narrow and "morning_review" in narrow and "paused 1" in narrow


def test_column_widths_shrink_fitted_before_the_title_and_leave_out_the_hidden() -> None:
    from clawtower.tui.columns import column_widths

    cols = [Column("ID", width=4), Column("Kind", fit=20, min_width=6),
            Column("Title", ratio=1, min_width=10), Column("Cost", width=7, hide_below=40)]
    fitted = {1: 17}
    assert column_widths(cols, 60, fitted) == [4, 17, 60 - 4 - 17 - 7 - 3, 7]
    # under 40 cells Cost leaves first; at 36 everything else fits as it is
    assert column_widths(cols, 36, fitted) == [4, 17, 13, -1]
    # at 30 Kind gives up 3 cells so that Title keeps its 10
    assert column_widths(cols, 30, fitted) == [4, 14, 10, -1]
    # too narrow for both floors: Kind stops at its floor, Title gets what is left
    assert column_widths(cols, 18, fitted) == [4, 6, 6, -1]
