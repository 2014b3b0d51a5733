"""Task protocol write commands. Each runs inside one write transaction (see core.store).

Every command checks the permissions matrix first; a refused write is itself recorded as a
`permission.refused` event and answered with PermissionDenied. Phase guards read stored
evidence (reviews, attempts, approvals), never agent text.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from .. import events as ev
from ..errors import AlreadyDecided, IllegalTransition, NotFound, PermissionDenied, ValidationError
from ..events import NewEvent
from ..store.interface import WriteTx
from .guards import (
    NEEDS_BUDGET,
    budget_base,
    current_attempt,
    guard,
    latest_approval,
    pending_effects,
)
from .permissions import Action, Role, allowed
from .phases import (
    ESCALATE_AT_ATTEMPT,
    TERMINAL,
    TRANSITIONS,
    UNBLOCK_OPTIONS,
    Phase,
    backoff_seconds,
)
from .spec import TaskSpec, spec_problems

SPEC_VERDICTS = ("approved", "changes_requested", "blocked")
QUALITY_VERDICTS = ("approve", "rework")
RISKS = ("low", "medium", "high")


def check_permission(tx: WriteTx, actor: str, role: Role, action: Action, target: str) -> bool:
    """True if allowed; otherwise records the refusal and defers a PermissionDenied."""
    if allowed(role, action):
        return True
    reason = f"role {role.value} may not {action.value}"
    refuse(tx, actor, role, action, target, reason, f"{target}: {reason} (actor {actor})")
    return False


def refuse(tx: WriteTx, actor: str, role: Role, action: Action, target: str, reason: str,
           message: str) -> None:
    """Record a refused write as a `permission.refused` event; the caller gets PermissionDenied
    once the refusal is committed (the refused write itself is not made)."""
    tx.emit(NewEvent(entity_id=target, actor=actor, role=role.value,
                     payload=ev.PermissionRefused(action=action.value, target=target,
                                                  reason=reason)))
    tx.defer_error(PermissionDenied(message))


def load_task(tx: WriteTx, task_id: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM tasks WHERE id=?", (task_id,))
    if row is None:
        raise NotFound(f"task {task_id!r}: no such task")
    return row


def create_task(tx: WriteTx, spec: TaskSpec, actor: str, role: Role,
                source: str | None = None) -> str | None:
    if not check_permission(tx, actor, role, Action.TASK_CREATE, "task"):
        return None
    row = tx.one("SELECT coalesce(max(num), 0) + 1 AS n FROM tasks")
    task_id = f"T-{row['n'] if row else 1}"
    problems = spec_problems(spec)
    tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=ev.TaskCreated(
        title=spec.display_title(), spec=spec.model_dump(mode="json"), spec_ok=not problems,
        spec_problems=problems, source=source)))
    return task_id


def update_spec(tx: WriteTx, task_id: str, spec: TaskSpec, actor: str, role: Role) -> list[str]:
    if not check_permission(tx, actor, role, Action.TASK_UPDATE_SPEC, task_id):
        return []
    task = load_task(tx, task_id)
    if task["phase"] != Phase.SPEC_DRAFT:
        raise IllegalTransition(
            f"task {task_id!r}: the spec can only change in spec_draft (it is in {task['phase']})"
        )
    problems = spec_problems(spec)
    tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=ev.TaskSpecUpdated(
        spec=spec.model_dump(mode="json"), spec_ok=not problems, spec_problems=problems)))
    return problems


def transition(tx: WriteTx, task_id: str, dst: Phase, reason: str, actor: str, role: Role,
               *, model: str = "default", escalation_model: str | None = None,
               failure_summary: str | None = None, backoff_scale: float = 1.0,
               task: dict[str, Any] | None = None) -> dict[str, Any]:
    """task_transition: the only way a phase moves. Orchestrator role only.
    `backoff_scale` multiplies a retry's backoff (a simulated world running faster than real
    time: the demo at `--speed 0` waits for nothing). `task`: its row, when the calling
    command read it in this transaction already."""
    if not check_permission(tx, actor, role, Action.TASK_TRANSITION, task_id):
        return {}
    if dst == Phase.EXECUTING and not check_permission(tx, actor, role, Action.ATTEMPT_START,
                                                       task_id):
        return {}
    if not reason.strip():
        raise ValidationError("--reason: a transition needs a reason")
    if task is None:
        task = load_task(tx, task_id)
    src = Phase(task["phase"])
    if dst not in TRANSITIONS[src]:
        allowed_next = ", ".join(sorted(p.value for p in TRANSITIONS[src])) or "none (terminal)"
        raise IllegalTransition(
            f"task {task_id!r}: {src.value} -> {dst.value} is not a legal transition"
            f" (from {src.value}: {allowed_next})"
        )
    # read once, and only for the moves that count attempts (not on the approval path)
    base = budget_base(tx, task_id) if dst in NEEDS_BUDGET or src == Phase.EXECUTING else 0
    why_not = guard(tx, task, dst, base)
    if why_not:
        raise IllegalTransition(f"task {task_id!r}: {src.value} -> {dst.value} refused: {why_not}")
    attempt = task["attempts"]
    reset = src == Phase.CIRCUIT_OPEN  # a fresh budget: see budget_base
    payload = ev.TaskTransitioned(from_phase=src.value, to_phase=dst.value, reason=reason,
                                  attempt=attempt, reset_attempts=reset)
    tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=payload))
    if dst == Phase.EXECUTING:
        n = attempt + 1
        escalate = n - base >= ESCALATE_AT_ATTEMPT
        chosen = escalation_model if (escalate and escalation_model) else model
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=ev.AttemptStarted(
            attempt=n, model=chosen, escalated=bool(escalate and escalation_model))))
    elif dst == Phase.RETRYING:
        att = current_attempt(tx, task)
        failed_reason = (att or {}).get("reason") or reason
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=ev.RetryScheduled(
            attempt=attempt, next_attempt=attempt + 1, reason=failed_reason,
            not_before=tx.now + backoff_seconds(attempt - base) * max(0.0, backoff_scale),
            escalate=attempt + 1 - base >= ESCALATE_AT_ATTEMPT)))
    elif dst == Phase.CIRCUIT_OPEN:
        last_good = tx.one(
            "SELECT a.name, a.uri FROM artifacts a JOIN attempts t ON t.task_id=a.task_id"
            " AND t.n=a.attempt WHERE a.task_id=? AND t.status='succeeded'"
            " ORDER BY a.seq DESC LIMIT 1", (task_id,))
        fails = tx.all("SELECT n, reason FROM attempts WHERE task_id=? AND status!='succeeded'"
                       " AND n > ? ORDER BY n", (task_id, base))
        summary = failure_summary or "; ".join(
            f"attempt {f['n']}: {f['reason'] or 'failed'}" for f in fails) or reason
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value, payload=ev.CircuitOpened(
            failure_summary=summary, attempts=attempt - base,
            last_good_artifact=(f"{last_good['name']} ({last_good['uri']})" if last_good else None),
            unblock_options=UNBLOCK_OPTIONS)))
    elif dst == Phase.AWAITING_APPROVAL:
        effects = pending_effects(tx, task_id)
        spec = json.loads(task["spec"])
        request_approval(
            tx, kind=SIDE_EFFECT_KIND, subject=task_id,
            title=f"{task_id}: {len(effects)} side effect(s) of {task['title']!r}",
            prompt=f"Allow {task_id} to perform its planned side effects?",
            context={"task": task_id, "attempt": attempt, "phase": dst.value,
                     "effects": [{k: e[k] for k in ("effect_id", "kind", "description",
                                                       "target", "idem_key")} for e in effects]},
            preview="\n".join(f"- {e['kind']}: {e['description']}"
                              + (f" -> {e['target']}" if e["target"] else "") for e in effects),
            actor=actor, role=role,
            required_approver=spec.get("required_approver"),
            require_different_approver=bool(spec.get("require_different_approver")),
        )
    elif dst == Phase.FAILED and src == Phase.AWAITING_APPROVAL:
        a = latest_approval(tx, task_id)
        if a is not None and a["status"] == "pending":
            tx.emit(NewEvent(entity_id=a["id"], actor=actor, role=role.value,
                             payload=ev.ApprovalDecided(decision="withdrawn", reason=reason)))
    return {"task": task_id, "from": src.value, "to": dst.value, "attempt": attempt}


def request_approval(tx: WriteTx, *, kind: str, subject: str, title: str, prompt: str,
                     context: dict[str, Any], preview: str, actor: str, role: Role,
                     required_approver: str | None = None,
                     require_different_approver: bool = False,
                     into: list[NewEvent] | None = None) -> str:
    """Add an item to the one approvals list (tasks, gates). `into`: its event is appended
    there instead of emitted (a workflow gate folds it into its pause, issue 24.2)."""
    if not check_permission(tx, actor, role, Action.APPROVAL_REQUEST, subject):
        return ""
    for _ in range(16):
        approval_id = secrets.token_hex(4)
        if tx.one("SELECT 1 FROM approvals WHERE id=?", (approval_id,)) is None:
            break
    else:  # pragma: no cover - 16 collisions in 2^32 ids
        raise ValidationError("could not allocate an approval id")
    (tx.emit if into is None else into.append)(NewEvent(
        entity_id=approval_id, actor=actor, role=role.value, payload=ev.ApprovalRequested(
            kind=kind, subject=subject, title=title, prompt=prompt, context=context,
            preview=preview, required_approver=required_approver,
            require_different_approver=require_different_approver)))
    return approval_id


#: the approvals kind of a task's planned side effects (decided: its phase follows at once)
SIDE_EFFECT_KIND = "task_side_effect"

#: what deciding an approval reads of its row (not the wide title, prompt and context)
DECISION_COLUMNS = ("SELECT id, kind, subject, status, decided_by, decided_at, required_approver,"
                    " require_different, requested_by FROM approvals WHERE id=?")


def decide_approval(tx: WriteTx, approval_id: str, approve: bool, by: str, reason: str,
                    role: Role = Role.OPERATOR, row: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """Approve or reject exactly once, by a named operator. `row`: the approval's
    DECISION_COLUMNS when the calling command read them in this transaction already."""
    if not by.strip():
        raise ValidationError("--by: an approval needs the approver's name")
    if not check_permission(tx, by, role, Action.APPROVAL_DECIDE, approval_id):
        return {}
    a = row if row is not None else tx.one(DECISION_COLUMNS, (approval_id,))
    if a is None:
        raise NotFound(f"approval {approval_id!r}: no such approval")
    if a["status"] != "pending":
        raise AlreadyDecided.from_row(a)
    if a["required_approver"] and by != a["required_approver"]:
        refuse(tx, by, role, Action.APPROVAL_DECIDE, approval_id,
               f"only {a['required_approver']} may decide it",
               f"approval {approval_id!r}: only {a['required_approver']} may decide it (not {by})")
        return {}
    if a["require_different"] and by == a["requested_by"]:
        refuse(tx, by, role, Action.APPROVAL_DECIDE, approval_id,
               "the requester may not decide it",
               f"approval {approval_id!r}: must be decided by someone other than {by}, who asked")
        return {}
    decision = "approved" if approve else "rejected"
    tx.emit(NewEvent(entity_id=approval_id, actor=by, role=role.value,
                     payload=ev.ApprovalDecided(decision=decision, reason=reason)))
    return {"approval": approval_id, "decision": decision, "subject": a["subject"],
            "kind": a["kind"]}


def resume_decided(tx: WriteTx, task_id: str, actor: str, role: Role) -> bool:
    """The orchestrator's step out of awaiting_approval, as one command: read the latest
    decision and move (approved: ready_to_resume; rejected or withdrawn: failed), with no
    full read of the task first. False: nothing decided yet. True: moved, or the task is no
    longer awaiting approval (the caller reads it again and takes its next step)."""
    task = load_task(tx, task_id)
    if task["phase"] != Phase.AWAITING_APPROVAL:
        return True
    a = tx.one("SELECT id, status, decided_by, reason FROM approvals WHERE subject=?"
               " ORDER BY seq DESC LIMIT 1", (task_id,))
    if a is None or a["status"] == "pending":
        return False
    if a["status"] == "approved":
        transition(tx, task_id, Phase.READY_TO_RESUME,
                   f"approval {a['id']} granted by {a['decided_by']}", actor, role, task=task)
    else:
        transition(tx, task_id, Phase.FAILED,
                   f"approval {a['id']} rejected by {a['decided_by']}"
                   + (f": {a['reason']}" if a["reason"] else ""), actor, role, task=task)
    return True


# ----------------------------------------------------------------- reviewers' writes


def append_review(tx: WriteTx, task_id: str, role: Role, reviewer: str, verdict: str,
                  findings: list[dict[str, Any]], details: dict[str, Any] | None = None,
                  kind: str | None = None) -> int:
    """Append a spec or quality review. `kind` defaults to the one the role writes; asking
    for the other kind is a refused (and recorded) write, like any other role's review."""
    if kind is None:
        kind = "quality" if role == Role.QUALITY_REVIEWER else "spec"
    if kind not in ("spec", "quality"):
        raise ValidationError(f"--kind: {kind!r} is not one of spec, quality")
    action = Action.REVIEW_SPEC if kind == "spec" else Action.REVIEW_QUALITY
    if not check_permission(tx, reviewer, role, action, task_id):
        return 0
    task = load_task(tx, task_id)
    phase = task["phase"]
    if kind == "spec":
        if verdict not in SPEC_VERDICTS:
            raise ValidationError(
                f"--verdict: {verdict!r} is not one of {', '.join(SPEC_VERDICTS)}")
        if phase not in (Phase.SPEC_REVIEW, Phase.SPEC_GATE):
            raise IllegalTransition(
                f"task {task_id!r}: is in {phase};"
                " spec reviews are taken in spec_review or spec_gate")
    else:
        if verdict not in QUALITY_VERDICTS:
            raise ValidationError(
                f"--verdict: {verdict!r} is not one of {', '.join(QUALITY_VERDICTS)}")
        if phase != Phase.QUALITY_GATE:
            raise IllegalTransition(
                f"task {task_id!r}: is in {phase}; quality reviews are taken in quality_gate")
        details = dict(details or {})
        risk = details.get("risk", "low")
        if risk not in RISKS:
            raise ValidationError(f"--risk: {risk!r} is not one of {', '.join(RISKS)}")
        details.setdefault("risk", risk)
        details.setdefault("maintainability", "")
        details.setdefault("test_gaps", [])
        details["recommendation"] = verdict
    if verdict not in ("approved", "approve") and not findings:
        raise ValidationError(f"--finding: a {verdict} verdict needs at least one finding")
    stored = tx.emit(NewEvent(entity_id=task_id, actor=reviewer, role=role.value,
                              payload=ev.ReviewAppended(
                                  kind=kind, stage=phase, reviewer=reviewer, verdict=verdict,
                                  findings=findings, details=details or {},
                                  attempt=task["attempts"])))
    return stored.seq


