"""The task drill-down: everything the store knows about one task, refreshed as it changes."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from clawtower.core import ClawError, Tasks
from clawtower.core.describe import one_line, verdict_label
from clawtower.core.textsafe import safe_line

from ..commands import mode_help
from ..model import Delta, fmt_datetime, fmt_time
from ..render import (
    Palette,
    approval_renderable,
    columns_table,
    kv_table,
    show_section,
    usage_line,
    usage_renderable,
)
from ..views import ModeBar, phase_label
from .base import ConsoleScreen, explained, task_command_unavailable


class TaskDetailScreen(ConsoleScreen):
    """Everything the store knows about one task, refreshed as it changes."""

    HELP = mode_help(
        "**A task**: its history, reviews, attempts, evidence. `a`/`r` decide its "
        "pending approval, `u` unblocks it, `x` cancels it, `esc` goes back.",
        ("approve", "reject", "unblock", "retry", "cancel"))

    MODE = "tasks"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "escape", "Back", id="detail.back"),
        Binding("a", "approve", "Approve", id="detail.approve",
                tooltip="Approve this task's pending approval"),
        explained("a", "approve"),
        Binding("r", "reject", "Reject", id="detail.reject",
                tooltip="Reject this task's pending approval"),
        explained("r", "reject"),
        Binding("u", "unblock", "Unblock", id="detail.unblock",
                tooltip="Unblock this task (circuit open): retry, revise the spec, or abandon"),
        explained("u", "unblock"),
        Binding("x", "cancel_task", "Cancel task", id="detail.cancel",
                tooltip="Cancel this task: it ends failed (asks to confirm)"),
        explained("x", "cancel_task"),
        Binding("up,k", "scroll('up')", "Up", show=False, id="detail.up"),
        Binding("down,j", "scroll('down')", "Down", show=False, id="detail.down"),
    ]

    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("summary", ""), ("pending", "Waiting on you"), ("circuit", "Circuit open"),
        ("spec", "Spec"), ("history", "History"), ("reviews", "Reviews"),
        ("attempts", "Attempts"), ("evidence", "Evidence"), ("approvals", "Approvals"),
        ("usage", "Agent usage"), ("refusals", "Refused actions"),
    ]

    def __init__(self, task_id: str) -> None:
        super().__init__()
        self.task_id = task_id
        self.detail: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with VerticalScroll(id="detail"):
            for key, title in self.SECTIONS:
                section = Static(id=f"sec-{key}", classes="section")
                section.border_title = title
                section.display = False
                yield section
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#detail").focus()
        self.app.theme_changed_signal.subscribe(self, lambda _t: self._render_detail())

    def sync(self) -> None:
        self.reload()
        super().sync()

    def apply(self, delta: Delta) -> None:
        if any(t["id"] == self.task_id for t in delta.tasks) or (
                delta.approvals_changed and self.detail is not None):
            self.reload()
        super().apply(delta)

    @work(exclusive=True, group="detail")
    async def reload(self) -> None:
        store = self.capp.store
        if store is None:
            return
        try:
            self.detail = await Tasks(store).get(self.task_id)
        except ClawError as exc:
            self.notify(str(exc), severity="error")
            return
        self._render_detail()

    HIDDEN_WHEN_UNAVAILABLE = frozenset({"filter"})

    def unavailable(self, action: str) -> str | None:
        if action == "filter":
            return "nothing to filter in a task's detail (esc goes back to the list)"
        if action in ("approve", "reject"):
            return None if self._pending() else f"{self.task_id}: nothing waits for approval"
        if action in ("unblock", "cancel_task"):
            return task_command_unavailable(self.capp.model.tasks.get(self.task_id),
                                            self.task_id, action)
        return None

    def action_escape(self) -> None:
        if not self.close_help():
            self.back()

    def back(self) -> None:
        self.dismiss()

    def action_scroll(self, direction: str) -> None:
        scroll = self.query_one("#detail", VerticalScroll)
        if direction == "up":
            scroll.scroll_up()
        else:
            scroll.scroll_down()

    def _pending(self) -> dict[str, Any] | None:
        return self.capp.model.pending_for(self.task_id)

    def action_approve(self) -> None:
        a = self._pending()
        if a is not None:
            self.capp.request_approve(a["id"])

    def action_reject(self) -> None:
        a = self._pending()
        if a is not None:
            self.capp.request_reject(a["id"])

    def action_unblock(self) -> None:
        self.capp.request_unblock(self.task_id)

    def action_cancel_task(self) -> None:
        self.capp.request_cancel_task(self.task_id)

    def _set(self, key: str, renderable: RenderableType | None, title: str | None = None) -> None:
        show_section(self.query_one(f"#sec-{key}", Static), renderable, title)

    def _render_detail(self) -> None:
        t = self.detail
        if t is None or not self.is_mounted:
            return
        pal = Palette(self.app)
        self.refresh_bindings()
        self._set("summary", summary_renderable(pal, t))
        pending = self._pending()
        self._set("pending", approval_renderable(Palette(self.app), pending, keys=True)
                  if pending else None,
                  f"Waiting on you · approval {pending['id']}" if pending else None)
        self._set("circuit", circuit_renderable(pal, t["circuit"], keys=True)
                  if t.get("circuit") else None)
        self._set("spec", spec_renderable(pal, t))
        self._set("history", history_renderable(pal, t["history"]),
                  f"History · {len(t['history'])} transitions")
        self._set("reviews", reviews_renderable(pal, t["reviews"]) if t["reviews"] else None,
                  f"Reviews · {len(t['reviews'])}")
        self._set("attempts", attempts_renderable(pal, t) if t["attempt_records"] else None,
                  f"Attempts · {len(t['attempt_records'])}")
        has_evidence = t["artifacts"] or t["side_effects"]
        self._set("evidence", evidence_renderable(pal, t) if has_evidence else None)
        self._set("approvals", approvals_table(pal, t["approvals"]) if t["approvals"] else None)
        self._set("usage", usage_renderable(pal, t["usage"]) if t["usage"] else None,
                  f"Agent usage · {usage_line(t['usage'])}" if t["usage"] else None)
        self._set("refusals", refusals_renderable(pal, t["refusals"]) if t["refusals"] else None)


# ---------------------------------------------------------------------------- renderers


def summary_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{t['id']}  ", style=pal("accent", "bold"))
    head.append(safe_line(t["title"]), style="bold")
    head.append("   ")
    head.append(f" {phase_label(t['phase']).upper()} ", style=pal.phase(t["phase"], "bold reverse"))
    spec_state = "spec ok" if t["spec_ok"] else "spec incomplete"
    meta = Text(
        f"attempts {t['attempts']} · spec v{t['spec_version']} ({spec_state}) · created "
        f"{fmt_datetime(t['created_at'])} · updated {fmt_datetime(t['updated_at'])}",
        style=pal.tone("idle"))
    rows: list[RenderableType] = [head, meta]
    if t.get("source"):
        rows.append(Text(f"source {t['source']}", style=pal.tone("idle")))
    if t["phase_reason"]:
        why = Text("why: ", style=pal.tone("idle"))
        why.append(t["phase_reason"], style=pal.phase(t["phase"]))
        rows.append(why)
    return Group(*rows)


def spec_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    spec = t["spec"]
    rows: list[tuple[str, Any]] = [("goal", spec.get("goal", ""))]

    def bullets(items: list[Any]) -> Text:
        return Text("\n".join(f"• {one_line(i, 300)}" for i in items))

    for field, label in (("acceptance_criteria", "acceptance"), ("scope_in", "in scope"),
                         ("scope_out", "out of scope"), ("inputs", "inputs"),
                         ("outputs", "outputs"), ("risks", "risks")):
        if spec.get(field):
            rows.append((label, bullets(spec[field])))
    if spec.get("side_effects"):
        rows.append(("side effects", bullets(
            [f"{e['kind']}: {e['description']}" + (f" → {e['target']}" if e.get("target") else "")
             for e in spec["side_effects"]])))
    if spec.get("labels"):
        rows.append(("labels", ", ".join(spec["labels"])))
    problems = t.get("spec_problems") or []
    if problems:
        rows.append(("problems", Text("\n".join(f"• {p}" for p in problems),
                                      style=pal.tone("waiting"))))
    return kv_table(pal, rows)


def circuit_renderable(pal: Palette, c: dict[str, Any], *, keys: bool = False
                       ) -> RenderableType:
    options = Text()
    for i, opt in enumerate(c.get("unblock_options") or []):
        if i:
            options.append("\n")
        phase, _, what = str(opt).partition(":")
        options.append(f"→ {phase}", style=pal.phase(phase.strip(), "bold"))
        options.append(f":{what}" if what else "")
    rows: list[tuple[str, Any]] = [
        ("failure", Text(str(c.get("failure_summary", "")), style=pal.tone("failed"))),
        ("attempts", c.get("attempts", "")),
        ("last good", c.get("last_good_artifact") or "none"),
        ("unblock", options),
    ]
    if keys:
        hint = Text()
        hint.append(" u ", style=pal.tone("active", "bold reverse"))
        hint.append(" unblock: retry · revise · abandon   ")
        hint.append(" x ", style=pal.tone("failed", "bold reverse"))
        hint.append(" cancel the task")
        rows.append(("act", hint))
    return kv_table(pal, rows)


def history_renderable(pal: Palette, history: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, ("Time", {"no_wrap": True}), ("Seq", {"justify": "right"}),
                   ("From", {"no_wrap": True}), ("To", {"no_wrap": True}), "Att",
                   ("By", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for h in history:
        table.add_row(
            Text(fmt_time(h["at"]), style=pal.tone("idle")),
            Text(str(h["seq"]), style=pal.tone("idle")),
            Text(phase_label(h["from_phase"]), style=pal.phase(h["from_phase"])),
            Text(phase_label(h["to_phase"]), style=pal.phase(h["to_phase"], "bold")),
            str(h["attempt"] or ""), h["actor"], h["reason"])
    return table


def _verdict_style(pal: Palette, verdict: str) -> str:
    if verdict in ("approved", "approve"):
        return pal.tone("done", "bold")
    if verdict in ("blocked", "rejected"):
        return pal.tone("failed", "bold")
    return pal.tone("waiting", "bold")


def reviews_renderable(pal: Palette, reviews: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, ("Time", {"no_wrap": True}), ("Stage", {"no_wrap": True}), "Att",
                   ("Reviewer", {"no_wrap": True}), ("Verdict", {"no_wrap": True}),
                   ("Findings", {"ratio": 1}))
    for r in reviews:
        findings = Text()
        for i, f in enumerate(r.get("findings") or []):
            if i:
                findings.append("\n")
            if isinstance(f, dict):
                if f.get("ref"):
                    findings.append(f"{f['ref']}: ", style=pal("accent"))
                findings.append(str(f.get("text", "")))
            else:
                findings.append(str(f))
        details = r.get("details") or {}
        if details:
            if findings:
                findings.append("\n")
            findings.append(one_line(", ".join(f"{k}: {v}" for k, v in details.items()
                                               if v not in (None, "", [])), 300),
                            style=pal.tone("idle"))
        table.add_row(Text(fmt_time(r["at"]), style=pal.tone("idle")), r["stage"],
                      str(r["attempt"] or ""), r["reviewer"],
                      Text(verdict_label(r["verdict"]), style=_verdict_style(pal, r["verdict"])),
                      findings)
    return table


def attempts_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    table = columns_table(pal, ("#", {"justify": "right"}), ("Model", {"no_wrap": True}),
                   ("Status", {"no_wrap": True}), ("Started", {"no_wrap": True}),
                   ("Finished", {"no_wrap": True}), ("Beats", {"justify": "right"}),
                   ("Checkpoint", {"no_wrap": True}), ("Reason / output", {"ratio": 1}))
    for a in t["attempt_records"]:
        status = a["status"]
        tone = "done" if status == "succeeded" else "failed" if status in (
            "failed", "abandoned") else "active"
        model = a["model"] + (" ↑" if a.get("escalated") else "")
        cp = a.get("checkpoint")
        out = a.get("output") or {}
        why = a["reason"] or (out.get("summary", "") if isinstance(out, dict) else "")
        table.add_row(str(a["n"]), model, Text(status, style=pal.tone(tone, "bold")),
                      fmt_time(a["started_at"]), fmt_time(a.get("finished_at")),
                      str(a["heartbeats"]),
                      json.dumps(cp, sort_keys=True) if cp else "", one_line(why, 300))
    retries = t.get("retries") or []
    if not retries:
        return table
    rt = columns_table(pal, ("Time", {"no_wrap": True}), ("After", {"justify": "right"}),
                ("Next", {"justify": "right"}), ("Not before", {"no_wrap": True}),
                ("Escalate", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for r in retries:
        rt.add_row(fmt_time(r["at"]), str(r["attempt"]), str(r["next_attempt"]),
                   fmt_time(r["not_before"]), "yes" if r["escalate"] else "",
                   r["reason"])
    return Group(table, Text(""), Text("Retries", style="bold"), rt)


def evidence_renderable(pal: Palette, t: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    if t["artifacts"]:
        table = columns_table(pal, ("Att", {"justify": "right"}), ("Artifact", {"no_wrap": True}),
                       ("URI", {"ratio": 1}), ("Summary", {"ratio": 1}))
        for a in t["artifacts"]:
            table.add_row(str(a["attempt"]), a["name"], Text(a["uri"], style=pal("accent")),
                          a["summary"])
        parts += [Text("Artifacts", style="bold"), table]
    if t["side_effects"]:
        table = columns_table(pal, ("Effect", {"no_wrap": True}), ("Kind", {"no_wrap": True}),
                       ("Status", {"no_wrap": True}), ("Target", {"ratio": 1}),
                       ("Description", {"ratio": 2}), ("Result", {"ratio": 1}))
        for e in t["side_effects"]:
            tone = "done" if e["status"] == "done" else "waiting"
            table.add_row(e["effect_id"], e["kind"], Text(e["status"], style=pal.tone(tone)),
                          e["target"], e["description"], e["result"])
        if parts:
            parts.append(Text(""))
        parts += [Text("Side effects", style="bold"), table]
    return Group(*parts)


def approvals_table(pal: Palette, approvals: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, ("ID", {"no_wrap": True}), ("Kind", {"no_wrap": True}),
                   ("Status", {"no_wrap": True}), ("Asked", {"no_wrap": True}),
                   ("Decided by", {"no_wrap": True}), ("Reason", {"ratio": 1}))
    for a in approvals:
        status = a["status"]
        tone = {"approved": "done", "rejected": "failed", "pending": "waiting"}.get(status, "idle")
        table.add_row(a["id"], a["kind"], Text(status, style=pal.tone(tone, "bold")),
                      fmt_time(a["requested_at"]),
                      (a.get("decided_by") or "") + (f" at {fmt_time(a['decided_at'])}"
                                                     if a.get("decided_at") else ""),
                      a.get("reason") or "")
    return table


def refusals_renderable(pal: Palette, refusals: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, "Time", "Actor", "Role", "Action", ("Reason", {"ratio": 1}))
    for r in refusals:
        table.add_row(fmt_time(r["at"]), r["actor"], r["role"], r["action"],
                      Text(r["reason"], style=pal.tone("failed")))
    return table
