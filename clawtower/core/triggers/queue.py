"""The persisted trigger queue: accept (with dedupe), claim (exactly one worker, in lane
order), link, finish, fail (retry or on_failure), and the dead-letter operations.

Every function that changes state is a command run in ONE write transaction (BEGIN
IMMEDIATE): the dedupe check and the append, or the lane check and the claim with its lease,
commit together, so two processes on one store can never both accept a duplicate or both
run an invocation.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import leases
from ..errors import Conflict, NotFound, ValidationError
from ..events import NewEvent
from ..limits import check_process_inputs
from ..liveness import holder_gone
from ..store.interface import WriteTx
from ..tasks.permissions import Role
from . import events as tev
from . import presets
from .spec import MISSING, TriggerSpec, key_text, resolve

ACTIVE = ("queued", "retry", "running", "paused")
LEASE_TTL_S = 15.0
ACTOR = "triggers"


class BadEvent(ValueError):
    """An incoming event a trigger cannot accept (the webhook answers 422)."""


def lease_name(item_id: str) -> str:
    return f"trigger:{item_id}"


def new_id() -> str:
    """`I-<hex>`: a prefix no other id uses (tasks T-, sessions S-, flows F-, workflow runs
    W-, webhook events E-). Stores written before kept `T-<hex>` ids: every command that
    takes an invocation id takes either (they are looked up as given)."""
    return f"I-{uuid.uuid4().hex[:16]}"


@dataclass
class Prepared:
    """An event made ready for the queue: enriched, keyed, mapped (before the write)."""

    spec: TriggerSpec
    source: str
    payload: dict[str, Any]
    inputs: dict[str, Any]
    lane: str
    dedupe: str | None
    warning: str = ""
    fire_at: float | None = None
    missed: int = 0
    source_seq: int | None = None
    idem_key: str | None = None
    item_id: str = field(default_factory=new_id)


def prepare(spec: TriggerSpec, payload: dict[str, Any], source: str, *,
            strict: bool = True) -> Prepared:
    """Enrich `payload` (preset), resolve dedupe and concurrency keys and payload_mapping.

    `strict` (webhooks): a payload without the dedupe or concurrency key is refused
    (BadEvent). Otherwise (cron, channel) a missing concurrency key falls back to the
    trigger's serial queue with a warning, as the spec says."""
    try:
        enriched = presets.apply(spec.preset, payload)
    except presets.PresetError as exc:
        raise BadEvent(str(exc)) from None
    dedupe = None
    if spec.dedupe_key:
        dedupe = key_text(resolve(enriched, spec.dedupe_key))
        if dedupe is None and strict:
            raise BadEvent(f"dedupe_key {spec.dedupe_key!r}: not in the payload (or not a"
                           " scalar)")
    warning = ""
    base = f"{spec.expert}/{spec.name}"
    item_id = new_id()
    if spec.mode == "serial_per_key" and spec.concurrency_key:
        key = key_text(resolve(enriched, spec.concurrency_key))
        if key is None:
            if strict:
                raise BadEvent(f"concurrency_key {spec.concurrency_key!r}: not in the payload"
                               " (or not a scalar)")
            warning = (f"concurrency_key {spec.concurrency_key!r} not in the payload: queued"
                       " serially on the trigger")
            lane = base
        else:
            lane = f"{base}/key:{key}"
    elif spec.mode in ("serial", "serial_per_key"):
        lane = base
    else:
        lane = f"{base}/item:{item_id}"
    inputs: dict[str, Any] = {}
    for name, path in spec.payload_mapping.items():
        value = resolve(enriched, path)
        if value is not MISSING:
            inputs[name] = value
    try:  # a 202 means it will run: what the run cannot take is refused here, named
        check_process_inputs(inputs, {n: f"payload.{p} (input {n})"
                                      for n, p in spec.payload_mapping.items()})
    except ValidationError as exc:
        raise BadEvent(str(exc)) from None
    return Prepared(spec=spec, source=source, payload=enriched, inputs=inputs, lane=lane,
                    dedupe=dedupe, warning=warning, item_id=item_id)