def parse_finding(text: str) -> dict[str, Any]:
    """'src/app.py:12: message' or 'artifact:report.md: message' -> {ref, text}; else text."""
    head, sep, rest = text.partition(": ")
    if sep and head and " " not in head and ("/" in head or "." in head or ":" in head):
        return {"ref": head, "text": rest.strip()}
    return {"ref": None, "text": text.strip()}


# ----------------------------------------------------------------- executors' writes


def _running_attempt(tx: WriteTx, task_id: str, attempt: int) -> dict[str, Any]:
    task = load_task(tx, task_id)
    if task["phase"] != Phase.EXECUTING or task["attempts"] != attempt:
        raise IllegalTransition(
            f"task {task_id!r}: attempt {attempt} is not the running attempt"
            f" (phase {task['phase']}, attempt {task['attempts']})")
    att = current_attempt(tx, task)
    if att is None or att["status"] != "running":
        raise IllegalTransition(f"task {task_id!r}: attempt {attempt} already finished")
    return task


def heartbeat(tx: WriteTx, task_id: str, attempt: int, actor: str, role: Role,
              note: str = "") -> None:
    if check_permission(tx, actor, role, Action.ATTEMPT_HEARTBEAT, task_id):
        _running_attempt(tx, task_id, attempt)
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                         payload=ev.AttemptHeartbeat(attempt=attempt, note=note)))


