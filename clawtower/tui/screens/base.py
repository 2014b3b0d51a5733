"""What every mode's screen shares: the store's changes fed in, the `/` filter, the footer;
and the list-and-detail layout of modes 3 and 5."""

from __future__ import annotations

from typing import Any, ClassVar, cast

from rich.console import RenderableType
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Input, Static, TextArea

from clawtower.core import ClawError

from ..model import Delta
from ..protocol import ConsoleApp
from ..render import show_section
from ..rowlist import RowList
from ..views import ItemList, KeyBar, ModeBar


class FilterBar(Input):
    """The `/` filter input: narrows the list that had focus; esc clears it."""

    def __init__(self) -> None:
        super().__init__(placeholder="filter (enter keeps it, esc clears)", id="filter-bar",
                         disabled=True)  # hidden and out of the focus chain until `/`
        self.target: RowList | None = None


def count_label(lst: RowList, total: int) -> str:
    """A list title's count: `12`, or `3 of 12` while a filter hides some."""
    return f"{lst.visible_count} of {total}" if lst.filter_text else str(total)


def explained(key: str, action: str) -> Binding:
    """The fallback of a key whose action cannot run now: says why (ConsoleScreen.explain).

    Put it right after the key's own binding: Textual tries a key's bindings in order, and
    moves on to the next when `check_action` refuses one."""
    return Binding(key, f"screen.explain('{action}')", show=False, system=True)


def task_command_unavailable(task: dict[str, Any] | None, task_id: str | None,
                             action: str) -> str | None:
    """Why `u` (unblock) or `x` (cancel_task) cannot act on `task` now, or None."""
    if task is None:
        return f"task {task_id}: no such task" if task_id else "no task selected"
    phase = str(task["phase"])
    if action == "unblock" and phase != "circuit_open":
        return (f"{task['id']} is {phase.replace('_', ' ')}: nothing to unblock (only a task"
                " whose circuit is open is blocked)")
    if action == "cancel_task" and phase in ("completed", "failed"):
        return f"{task['id']} already ended {phase}: nothing to cancel"
    return None


