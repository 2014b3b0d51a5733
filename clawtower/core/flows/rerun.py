"""Going back in a flow (issue 37): `rerun(F-1/root/research)` starts a new flow that reuses
every reply not downstream of that node and runs the node and its dependents again (with
an edited instruction, when given).

What runs again: the node, and at its level every sibling that depends on it (transitively)
or had not replied; those start from scratch (their old subtrees are not copied: they
decide again). Every coordinator above the node synthesises again, once the children of
it that run again replied, and at each of their levels the same rule holds. Everything
else is reused as it was (its reply, its whole subtree; mode `reused`, no tokens spent).

One `flow.rerun` event writes the new flow's tree; then only what runs again writes events
(the TASKs dispatched now, their sessions): O(rerun nodes), not O(flow). A flow still
running, an unknown flow or node, an empty instruction: refused, nothing written.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import Conflict, NotFound, ValidationError
from ..store.interface import Store, WriteTx
from . import events as fev
from .service import _READY, OPERATOR, WorkItem, _dispatch, _ev, tree_order


def _closure(by_id: dict[str, dict[str, Any]], parent: str, start: list[str]) -> set[str]:
    """`start` and every sibling under `parent` that depends on one of them, transitively."""
    out: set[str] = set()
    todo = list(start)
    while todo:
        t = todo.pop()
        if t in out:
            continue
        out.add(t)
        todo.extend(f"{parent}/{d}" for d in json.loads(by_id[t]["dependents"] or "[]"))
    return out


def rerun(tx: WriteTx, node: str, instruction: str | None, by: str
          ) -> tuple[str, list[WorkItem]]:
    flow_id = node.split("/", 1)[0]
    flow = tx.one("SELECT * FROM flows WHERE id=?", (flow_id,))
    if flow is None:
        raise NotFound(f"flow {flow_id!r}: no such flow")
    if flow["status"] == "running":
        raise Conflict(f"flow {flow_id}: still in flight (running); rerun it once it ends,"
                       " or cancel it first")
    if instruction is not None and not instruction.strip():
        raise ValidationError(f"flow rerun {node}: --instruction is empty")
    rows = tree_order(tx.all("SELECT * FROM flow_tasks WHERE flow_id=?", (flow_id,)))
    by_id = {r["task_id"]: r for r in rows}
    if node not in by_id:
        some = ", ".join(r["task_id"] for r in rows[:8]) + (", ..." if len(rows) > 8 else "")
        raise NotFound(f"flow {flow_id}: no node {node!r} (its nodes: {some})")
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for r in rows:
        kids.setdefault(r["parent_id"], []).append(r)
    ancestors: list[str] = []  # above the node, nearest first
    fresh: set[str] = set()  # run again from scratch
    cur = node
    while True:
        parent = by_id[cur]["parent_id"]
        if parent is None:
            if not ancestors:  # the node is the root: the whole flow runs again
                fresh.add(cur)
            break
        undone = [s["task_id"] for s in kids[parent] if s["status"] != "done"]
        fresh |= _closure(by_id, parent, [cur, *undone]) - {cur if ancestors else ""}
        ancestors.append(parent)
        cur = parent
    again = fresh | set(ancestors)
    num = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM flows")
    new = f"F-{int(num['n']) if num else 1}"

    def nid(old: str | None) -> str | None:
        return None if old is None else new + old[len(flow_id):]

    tasks: list[dict[str, Any]] = []
    dropped: set[str] = set()  # below a node that starts from scratch
    for r in rows:
        tid = r["task_id"]
        if r["parent_id"] in dropped or r["parent_id"] in fresh:
            dropped.add(tid)
            continue
        t = {c: r[c] for c in ("local_id", "depth", "ord", "agent", "instruction", "context",
                               "depends_on", "dependents")}
        t.update(task_id=nid(tid), parent_id=nid(r["parent_id"]), waiting=0, open_children=0,
                 children=0, status="done", mode="reused", result=r["result"], tokens=0)
        if tid in fresh:
            deps = json.loads(r["depends_on"] or "[]")
            t.update(status="pending", mode=None, result=None,
                     waiting=sum(1 for d in deps if f"{r['parent_id']}/{d}" in again))
            if tid == node and instruction is not None:
                t["instruction"] = instruction
        elif tid in ancestors:
            children = kids.get(tid, [])
            t.update(status="waiting", mode="decompose", result=None, children=len(children),
                     open_children=sum(1 for c in children if c["task_id"] in again))
        tasks.append(t)
    root = rows[0]
    started = fev.FlowStarted(
        agent=flow["agent"], instruction=str(tasks[0]["instruction"]),
        context=_obj(root["context"]), root_task=str(nid(root["task_id"])),
        limits=json.loads(flow["limits"]), split=bool(flow["split"]), by=by,
        executor=flow["executor"] or "")
    tx.emit(_ev(new, by, fev.FlowRerun(origin=flow_id, node=node, instruction=instruction,
                                       started=started, tasks=tasks)))
    items: list[WorkItem] = []
    ready = json.dumps(sorted(str(nid(t)) for t in fresh))
    for row in tx.all(_READY, (ready,)):
        parent = row["parent_id"]
        sender = by_id[flow_id + parent[len(new):]]["agent"] if parent else OPERATOR
        items.append(_dispatch(tx, row, sender))
    return new, items


async def rerun_flow(store: Store, node: str, instruction: str | None = None, *,
                     by: str = OPERATOR) -> str:
    """`rerun` in one command; returns the new flow's id (an engine runs it)."""
    new, _ = await store.execute(lambda tx: rerun(tx, node, instruction, by))
    return new


async def rerun_origin(store: Store, flow_id: str) -> dict[str, Any] | None:
    """{flow, node, instruction, by} when `flow_id` is a rerun (`flow show` says so)."""
    row = await store.fetchone(
        "SELECT actor, payload FROM events WHERE entity='flow' AND entity_id=? AND"
        " type='flow.rerun' LIMIT 1", (flow_id,))
    if row is None:
        return None
    p = json.loads(row["payload"])
    return {"flow": p["origin"], "node": p["node"], "instruction": p.get("instruction"),
            "by": row["actor"]}


def _obj(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


__all__ = ["rerun", "rerun_flow", "rerun_origin"]
