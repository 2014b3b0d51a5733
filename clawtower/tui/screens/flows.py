"""Mode 7: flows (core/flows, seed 003): each flow's task DAG as a live tree (status per
node, agent, duration, tokens), the selected node's agent mailbox (inbox, outbox, archive;
`b` cycles), and a drill-down into the node's session transcript (the TASK it got and what
the agent answered). `x` cancels the selected node's flow.

Everything goes through core's read and write API (`core.flows.service.Flows`); the screen
re-reads when the store's events touch flows, whichever process wrote them, and once a
second while a flow runs (durations move).
"""

from __future__ import annotations

import json
import time
from collections.abc import Hashable, Sequence
from functools import partial
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType

from clawtower.core import ClawError
from clawtower.core.describe import one_line
from clawtower.core.flows.service import BOXES, Flows
from clawtower.core.textsafe import safe

from ..columns import Column
from ..commands import mode_help
from ..modals import ConfirmScreen, EditTextScreen
from ..model import Delta, fmt_time
from ..render import Palette, columns_table
from ..rowlist import Cell, RowList
from ..traceview import no_trace, open_trace, trace_binding
from ..views import ItemList
from .base import ListDetailScreen, explained

FLOWS_SHOWN = 20  # newest flows listed
NODES_SHOWN = 300  # task rows per flow (the rest is counted on the flow's row)
MAIL_SHOWN = 30
STATUS_TONE = {"running": "active", "dispatched": "waiting", "pending": "idle",
               "waiting": "waiting", "synthesizing": "active", "done": "done",
               "failed": "failed", "cancelled": "failed"}


def duration(row: dict[str, Any], now: float) -> str:
    start = row.get("started_at") or row.get("dispatched_at") or row.get("created_at")
    if not start:
        return "-"
    end = row.get("ended_at") or now
    secs = max(0.0, float(end) - float(start))
    return f"{secs:.1f}s" if secs < 120 else f"{secs / 60:.1f}m"