class ConsoleScreen(Screen[None]):
    """A screen fed with the store's changes by the app.

    Keys never do nothing silently: an action that cannot run now (`unavailable` says why)
    shows dimmed in the footer, stays listed in the key panel, and its key, pressed, says why
    in a notification (through its `explained` fallback binding)."""

    MODE: ClassVar[str] = "tasks"
    AUTO_FOCUS = None  # each screen focuses its main widget itself
    HIDDEN_WHEN_UNAVAILABLE: ClassVar[frozenset[str]] = frozenset()  # not dimmed: not shown

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", id="filter",
                tooltip="Filter the focused list (esc clears)"),
        explained("slash", "filter"),
        Binding("escape", "escape", "Back/clear", show=False, id="escape"),
    ]

    def unavailable(self, action: str) -> str | None:
        """Why `action` cannot run here now, or None when it can."""
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "explain":
            return True
        if self.unavailable(action) is None:
            return True
        return False if action in self.HIDDEN_WHEN_UNAVAILABLE else None

    def action_explain(self, action: str) -> None:
        why = self.unavailable(action)
        if why:
            self.notify(why, severity="warning")

    @property
    def capp(self) -> ConsoleApp:
        """The app, as far as a screen may use it (tui/protocol.py)."""
        return cast(ConsoleApp, self.app)

    def on_mount(self) -> None:
        self.capp.add_view(self)
        self.sync()
        self.mark_waiting()

    def on_unmount(self) -> None:
        self.capp.remove_view(self)

    def rows_read(self) -> bool:
        """Have this screen's rows been read yet? The model's are once the app's first
        load has finished; a screen that reads the store itself adds its own first read."""
        return self.capp.loaded.is_set()

    def mark_waiting(self) -> None:
        """Until `rows_read`, its empty lists say "loading…", not their empty-state text
        (an empty list on a busy machine looked like a broken demo)."""
        waiting = not self.rows_read()
        for lst in self.query(RowList):
            lst.set_waiting(waiting)

    def sync(self) -> None:
        """Show the model as it is now."""
        self._update_bar()

    def model_changed(self, delta: Delta) -> None:
        if delta.full:
            self.sync()
        else:
            self.apply(delta)
        self.mark_waiting()

    def apply(self, delta: Delta) -> None:
        self._update_bar()

    def _update_bar(self) -> None:
        for bar in self.query(ModeBar):
            bar.update_bar()

    # ------------------------------------------------------------------ filter

    def action_filter(self) -> None:
        focused = self.focused
        target = focused if isinstance(focused, RowList) else None
        if target is None:
            lists = list(self.query(RowList))
            target = lists[0] if lists else None
        if target is None:
            self.notify("nothing to filter here", severity="warning")
            return
        bar = self.query_one(FilterBar)
        bar.target = target
        bar.value = target.filter_text
        bar.disabled = False
        bar.display = True
        bar.focus()

    @on(Input.Changed, "#filter-bar")
    def _filter_changed(self, event: Input.Changed) -> None:
        bar = self.query_one(FilterBar)
        if bar.target is not None:
            bar.target.set_filter(event.value)
            self.filter_applied(bar.target)

    @on(Input.Submitted, "#filter-bar")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._close_filter(clear=False)

    def _close_filter(self, *, clear: bool) -> None:
        bar = self.query_one(FilterBar)
        target = bar.target
        bar.display = False
        bar.disabled = True
        if target is not None:
            if clear:
                target.set_filter("")
                self.filter_applied(target)
            target.focus()

    def filter_applied(self, target: RowList) -> None:
        """The filter of `target` changed: its subtitle, and the titles' counts, follow."""
        self._filter_subtitle(target)
        self.update_titles()

    def update_titles(self) -> None:
        """Recount the titles (a subclass's lists say `3 of 12` while filtered)."""

    def _filter_subtitle(self, target: RowList) -> None:
        if target.filter_text:
            target.border_subtitle = (f"filter '{target.filter_text}': {target.visible_count} of "
                                      f"{len(target)} · esc clears")
        else:
            target.border_subtitle = ""

    def close_help(self) -> bool:
        """esc closes the key panel first, when it is open (True if it was). Queried by name:
        the help widget (it loads Markdown) is imported when first shown, not at start-up."""
        if not self.query("HelpPanel"):
            return False
        self.app.action_hide_help_panel()
        return True

    def action_escape(self) -> None:
        if self.close_help():
            return
        bar = self.query_one(FilterBar)
        if bar.display:
            self._close_filter(clear=True)
            return
        focused = self.focused
        if isinstance(focused, Input | TextArea):
            self.leave_input()
            return
        if isinstance(focused, RowList) and focused.filter_text:
            focused.set_filter("")
            self.filter_applied(focused)
            return
        self.back()

    def leave_input(self) -> None:
        """esc in a text box of the mode (mode 4's message line): the keyboard goes back
        to the mode's first list, where the mode keys work again (what was typed stays)."""
        lists = [lst for lst in self.query(RowList) if lst.display]
        if lists:
            lists[0].focus()
        else:
            self.set_focus(None)

    def back(self) -> None:
        """What esc does when there is no filter, help or text box to leave."""

    def compose_bottom(self) -> ComposeResult:
        yield FilterBar()
        yield KeyBar()


class PlaceholderScreen(ConsoleScreen):
    """Modes whose features arrive with later issues: say so, show nothing made up."""

    TEXT: ClassVar[str] = ""

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Vertical(id="body"):
            yield Static(self.TEXT, id="placeholder")
        yield from self.compose_bottom()

    HIDDEN_WHEN_UNAVAILABLE = frozenset({"filter"})

    def unavailable(self, action: str) -> str | None:
        return "nothing to filter here: this mode has no list yet" if action == "filter" else None