def accept_in(tx: WriteTx, p: Prepared, actor: str = ACTOR) -> dict[str, Any]:
    """Queue `p`, or record it skipped when its dedupe key was accepted within the window.
    Returns {"id", "status": queued|skipped, "duplicate_of"?}."""
    s = p.spec
    if p.dedupe is not None:
        row = tx.one("SELECT item_id, until FROM trigger_dedupe WHERE expert=? AND trigger=?"
                     " AND key=?", (s.expert, s.name, p.dedupe))
        if row is not None and row["until"] > tx.now:
            tx.emit(NewEvent(entity_id=p.item_id, actor=actor, role=Role.SYSTEM.value,
                             payload=tev.TriggerSkipped(
                                 expert=s.expert, trigger=s.name, source=p.source,
                                 dedupe=p.dedupe, duplicate_of=str(row["item_id"]),
                                 payload=p.payload)))
            return {"id": p.item_id, "status": "skipped", "duplicate_of": row["item_id"]}
    tx.emit(NewEvent(
        entity_id=p.item_id, actor=actor, role=Role.SYSTEM.value, idem_key=p.idem_key,
        payload=tev.TriggerReceived(
            expert=s.expert, trigger=s.name, process=s.process, source=p.source, lane=p.lane,
            mode=s.mode, payload=p.payload, inputs=p.inputs, dedupe=p.dedupe,
            dedupe_until=None if p.dedupe is None else tx.now + s.dedupe_window_s,
            fire_at=p.fire_at, missed=p.missed, source_seq=p.source_seq,
            warning=p.warning)))
    return {"id": p.item_id, "status": "queued"}


def claim_in(tx: WriteTx, owner: str, limit: int, ttl: float = LEASE_TTL_S
             ) -> list[dict[str, Any]]:
    """Claim up to `limit` runnable invocations: the head of each lane (oldest active item)
    when it is queued or its retry is due, and any running one whose claimer died (its lease
    expired, or its process is gone from this host). Each claim takes the item's lease in
    the same commit."""
    rows = tx.all(
        "SELECT t.* FROM trigger_items t INDEXED BY trigger_items_waiting WHERE t.status IN"
        " ('queued', 'retry')"
        " AND t.not_before <= ? AND NOT EXISTS (SELECT 1 FROM trigger_items o"
        " WHERE o.lane = t.lane AND o.seq < t.seq AND o.status IN ('queued', 'retry',"
        " 'running', 'paused')) ORDER BY t.seq LIMIT ?", (tx.now, limit))
    out = []
    for r in rows:
        leases.acquire_in(tx, lease_name(r["id"]), owner, ttl)
        attempt = int(r["attempt"]) + 1
        tx.emit(NewEvent(entity_id=r["id"], actor=owner, role=Role.SYSTEM.value,
                         payload=tev.TriggerClaimed(owner=owner, attempt=attempt)))
        out.append({**r, "attempt": attempt, "recovered": False, "run_id": None})
    if len(out) < limit:
        orphans = tx.all(
            "SELECT t.*, l.owner AS holder, l.expires_at, l.released FROM trigger_items t"
            " LEFT JOIN leases l ON l.name = 'trigger:' || t.id WHERE t.status='running'"
            " AND t.owner IS NOT NULL ORDER BY t.seq")
        taken = {o["id"] for o in out}
        for r in orphans:
            if len(out) >= limit:
                break
            if r["id"] in taken:
                continue
            free = r["holder"] is None or r["released"] or r["expires_at"] <= tx.now
            if not free and not holder_gone(str(r["holder"])):
                continue
            if not leases._acquire(tx, lease_name(r["id"]), owner, ttl,
                                   holder_gone=holder_gone):
                continue
            tx.emit(NewEvent(entity_id=r["id"], actor=owner, role=Role.SYSTEM.value,
                             payload=tev.TriggerClaimed(owner=owner, attempt=int(r["attempt"]),
                                                        recovered=True)))
            out.append({**r, "recovered": True})
    return out


def _mine(tx: WriteTx, item_id: str, owner: str, attempt: int) -> bool:
    row = tx.one("SELECT status, owner, attempt FROM trigger_items WHERE id=?", (item_id,))
    return (row is not None and row["status"] == "running" and row["owner"] == owner
            and int(row["attempt"]) == attempt)


def renew_in(tx: WriteTx, item_ids: list[str], owner: str, ttl: float = LEASE_TTL_S
             ) -> list[str]:
    """Renew the leases of the items this worker runs; returns the ones it lost."""
    return [i for i in item_ids if not leases.acquire_in(tx, lease_name(i), owner, ttl)]


def link_in(tx: WriteTx, item_id: str, run_id: str, attempt: int, owner: str) -> None:
    tx.emit(NewEvent(entity_id=item_id, actor=owner, role=Role.SYSTEM.value,
                     payload=tev.TriggerLinked(run_id=run_id, attempt=attempt)))