def checkpoint(tx: WriteTx, task_id: str, attempt: int, data: dict[str, Any], actor: str,
               role: Role) -> None:
    if check_permission(tx, actor, role, Action.ATTEMPT_CHECKPOINT, task_id):
        _running_attempt(tx, task_id, attempt)
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                         payload=ev.AttemptCheckpoint(attempt=attempt, data=data)))


def record_artifact(tx: WriteTx, task_id: str, attempt: int, name: str, uri: str, actor: str,
                    role: Role, digest: str = "", summary: str = "") -> None:
    if check_permission(tx, actor, role, Action.ARTIFACT_RECORD, task_id):
        _running_attempt(tx, task_id, attempt)
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                         payload=ev.ArtifactRecorded(attempt=attempt, name=name, uri=uri,
                                                     digest=digest, summary=summary)))


def plan_side_effect(tx: WriteTx, task_id: str, attempt: int, kind: str, description: str,
                     actor: str, role: Role, target: str = "") -> str | None:
    if not check_permission(tx, actor, role, Action.SIDE_EFFECT_PLAN, task_id):
        return None
    _running_attempt(tx, task_id, attempt)
    n = tx.one("SELECT count(*) AS c FROM side_effects WHERE task_id=?", (task_id,))
    effect_id = f"{task_id}.e{(n['c'] if n else 0) + 1}"
    idem_key = f"{task_id}/{effect_id}/{secrets.token_hex(8)}"
    tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                     payload=ev.SideEffectPlanned(effect_id=effect_id, attempt=attempt,
                                                  kind=kind, description=description,
                                                  target=target, idem_key=idem_key)))
    return effect_id