class ListDetailScreen(ConsoleScreen):
    """A live list on the left and the selected item's detail on the right, in titled
    sections that hide when empty; the detail is re-read from the store when its item
    changes. Subclasses say which list, which sections, and how to read and draw an item."""

    SECTIONS: ClassVar[list[tuple[str, str]]] = []
    PREFIX: ClassVar[str] = ""  # section ids: f"{PREFIX}-{key}"; pane/detail ids from it too
    LIST_TITLE: ClassVar[str] = ""

    def __init__(self) -> None:
        super().__init__()
        self.selected: str | None = None
        self.detail: dict[str, Any] | None = None

    # -- what a subclass provides

    def make_list(self) -> ItemList:
        raise NotImplementedError

    def items(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        """(did the list change, ids of the items that changed)."""
        raise NotImplementedError

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        return ""

    async def fetch(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _render_detail(self) -> None:
        raise NotImplementedError

    # -- shared behaviour

    @property
    def item_list(self) -> ItemList:
        return self.query_one(f"#{self.PREFIX}-list", ItemList)

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with Horizontal(id=f"{self.PREFIX}-pane", classes="list-detail"):
            lst = self.make_list()
            lst.id = f"{self.PREFIX}-list"
            lst.border_title = self.LIST_TITLE
            yield lst
            with VerticalScroll(id=f"{self.PREFIX}-detail", classes="detail"):
                for key, title in self.SECTIONS:
                    section = Static(id=f"{self.PREFIX}-{key}", classes="section")
                    section.border_title = title
                    yield section
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.item_list.focus()
        self.app.theme_changed_signal.subscribe(self, lambda _t: self._render_detail())
        if not self.rows_read():  # say "Loading…" (drawn once mounted)
            self.call_after_refresh(self._render_detail)

    def sync(self) -> None:
        self._list()
        self.reload()
        super().sync()

    def apply(self, delta: Delta) -> None:
        changed, ids = self.changes(delta)
        if changed:
            self._list()
            if self.selected in ids:
                self.reload()
        super().apply(delta)

    def _list(self) -> None:
        if self._tearing_down():  # rows read while the console quit: their list may be gone
            return
        lst = self.item_list
        items = self.items()
        lst.load(items)
        self._title(lst, items)
        self._filter_subtitle(lst)
        self.before_select(lst)
        key = lst.cursor_key
        if key is not None and key != self.selected:
            self.select(str(key))
        elif key is None and self.selected is None:
            self._render_detail()
        self.mark_waiting()

    def _title(self, lst: RowList, items: list[dict[str, Any]]) -> None:
        lst.border_title = (f"{self.LIST_TITLE} · {count_label(lst, len(items))}"
                            f"{self.list_extra(items)}")

    def update_titles(self) -> None:
        self._title(self.item_list, self.items())

    def before_select(self, lst: RowList) -> None:
        """A hook to move the cursor (e.g. to an item just started) before selecting."""

    def select(self, key: str) -> None:
        self.selected = key
        self.detail = None
        self.reload()

    def on_row_list_highlighted(self, event: RowList.Highlighted) -> None:
        if event.control is self.item_list and event.key is not None \
                and event.key != self.selected:
            self.select(str(event.key))

    @work(exclusive=True, group="detail")
    async def reload(self) -> None:
        if self.capp.store is None or self.selected is None:
            self._render_detail()
            return
        wanted = self.selected
        try:
            detail = await self.fetch(wanted)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        if wanted == self.selected and not self._tearing_down():
            self.detail = detail
            self._render_detail()

    def _tearing_down(self) -> bool:
        """The screen or the app is closing (its sections may be gone already): a detail
        fetched meanwhile has nowhere to go (a NoMatches on quit, seen under load)."""
        return bool(self._closing or self._closed or self._pruning or self.app._closing
                    or self.app._exit)

    def _set(self, key: str, renderable: RenderableType | None, title: str | None = None) -> None:
        show_section(self.query_one(f"#{self.PREFIX}-{key}", Static), renderable, title)
