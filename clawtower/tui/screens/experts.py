"""Mode 6: installed experts (validation status, tool bindings), their recent workflow runs
and the confirm gates they wait at (decided in mode 2 like any approval).

Packages are read from disk when the mode opens and on `r`; runs and gates are the live
model (compiled expert runs are ordinary workflow runs named `<expert>/<process>`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..model import Delta
from ..render import Palette, columns_table
from ..views import ModeBar
from ..workflowdata import RUN_TONE
from .base import ConsoleScreen

RECENT_RUNS = 20


def read_experts() -> list[dict[str, Any]]:
    """Each installed expert with its problems and bindings (a bad bindings file is shown,
    not raised)."""
    from clawtower.core.errors import ValidationError
    from clawtower.core.experts import home
    from clawtower.core.experts.bindings import bindings_path, load_bindings

    out = []
    for pkg in home.installed():
        try:
            binds = load_bindings(bindings_path(pkg.name))
            bound = {t: _bound(binds.get(t)) for t in pkg.required_tools()}
        except ValidationError as exc:
            bound = {t: f"bindings error: {exc}" for t in pkg.required_tools()}
        out.append({"name": pkg.name, "version": pkg.version, "errors": len(pkg.errors),
                    "warnings": len(pkg.warnings), "tools": bound})
    return out


def _bound(b: Any) -> str:
    if b is None:
        return "unbound"
    return f"mcp {b.server.name}" if b.server is not None else f"skill {b.skill}"


class ExpertsScreen(ConsoleScreen):
    MODE = "experts"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload", id="experts.reload",
                tooltip="Read the installed packages and bindings again"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.experts: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        with VerticalScroll(id="body"):
            yield Static("", id="experts-body")
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        self.experts = read_experts()
        super().on_mount()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return action != "filter"

    def action_reload(self) -> None:
        self.experts = read_experts()
        self.sync()

    def sync(self) -> None:
        super().sync()
        self.query_one("#experts-body", Static).update(self.render_body())

    def apply(self, delta: Delta) -> None:
        super().apply(delta)
        if delta.workflows or delta.workflows_changed or delta.approvals_changed:
            self.query_one("#experts-body", Static).update(self.render_body())

    def render_body(self) -> RenderableType:
        pal = Palette(self.app)
        if not self.experts:
            return Text("No experts installed: clawtower expert install PATH|GIT_URL")
        names = {e["name"] for e in self.experts}
        table = columns_table(pal, "Expert", "Version", "Status", ("Tools", {"ratio": 1}))
        for e in self.experts:
            status = ("valid" if not e["errors"] else f"{e['errors']} errors") + (
                f", {e['warnings']} warnings" if e["warnings"] else "")
            tone = pal.tone("done" if not e["errors"] else "failed")
            tools = ", ".join(f"{t} → {b}" for t, b in e["tools"].items())
            table.add_row(Text(e["name"], style="bold"), e["version"],
                          Text(status, style=tone), tools)
        model = self.capp.model
        runs = [r for r in model.workflows
                if str(r.get("name") or "").split("/")[0] in names][:RECENT_RUNS]
        rt = columns_table(pal, "Run", "Process", "Status", ("Waiting at", {"ratio": 1}))
        for r in runs:
            status = str(r["status"])
            rt.add_row(r["id"], str(r.get("name") or ""),
                       Text(status, style=pal.tone(RUN_TONE.get(status, "idle"))),
                       str(r.get("waiting_step") or "") if status == "paused" else "")
        run_ids = {r["id"] for r in runs}
        gates = [a for a in model.approvals if a.get("subject") in run_ids]
        gt = columns_table(pal, "Approval", ("Confirm", {"ratio": 1}))
        for a in gates:
            gt.add_row(str(a["id"]), str(a.get("title") or ""))
        parts: list[RenderableType] = [Text("Installed experts", style="bold"), table,
                                       Text(""), Text("Recent runs", style="bold")]
        loading = Text("loading…", style=pal.tone("idle"))
        parts.append(rt if runs else Text("none yet: clawtower expert run NAME PROCESS")
                     if self.rows_read() else loading)
        parts += [Text(""), Text("Pending confirms (decide in mode 2)", style="bold")]
        parts.append(gt if gates else Text("none") if self.rows_read() else loading)
        return Group(*parts)
