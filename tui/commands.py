"""The command palette (ctrl+p) and the `:` command line share these commands."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .protocol import ConsoleApp

_TASK_ID = re.compile(r"^(?:t-?)?(\d+)$", re.IGNORECASE)
MAX_TASK_HITS = 30


def normalise_task_id(text: str) -> str:
    """`4`, `t4`, `t-4`, `T-4` all name task T-4; anything else is returned as given."""
    m = _TASK_ID.match(text.strip())
    return f"T-{int(m.group(1))}" if m else text.strip()


@dataclass
class Command:
    name: str
    help: str
    run: Callable[[], object]


HELP = """\
:approve ID [REASON]    approve a pending item (by you)
:reject ID REASON       reject it, with the reason recorded
:task ID                open a task (T-4, t4 or 4)
:theme NAME             switch theme (no NAME: the picker)
:meeting A,B,C TOPIC    start a meeting of agents A, B, C (simulator script)
:stop ID [REASON]       stop a running meeting
:grant ID N             give a running meeting N more rounds
:workflow FILE [JSON]   run a Lobster workflow here (JSON: its args object)
:filter TEXT            filter the focused list (empty: clear)
:tasks · :approvals · :meetings · :workflows   switch mode (also 1, 2, 3, 5)
:help                   the key panel
:q                      quit"""


def parse_command_line(app: ConsoleApp, line: str) -> Callable[[], object] | str:
    """Turn a command line into a callable, or a one-line error message."""
    words = line.strip().lstrip(":").split(maxsplit=2)
    if not words:
        return "empty command"
    verb = words[0].lower()
    args = words[1:]
    if verb in ("q", "quit", "exit", "q!"):
        return app.action_quit_console if verb != "q!" else partial(app.exit, return_code=0)
    if verb in ("approve", "a"):
        if not args:
            return "approve: which approval? (:approve ID [REASON])"
        reason = args[1] if len(args) > 1 else ""
        return partial(app.decide, args[0], approve=True, reason=reason)
    if verb in ("reject", "r"):
        if not args:
            return "reject: which approval? (:reject ID REASON)"
        if len(args) < 2:
            return partial(app.request_reject, args[0])
        return partial(app.decide, args[0], approve=False, reason=args[1])
    if verb in ("task", "t", "open"):
        if not args:
            return "task: which task? (:task ID)"
        return partial(app.open_task, normalise_task_id(args[0]))
    if verb == "theme":
        if not args:
            return app.action_change_theme
        name = args[0]
        if name not in app.available_themes:
            known = ", ".join(sorted(app.available_themes))
            return f"theme: unknown theme {name!r} (known: {known})"
        return partial(setattr, app, "theme", name)
    if verb in ("meeting", "m"):
        if len(args) < 2:
            return "meeting: who and what? (:meeting ada,ben,cyd TOPIC)"
        names = [n.strip() for n in args[0].split(",") if n.strip()]
        return partial(app.start_meeting, names, args[1])
    if verb == "stop":
        if not args:
            return "stop: which meeting? (:stop ID [REASON])"
        return partial(app.stop_meeting, args[0], args[1] if len(args) > 1 else "")
    if verb == "grant":
        if not args:
            return "grant: which meeting? (:grant ID N)"
        n_text = args[1] if len(args) > 1 else "1"
        if not n_text.isdigit() or int(n_text) < 1:
            return f"grant: N must be a whole number of rounds >= 1, got {n_text!r}"
        return partial(app.grant_rounds, args[0], int(n_text))
    if verb in ("tasks", "1"):
        return partial(app.switch_mode, "tasks")
    if verb in ("approvals", "2"):
        return partial(app.switch_mode, "approvals")
    if verb in ("meetings", "3"):
        return partial(app.switch_mode, "meetings")
    if verb in ("sessions", "4"):
        return partial(app.switch_mode, "sessions")
    if verb in ("workflows", "5"):
        return partial(app.switch_mode, "workflows")
    if verb in ("workflow", "w"):
        if not args:
            return "workflow: which file? (:workflow FILE [ARGS-JSON])"
        return _workflow_command(app, args)
    if verb in ("filter", "f"):
        text = " ".join(args)
        return partial(app.filter_focused, text)
    if verb in ("help", "h", "?"):
        return app.action_toggle_help
    return (f"unknown command {verb!r} (try approve, reject, task, meeting, stop, grant,"
            " workflow, theme, filter, help, q)")


def _workflow_command(app: ConsoleApp, args: list[str]) -> Callable[[], Any] | str:
    """`:workflow FILE [ARGS-JSON]`: the args must be a JSON object, checked here."""
    parsed: dict[str, Any] | None = None
    if len(args) > 1:
        try:
            value = json.loads(args[1])
        except json.JSONDecodeError as exc:
            return f"workflow: ARGS-JSON is not JSON ({exc.msg})"
        if not isinstance(value, dict):
            return "workflow: ARGS-JSON must be a JSON object"
        parsed = value
    return partial(app.start_workflow, args[0], parsed)


class ConsoleCommands(Provider):
    """Modes, pending approvals, themes and tasks, fuzzy-searched."""

    @property
    def capp(self) -> ConsoleApp:
        return cast(ConsoleApp, self.app)

    def _commands(self) -> list[Command]:
        app = self.capp
        cmds = [
            Command("Mode: Tasks", "Tasks by phase (1)", partial(app.switch_mode, "tasks")),
            Command("Mode: Approvals", "Pending approvals (2)",
                    partial(app.switch_mode, "approvals")),
            Command("Mode: Meetings", "Consensus meetings (3)",
                    partial(app.switch_mode, "meetings")),
            Command("Start a meeting…", "Agents and a topic: meeting ada,ben,cyd TOPIC",
                    partial(app.action_command_line, "meeting ")),
            Command("Mode: Sessions", "Agent sessions (4, arrives later)",
                    partial(app.switch_mode, "sessions")),
            Command("Mode: Workflows", "Workflow runs and their steps (5)",
                    partial(app.switch_mode, "workflows")),
            Command("Run a workflow…", "A Lobster file, then optional JSON args: workflow F",
                    partial(app.action_command_line, "workflow ")),
            Command("Command line", "Type a command (:)", app.action_command_line),
        ]
        for a in app.model.approvals:
            what = f"{a['id']} · {a['subject']} · {a['title']}"
            cmds.append(Command(f"Approve {what}", a["prompt"],
                                partial(app.request_approve, a["id"])))
            cmds.append(Command(f"Reject {what}", a["prompt"],
                                partial(app.request_reject, a["id"])))
        for m in app.model.meetings:
            if m.get("status") != "running":
                continue
            what = f"{m['id']} · {m['topic']}"
            cmds.append(Command(f"Stop meeting {what}", "Ask it to stop after this round",
                                partial(app.request_stop_meeting, m["id"])))
            cmds.append(Command(f"Grant a round to meeting {what}", "One more round",
                                partial(app.grant_rounds, m["id"], 1)))
        for name in sorted(app.available_themes):
            cmds.append(Command(f"Theme: {name}", "Switch the console's theme",
                                partial(setattr, app, "theme", name)))
        return cmds

    async def discover(self) -> Hits:
        for c in self._commands():
            yield DiscoveryHit(c.name, c.run, help=c.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for c in self._commands():
            score = matcher.match(c.name)
            if score > 0:
                yield Hit(score, matcher.highlight(c.name), c.run, help=c.help)
        # Tasks: a cheap substring pass first, so 10,000 tasks stay quick to search.
        needle = query.strip().casefold()
        if len(needle) < 2:
            return
        app = self.capp
        tid = normalise_task_id(query)
        hits = 0
        for t in app.model.tasks.values():
            label = f"Task {t['id']} · {t['title']}"
            if t["id"] != tid and needle not in label.casefold():
                continue
            score = 1.0 if t["id"] == tid else max(matcher.match(label), 0.3)
            yield Hit(score, matcher.highlight(label), partial(app.open_task, t["id"]),
                      help=f"{t['phase'].replace('_', ' ')} · {t['phase_reason'][:80]}")
            hits += 1
            if hits >= MAX_TASK_HITS:
                return
