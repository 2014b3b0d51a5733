"""Mode 5: workflow runs, newest first; the selected run's steps live (running, done,
skipped, failed, waiting), its gate, its output or error."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.text import Text

from clawtower.core.agents.usage import UsageTotals, format_usage
from clawtower.core.describe import one_line
from clawtower.core.textsafe import safe
from clawtower.core.workflows.cost import describe_cost

from ..commands import mode_help
from ..modals import ChoiceScreen, ConfirmScreen
from ..model import Delta, fmt_datetime, fmt_time
from ..render import Palette, columns_table, kv_table
from ..rowlist import RowList
from ..traceview import no_trace, open_trace
from ..views import ItemList, WorkflowList
from ..workflowdata import STEP_TONE, get_run, run_status
from .base import ListDetailScreen

PREVIEW_CHARS = 600


def _short(value: Any, limit: int = PREVIEW_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "…"


def step_summary(step: dict[str, Any]) -> str:
    """One line on what a step produced: its error, its json, else its stdout."""
    if step.get("error"):
        return one_line(str(step["error"]))
    if step.get("status") == "cancelled":
        return ("never ran: the run ended first" if not step.get("started_at") else
                "stopped: the run was cancelled here")
    if step.get("status") == "waiting":
        return "waits for an answer" if step.get("kind") == "input" else "waits for a decision"
    result = step.get("result") or {}
    if not isinstance(result, dict):
        return one_line(_short(result, 120))
    if result.get("skipped"):
        return "condition false"
    if result.get("approved") is not None:
        by = f" by {result['approvedBy']}" if result.get("approvedBy") else ""
        return ("approved" if result["approved"] else "not approved") + by
    for key in ("response", "json"):
        if result.get(key) is not None:
            return one_line(_short(result[key], 120))
    return one_line(str(result.get("stdout") or "")[:120])


STEP_NAME_KEPT = 24  # a step name up to this long is never cut, however narrow the pane


def steps_table(pal: Palette, run: dict[str, Any]) -> RenderableType:
    # the step name is what the operator reads (and types: `:retry RUN STEP`): it keeps its
    # width, up to STEP_NAME_KEPT cells; kind, status and result give way first
    names = [str(s["id"]) for s in run.get("steps") or []] + [
        f"  └ {b['id']}" for s in run.get("steps") or [] for b in s.get("branches") or []]
    step_width = min(STEP_NAME_KEPT, max((cell_len(n) for n in names), default=4))
    table = columns_table(pal, ("#", {"justify": "right", "width": 3}),
                          ("Step", {"min_width": step_width, "no_wrap": True,
                                    "overflow": "ellipsis"}), "Kind",
                   ("Status", {"no_wrap": True}), ("Try", {"justify": "right"}),
                   ("Result", {"ratio": 1, "no_wrap": True, "overflow": "ellipsis"}))
    for step in run.get("steps") or []:
        status = str(step["status"])
        tone = pal.tone(STEP_TONE.get(status, "idle"))
        table.add_row(str(step["index"] + 1), Text(step["id"], style="bold"),
                      Text(step.get("kind") or "", style=pal.tone("idle")),
                      Text(status, style=tone),
                      str(step["attempts"] or ""), Text(step_summary(step)))
        for branch in step.get("branches") or []:
            bstatus = str(branch["status"])
            table.add_row("", Text(f"  └ {branch['id']}"), Text(branch.get("kind") or "",
                                                                  style=pal.tone("idle")),
                          Text(bstatus, style=pal.tone(STEP_TONE.get(bstatus, "idle"))),
                          str(branch["attempts"] or ""), Text(step_summary(branch)))
    return table


def run_head(pal: Palette, run: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{run['id']}  ", style=pal("accent", "bold"))
    head.append(str(run.get("name") or ""), style="bold")
    status, tone = run_status(run)
    head.append(f"  {status}", style=pal.tone(tone, "bold"))
    rows: list[tuple[str, Any]] = [
        ("file", Path(str(run.get("file") or "")).name),
        ("started", f"{fmt_datetime(run.get('started_at'))} by {run.get('started_by')}"),
        ("steps", f"{run['steps_done']} of {run['steps_total']} finished"),
    ]
    if run.get("driver") == "gone":
        rows.append(("orphaned", "the process driving it is gone; `c` cancels it"))
    if run.get("args"):
        rows.append(("args", _short(run["args"], 300)))
    if run.get("ended_at"):
        rows.append(("ended", fmt_datetime(run["ended_at"])))
    usage = run.get("usage")
    if isinstance(usage, UsageTotals) and usage.calls:
        rows.append(("tokens", format_usage(usage)))
    spend = describe_cost(run.get("cost"))
    if spend:
        rows.append(("cost", spend))
    return Group(head, kv_table(pal, rows))


def gate_renderable(pal: Palette, run: dict[str, Any]) -> RenderableType | None:
    gate = run.get("gate")
    if not gate:
        return None
    request = gate.get("request") or {}
    parts: list[RenderableType] = [Text(str(request.get("prompt") or ""), style="bold")]
    if gate["kind"] == "input":
        schema = request.get("responseSchema")
        parts += [Text(""), Text("Response schema", style=pal.tone("idle", "bold")),
                  Text(json.dumps(schema, indent=2) if schema is not None else "any JSON")]
        hint = "`a` opens a JSON editor to answer it (here or in mode 2), `r` rejects"
    else:
        items = request.get("items") or []
        if items:
            parts += [Text(""), Text("Items", style=pal.tone("idle", "bold"))]
            parts += [Text(f"• {_short(item, 200)}") for item in items[:20]]
            if len(items) > 20:
                parts.append(Text(f"… {len(items) - 20} more", style=pal.tone("idle")))
        if request.get("preview"):
            parts += [Text(""), Text("Preview", style=pal.tone("idle", "bold")),
                      Text(_short(request["preview"]), style=pal("accent"))]
        hint = "`a` approves (the run continues), `r` rejects (cancels); here or in mode 2"
    parts += [Text(""), Text(f"approval {gate['approval_id']} · {hint}",
                             style=pal.tone("waiting"))]
    return Group(*parts)


def outcome_renderable(pal: Palette, run: dict[str, Any]) -> RenderableType | None:
    if run["status"] == "failed":
        return Text(str(run.get("error") or "failed"), style=pal.tone("failed"))
    if run["status"] == "cancelled" and run.get("error"):  # how it was decided, and why
        return Text(safe(str(run["error"])), style=pal.tone("waiting"))
    if run["status"] in ("ok", "cancelled"):
        out = run.get("output")
        return Text(_short(json.dumps(out, indent=2, ensure_ascii=False), 2000))
    return None


class WorkflowsScreen(ListDetailScreen):
    """Mode 5: runs newest first; the selected run's steps update as they change.

    `c` cancels the selected paused or orphaned run (after a y/n); `t`/`k` retry or skip a
    step its dead driver left interrupted (shown only then); `enter` on a run waiting at a
    gate opens that gate in mode 2; `:workflow FILE [ARGS-JSON]` starts one in this console.
    """

    HELP = mode_help(
        "**Workflow runs**, the selected one's steps live. `a`/`r` decide a run's gate, "
        "`c` cancels a paused run, `t`/`k` retry or skip a step left interrupted by a dead "
        "driver, `R` reruns the run from a step (pick it, confirm: a new run reuses the "
        "recorded outputs of the steps before it; its gates ask again), `enter` opens its "
        "gate in Approvals, `w` shows the run's trace as a waterfall (its steps and gate "
        "waits).",
        ("workflow", "approve", "reject", "cancel"))
    HIDDEN_WHEN_UNAVAILABLE = frozenset({"filter", "recover_run"})  # rare: shown when it acts

    MODE = "workflows"
    PREFIX = "wf"
    LIST_TITLE = "Workflow runs"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("gate", "Waiting for"), ("steps", "Steps"), ("outcome", "Output"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.wanted: str | None = None  # a run to select once it is listed (a rerun)

    def make_list(self) -> ItemList:
        return WorkflowList()

    def items(self) -> list[dict[str, Any]]:
        return self.capp.model.workflows

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        return delta.workflows_changed, delta.workflows

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        live = sum(1 for r in items if r["status"] == "running")
        waiting = sum(1 for r in items if r["status"] == "paused")
        return (f" · {live} running" if live else "") + (
            f" · {waiting} waiting" if waiting else "")

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        return await get_run(self.capp.store, key)

    def on_row_list_selected(self, event: RowList.Selected) -> None:
        if event.control is not self.item_list:
            return
        run = self.capp.model.workflow(str(event.key))
        if run is not None and run.get("approval_id"):
            self.capp.open_approval(str(run["approval_id"]))

    def apply(self, delta: Delta) -> None:
        origin = self.capp.pending_rerun
        for e in delta.events:  # the run this console's `R` started: selected once listed
            if origin is not None and e.type == "workflow.rerun" \
                    and getattr(e.payload, "origin", None) == origin:
                self.wanted, self.capp.pending_rerun = e.entity_id, None
        super().apply(delta)

    def before_select(self, lst: RowList) -> None:
        if self.wanted is not None and self.wanted in lst:
            lst.move_cursor_to_key(self.wanted)
            self.wanted = None

    def action_rerun_run(self) -> None:
        """`R`: pick the step to rerun from, confirm, then core's rerun (in this console)."""
        run = self.detail
        if run is None or run["id"] != self.selected:
            return
        rid = str(run["id"])
        steps = list(run.get("steps") or [])

        def confirmed(step: str, ok: bool | None) -> None:
            if ok:
                self.capp.rerun_run(rid, step)

        def picked(step: str | None) -> None:
            if step is None:
                return
            before = [str(s["id"]) for s in steps[:[s["id"] for s in steps].index(step)]]
            kept = (f"Steps {', '.join(before)} keep the outputs {rid} recorded;" if before
                    else "Nothing is reused:")
            self.app.push_screen(ConfirmScreen(
                f"Rerun {rid} from step {step}?",
                f"{run.get('name') or run.get('file')}\n\nA new run: {kept} step {step} and"
                f" every step after it run again, here; their gates ask again. {rid} is"
                f" untouched.\n\nBy {self.capp.operator}.", yes="Rerun", no="Not now",
                destructive=False), partial(confirmed, step))

        self.app.push_screen(ChoiceScreen(
            f"Rerun {rid} from which step?", "The steps before it keep their recorded outputs.",
            [(str(s["id"]), f"{s['id']} · {s['status']}") for s in steps]), picked)

    def _selected_run(self) -> dict[str, Any] | None:
        key = self.item_list.cursor_key
        return self.capp.model.workflow(str(key)) if key is not None else None

    def action_trace(self) -> None:
        open_trace(self, self.selected)

    def unavailable(self, action: str) -> str | None:
        if action == "rerun_run":
            run = self._selected_run()
            if run is None:
                return ("no run selected: nothing to rerun" if self.capp.model.workflows else
                        "no workflow runs yet: nothing to rerun")
            return None if self.detail is not None and self.detail["id"] == run["id"] else \
                f"{run['id']}: its steps are still loading"
        if action == "trace":
            return no_trace("run", self.selected)
        if action not in ("cancel_run", "decide_gate", "recover_run"):
            return None
        verb = {"cancel_run": "cancel", "decide_gate": "decide",
                "recover_run": "retry or skip"}[action]
        run = self._selected_run()
        if run is None:
            return (f"no run selected: nothing to {verb}" if self.capp.model.workflows else
                    f"no workflow runs yet: nothing to {verb} (start one: :workflow FILE)")
        if action == "cancel_run" and (run["status"] == "paused" or run.get("driver") == "gone"):
            return None
        if action == "decide_gate" and run["status"] == "paused" and run.get("approval_id"):
            return None
        interrupted = run["status"] == "paused" and run.get("gate_kind") == "interrupted"
        if action == "recover_run":
            if interrupted:
                return None
            status = "orphaned" if run.get("driver") == "gone" else str(run["status"])
            return (f"{run['id']} is {status}, no step left interrupted by a dead driver:"
                    f" nothing to {verb}")
        if action == "decide_gate" and interrupted:
            return (f"{run['id']} waits on step {run['waiting_step']}, interrupted when its"
                    " driver died: t retries it, k skips it, c cancels the run")
        status = "orphaned" if run.get("driver") == "gone" else str(run["status"])
        return f"{run['id']} is {status}, not waiting at a gate: nothing to {verb}"

    def action_cancel_run(self) -> None:
        run = self._selected_run()
        if run is not None:
            self.capp.request_cancel_run(str(run["id"]))

    def action_recover_run(self, decision: str) -> None:
        """`t`/`k` on a run whose step a dead driver left interrupted: retry or skip it."""
        run = self._selected_run()
        if run is not None:
            self.capp.request_recover_run(str(run["id"]), decision)

    def action_decide_gate(self, approve: bool) -> None:
        """`a`/`r` on a run waiting at a gate: the same decision as in mode 2."""
        run = self._selected_run()
        if run is None or not run.get("approval_id"):
            return
        if approve:
            self.capp.request_approve(str(run["approval_id"]))
        else:
            self.capp.request_reject(str(run["approval_id"]))

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        run = self.detail
        pal = Palette(self.app)
        if run is None:
            text = ("Select a run to follow it." if self.capp.model.workflows else
                    "Loading…" if not self.rows_read() else
                    "No workflow runs yet. Start one with\n"
                    "  clawtower workflow run --file FLOW.lobster\n"
                    "or from here with :workflow FLOW.lobster")
            self._set("head", Text(text, style=pal.tone("idle")))
            for key, _ in self.SECTIONS[1:]:
                self._set(key, None)
            return
        self._set("head", run_head(pal, run))
        gate = run.get("gate")
        gate_title = None
        if gate:
            gate_title = (f"Waiting for {'an answer' if gate['kind'] == 'input' else 'approval'}"
                          f" · step {gate['step']}")
        self._set("gate", gate_renderable(pal, run), gate_title)
        running = next((s for s in run.get("steps") or [] if s["status"] in
                        ("running", "retrying")), None)
        now = f" · running {running['id']}" if running else ""
        self._set("steps", steps_table(pal, run),
                  f"Steps · {run['steps_done']}/{run['steps_total']}{now}")
        title = {"failed": "Error", "cancelled": "Cancelled"}.get(
            str(run["status"]), f"Output · {fmt_time(run.get('ended_at'))}")
        self._set("outcome", outcome_renderable(pal, run), title)
