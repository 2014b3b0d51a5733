"""The flows API: store commands (start, decompose, complete, deliver, cancel) and the reads
the CLI and the console use (list, get, mailbox, transcript).

Each command is one transaction. A completion applies the reply, decrements its parent's
and its dependents' counters and dispatches the subtasks it unblocked in the same commit,
so a crash leaves either all of it or none of it, and the work is O(out-degree).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..errors import Conflict, NotFound, ValidationError
from ..events import NewEvent, Payload
from ..executors import EXECUTOR_PATTERN
from ..sessions import events as sev
from ..sessions.checks import INTERNAL_CHANNEL, _next_session_id
from ..sessions.registry import _spec_of, spec_by_ref, spec_for
from ..sessions.service import _stop
from ..sessions.specs import AgentSpec
from ..store.interface import Store, WriteTx
from . import events as fev
from .plan import ID_RE, FlowLimits, PlanRefused, validate
from .projections import OPEN
from .reads import flows_listing

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

OPERATOR = "operator"  # the root's parent: where the flow's TASK comes from and its REPLY goes
RUNNABLE = ("dispatched", "running", "synthesizing")  # an engine has work to do on these
BOXES = ("inbox", "outbox", "archive")


@dataclass(frozen=True)
class WorkItem:
    """One unit an engine runs: a TASK to decide on, or a coordinator's synthesis."""

    flow_id: str
    task_id: str
    kind: str  # task | synth
    agent: str
    instruction: str
    context: dict[str, Any] = field(default_factory=dict)
    depth: int = 0
    local_id: str = "root"
    msg_id: str = ""
    split: bool = False
    # queued from the command that dispatched its TASK (not found by a scan): nothing can
    # have been queued for it before that commit, so a brain need not look (TurnBrain)
    dispatched_here: bool = False


@dataclass
class Outcome:
    """What a command did: work to run next, and whether the flow ended."""

    items: list[WorkItem] = field(default_factory=list)
    finished: str = ""  # the flow's final status when this command ended it
    ignored: str = ""  # the reason, when the message was recorded as ignored


def _ev(flow_id: str, actor: str, payload: Payload, idem: str | None = None) -> NewEvent:
    return NewEvent(entity_id=flow_id, actor=actor or OPERATOR, role="agent",
                    payload=payload, idem_key=idem)


def task_msg_id(task_id: str) -> str:
    return f"T:{task_id}"


def reply_msg_id(task_id: str, ok: bool) -> str:
    return f"{'R' if ok else 'E'}:{task_id}"


def _context(ctx: str) -> Any:
    try:
        return json.loads(ctx)
    except ValueError:
        return ctx


def item_of(row: dict[str, Any], kind: str, split: bool = False) -> WorkItem:
    return WorkItem(flow_id=row["flow_id"], task_id=row["task_id"], kind=kind,
                    agent=row["agent"], instruction=row["instruction"],
                    context=_context(row["context"]) if kind == "task" else {},
                    depth=int(row["depth"]), local_id=row["local_id"],
                    msg_id=row["task_msg"] or "", split=split)


def ignore(tx: WriteTx, flow_id: str, msg_id: str, task_id: str, kind: str, agent: str,
           reason: str) -> Outcome:
    tx.emit(_ev(flow_id, agent, fev.FlowMessageIgnored(msg_id=msg_id, task_id=task_id,
                                                       kind=kind, agent=agent, reason=reason)))
    return Outcome(ignored=reason)


def _specs(tx: WriteTx) -> dict[str, AgentSpec]:
    return {r["name"]: _spec_of(r) for r in tx.all("SELECT * FROM agent_specs")}


