"""Several REPLYs in one store command: what the engine commits for the turns that ended
together (issue 24: the writer's cost per node is its statements, and a command per reply
repeated the same reads).

Each reply is applied as `service.complete` applies it (the same events, in the same order
per reply, so the same rows); what is shared is the reading: the replying tasks and their
coordinators in one statement, the subtasks the batch unblocked (with their inputs) in
one; a coordinator the batch left with nothing open is read for its synthesis. A reply
that would end its flow (the root's), or any reply after one that did, goes through
`complete` itself, which reads again: a flow ended by the batch cancels tasks the batch
read before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..store.interface import WriteTx
from .service import (
    _READY,
    _REPLYING_FROM,
    RUNNABLE,
    Outcome,
    _dispatch,
    _task,
    complete,
    item_of,
    replied,
)

_TASKS = _REPLYING_FROM + "t.task_id IN (SELECT value FROM json_each(?))"


@dataclass(frozen=True)
class Reply:
    """A task's successful answer, as the engine hands it to `complete_many`."""

    task_id: str
    body: str
    mode: str
    tokens: int = 0


def complete_many(tx: WriteTx, replies: list[Reply]) -> list[Outcome]:
    """Apply `replies` in order, one Outcome each; the work they unblocked (dispatched in
    this command) rides on the last one."""
    if len(replies) < 2:  # nothing to share: the reply's own reads (by primary key)
        return [complete(tx, r.task_id, True, r.body, r.mode, r.tokens) for r in replies]
    rows = {r["task_id"]: r for r in tx.all(
        _TASKS, (json.dumps([r.task_id for r in replies]),))}
    outs: list[Outcome] = []
    ended: set[str] = set()  # flows this batch finished: their later replies read again
    seen: set[str] = set()
    unblocked: dict[str, None] = {}  # dependents of the replies, in order, once each
    # coordinators waiting on the batch's replies: how many subtasks they have left open
    left: dict[str, int] = {}
    coordinator: dict[str, str] = {}  # coordinator task -> its agent
    for rep in replies:
        t = rows.get(rep.task_id)
        if (t is None or t["status"] not in RUNNABLE or not t["parent_id"]
                or t["flow_id"] in ended or rep.task_id in seen):
            out = complete(tx, rep.task_id, True, rep.body, rep.mode, rep.tokens)
            if out.finished and t is not None:
                ended.add(t["flow_id"])
            outs.append(out)
            seen.add(rep.task_id)
            continue
        seen.add(rep.task_id)
        parent = t["parent_id"]
        replied(tx, t, True, rep.body, rep.mode, rep.tokens)
        coordinator[parent] = t["p_agent"]
        if t["p_status"] == "waiting":
            left[parent] = left.get(parent, t["p_open"]) - 1
        for dep in json.loads(t["dependents"]):
            unblocked[f"{parent}/{dep}"] = None
        outs.append(Outcome())
    last = outs[-1]
    if unblocked:
        for row in tx.all(_READY, (json.dumps(list(unblocked)),)):
            if row["flow_id"] not in ended:
                last.items.append(_dispatch(tx, row, coordinator[row["parent_id"]]))
    for parent, n in left.items():  # those whose last open subtask replied in this batch
        if n == 0:
            p = _task(tx, parent)
            if p["flow_id"] not in ended:
                last.items.append(item_of(p, "synth"))
    return outs


__all__ = ["Reply", "complete_many"]
