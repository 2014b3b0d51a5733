"""The command palette (ctrl+p) and the `:` command line share these commands."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.suggester import Suggester

from clawtower.core.tasks.phases import UNBLOCK_CHOICES, UNBLOCK_MENU

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


@dataclass(frozen=True)
class Verb:
    """One `:` command: its name, what it takes, what it does, and what its first argument
    names (for completion: task, blocked, approval, meeting, running, run, theme)."""

    name: str
    usage: str
    help: str
    aliases: tuple[str, ...] = ()
    ids: str | None = None


VERBS: tuple[Verb, ...] = (
    Verb("approve", "ID [REASON]", "approve a pending item, as you", ("a",), "approval"),
    Verb("reject", "ID REASON", "reject a pending item, the reason recorded", ("r",),
         "approval"),
    Verb("task", "ID", "open a task (T-4, t4 or 4)", ("t", "open"), "task"),
    Verb("unblock", "ID CHOICE [REASON]", "unblock a task whose circuit is open: CHOICE is"
         " retry, revise or abandon", (), "blocked"),
    Verb("retry", "ID [REASON]", "give a task whose circuit is open a fresh attempt budget",
         (), "blocked"),
    Verb("cancel", "ID [REASON]", "cancel a task (it ends failed) or a paused run (W-…)",
         (), "cancellable"),
    Verb("meeting", "A,B,C TOPIC", "start a meeting of agents A, B, C", ("m",)),
    Verb("stop", "ID [REASON]", "stop a running meeting after its round", (), "running"),
    Verb("grant", "ID [N]", "give a running meeting N more rounds (default 1)", (),
         "running"),
    Verb("workflow", "FILE [ARGS-JSON]", "run a Lobster workflow in this console", ("w",)),
    Verb("theme", "[NAME]", "switch theme (no NAME: the picker)", (), "theme"),
    Verb("filter", "[TEXT]", "filter the focused list (no TEXT: clear)", ("f",)),
    Verb("tasks", "", "mode 1", ("1",)),
    Verb("approvals", "", "mode 2", ("2",)),
    Verb("meetings", "", "mode 3", ("3",)),
    Verb("sessions", "", "mode 4", ("4",)),
    Verb("workflows", "", "mode 5", ("5",)),
    Verb("help", "", "the key panel (also ?)", ("h", "?")),
    Verb("quit", "", "quit (q! without asking)", ("q", "exit", "q!")),
)
_BY_WORD: dict[str, Verb] = {w: v for v in VERBS for w in (v.name, *v.aliases)}
MODE_VERBS = ("tasks", "approvals", "meetings", "sessions", "workflows")


def command_help(names: tuple[str, ...] | None = None) -> str:
    """The `:` commands as Markdown lines (all, or those named), for the key panel."""
    verbs = [v for v in VERBS if names is None or v.name in names]
    return "\n".join(f"- `:{v.name}{' ' + v.usage if v.usage else ''}` {v.help}"
                      for v in verbs)


def mode_help(what: str, names: tuple[str, ...]) -> str:
    """A screen's HELP (Markdown, shown atop the `?` key panel): what the mode shows, and the
    `:` commands that act on it (their usage only: the `:` line's hint says the rest)."""
    usages = " · ".join(f"`:{v.name}{' ' + v.usage if v.usage else ''}`"
                        for v in VERBS if v.name in names)
    return (f"{what}\n\n**Commands** (`:`, `→` completes): {usages}"
            f"{' · ' if usages else ''}`:tasks`…`:workflows` · `:theme NAME` · `:q`")


def describe(line: str) -> str:
    """A one-line hint for what is typed so far: the verb's usage, or the verbs it could be."""
    text = line.strip().lstrip(":")
    word = text.split(maxsplit=1)[0].lower() if text else ""
    verb = _BY_WORD.get(word)
    if verb is not None and (" " in text or word in (verb.name, *verb.aliases)):
        usage = f" {verb.usage}" if verb.usage else ""
        return f":{verb.name}{usage} — {verb.help}"
    matches = [v.name for v in VERBS if v.name.startswith(word)] if word else []
    if word and not matches:
        return f"unknown command {word!r}: " + " ".join(v.name for v in VERBS)
    return " ".join(matches or [v.name for v in VERBS])


def id_candidates(app: ConsoleApp, kind: str | None) -> list[str]:
    """The ids a verb's first argument may name, as the console knows them now."""
    m = app.model
    if kind == "task":
        return list(m.tasks)
    if kind == "blocked":
        return [t for t, row in m.tasks.items() if row["phase"] == "circuit_open"]
    if kind == "cancellable":
        return ([t for t, row in m.tasks.items() if row["phase"] not in ("completed", "failed")]
                + [str(r["id"]) for r in m.workflows
                   if r["status"] == "paused" or r.get("driver") == "gone"])
    if kind == "approval":
        return [str(a["id"]) for a in m.approvals]
    if kind == "running":
        return [str(x["id"]) for x in m.meetings if x.get("status") == "running"]
    if kind == "theme":
        return sorted(app.available_themes)
    return []


class CommandSuggester(Suggester):
    """Completes the `:` line: verbs, then the ids their first argument names (tasks,
    approvals, meetings, runs, themes), then unblock's choices. `right` accepts."""

    def __init__(self, app: ConsoleApp) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.capp = app

    async def get_suggestion(self, value: str) -> str | None:
        parts = value.split(" ")
        if len(parts) == 1:
            word = parts[0].lower()
            if not word:
                return None
            for v in VERBS:
                if v.name.startswith(word) and v.name != word:
                    return value + v.name[len(word):] + (" " if v.usage else "")
            return None
        verb = _BY_WORD.get(parts[0].lower())
        if verb is None:
            return None
        if len(parts) == 2:
            return _complete(value, parts[1], id_candidates(self.capp, verb.ids))
        if len(parts) == 3 and verb.name == "unblock":
            return _complete(value, parts[2], [w for w, _, _ in UNBLOCK_MENU])
        return None


def _complete(value: str, typed: str, candidates: list[str]) -> str | None:
    low = typed.lower()
    for c in candidates:
        if c.lower().startswith(low) and c.lower() != low:
            return value + c[len(typed):]
    return None


def parse_command_line(app: ConsoleApp, line: str) -> Callable[[], object] | str:
    """Turn a command line into a callable, or a one-line error message."""
    text = line.strip().lstrip(":").strip()
    if not text:
        return "empty command"
    word, _, rest = text.partition(" ")
    word = word.lower()
    rest = rest.strip()
    verb = _BY_WORD.get(word)
    if verb is None:
        if word in ("transition", "move"):
            return (f"unknown command {word!r}: operators do not move phases; use :unblock ID"
                    " CHOICE, :retry ID or :cancel ID (the orchestrator executes them)")
        return f"unknown command {word!r} (known: {', '.join(v.name for v in VERBS)})"
    name = verb.name
    usage = f"(:{name} {verb.usage})"
    args = rest.split(maxsplit=1)  # ID and the rest, for most verbs
    if name == "quit":
        return app.action_quit_console if word != "q!" else partial(app.exit, return_code=0)
    if name == "approve":
        if not args:
            return f"approve: which approval? {usage}"
        return partial(app.decide, args[0], approve=True, reason=args[1] if len(args) > 1
                       else "")
    if name == "reject":
        if not args:
            return f"reject: which approval? {usage}"
        if len(args) < 2:
            return partial(app.request_reject, args[0])
        return partial(app.decide, args[0], approve=False, reason=args[1])
    if name == "task":
        if not args:
            return f"task: which task? {usage}"
        return partial(app.open_task, normalise_task_id(args[0]))
    if name == "unblock":
        parts = rest.split(maxsplit=2)
        if not parts:
            return f"unblock: which task? {usage}"
        tid = normalise_task_id(parts[0])
        if len(parts) < 2:
            return partial(app.request_unblock, tid)  # asks which option
        choice = parts[1].lower()
        if choice not in UNBLOCK_CHOICES:
            return (f"unblock: unknown choice {parts[1]!r} (known: "
                    f"{', '.join(UNBLOCK_CHOICES)})")
        return partial(app.command_task, tid, "unblock", choice=choice,
                       reason=parts[2] if len(parts) > 2 else "")
    if name == "retry":
        if not args:
            return f"retry: which task? {usage}"
        return partial(app.command_task, normalise_task_id(args[0]), "retry",
                       reason=args[1] if len(args) > 1 else "")
    if name == "cancel":
        if not args:
            return f"cancel: which task or run? {usage}"
        target = args[0]
        if target.upper().startswith("W-"):
            return partial(app.request_cancel_run, target.upper())
        tid = normalise_task_id(target)
        if len(args) < 2:
            return partial(app.request_cancel_task, tid)  # asks to confirm
        return partial(app.command_task, tid, "cancel", reason=args[1])
    if name == "theme":
        if not args:
            return app.action_change_theme
        theme = args[0]
        if theme not in app.available_themes:
            known = ", ".join(sorted(app.available_themes))
            return f"theme: unknown theme {theme!r} (known: {known})"
        return partial(setattr, app, "theme", theme)
    if name == "meeting":
        if len(args) < 2:
            return f"meeting: who and what? {usage}"
        names = [n.strip() for n in args[0].split(",") if n.strip()]
        return partial(app.start_meeting, names, args[1])
    if name == "stop":
        if not args:
            return f"stop: which meeting? {usage}"
        return partial(app.stop_meeting, args[0], args[1] if len(args) > 1 else "")
    if name == "grant":
        if not args:
            return f"grant: which meeting? {usage}"
        n_text = args[1] if len(args) > 1 else "1"
        if not n_text.isdigit() or int(n_text) < 1:
            return f"grant: N must be a whole number of rounds >= 1, got {n_text!r}"
        return partial(app.grant_rounds, args[0], int(n_text))
    if name in MODE_VERBS:
        return partial(app.switch_mode, name)
    if name == "workflow":
        if not args:
            return f"workflow: which file? {usage}"
        return _workflow_command(app, args)
    if name == "filter":
        return partial(app.filter_focused, rest)
    assert name == "help"
    return app.action_toggle_help


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
