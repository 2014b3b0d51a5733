"""Mode 3: consensus meetings, newest first; the selected one live, round by round."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text

from clawtower.core.describe import one_line
from clawtower.core.textsafe import safe, safe_line

from ..commands import mode_help
from ..meetingdata import get_meeting, reply_state, rounds_of
from ..model import Delta, fmt_datetime, fmt_time
from ..render import Fitted, Palette, columns_table, table_need, usage_line
from ..rowlist import RowList
from ..views import ItemList, MeetingList, meeting_outcome, meeting_tone
from .base import ListDetailScreen


class MeetingsScreen(ListDetailScreen):
    """Mode 3: meetings, newest first; the selected one live, round by round.

    `s` stops the selected meeting (after a y/n), `+` grants it one more round;
    `:meeting a,b,c TOPIC` starts one.
    """

    HELP = mode_help(
        "**Meetings**, newest first, the selected one live. `s` stops it, `+` grants "
        "one more round.",
        ("meeting", "stop", "grant"))

    MODE = "meetings"
    PREFIX = "mtg"
    LIST_TITLE = "Meetings"
    SECTIONS: ClassVar[list[tuple[str, str]]] = [
        ("head", ""), ("current", "Current round"), ("stances", "Stances by round"),
        ("summary", "Rolling summary"), ("tokens", "Tokens per round"),
    ]

    def make_list(self) -> ItemList:
        return MeetingList()

    def items(self) -> list[dict[str, Any]]:
        return self.capp.model.meetings

    def changes(self, delta: Delta) -> tuple[bool, set[str]]:
        return delta.meetings_changed, delta.meetings

    def list_extra(self, items: list[dict[str, Any]]) -> str:
        running = sum(1 for m in items if m.get("status") == "running")
        return f" · {running} running" if running else ""

    def before_select(self, lst: RowList) -> None:
        wanted = self.capp.pending_meeting
        if wanted is not None and wanted in lst:
            self.capp.pending_meeting = None
            lst.move_cursor_to_key(wanted)

    async def fetch(self, key: str) -> dict[str, Any] | None:
        assert self.capp.store is not None
        return await get_meeting(self.capp.store, key)

    def _selected_meeting(self) -> dict[str, Any] | None:
        key = self.item_list.cursor_key
        return self.capp.model.meeting(str(key)) if key is not None else None

    def unavailable(self, action: str) -> str | None:
        if action not in ("stop_meeting", "grant_round"):
            return None
        verb = "stop" if action == "stop_meeting" else "grant a round to"
        m = self._selected_meeting()
        if m is None:
            return (f"no meeting selected: nothing to {verb}" if self.capp.model.meetings else
                    f"no meetings yet: nothing to {verb} (start one: :meeting ada,ben,cyd TOPIC)")
        if m.get("status") != "running":
            return f"{m['id']} has ended ({meeting_outcome(m)}): nothing to {verb}"
        return None

    def action_stop_meeting(self) -> None:
        m = self._selected_meeting()
        if m is not None:
            self.capp.request_stop_meeting(m["id"])

    def action_grant_round(self) -> None:
        m = self._selected_meeting()
        if m is not None:
            self.capp.grant_rounds(m["id"], 1)

    def _render_detail(self) -> None:
        if not self.is_mounted:
            return
        self.refresh_bindings()
        m = self.detail
        pal = Palette(self.app)
        if m is None:
            text = ("Select a meeting to watch it." if self.capp.model.meetings else
                    "Loading…" if not self.rows_read() else
                    "No meetings yet. Start one from the palette (ctrl+p) or with\n"
                    ":meeting ada,ben,cyd Should we ship on Friday?")
            self._set("head", Text(text, style=pal.tone("idle")))
            for key, _ in self.SECTIONS[1:]:
                self._set(key, None)
            return
        rounds = rounds_of(m)
        self._set("head", meeting_head_renderable(pal, m))
        current = rounds[-1] if rounds else None
        running = m.get("status") == "running"
        if current is not None:
            state = "in progress" if running and current.get("consensus") is None else (
                str(current.get("consensus") or ""))
            self._set("current", current_round_renderable(pal, m, current),
                      f"Round {current['round']} of {m.get('max_rounds')} · {state}")
        else:
            self._set("current", Text("waiting for round 1", style=pal.tone("idle")),
                      "Current round")
        self._set("stances", stance_table(pal, m) if rounds else None)
        self._set("summary", summary_renderable(pal, m))
        usage = m.get("usage")
        self._set("tokens", tokens_table(pal, rounds) if rounds else None,
                  f"Tokens per round · {usage_line(usage)}" if rounds and usage else None)


STANCE_LABEL = {"AGREE": "agree", "DISAGREE": "disagree", "NEUTRAL": "neutral",
                "UNKNOWN": "unknown"}


def stance_style(pal: Palette, stance: str | None, extra: str = "") -> str:
    name = str(stance or "UNKNOWN").lower()
    if name not in ("agree", "disagree", "neutral"):
        name = "unknown"
    return pal(f"stance-{name}", extra)


def meeting_head_renderable(pal: Palette, m: dict[str, Any]) -> RenderableType:
    head = Text()
    head.append(f"{m['id']}  ", style=pal("accent", "bold"))
    head.append(safe_line(str(m["topic"])), style="bold")
    head.append("   ")
    head.append(f" {meeting_outcome(m).upper()} ", style=pal.tone(meeting_tone(m),
                                                                 "bold reverse"))
    ended = f" · ended {fmt_time(m.get('ended_at'))}" if m.get("ended_at") else ""
    meta = Text(f"{', '.join(m.get('participants') or [])} · round {len(rounds_of(m))} of "
                f"{m.get('max_rounds')} · started {fmt_datetime(m.get('started_at'))}{ended}",
                style=pal.tone("idle"))
    rows: list[RenderableType] = [head, meta]
    if m.get("detail"):
        rows.append(Text(safe(f"why: {m['detail']}"), style=pal.tone("idle")))
    if m.get("minutes_path"):
        rows.append(Text(f"minutes: {m['minutes_path']}", style=pal.tone("idle")))
    return Group(*rows)


STANCE_GLYPH = {"AGREE": "✓", "DISAGREE": "✗", "NEUTRAL": "○", "UNKNOWN": "?"}
STATE_GLYPH = {"thinking": "…", "timed out": "*", "error": "!", "absent": " "}
GLYPH_LEGEND = "✓ agree  ✗ disagree  ○ neutral  * timed out  … thinking"
WHY_MIN = 16  # below this the Why column wraps a word per line: go compact instead


def current_round_renderable(pal: Palette, m: dict[str, Any],
                             rnd: dict[str, Any]) -> RenderableType:
    """Agent, state, stance, tokens and why; where that leaves Why too narrow to read, one
    glyph for state and stance and the rest of the row for why."""
    running = m.get("status") == "running" and rnd.get("consensus") is None
    replies = {r["agent"]: r for r in rnd.get("replies") or []}
    agents = list(m.get("participants") or [])
    agents += [a for a in replies if a not in agents]
    rows = []
    for agent in agents:
        r = replies.get(agent)
        state = reply_state(r, running)
        stance = str(r.get("stance") or "UNKNOWN") if r is not None else ""
        rows.append((agent, r, state, stance))

    def wide() -> RenderableType:
        table = columns_table(pal, ("Agent", {"no_wrap": True}), ("State", {"no_wrap": True}),
                              ("Stance", {"no_wrap": True}), ("Tokens", {"justify": "right"}),
                              ("Why", {"ratio": 1}))
        for agent, r, state, stance in rows:
            tone = {"thinking": "active", "replied": "done", "timed out": "waiting",
                    "absent": "idle"}.get(state, "failed")
            if r is None:
                table.add_row(agent, Text(state, style=pal.tone(tone, "italic")), "", "", "")
                continue
            tokens = f"{r.get('prompt_tokens') or 0}+{r.get('completion_tokens') or 0}"
            table.add_row(agent, Text(state, style=pal.tone(tone)),
                          Text(STANCE_LABEL.get(stance, stance.lower()),
                               style=stance_style(pal, stance, "bold")),
                          Text(tokens, style=pal.tone("idle")),
                          one_line(str(r.get("why") or ""), 200))
        return table

    def compact() -> RenderableType:
        table = columns_table(pal, ("Agent", {"no_wrap": True}), ("", {"no_wrap": True}),
                              ("Why", {"ratio": 1}))
        for agent, r, state, stance in rows:
            if r is None:
                table.add_row(agent, Text(STATE_GLYPH.get(state, " "),
                                          style=pal.tone("active")),
                              Text(state, style=pal.tone("idle", "italic")))
                continue
            glyph = STANCE_GLYPH.get(stance, "?") + STATE_GLYPH.get(state, "")
            table.add_row(agent, Text(glyph, style=stance_style(pal, stance, "bold")),
                          one_line(str(r.get("why") or ""), 200))
        return Group(table, Text(GLYPH_LEGEND, style=pal.tone("idle")))

    need = table_need([a for a, *_ in rows] + ["Agent"], ["timed out"], ["disagree"],
                      ["Tokens", "0000+000"], ["x" * WHY_MIN])
    return Fitted(need, wide, compact)


def stance_table(pal: Palette, m: dict[str, Any]) -> RenderableType:
    """Rows agents, columns rounds; the running round shows who is still thinking. Where
    the words would be cut, one glyph per cell and a legend."""
    rounds = rounds_of(m)
    running = m.get("status") == "running"
    agents = list(m.get("participants") or [])
    grid: list[list[tuple[str, str, str]]] = []  # per agent, per round: (stance, state, label)
    for agent in agents:
        cells: list[tuple[str, str, str]] = []
        for i, rnd in enumerate(rounds):
            reply = next((x for x in rnd.get("replies") or [] if x["agent"] == agent), None)
            live = running and i == len(rounds) - 1 and rnd.get("consensus") is None
            state = reply_state(reply, live)
            if reply is None:
                cells.append(("", state, "…" if state == "thinking" else ""))
                continue
            stance = str(reply.get("stance") or "UNKNOWN")
            label = STANCE_LABEL.get(stance, stance.lower())
            if state == "timed out":
                label += " (timeout)"
            elif state == "error":
                label += " (error)"
            cells.append((stance, state, label))
        grid.append(cells)
    verdicts = [str(rnd.get("consensus") or "…") for rnd in rounds]

    def table(compact: bool) -> RenderableType:
        t = columns_table(pal, ("Agent", {"no_wrap": True}),
                          *[(f"R{r['round']}", {"no_wrap": True}) for r in rounds])
        for agent, cells in zip(agents, grid, strict=True):
            row: list[Any] = [agent]
            for stance, state, label in cells:
                if not stance:
                    row.append(Text(label, style=pal.tone("active")))
                elif compact:
                    row.append(Text(STANCE_GLYPH.get(stance, "?") + STATE_GLYPH.get(state, ""),
                                    style=stance_style(pal, stance)))
                else:
                    row.append(Text(label, style=stance_style(pal, stance)))
            t.add_row(*row)
        verdict: list[Any] = [Text("consensus", style=pal.tone("idle", "bold"))]
        for c in verdicts:
            shown = c[:3] if compact and c not in ("NO", "…") else c
            verdict.append(Text(shown, style=pal.tone(
                "done" if c in ("FULL", "MAJORITY") else "idle", "bold")))
        t.add_row(*verdict)
        return Group(t, Text(GLYPH_LEGEND, style=pal.tone("idle"))) if compact else t

    need = table_need([*agents, "consensus"], *[
        [f"R{r['round']}", verdicts[i], *(cells[i][2] for cells in grid)]
        for i, r in enumerate(rounds)])
    return Fitted(need, lambda: table(False), lambda: table(True))


def summary_renderable(pal: Palette, m: dict[str, Any]) -> RenderableType | None:
    """The rolling summary as a short list, one entry per round (the newest in full). A
    summarizer that failed kept the round's tally with the previous summary nested after
    "Earlier:"; the earlier rounds have their own entries, so only the tally is shown."""
    entries = [(r["round"], str(r["summary"]).split(" Earlier: ", 1)[0].strip())
               for r in rounds_of(m) if r.get("summary")]
    if not entries:
        summary = str(m.get("summary") or "")
        return Text(safe(summary)) if summary else None
    rows: list[RenderableType] = []
    for i, (n, text) in enumerate(entries):
        line = Text()
        line.append(f"R{n}  ", style=pal.tone("idle", "bold"))
        line.append(safe(text) if i == len(entries) - 1 else one_line(text, 160))
        rows.append(line)
    return Group(*rows)


def tokens_table(pal: Palette, rounds: list[dict[str, Any]]) -> RenderableType:
    table = columns_table(pal, ("Round", {"justify": "right"}), ("Prompt", {"justify": "right"}),
                   ("Completion", {"justify": "right"}), ("Summary", {"justify": "right"}),
                   ("Agree/Dis/Neu", {"no_wrap": True}), ("Consensus", {"ratio": 1}))
    for rnd in rounds:
        replies = rnd.get("replies") or []
        prompt = rnd.get("prompt_tokens")
        if prompt is None:
            prompt = sum(int(r.get("prompt_tokens") or 0) for r in replies)
        completion = rnd.get("completion_tokens")
        if completion is None:
            completion = sum(int(r.get("completion_tokens") or 0) for r in replies)
        counts = ("" if rnd.get("agree") is None else
                  f"{rnd.get('agree')}/{rnd.get('disagree')}/{rnd.get('neutral')}")
        table.add_row(str(rnd["round"]), str(prompt), str(completion),
                      str(rnd.get("summary_tokens") or ""), counts,
                      str(rnd.get("consensus") or "…"))
    return table