def finish_attempt(tx: WriteTx, task_id: str, attempt: int, ok: bool, reason: str, actor: str,
                   role: Role, output: dict[str, Any] | None = None,
                   status: str | None = None) -> None:
    if check_permission(tx, actor, role, Action.ATTEMPT_FINISH, task_id):
        _running_attempt(tx, task_id, attempt)
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                         payload=ev.AttemptFinished(
                             attempt=attempt, status=status or ("succeeded" if ok else "failed"),
                             reason=reason, output=output or {})))


def effect_intent(tx: WriteTx, task_id: str, effect_id: str, actor: str, role: Role) -> str:
    """Commit the intent before performing an effect; returns its idempotency key."""
    if not check_permission(tx, actor, role, Action.SIDE_EFFECT_PERFORM, task_id):
        return ""
    task = load_task(tx, task_id)
    if task["phase"] != Phase.READY_TO_RESUME:
        raise IllegalTransition(f"task {task_id!r}: effects run only in ready_to_resume")
    e = tx.one("SELECT * FROM side_effects WHERE effect_id=? AND task_id=?", (effect_id, task_id))
    if e is None:
        raise NotFound(f"side effect {effect_id!r}: no such effect")
    if e["status"] == "planned":
        tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                         payload=ev.SideEffectIntent(effect_id=effect_id,
                                                     idem_key=e["idem_key"])))
    return str(e["idem_key"])


