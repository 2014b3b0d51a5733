"""How a workflow gate gets decided: the write that claims a paused run's gate and records
the decision (for `resume` and `cancel`), and the approvals list's side (approve, reject or
answer a gate by its approvals item, check an answer first). Apart from the service because
deciding a gate is not driving a run; the service inherits it as `Decisions`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import events as ev
from .. import leases
from ..errors import AlreadyDecided, ClawError, Conflict, NotFound, ValidationError
from ..events import NewEvent
from ..liveness import holder_gone, process_tag
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from . import events as wev
from .envelopes import _loads, error_envelope
from .jsvalues import UNDEFINED, js_plain
from .kinds import GATE_KINDS
from .load import WorkflowError
from .recorder import lease_name
from .tokens import decode_token, matches

NOT_FOUND = "Workflow resume state not found"


class GateDecided(WorkflowError):
    """The gate a resume was aimed at is no longer waiting. Lobster's message (the envelope
    of `workflow resume` stays Lobster's); `approval` is the gate's approvals row, read in
    the same transaction, so `decide` can tell the loser who decided what and when."""

    def __init__(self, message: str, approval: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.approval = approval if approval and approval["status"] != "pending" else None


def _why_cancelled(decision: str, reason: str) -> str:
    """A cancelled run's reason: how its gate was decided, and the decider's words."""
    how = "rejected" if decision == "rejected" else "cancelled"
    return f"{how}: {reason.strip()}" if reason.strip() else how


class Decisions:
    """Gates claimed and decided; from the approvals list through the service's `_resume`."""

    store: Store
    owner: str
    lease_ttl_s: float
    actor: str

    if TYPE_CHECKING:  # the service's: Lobster's resume, and the reads it inherits
        async def _paused_run(self, run_id: str) -> tuple[dict[str, Any] | None,
                                                           dict[str, dict[str, Any]]]: ...

    if TYPE_CHECKING:  # the service's: Lobster's resume
        async def _resume(self, token: str | None, approval_id: str | None,
                          approve: bool | None, response: Any, cancel: bool,
                          approved_by: str | None, reason: str = "") -> dict[str, Any]: ...

    async def _locate(self, token: str | None, approval_id: str | None, missing: str
                      ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The paused run a token or approval id names (WorkflowError otherwise), with its
        step results, read with it from one snapshot."""
        if approval_id:
            a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
            gone = GateDecided(f'Approval ID "{approval_id}" not found or expired', a)
            gone.kind = "parse_error"
            if a is None or a["kind"] not in GATE_KINDS.values() or a["status"] != "pending":
                raise gone
            run, results = await self._paused_run(a["subject"])
            if run is None or run["status"] != "paused" or run["approval_id"] != approval_id:
                # decided between the two reads: the decision was committed with the run's
                # new status, so reading the approval again finds it
                gone = GateDecided(gone.message, await self.store.fetchone(
                    "SELECT * FROM approvals WHERE id=?", (approval_id,)))
                gone.kind = "parse_error"
                raise gone
            return run, results
        if not token:
            raise WorkflowError("resume requires token or approvalId", "parse_error")
        ref = decode_token(token)
        if ref is None:
            raise WorkflowError(missing)
        run, results = await self._paused_run(ref.run_id)
        if run is None or run["status"] != "paused" or not matches(ref.secret,
                                                                   run["token_hash"]):
            raise WorkflowError(missing)
        return run, results

    async def cancel(self, run_id: str, *, by: str, reason: str = "") -> None:
        """Cancel a paused run (its gate is withdrawn) or one left running by a dead process."""
        def command(tx: WriteTx) -> None:
            run = tx.one("SELECT * FROM workflow_runs WHERE id=?", (run_id,))
            if run is None:
                raise NotFound(f"workflow run {run_id!r}: no such run")
            if run["status"] not in ("paused", "running"):
                raise Conflict(f"workflow run {run_id!r}: already {run['status']}")
            if run["status"] == "paused":
                self._decide(tx, run, "withdrawn", by, reason)
            tx.emit(NewEvent(entity_id=run_id, actor=by, role=Role.OPERATOR.value,
                             payload=wev.WorkflowCancelled(reason=reason or "cancelled", by=by)))

        await self.store.execute(command)


    def _claim(self, tx: WriteTx, run: dict[str, Any]) -> dict[str, Any]:
        """Inside the write: the run is still paused at the same gate (a token works once)."""
        now = tx.one("SELECT * FROM workflow_runs WHERE id=?", (run["id"],))
        if (now is None or now["status"] != "paused" or now["token_hash"] != run["token_hash"]
                or now["approval_id"] != run["approval_id"]):
            raise GateDecided(NOT_FOUND, tx.one("SELECT * FROM approvals WHERE id=?",
                                                (run["approval_id"],)))
        return now

    def _decide(self, tx: WriteTx, run: dict[str, Any], decision: str, by: str | None,
                reason: str = "", fold: bool = False) -> ev.ApprovalDecided | None:
        """The gate's approvals item decided; `fold`: returned for the run's resume to
        carry (one event, issue 24.2) rather than emitted."""
        a = tx.one("SELECT status FROM approvals WHERE id=?", (run["approval_id"],))
        if a is None or a["status"] != "pending":
            return None
        payload = ev.ApprovalDecided(decision=decision, reason=reason)
        if not fold:
            tx.emit(NewEvent(entity_id=run["approval_id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=payload))
        return payload

    def _consume(self, run: dict[str, Any], decision: str, by: str | None,
                 result: dict[str, Any], reason: str = "") -> Callable[[WriteTx], None]:
        """The write that claims the gate, records the decision and takes the run's lease.
        Not a commit of its own: it opens the run's next write (the recorder's `opening`:
        the next gate's pause, or the start of the first step with an effect), so a gate
        after a gate costs one commit (issue 36). Nothing with an effect runs before it
        commits; if the gate was decided meanwhile, that write raises GateDecided and
        nothing of this resume is written."""
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            decided = self._decide(tx, run, "approved" if decision == "approved"
                                   else "answered", by, reason, fold=True)
            lease: list[NewEvent] = []
            leases._acquire(tx, lease_name(run["id"]), self.owner, self.lease_ttl_s,
                            holder_gone=holder_gone, into=lease)
            taken = lease[0].payload if lease else None  # a take-over keeps its own event
            if not isinstance(taken, ev.LeaseAcquired) or taken.took_over_from is not None:
                taken = None
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=wev.WorkflowResumed(
                                 step_id=run["waiting_step"], decision=decision,
                                 by=(by or "").strip() or None,
                                 result=js_plain(result), owner=process_tag(),
                                 approval_id=run["approval_id"] if decided else None,
                                 decided=decided, lease=taken)))
            for event in lease if taken is None else ():
                tx.emit(event)

        return command

    async def _consume_cancel(self, run: dict[str, Any], by: str | None, decision: str,
                              reason: str = "") -> None:
        def command(tx: WriteTx) -> None:
            self._claim(tx, run)
            self._decide(tx, run, decision, by, reason)
            tx.emit(NewEvent(entity_id=run["id"], actor=(by or "").strip() or self.actor,
                             role=Role.OPERATOR.value, payload=wev.WorkflowCancelled(
                                 reason=_why_cancelled(decision, reason),
                                 by=(by or "").strip() or None)))

        await self.store.execute(command)

    # ------------------------------------------------- the approvals list's side

    async def decide(self, approval_id: str, approve: bool, *, by: str,
                     reason: str = "") -> dict[str, Any]:
        """`clawtower approve/reject ID` on a gate: approving continues the run (in this
        process, until it ends or pauses again), rejecting cancels it.

        Exactly one of two racing decisions wins: the gate is claimed inside the write that
        records the decision, and the loser gets AlreadyDecided (who, what, when)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        if a["status"] != "pending":
            raise AlreadyDecided.from_row(a)
        if approve and a["kind"] == GATE_KINDS["input"]:
            raise ValidationError(f"approval {approval_id!r}: a workflow input gate needs an"
                                  f" answer: clawtower workflow resume --id {approval_id}"
                                  " --response-json JSON")
        cancel = a["kind"] == GATE_KINDS["input"]
        envelope = await self._resume_or_lose(approval_id, None if cancel else approve,
                                              UNDEFINED, cancel, by, reason)
        return await self._decided(approval_id, a, envelope, "approved" if approve else
                                   "rejected")

    async def _resume_or_lose(self, approval_id: str, approve: bool | None, response: Any,
                              cancel: bool, by: str, reason: str = "") -> dict[str, Any]:
        """`resume` for the approvals list: a gate someone else decided meanwhile raises
        AlreadyDecided rather than answer Lobster's "not found" envelope."""
        try:
            return await self._resume(None, approval_id, approve, response, cancel, by,
                                      reason)
        except GateDecided as exc:
            if exc.approval is not None:
                raise AlreadyDecided.from_row(exc.approval) from None
            return error_envelope(exc.kind, exc.message)
        except WorkflowError as exc:
            return error_envelope(exc.kind, exc.message)

    async def respond(self, approval_id: str, response: Any, *, by: str) -> dict[str, Any]:
        """Answer an input gate with a JSON value (validated against its schema first)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        if a["status"] != "pending":
            raise AlreadyDecided.from_row(a)
        envelope = await self._resume_or_lose(approval_id, None, response, False, by)
        return await self._decided(approval_id, a, envelope, "answered")

    async def _decided(self, approval_id: str, a: dict[str, Any], envelope: dict[str, Any],
                       decision: str) -> dict[str, Any]:
        now = await self.store.fetchone("SELECT status FROM approvals WHERE id=?",
                                        (approval_id,))
        if not envelope["ok"] and (now is None or now["status"] == "pending"):
            message = envelope["error"]["message"]
            if envelope["error"]["type"] == "parse_error":
                raise ValidationError(f"approval {approval_id!r}: {message}")
            raise ClawError(f"approval {approval_id!r}: {message}")
        run = await self.store.fetchone("SELECT status FROM workflow_runs WHERE id=?",
                                        (a["subject"],))
        return {"approval": approval_id, "decision": decision, "subject": a["subject"],
                "kind": a["kind"], "run_status": run["status"] if run else None,
                "envelope": envelope}

    async def check_response(self, approval_id: str, response: Any) -> str | None:
        """Why a response would be refused by an input gate's schema (None: it is fine)."""
        a = await self.store.fetchone("SELECT * FROM approvals WHERE id=?", (approval_id,))
        if a is None:
            raise NotFound(f"approval {approval_id!r}: no such approval")
        run = await self.store.fetchone("SELECT * FROM workflow_runs WHERE id=?",
                                        (a["subject"],))
        if run is None or run["gate"] != "input":
            raise ValidationError(f"approval {approval_id!r}: not a waiting workflow input gate")
        from .ajv import validate_response

        return validate_response(_loads(run["input_schema"]), response, run["waiting_step"])