def _flow(tx: WriteTx, flow_id: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM flows WHERE id=?", (flow_id,))
    if row is None:
        raise NotFound(f"flow {flow_id!r}: no such flow")
    return row


def _task(tx: WriteTx, task_id: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM flow_tasks WHERE task_id=?", (task_id,))
    if row is None:
        raise NotFound(f"task {task_id!r}: no such flow task")
    return row


# --------------------------------------------------------------------------- commands


def start(tx: WriteTx, agent: str, instruction: str, *, context: dict[str, Any] | None,
          split: bool, by: str, limits: FlowLimits, root_id: str = "root",
          executor: str = "", cfg: ClawtowerConfig | None = None) -> tuple[str, WorkItem]:
    if not instruction.strip():
        raise ValidationError("flow: the task is empty")
    if not ID_RE.match(root_id):
        raise ValidationError(f"flow: root id {root_id!r} must be 1-64 letters, digits, '_',"
                              " '-' or '.'")
    spec = spec_for(tx, agent, cfg, by)
    row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM flows")
    flow_id = f"F-{int(row['n']) if row else 1}"
    root = f"{flow_id}/{root_id}"
    tx.emit(_ev(flow_id, by, fev.FlowStarted(agent=spec.name, instruction=instruction,
                                             context=context or {}, root_task=root,
                                             limits=limits.as_dict(), split=split, by=by,
                                             executor=executor)))
    msg = task_msg_id(root)
    ctx: dict[str, Any] = {"from_operator": context} if context else {}
    tx.emit(_ev(flow_id, by, fev.FlowTaskSent(msg_id=msg, task_id=root, from_agent=OPERATOR,
                                              to_agent=spec.name, instruction=instruction,
                                              context=ctx,
                                              session_id=session_for(tx, flow_id, spec.name)),
                idem=f"flow-task:{root}"))
    return flow_id, WorkItem(flow_id=flow_id, task_id=root, kind="task", agent=spec.name,
                             instruction=instruction, context=ctx, local_id=root_id,
                             msg_id=msg, split=split)


def take(tx: WriteTx, item: WorkItem) -> None:
    """The agent is still on its TASK after the engine's progress delay: the task shows as
    running (progress only; a faster turn goes from dispatched to done directly). Not once
    a TurnBrain works on it: its node session's `session.created` takes it (issue 36)."""
    tx.emit(_ev(item.flow_id, item.agent, fev.FlowTaskTaken(task_id=item.task_id,
                                                            msg_id=item.msg_id)))


def session_for(tx: WriteTx, flow_id: str, agent: str) -> str:
    """The agent's session in this flow (internal channel, never delivered outside)."""
    row = tx.one("SELECT session_id FROM flow_sessions WHERE flow_id=? AND agent=?",
                 (flow_id, agent))
    if row is not None:
        return str(row["session_id"])
    spec = spec_by_ref(tx, agent)
    sid = _next_session_id(tx)
    tx.emit(NewEvent(entity_id=sid, actor=OPERATOR, role="agent", payload=sev.SessionCreated(
        title=f"{flow_id} {agent}", agent_id=spec.agent_id, deliver=False,
        channel=INTERNAL_CHANNEL, trace_id=flow_id, task={"label": flow_id, "prompt": ""},
        created_by=f"flow:{flow_id}")))
    _link_session(tx, flow_id, agent, sid)
    return sid


def _link_session(tx: WriteTx, flow_id: str, agent: str, sid: str) -> None:
    tx.emit(_ev(flow_id, agent, fev.FlowSessionLinked(agent=agent, session_id=sid)))


# A subtask ready to dispatch: the columns `_dispatch` uses and, in the same statement, the
# results of its dependencies (`inputs`, a JSON object by local id): one read per ready
# subtask instead of two. `?1`: the coordinator's task id; `?2`: the subtask ids (JSON list).
# The subtasks among `?` (full task ids, a JSON list) ready to run, with their inputs (the
# results of what they depend on): one statement for a reply's dependents, a decomposition's
# roots or a batch of replies with several coordinators.
_READY = ("SELECT d.task_id, d.parent_id, d.flow_id, d.agent, d.instruction, d.context,"
          " d.depth, d.local_id, d.session_id, d.depends_on, (SELECT"
          " json_group_object(i.local_id, i.result) FROM flow_tasks i WHERE i.task_id IN"
          " (SELECT d.parent_id || '/' || value FROM json_each(d.depends_on))) AS inputs"
          " FROM flow_tasks d WHERE d.task_id IN (SELECT value FROM json_each(?)) AND"
          " d.waiting=0 AND d.status='pending' ORDER BY d.parent_id, d.ord")


def ready_ids(parent_id: str, local_ids: list[str]) -> str:
    """`_READY`'s parameter: the full task ids of `parent_id`'s subtasks `local_ids`."""
    return json.dumps([f"{parent_id}/{local}" for local in local_ids])


def _dispatch(tx: WriteTx, row: dict[str, Any], from_agent: str) -> WorkItem:
    """Send the TASK of a pending subtask whose dependencies are done. Its context: the
    notes the coordinator wrote for it and the results of its dependencies (read with the
    row by `_READY`, or here in one statement)."""
    inputs: dict[str, Any] = {}
    if row["depends_on"] != "[]":
        got = row.get("inputs")
        if got is not None:
            found = json.loads(got)
        else:
            found = {d["local_id"]: d["result"] for d in tx.all(
                "SELECT local_id, result FROM flow_tasks WHERE task_id IN (SELECT ? || '/' ||"
                " value FROM json_each(?))", (row["parent_id"], row["depends_on"]))}
        inputs = {dep: found.get(dep) for dep in json.loads(row["depends_on"])}
    ctx: dict[str, Any] = {}
    notes = _context(row["context"])
    if notes:
        ctx["notes"] = notes
    if inputs:
        ctx["inputs"] = inputs
    msg = task_msg_id(row["task_id"])
    tx.emit(_ev(row["flow_id"], from_agent, fev.FlowTaskSent(
        msg_id=msg, task_id=row["task_id"], from_agent=from_agent, to_agent=row["agent"],
        instruction=row["instruction"], context=ctx,
        session_id=row["session_id"] or session_for(tx, row["flow_id"], row["agent"])),
        idem=f"flow-task:{row['task_id']}"))
    return WorkItem(flow_id=row["flow_id"], task_id=row["task_id"], kind="task",
                    agent=row["agent"], instruction=row["instruction"], context=ctx,
                    depth=int(row["depth"]), local_id=row["local_id"], msg_id=msg,
                    dispatched_here=True)


def decompose(tx: WriteTx, task_id: str, raw: Any, tokens: int = 0) -> Outcome:
    """The agent splits its TASK: validate, record the sub-DAG, dispatch the ready roots.
    A refused plan fails the task with the reason (fail-fast) and records the refusal."""
    t = _task(tx, task_id)
    msg = t["task_msg"] or task_msg_id(task_id)
    if t["status"] not in ("dispatched", "running"):
        return ignore(tx, t["flow_id"], msg, task_id, "TASK", t["agent"],
                      f"task {task_id} is {t['status']}")
    flow = _flow(tx, t["flow_id"])
    specs = _specs(tx)
    sender = specs.get(t["agent"]) or spec_by_ref(tx, t["agent"])
    try:
        subs = validate(raw, sender=sender, specs=specs, depth=int(t["depth"]),
                        nodes=int(flow["nodes"]),
                        limits=FlowLimits.from_dict(json.loads(flow["limits"])))
    except PlanRefused as exc:
        reason = f"decomposition refused: {exc}"
        tx.emit(NewEvent(entity_id=task_id, actor=t["agent"], role="agent",
                         payload=ev.PermissionRefused(action="flow.decompose", target=task_id,
                                                      reason=str(exc))))
        return complete(tx, task_id, False, reason, "refused", tokens)
    for agent in sorted({sub.agent for sub in subs}):  # their sessions, before the rows
        session_for(tx, t["flow_id"], agent)
    tx.emit(_ev(t["flow_id"], t["agent"], fev.FlowDecomposed(
        task_id=task_id, msg_id=msg, subtasks=[s.model_dump() for s in subs], tokens=tokens)))
    out = Outcome()
    roots = ready_ids(task_id, [s.id for s in subs if not s.depends_on])
    for row in tx.all(_READY, (roots,)):  # the ready roots, in one statement
        out.items.append(_dispatch(tx, row, t["agent"]))
    return out


# What a reply reads: the task and its coordinator, in one statement (the columns used).
_REPLYING_FROM = ("SELECT t.task_id, t.flow_id, t.agent, t.status, t.task_msg, t.parent_id,"
                  " t.dependents, t.local_id, p.agent AS p_agent, p.status AS p_status,"
                  " p.open_children AS p_open FROM flow_tasks t"
                  " LEFT JOIN flow_tasks p ON p.task_id=t.parent_id WHERE ")
_REPLYING = _REPLYING_FROM + "t.task_id=?"


def replied(tx: WriteTx, t: dict[str, Any], ok: bool, body: str, mode: str, tokens: int,
            msg_id: str | None = None) -> None:
    """The task `t` (a `_REPLYING` row) answers its coordinator, or the operator."""
    task_id = t["task_id"]
    tx.emit(_ev(t["flow_id"], t["agent"], fev.FlowReplied(
        msg_id=msg_id or reply_msg_id(task_id, ok), kind="REPLY" if ok else "ERROR",
        task_id=task_id, from_agent=t["agent"],
        to_agent=t["p_agent"] if t["parent_id"] else OPERATOR, body=body,
        in_reply_to=t["task_msg"] or "", mode=mode, tokens=tokens),
        idem=f"flow-reply:{task_id}"))


def complete(tx: WriteTx, task_id: str, ok: bool, body: str, mode: str, tokens: int = 0,
             msg_id: str | None = None) -> Outcome:
    """A task's REPLY (ok) or ERROR, applied at once to its parent. An ERROR climbs to the
    root (v1 fail-fast): each coordinator on the way fails and reports ERROR upward, and the
    flow ends failed, cancelling every task still open."""
    t = tx.one(_REPLYING, (task_id,))
    if t is None:
        raise NotFound(f"task {task_id!r}: no such flow task")
    kind = "REPLY" if ok else "ERROR"
    msg = msg_id or reply_msg_id(task_id, ok)
    flow_id = t["flow_id"]
    if t["status"] not in RUNNABLE:
        return ignore(tx, flow_id, msg, task_id, kind, t["agent"],
                      f"task {task_id} is {t['status']}")
    parent_id = t["parent_id"]
    replied(tx, t, ok, body, mode, tokens, msg)
    out = Outcome()
    if not ok:
        reason = _fail_upward(tx, flow_id, t, body)
        _finish(tx, flow_id, "failed", "", reason, t["agent"])
        out.finished = "failed"
        return out
    if not parent_id:
        _finish(tx, flow_id, "done", body, "", t["agent"])
        out.finished = "done"
        return out
    if t["dependents"] != "[]":  # the dependents this reply unblocked, with their inputs
        for row in tx.all(_READY, (ready_ids(parent_id, json.loads(t["dependents"])),)):
            out.items.append(_dispatch(tx, row, t["p_agent"]))
    if t["p_open"] == 1 and t["p_status"] == "waiting":
        p = _task(tx, parent_id)
        out.items.append(item_of(p, "synth"))
    return out


def _fail_upward(tx: WriteTx, flow_id: str, cur: dict[str, Any], reason: str) -> str:
    """Each open coordinator above the failed task `cur` fails in turn and reports ERROR
    to its own parent. Returns the reason as it reached the root."""
    parent = _task(tx, cur["parent_id"]) if cur["parent_id"] else None
    while parent is not None and parent["status"] in OPEN:
        reason = f"subtask {cur['local_id']} ({cur['agent']}) failed: {reason}"
        grand = tx.one("SELECT agent FROM flow_tasks WHERE task_id=?",
                       (parent["parent_id"],)) if parent["parent_id"] else None
        pmsg = reply_msg_id(parent["task_id"], False)
        tx.emit(_ev(flow_id, parent["agent"], fev.FlowReplied(
            msg_id=pmsg, kind="ERROR", task_id=parent["task_id"],
            from_agent=parent["agent"], to_agent=grand["agent"] if grand else OPERATOR,
            body=reason, in_reply_to=parent["task_msg"] or "", mode="failed"),
            idem=f"flow-reply:{parent['task_id']}"))
        cur = parent
        parent = _task(tx, parent["parent_id"]) if parent["parent_id"] else None
    return reason


def _finish(tx: WriteTx, flow_id: str, status: str, result: str, error: str, by: str
            ) -> None:
    tx.emit(_ev(flow_id, by, fev.FlowFinished(status=status, result=result, error=error,
                                              by=by)))
    linked = set()
    for r in tx.all("SELECT session_id FROM flow_sessions WHERE flow_id=?", (flow_id,)):
        linked.add(r["session_id"])
        tx.emit(NewEvent(entity_id=r["session_id"], actor=by or OPERATOR, role="agent",
                         payload=sev.SessionFinished(status="ok" if status == "done" else
                                                     "error" if status == "failed" else
                                                     "stopped")))
    if status != "done":  # the turns of nodes still in flight stop with their flow
        for r in tx.all("SELECT id FROM sessions WHERE status IN ('idle', 'queued',"
                        " 'running', 'waiting') AND created_by=?", (f"flow:{flow_id}",)):
            if r["id"] not in linked:
                _stop(tx, r["id"], by or OPERATOR, f"flow {flow_id} {status}")


def cancel(tx: WriteTx, flow_id: str, by: str, reason: str) -> None:
    flow = _flow(tx, flow_id)
    if flow["status"] != "running":
        raise Conflict(f"flow {flow_id!r}: already {flow['status']}")
    _finish(tx, flow_id, "cancelled", "", reason or f"cancelled by {by}", by)


def deliver(tx: WriteTx, flow_id: str, kind: str, task_id: str, msg_id: str, body: str,
            sender: str) -> Outcome:
    """A message arriving from outside the engine (a transport, a person answering for an
    agent, a redelivery). Processed exactly once: a known message id, a TASK for a task
    already dispatched, or a reply to a task no longer open is recorded as ignored."""
    if kind not in ("TASK", "REPLY", "ERROR"):
        raise ValidationError(f"message {msg_id}: kind must be TASK, REPLY or ERROR")
    _flow(tx, flow_id)
    t = _task(tx, task_id)
    if t["flow_id"] != flow_id:
        raise NotFound(f"task {task_id!r}: not in flow {flow_id}")
    known = tx.one("SELECT 1 FROM flow_messages WHERE msg_id=?", (msg_id,)) is not None or \
        tx.one("SELECT 1 FROM flow_ignored WHERE msg_id=? LIMIT 1", (msg_id,)) is not None
    if known:
        return ignore(tx, flow_id, msg_id, task_id, kind, sender, "duplicate message id")
    if kind == "TASK":
        if t["task_msg"] is not None or t["status"] != "pending":
            return ignore(tx, flow_id, msg_id, task_id, kind, sender,
                          f"task {task_id} is already {t['status']}")
        if t["waiting"]:
            return ignore(tx, flow_id, msg_id, task_id, kind, sender,
                          f"task {task_id} waits on {t['waiting']} dependencies")
        parent = _task(tx, t["parent_id"])
        return Outcome(items=[_dispatch(tx, t, parent["agent"])])
    return complete(tx, task_id, kind == "REPLY", body, "delivered", msg_id=msg_id)


# --------------------------------------------------------------------------- the API


class Flows:
    """Writes and reads of flows for the CLI, the console and engines."""

    def __init__(self, store: Store, limits: FlowLimits | None = None) -> None:
        self.store = store
        self.limits = limits or FlowLimits()

    async def start(self, agent: str, instruction: str, *,
                    context: dict[str, Any] | None = None, split: bool = False,
                    by: str = OPERATOR, limits: FlowLimits | None = None,
                    root_id: str = "root", executor: str = "",
                    cfg: ClawtowerConfig | None = None) -> str:
        """Start a flow: the TASK goes to `agent`; `root_id` names the root task (and so the
        simulator script of its decision); `executor` (builtin | acp:NAME) runs every
        executed node instead of what each agent's spec names."""
        if executor and not re.match(EXECUTOR_PATTERN, executor):
            raise ValidationError(f"--executor: {executor!r} is not builtin or acp:NAME")
        lim = limits or self.limits
        flow_id, _ = await self.store.execute(
            lambda tx: start(tx, agent, instruction, context=context, split=split, by=by,
                             limits=lim, root_id=root_id, executor=executor, cfg=cfg))
        return flow_id

    async def cancel(self, flow_id: str, by: str = OPERATOR, reason: str = "") -> None:
        await self.store.execute(lambda tx: cancel(tx, flow_id, by, reason))

    async def deliver(self, flow_id: str, kind: str, task_id: str, msg_id: str, body: str = "",
                      sender: str = OPERATOR) -> Outcome:
        return await self.store.execute(
            lambda tx: deliver(tx, flow_id, kind, task_id, msg_id, body, sender))

    # ------------------------------------------------------------------ reads

    async def flows(self, status: str | None = None, limit: int = 200
                    ) -> list[dict[str, Any]]:
        return await flows_listing(self.store, status, limit)

    async def get(self, flow_id: str, limit: int | None = None) -> dict[str, Any]:
        """The flow and its tasks in tree order (each task after its parent, siblings in
        the order their coordinator listed them). `limit`: only the first tasks created
        (a parent is always created before its subtasks, so the tree stays whole)."""
        cap = f" ORDER BY rowid LIMIT {int(limit)}" if limit is not None else ""
        flow, tasks = await self.store.fetch_many([
            ("SELECT * FROM flows WHERE id=?", (flow_id,)),
            (f"SELECT * FROM flow_tasks WHERE flow_id=?{cap}", (flow_id,))])
        if not flow:
            raise NotFound(f"flow {flow_id!r}: no such flow")
        return {"flow": flow[0], "tasks": tree_order(tasks)}

    async def task(self, task_id: str) -> dict[str, Any]:
        row = await self.store.fetchone("SELECT * FROM flow_tasks WHERE task_id=?", (task_id,))
        if row is None:
            raise NotFound(f"task {task_id!r}: no such flow task")
        return row

    async def mailbox(self, agent: str, box: str = "inbox", flow_id: str | None = None,
                      limit: int = 200) -> list[dict[str, Any]]:
        return await self.store.fetchall(*mailbox_query(agent, box, flow_id, limit))

    async def transcript(self, task_id: str) -> list[dict[str, Any]]:
        """The messages of the task's agent session that are about this task."""
        row = await self.task(task_id)
        if not row["session_id"]:
            return []
        return await self.store.fetchall(
            "SELECT seq, role, text, meta, at FROM session_messages WHERE session_id=? AND"
            " json_extract(meta, '$.task')=? ORDER BY seq", (row["session_id"], task_id))

    async def agents(self, flow_id: str) -> list[str]:
        rows = await self.store.fetchall(
            "SELECT DISTINCT agent FROM flow_tasks WHERE flow_id=? ORDER BY agent", (flow_id,))
        return [r["agent"] for r in rows]


def mailbox_query(agent: str, box: str, flow_id: str | None, limit: int
                  ) -> tuple[str, tuple[Any, ...]]:
    if box not in BOXES:
        raise ValidationError(f"--box: {box!r} is not one of {', '.join(BOXES)}")
    cols = ("msg_id, flow_id, task_id, kind, from_agent, to_agent, body, context, status,"
            " seq, at, processed_at")
    flt = " AND flow_id=?" if flow_id else ""
    fp: tuple[Any, ...] = (flow_id,) if flow_id else ()
    if box == "inbox":
        return (f"SELECT {cols} FROM flow_messages WHERE to_agent=? AND status='inbox'{flt}"
                " ORDER BY seq LIMIT ?", (agent, *fp, limit))
    if box == "outbox":
        return (f"SELECT {cols} FROM flow_messages WHERE from_agent=?{flt} ORDER BY seq"
                " LIMIT ?", (agent, *fp, limit))
    return (f"SELECT * FROM (SELECT {cols}, '' AS reason FROM flow_messages WHERE to_agent=?"
            f" AND status!='inbox'{flt} UNION ALL SELECT msg_id, flow_id, task_id, kind,"
            " agent AS from_agent, ? AS to_agent, '' AS body, '{}' AS context,"
            f" 'ignored' AS status, seq, at, at AS processed_at, reason FROM flow_ignored"
            f" WHERE agent=?{flt}) ORDER BY seq LIMIT ?",
            (agent, *fp, agent, agent, *fp, limit))


def tree_order(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for t in tasks:
        kids.setdefault(t["parent_id"], []).append(t)
    for v in kids.values():
        v.sort(key=lambda r: r["ord"])
    out: list[dict[str, Any]] = []
    stack = list(reversed(kids.get(None, [])))
    while stack:
        t = stack.pop()
        out.append(t)
        stack.extend(reversed(kids.get(t["task_id"], [])))
    return out


__all__ = ["BOXES", "OPERATOR", "RUNNABLE", "Flows", "Outcome", "WorkItem", "cancel",
           "complete", "decompose", "deliver", "item_of", "start", "take", "tree_order"]