def effect_done(tx: WriteTx, task_id: str, effect_id: str, result: str, actor: str,
                role: Role) -> None:
    if not check_permission(tx, actor, role, Action.SIDE_EFFECT_PERFORM, task_id):
        return
    e = tx.one("SELECT * FROM side_effects WHERE effect_id=? AND task_id=?", (effect_id, task_id))
    if e is None:
        raise NotFound(f"side effect {effect_id!r}: no such effect")
    if e["status"] == "done":
        return
    if e["status"] != "intent":
        # only an approved effect whose intent is committed (in ready_to_resume) can be done
        raise IllegalTransition(
            f"task {task_id!r}: side effect {effect_id} has no committed intent ({e['status']})")
    tx.emit(NewEvent(entity_id=task_id, actor=actor, role=role.value,
                     payload=ev.SideEffectDone(effect_id=effect_id, idem_key=e["idem_key"],
                                               result=result)))


def record_usage(tx: WriteTx, subject: str, agent: str, model: str, purpose: str,
                 prompt_tokens: int, completion_tokens: int, *, estimated: bool = False
                 ) -> None:
    """One model call's `agent.usage`, built as the turn loop builds it (UsageRecorder)."""
    from ..agents.provider import Usage
    from ..agents.usage import UsageRecorder

    event, _ = UsageRecorder(None, subject, agent, actor_role=Role.SYSTEM.value).event(
        model, purpose, Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
        estimated=estimated)
    tx.emit(event)


__all__ = [
    "TERMINAL", "append_review", "budget_base", "check_permission", "checkpoint", "create_task",
    "decide_approval", "effect_done", "effect_intent", "finish_attempt", "guard", "heartbeat",
    "parse_finding", "plan_side_effect", "record_artifact", "record_usage", "request_approval",
    "resume_decided", "transition", "update_spec",
]