class FlowTree(ItemList):
    """Flows, each followed by its tasks as a tree (coordinator -> subtasks)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "screen.cycle_box", "Box", id="flow.box",
                tooltip="Show the agent's inbox, outbox or archive"),
        Binding("x", "screen.cancel_flow", "Cancel", id="flow.cancel",
                tooltip="Cancel the selected flow and its open tasks"),
        explained("x", "cancel_flow"),
        Binding("R", "screen.rerun_node", "Rerun", id="flow.rerun",
                tooltip="A new flow from the selected node: reuses every reply not"
                        " downstream of it (asks to confirm; the instruction may be edited)"),
        explained("R", "rerun_node"),
        *trace_binding("flow"),
    ]

    columns: ClassVar[Sequence[Column]] = (
        # the node id is the row's identity: siblings (`mig-users`, `mig-invoices`) share
        # their prefix, so the id keeps its whole width (up to 28 cells) and the other
        # columns give way first; the task text leaves a narrow list (the detail shows it)
        Column("Node", fit=28, min_width=10, keep=True),
        Column("Status", fit=12, min_width=8),
        Column("Agent", fit=12), Column("Time", width=7, justify="right", hide_below=56),
        Column("Tokens", fit=8, justify="right", hide_below=64),
        Column("Task", ratio=1, min_width=12, hide_below=48),
    )
    empty_text = "no flows yet — `clawtower flow run AGENT TASK`, or `clawtower demo`"

    def row_cells(self, key: Hashable, data: Any) -> Sequence[Cell]:
        now = time.time()
        if data["kind"] == "flow":
            more = data.get("hidden") or 0
            return [(str(data["id"]), "key"),
                    (str(data["status"]), STATUS_TONE.get(str(data["status"]), "idle")),
                    str(data["agent"]), (duration(data, now), "dim"),
                    (f"{data['tokens']:,}", "dim"),
                    one_line(f"{data['done']}/{data['nodes']} done · {data['instruction']}"
                             + (f" · {more} more node(s)" if more else ""))]
        depth = int(data["depth"]) + 1
        label = "  " * (depth - 1) + "└ " + str(data["local_id"])
        return [(label, None), (str(data["status"]), STATUS_TONE.get(str(data["status"]),
                                                                     "idle")),
                str(data["agent"]), (duration(data, now), "dim"),
                (f"{data['tokens']:,}", "dim"), one_line(str(data["instruction"]))]

    def row_search_text(self, key: Hashable, data: Any) -> str:
        return f"{data['id']} {data['agent']} {data['status']} {data.get('instruction', '')}"

    def row_sort_key(self, key: Hashable, data: Any) -> Any:
        return int(data["order"])

    @staticmethod
    def version(item: dict[str, Any]) -> Hashable:
        live = int(time.time()) if item["status"] in ("running", "synthesizing") else 0
        return (item.get("last_seq"), item["status"], item.get("order"), live)


async def read_rows(flows: Flows) -> list[dict[str, Any]]:
    """The newest flows and their task trees, as list rows in display order."""
    out: list[dict[str, Any]] = []
    for f in await flows.flows(limit=FLOWS_SHOWN):
        tasks = (await flows.get(f["id"], limit=NODES_SHOWN * 4))["tasks"]
        shown = tasks[:NODES_SHOWN]
        out.append({**f, "kind": "flow", "order": len(out),
                    "hidden": int(f["nodes"]) - len(shown)})
        for t in shown:
            out.append({**t, "id": t["task_id"], "kind": "task", "order": len(out)})
    return out


class FlowsScreen(ListDetailScreen):
    """Mode 7: flows as live DAG trees, the selected agent's mailbox, the node's transcript."""

    HELP = mode_help(
        "**Flows**: each flow's task DAG as a live tree (status, agent, duration, tokens). "
        "Select a node to see its instruction, the context its coordinator passed down, its "
        "result, its agent's mailbox (`b`: inbox, outbox, archive) and its session "
        "transcript; `x` cancels the flow; `R` reruns from the selected node (a new flow "
        "reusing every reply not downstream of it; its instruction may be edited first); "
        "`w` shows its trace as a waterfall (every node, turn and model call on one time "
        "axis). Start one with `clawtower flow run AGENT TASK`.",
        ())
    MODE = "flows"
    PREFIX = "flo"
    LIST_TITLE = "Flows"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("result", "Result"), ("context", "Context passed down"),
        ("mailbox", "Mailbox"), ("transcript", "Session transcript"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.box = "inbox"
        self.first_read = False  # its rows come from its own read of the store
        self.wanted: str | None = None  # a flow to select once it is listed (a rerun)

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(1.0, self._tick)

    def rows_read(self) -> bool:
        return super().rows_read() and self.first_read  # its own read of the store too

    def _tick(self) -> None:
        if any(r["kind"] == "flow" and r["status"] == "running" for r in self.rows):
            self.refresh_rows(reload_detail=True)

    # -- data

    def make_list(self) -> ItemList:
        return FlowTree()

    def items(self) -> list[dict[str, Any]]:
        return self.rows

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        # a node's session, created by its flow, takes the node's task (issue 36)
        hit = any(e.type.startswith(("flow.", "agentspec.")) or (
            e.type == "session.created" and e.actor.startswith("flow:")) for e in delta.events)
        return hit, {"*"} if hit else set()

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        running = sum(1 for r in items if r["kind"] == "flow" and r["status"] == "running")
        return f" · {running} running" if running else ""

    def sync(self) -> None:
        super().sync()
        self.refresh_rows(reload_detail=True)

    def apply(self, delta: Delta) -> None:
        changed, _ = self.changes(delta)
        if changed:
            self.refresh_rows(reload_detail=True)
        self._update_bar()

    @work(exclusive=True, group="flows-list")
    async def refresh_rows(self, reload_detail: bool = False) -> None:
        if self.capp.store is None:
            return
        try:
            self.rows = await read_rows(Flows(self.capp.store))
            self.first_read = True
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        self._list()
        if reload_detail:
            self.reload()

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        flows = Flows(self.capp.store)
        flow_id = key.split("/", 1)[0]
        flow = next((r for r in self.rows if r["id"] == flow_id), None)
        if flow is None:
            return None
        task_id = key if "/" in key else flow["root_task"]
        task = await flows.task(task_id)
        return {"flow": flow, "task": task, "is_flow": "/" not in key,
                "mail": await flows.mailbox(task["agent"], self.box, flow_id, MAIL_SHOWN),
                "transcript": await flows.transcript(task_id)}

    # -- actions

    def action_cycle_box(self) -> None:
        self.box = BOXES[(BOXES.index(self.box) + 1) % len(BOXES)]
        self.reload()

    def action_cancel_flow(self) -> None:
        if self.selected is not None:
            self._cancel(self.selected.split("/", 1)[0])

    @work(group="flow-cancel")
    async def _cancel(self, flow_id: str) -> None:
        if self.capp.store is None:
            return
        try:
            await Flows(self.capp.store).cancel(flow_id, by=self.capp.operator,
                                                reason=f"cancelled from the console by"
                                                       f" {self.capp.operator}")
            self.notify(f"{flow_id} cancelled", title="Flows")
        except ClawError as exc:
            self.notify(str(exc), severity="error", timeout=10)

    def before_select(self, lst: RowList) -> None:
        if self.wanted is not None and self.wanted in lst:
            lst.move_cursor_to_key(self.wanted)
            self.wanted = None

    def _node(self) -> tuple[str, str] | None:
        """The selected node's id and instruction (a flow's row: its root node)."""
        key = self.selected or ""
        row = next((r for r in self.rows if r["id"] == key), None)
        if row is None:
            return None
        if row["kind"] == "flow":
            root = next((r for r in self.rows if r["id"] == row["root_task"]), None)
            return str(row["root_task"]), str((root or row)["instruction"])
        return key, str(row["instruction"])

    def action_rerun_node(self) -> None:
        """`R`: edit the node's instruction (or keep it), confirm, then core's flow rerun."""
        picked = self._node()
        if picked is None:
            return
        node, instruction = picked
        flow_id = node.split("/", 1)[0]

        def confirmed(edited: str | None, ok: bool | None) -> None:
            if ok:
                self._rerun(node, edited)

        def got(text: str | None) -> None:
            if text is None:
                return
            edited = text if text.strip() and text.strip() != instruction.strip() else None
            said = f"with the edited instruction:\n\n{one_line(text, 300)}" if edited else \
                "with its instruction as it was."
            self.app.push_screen(ConfirmScreen(
                f"Rerun {node}?",
                f"A new flow reuses every reply of {flow_id} not downstream of {node}, and "
                f"runs {node}, its dependents and the syntheses above it again, {said}\n\n"
                f"{flow_id} is untouched. By {self.capp.operator}.", yes="Rerun",
                no="Not now", destructive=False), partial(confirmed, edited))

        self.app.push_screen(EditTextScreen(
            f"Rerun {node}: its instruction", "Edit the node's instruction, or keep it.",
            instruction, hint="unchanged or empty: as it was"), got)

    @work(group="flow-rerun")
    async def _rerun(self, node: str, instruction: str | None) -> None:
        if self.capp.store is None:
            return
        from clawtower.core.flows.rerun import rerun_flow

        try:
            new = await rerun_flow(self.capp.store, node, instruction, by=self.capp.operator)
        except ClawError as exc:
            self.notify(str(exc), title="Not rerun", severity="error", timeout=10)
            return
        self.notify(f"{new}: rerun of {node}", title="Flows")
        self.wanted = new
        self.refresh_rows(reload_detail=True)

    def selected_flow(self) -> str | None:
        return self.selected.split("/", 1)[0] if self.selected else None

    def action_trace(self) -> None:
        open_trace(self, self.selected_flow())

    def unavailable(self, action: str) -> str | None:
        """Why `x` cannot cancel now (said when it is pressed: a key never does nothing)."""
        if action == "rerun_node":
            return None if self._node() is not None else (
                "no node selected: nothing to rerun" if self.rows else
                "no flows yet: nothing to rerun")
        if action == "trace":
            return no_trace("flow", self.selected_flow())
        if action != "cancel_flow":
            return super().unavailable(action)
        fid = (self.selected or "").split("/", 1)[0]
        row = next((r for r in self.rows if r["id"] == fid), None)
        if row is None:
            return "no flow selected: nothing to cancel" if self.rows else \
                "no flows yet: nothing to cancel"
        if row["status"] != "running":
            return f"{fid} is {row['status']}: nothing to cancel"
        return None

    # -- drawing

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        d = self.detail
        pal = Palette(self.app)
        if d is None:
            text = ("Select a flow or one of its tasks." if self.rows else
                    "Loading…" if not self.rows_read() else
                    "No flows yet. Start one with `clawtower flow run AGENT TASK --wait`,"
                    " or run `clawtower demo`.")
            self._set("head", Text(text, style=pal.tone("idle")))
            for key, _ in self.SECTIONS[1:]:
                self._set(key, None)
            return
        t, f = d["task"], d["flow"]
        self._set("head", head_renderable(pal, f, t, d["is_flow"]))
        self._set("result", result_renderable(pal, f, t, d["is_flow"]))
        ctx = json.loads(t["context"]) if t["context"] else None
        self._set("context", Text(json.dumps(ctx, indent=2, ensure_ascii=False))
                  if ctx else None)
        self._set("mailbox", mailbox_renderable(pal, d["mail"], self.box),
                  f"Mailbox of {t['agent']} · {self.box} · {len(d['mail'])} (b: next box)")
        self._set("transcript", transcript_renderable(pal, d["transcript"]),
                  f"Session transcript · {t['session_id'] or 'none'}")


def head_renderable(pal: Palette, f: dict[str, Any], t: dict[str, Any], is_flow: bool
                    ) -> RenderableType:
    head = Text()
    name = f["id"] if is_flow else t["task_id"]
    status = f["status"] if is_flow else t["status"]
    head.append(f"{name}  ", style=pal("accent", "bold"))
    head.append(one_line(str(f["instruction"] if is_flow else t["instruction"]), 120),
                style="bold")
    head.append("   ")
    head.append(f" {str(status).upper()} ", style=pal.tone(STATUS_TONE.get(str(status), "idle"),
                                                          "bold reverse"))
    now = time.time()
    if is_flow:
        meta = Text(f"root agent {f['agent']} · {f['done']}/{f['nodes']} tasks done ·"
                    f" {f['tokens']:,} tokens · {duration(f, now)} · started"
                    f" {fmt_time(f['created_at'])}"
                    + (f" · {f['ignored']} ignored message(s)" if f["ignored"] else ""),
                    style=pal.tone("idle"))
        return Group(head, meta)
    deps = ", ".join(json.loads(t["depends_on"])) or "-"
    meta = Text(f"agent {t['agent']} · depth {t['depth']} · depends on {deps} ·"
                f" {t['mode'] or 'undecided'} · {duration(t, now)} · {t['tokens']:,} tokens"
                + (f" · {t['children']} subtask(s), {t['open_children']} open"
                   if t["children"] else ""), style=pal.tone("idle"))
    return Group(head, meta)


def result_renderable(pal: Palette, f: dict[str, Any], t: dict[str, Any], is_flow: bool
                      ) -> RenderableType | None:
    result = (f["result"] if is_flow else t["result"])
    error = (f["error"] if is_flow else t["error"])
    if error:
        return Text(str(error), style=pal.tone("failed"))
    return Text(str(result)) if result else None


def mailbox_renderable(pal: Palette, mail: list[dict[str, Any]], box: str) -> RenderableType:
    if not mail:
        return Text(f"({box} empty)", style=pal.tone("idle"))
    table = columns_table(pal, ("Kind", {"no_wrap": True}), ("From", {"no_wrap": True}),
                          ("To", {"no_wrap": True}), ("Task", {"no_wrap": True}),
                          ("Body", {"ratio": 1}))
    for m in mail:
        body = f"(ignored: {m['reason']})" if m.get("reason") else str(m["body"])
        if m["status"] == "cancelled":
            body = f"(cancelled) {body}"
        tone = {"TASK": "waiting", "REPLY": "done", "ERROR": "failed"}.get(str(m["kind"]))
        table.add_row(Text(str(m["kind"]), style=pal.tone(tone or "idle")),
                      str(m["from_agent"]), str(m["to_agent"]),
                      str(m["task_id"]).rsplit("/", 1)[-1], one_line(body, 200))
    return table


def transcript_renderable(pal: Palette, msgs: list[dict[str, Any]]) -> RenderableType:
    if not msgs:
        return Text("(no session turn for this task yet)", style=pal.tone("idle"))
    rows: list[RenderableType] = []
    for m in msgs:
        line = Text()
        line.append(f"{fmt_time(m.get('at'))} ", style=pal.tone("idle"))
        role = str(m["role"])
        line.append(f"{role:>10}  ", style=pal.tone(
            {"user": "waiting", "assistant": "done"}.get(role, "idle"), "bold"))
        line.append(safe(str(m["text"])))
        rows.append(line)
    return Group(*rows)


__all__ = ["FlowTree", "FlowsScreen", "read_rows"]