def pause_in(tx: WriteTx, item_id: str, run_id: str, attempt: int, owner: str) -> bool:
    if not _mine(tx, item_id, owner, attempt):
        return False
    tx.emit(NewEvent(entity_id=item_id, actor=owner, role=Role.SYSTEM.value,
                     payload=tev.TriggerPaused(run_id=run_id, attempt=attempt)))
    leases.release_in(tx, lease_name(item_id), owner)
    return True


def finish_in(tx: WriteTx, item_id: str, attempt: int, owner: str, *, run_id: str | None,
              output: Any, delivery: dict[str, Any], elapsed_s: float,
              sla_breach: tuple[str, str] | None, from_pause: bool = False) -> bool:
    """Record success (once: False if the item is no longer this worker's attempt)."""
    if not (from_pause and _paused(tx, item_id, attempt)) and not _mine(
            tx, item_id, owner, attempt):
        return False
    tx.emit(NewEvent(entity_id=item_id, actor=owner, role=Role.SYSTEM.value,
                     payload=tev.TriggerFinished(attempt=attempt, run_id=run_id,
                                                 output=output, delivery=delivery,
                                                 elapsed_s=elapsed_s)))
    if sla_breach is not None:
        tx.emit(NewEvent(entity_id=item_id, actor=owner, role=Role.SYSTEM.value,
                         payload=tev.TriggerSlaBreached(sla=sla_breach[0], elapsed_s=elapsed_s,
                                                        action=sla_breach[1])))
    leases.release_in(tx, lease_name(item_id), owner)
    return True


def _paused(tx: WriteTx, item_id: str, attempt: int) -> bool:
    row = tx.one("SELECT status, attempt FROM trigger_items WHERE id=?", (item_id,))
    return row is not None and row["status"] == "paused" and int(row["attempt"]) == attempt


def fail_in(tx: WriteTx, item_id: str, attempt: int, owner: str, *, error: str,
            run_id: str | None, retry_delay: float | None, action: str,
            execution_log: dict[str, Any], from_pause: bool = False) -> bool:
    """Record a failed attempt: due again `retry_delay` seconds from the commit, or ended
    with `action` (on_failure) when None."""
    retry_at = None if retry_delay is None else tx.now + retry_delay
    if not (from_pause and _paused(tx, item_id, attempt)) and not _mine(
            tx, item_id, owner, attempt):
        return False
    tx.emit(NewEvent(entity_id=item_id, actor=owner, role=Role.SYSTEM.value,
                     payload=tev.TriggerFailed(attempt=attempt, error=error[:2000],
                                               run_id=run_id, retry_at=retry_at,
                                               action="" if retry_at is not None else action,
                                               execution_log=execution_log)))
    leases.release_in(tx, lease_name(item_id), owner)
    return True


# ------------------------------------------------------------------ operator actions


def _item(tx: WriteTx, item_id: str) -> dict[str, Any]:
    row = tx.one("SELECT * FROM trigger_items WHERE id=?", (item_id,))
    if row is None:
        raise NotFound(f"trigger invocation {item_id!r}: no such invocation")
    return row


def deadletter_retry_in(tx: WriteTx, item_id: str, by: str) -> None:
    row = _item(tx, item_id)
    if row["status"] != "dead_letter":
        raise Conflict(f"trigger invocation {item_id!r}: {row['status']}, not dead-lettered")
    tx.emit(NewEvent(entity_id=item_id, actor=by, role=Role.OPERATOR.value,
                     payload=tev.DeadLetterRetried(by=by)))


def deadletter_drop_in(tx: WriteTx, item_id: str, by: str, reason: str = "") -> None:
    row = _item(tx, item_id)
    if row["status"] != "dead_letter":
        raise Conflict(f"trigger invocation {item_id!r}: {row['status']}, not dead-lettered")
    tx.emit(NewEvent(entity_id=item_id, actor=by, role=Role.OPERATOR.value,
                     payload=tev.DeadLetterDropped(by=by, reason=reason)))


def resolve_escalation_in(tx: WriteTx, item_id: str, by: str) -> None:
    row = _item(tx, item_id)
    if row["status"] != "escalated":
        raise Conflict(f"trigger invocation {item_id!r}: {row['status']}, not escalated")
    tx.emit(NewEvent(entity_id=item_id, actor=by, role=Role.OPERATOR.value,
                     payload=tev.EscalationResolved(by=by)))


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    """A trigger_items row with its JSON columns decoded."""
    out = dict(row)
    for k in ("payload", "inputs", "result"):
        if isinstance(out.get(k), str):
            out[k] = json.loads(out[k])
    return out
