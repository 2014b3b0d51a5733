"""The tools of a turn taken over after its worker died (kill -9, a lost lease).

A taken-over TurnJob runs its turn again from the start, and the model asks for the same
calls again. Calls its earlier attempts already made must not run twice (a tool call is a
side effect, like any other): the n-th identical call (same tool, same arguments) of this
attempt gets the n-th recorded one's result, from the turn's own records in the log
(`turn.tool_called` is committed before a call runs, `turn.tool_result` after it); a call
recorded as made but without a result is reported to the model as interrupted and not run
again (it may have taken effect). A call no earlier attempt made runs as usual, and so do
spawns (their job-scoped keys already find the children an earlier attempt made). Only the
attempts since the job last resumed from an approval count (a resumed turn continues from
its checkpoint and does not repeat the calls before it).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

from ..agents.turns import _clip
from ..tools.types import ToolResult
from .gate import interrupted_result
from .toolbox import SPAWN_MANY_TOOL, SPAWN_TOOL, SessionToolBox, TurnHost

if TYPE_CHECKING:
    from .claims import Claim

#: how a reused result starts (the model and the transcript see it was not run again)
REUSED = "[recorded before the worker restarted; not run again] "

Key = tuple[str, str]


def interrupted(name: str) -> ToolResult:
    return interrupted_result(name, "the worker running this call")


class TakeOverToolBox(SessionToolBox):
    """A SessionToolBox that answers the calls earlier attempts of its job made."""

    def __init__(self, runner: TurnHost, claim: Claim) -> None:
        super().__init__(runner, claim)
        self._earlier: list[dict[Key, list[ToolResult | None]]] | None = None
        self._seen: Counter[Key] = Counter()

    async def _load(self) -> list[dict[Key, list[ToolResult | None]]]:
        """Per earlier attempt (oldest first): its calls by (name, arguments), in order,
        each with its recorded result (None: made, no result recorded)."""
        store, job = self.runner.store, self.claim.job_id
        # its starts: its own events, and (issue 36) the first one folded into its
        # session's creation when the job was claimed there
        rows = await store.fetchall(
            "SELECT seq, type, payload FROM events WHERE (entity='turnjob' AND entity_id=?1"
            " AND type IN ('turnjob.started', 'turnjob.resumed')) OR (entity='session' AND"
            " entity_id=?2 AND type='session.created' AND json_extract(payload, '$.job_id')=?1)"
            " ORDER BY seq", (job, self.claim.session_id))
        turns: list[str] = []
        for r in rows:
            if r["type"] == "turnjob.resumed":
                turns = []  # a resumed turn goes on from its checkpoint
                continue
            p = json.loads(r["payload"])
            if r["type"] == "session.created":
                p = p.get("start") or {}
            tid = str(p.get("turn_id") or "")
            if tid and tid != self.claim.turn_id:
                turns.append(tid)
        if not turns:
            return []
        marks = ",".join("?" * len(turns))
        events = await store.fetchall(
            f"SELECT entity_id, type, payload FROM events WHERE entity='turn' AND entity_id IN"
            f" ({marks}) AND type IN ('turn.tool_called', 'turn.tool_result') ORDER BY seq",
            tuple(turns))
        calls: dict[str, dict[str, Key]] = {t: {} for t in turns}
        out: dict[str, dict[Key, list[ToolResult | None]]] = {t: {} for t in turns}
        where: dict[tuple[str, str], tuple[Key, int]] = {}
        for e in events:
            p = json.loads(e["payload"])
            turn = e["entity_id"]
            if e["type"] == "turn.tool_called":
                key = (str(p["name"]), str(p["arguments"]))
                calls[turn][p["call_id"]] = key
                slot = out[turn].setdefault(key, [])
                where[(turn, p["call_id"])] = (key, len(slot))
                slot.append(None)
            elif (turn, p["call_id"]) in where:
                key, i = where[(turn, p["call_id"])]
                if p.get("error_kind") == "interrupted":
                    continue  # still unknown: stays None
                content = str(p["content"])
                out[turn][key][i] = ToolResult(
                    content=content if content.startswith(REUSED) else REUSED + content,
                    is_error=bool(p.get("is_error")), error_kind=p.get("error_kind"))
        return [out[t] for t in turns]

    async def call(self, name: str, arguments: str) -> ToolResult:
        if name in (SPAWN_TOOL, SPAWN_MANY_TOOL):  # idempotent by their job-scoped keys:
            return await super().call(name, arguments)  # made again, they find their children
        if self._earlier is None:
            self._earlier = await self._load()
        key = (name, _clip(arguments))  # as the log has it
        n = self._seen[key]
        self._seen[key] += 1
        for attempt in self._earlier:  # the oldest attempt that made this call
            made = attempt.get(key, [])
            if len(made) > n:
                found = made[n]
                return found if found is not None else interrupted(name)
        return await super().call(name, arguments)


__all__ = ["REUSED", "TakeOverToolBox", "interrupted"]
