"""Mode 8: expert triggers (last and next fire, queue depth per key, last result, refused webhook
credentials in the last hour), the dead-letter queue and escalated invocations, with the
operator's actions on them, and the latest refused webhook requests (error id -> why).

Read from the store through `core.triggers.views` (the CLI's `triggers list`, `deadletter
list`) when the mode opens, on every store change and on `r`. `j`/`k` select a dead letter
or escalation; `t` sends a dead letter back to its queue, `d` drops it, `a` acknowledges an
escalation: the same core calls as `clawtower deadletter retry|drop`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from clawtower.core import ClawError
from clawtower.core.textsafe import safe_line

from ..model import Delta
from ..render import Fitted, Palette, columns_table, table_need
from ..views import ModeBar
from .base import ConsoleScreen, explained

STATUS_TONE = {"done": "done", "queued": "idle", "running": "running", "retry": "blocked",
               "paused": "blocked", "dead_letter": "failed", "escalated": "failed",
               "abandoned": "dim", "dropped": "dim", "skipped": "dim", "failed": "dim"}


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M:%S")


def _auth(pal: Palette, r: dict[str, Any]) -> Text | str:
    """Refused webhook credentials in the last hour (429 episodes in red)."""
    if r["type"] != "webhook":
        return "-"
    n, throttled = r["auth_failures_1h"], r["auth_throttled_1h"]
    if throttled:
        return Text(f"{n}, 429 x{throttled}", style=pal.tone("failed"))
    return Text(str(n), style=pal.tone("blocked") if n else "")


class TriggersScreen(ConsoleScreen):
    MODE = "triggers"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload", id="triggers.reload",
                tooltip="Read the triggers and queues again"),
        Binding("j,down", "move(1)", "Next", show=False, id="triggers.next"),
        Binding("k,up", "move(-1)", "Previous", show=False, id="triggers.prev"),
        Binding("t", "retry_dead_letter", "Retry", id="triggers.retry",
                tooltip="Send the selected dead letter back to its queue"),
        explained("t", "retry_dead_letter"),
        Binding("d", "drop_dead_letter", "Drop", id="triggers.drop",
                tooltip="Drop the selected dead letter for good"),
        explained("d", "drop_dead_letter"),
        Binding("a", "acknowledge", "Acknowledge", id="triggers.ack",
                tooltip="Acknowledge the selected escalation (it leaves the list)"),
        explained("a", "acknowledge"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.triggers: list[dict[str, Any]] = []
        self.dead: list[dict[str, Any]] = []
        self.escalated: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.cursor = 0
        self.error = ""
        self.first_read = False  # its rows come from its own read of the store

    def rows_read(self) -> bool:
        return super().rows_read() and self.first_read  # its own read of the store too

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with VerticalScroll(id="body"):
            yield Static("", id="triggers-body")
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()  # sync reads the store (once it is open)

    # ------------------------------------------------------------ data

    @work(exclusive=True, group="triggers-load")
    async def reload(self) -> None:
        from clawtower.core.triggers import views

        store = self.capp.store
        if store is None:
            return
        try:
            self.triggers = await views.overview(store)
            self.dead = await views.dead_letters(store)
            self.escalated = await views.escalations(store)
            self.refused = await views.auth_failures(store, limit=8)
            self.error = ""
            self.first_read = True
        except ClawError as exc:
            self.error = str(exc)
        self.cursor = min(self.cursor, max(0, len(self.actionable()) - 1))
        self.refresh_body()

    def actionable(self) -> list[dict[str, Any]]:
        return [*self.dead, *self.escalated]

    def selected(self) -> dict[str, Any] | None:
        items = self.actionable()
        return items[self.cursor] if 0 <= self.cursor < len(items) else None

    def apply(self, delta: Delta) -> None:
        super().apply(delta)
        self.reload()

    def sync(self) -> None:
        super().sync()
        self.refresh_body()
        if not self.first_read:  # opened before the store's first load: read it now
            self.reload()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "filter":
            return False
        return super().check_action(action, parameters)

    def unavailable(self, action: str) -> str | None:
        item = self.selected()
        if action in ("retry_dead_letter", "drop_dead_letter") and (
                item is None or item["status"] != "dead_letter"):
            return "select a dead letter first (j/k)"
        if action == "acknowledge" and (item is None or item["status"] != "escalated"):
            return "select an escalated invocation first (j/k)"
        return None

    # ------------------------------------------------------------ actions

    def action_reload(self) -> None:
        self.reload()

    def action_move(self, step: int) -> None:
        n = len(self.actionable())
        if n:
            self.cursor = (self.cursor + step) % n
            self.refresh_body()
            self.refresh_bindings()

    def action_retry_dead_letter(self) -> None:
        self._act("retry")

    def action_drop_dead_letter(self) -> None:
        self._act("drop")

    def action_acknowledge(self) -> None:
        self._act("ack")

    @work(group="triggers-act")
    async def _act(self, what: str) -> None:
        from clawtower.core.triggers import views

        item = self.selected()
        store = self.capp.store
        if item is None or store is None:
            return
        by = self.capp.operator
        try:
            if what == "retry":
                await views.retry_dead_letter(store, item["id"], by)
                self.notify(f"{item['id']}: queued again")
            elif what == "drop":
                await views.drop_dead_letter(store, item["id"], by, "dropped in the console")
                self.notify(f"{item['id']}: dropped")
            else:
                await views.resolve_escalation(store, item["id"], by)
                self.notify(f"{item['id']}: acknowledged")
        except ClawError as exc:
            self.notify(str(exc), severity="error")
        self.reload()

    # ------------------------------------------------------------ rendering

    def refresh_body(self) -> None:
        for body in self.query("#triggers-body"):
            assert isinstance(body, Static)
            body.update(self.render_body())

    def render_body(self) -> RenderableType:
        pal = Palette(self.app)
        parts: list[RenderableType] = []
        if self.error:
            parts.append(Text(self.error, style=pal.tone("failed")))
        parts.append(Text("Triggers", style="bold"))
        if not self.rows_read():
            parts.append(Text("loading…", style=pal.tone("idle")))
            return Group(*parts)
        if not self.triggers:
            parts.append(Text("none: install an expert package that declares triggers"))
        else:
            parts.append(triggers_table(pal, self.triggers))
        items = self.actionable()
        for title, rows in (("Dead-letter queue (t retry, d drop)", self.dead),
                            ("Escalated (a acknowledge)", self.escalated)):
            parts += [Text(""), Text(title, style="bold")]
            if not rows:
                parts.append(Text("none"))
                continue
            tt = columns_table(pal, "", "Invocation", "Trigger", "Attempts",
                               ("Error", {"ratio": 1}))
            for r in rows:
                mark = "▶" if items and items[self.cursor]["id"] == r["id"] else " "
                tt.add_row(mark, r["id"], f"{r['expert']}/{r['trigger']}", str(r["attempt"]),
                           Text(str(r.get("error") or ""), style=pal.tone("failed")))
            parts.append(tt)
        if self.refused:  # what the callers were not told, matched by the id they got
            parts += [Text(""), Text("Refused webhook requests (latest)", style="bold")]
            ta = columns_table(pal, "At", "Trigger", "Address", "Error id",
                               ("Why", {"ratio": 1}))
            for r in self.refused:
                ta.add_row(_when(r["at"]), f"{r['expert']}/{r['trigger']}", r["address"],
                           r["error_id"], Text(safe_line(r["reason"]), style=pal.tone(
                               "failed" if r["kind"] == "throttled" else "blocked")))
            parts.append(ta)
        return Group(*parts)


def triggers_table(pal: Palette, triggers: list[dict[str, Any]]) -> RenderableType:
    """Every column where the row has room; at 80 columns the trigger, its type, when it
    fired and fires next, and its queue (mode, auth failures and the last result are in
    `clawtower triggers list`)."""
    rows = []
    for r in triggers:
        # per key: "k-1 queued 2"; one serial or parallel lane: the Mode column names it
        # already, so just "paused 1"
        queue = ", ".join(
            ("" if lane.startswith("(") else f"{lane} ")
            + " ".join(f"{st} {n}" for st, n in sorted(c.items()))
            for lane, c in sorted(r["queue"].items())[:6]) or "-"
        if len(r["queue"]) > 6:
            queue += f", +{len(r['queue']) - 6} keys"
        rows.append((r, f"{r['expert']}/{r['trigger']}",
                     r["type"] + (" (inactive)" if r["inactive"] else ""),
                     _when(r.get("last_fired")),
                     _when(r["next_fire"]) if r["type"] == "cron" else "-", queue))

    def result(r: dict[str, Any]) -> RenderableType:
        last = r["last"]
        return Text(f"{last['status']} {last['id']}", style=pal.tone(
            STATUS_TONE.get(last["status"], "idle"))) if last else "-"

    def wide() -> RenderableType:
        t = columns_table(pal, "Trigger", "Type", "Last fire", "Next fire", "Mode",
                          ("Queue per key", {"ratio": 1}), "Auth fails 1h", "Last result")
        for r, name, kind, fired, nxt, queue in rows:
            t.add_row(Text(name, style="bold"), kind, fired, nxt, r["mode"], queue,
                      _auth(pal, r), result(r))
        return t

    def compact() -> RenderableType:
        t = columns_table(pal, "Trigger", "Type", "Fired / next", ("Queue", {"ratio": 1}))
        for r, _name, kind, fired, nxt, queue in rows:
            t.add_row(Text(f"{r['expert']}/\n{r['trigger']}", style="bold"), kind,
                      f"{fired}\n{nxt}", queue)
        return t

    need = table_need(["Trigger"] + [x[1] for x in rows], ["Type"] + [x[2] for x in rows],
                      ["Last fire"] + [x[3] for x in rows], ["Next fire"] + [x[4] for x in rows],
                      ["Mode"] + [str(x[0]["mode"]) for x in rows],
                      ["Queue per key"] + [x[5] for x in rows], ["Auth fails 1h"],
                      ["Last result"] + [f"{x[0]['last']['status']} {x[0]['last']['id']}"
                                         for x in rows if x[0]["last"]])
    return Fitted(need, wide, compact)
