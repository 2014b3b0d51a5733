"""The console's operator decisions: approve, reject or answer an approval (any kind, in
one list), and settle workflow runs (cancel, retry or skip an interrupted step, start one).
Each goes through the same core API as the CLI, in a worker, and ends in a notification.
`ClawtowerApp` inherits these actions; screens reach them through `tui.protocol.ConsoleApp`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App

from clawtower.core import AlreadyDecided, Approvals, ClawError, Store

from . import workflowdata
from .modals import ConfirmScreen, JsonAnswerScreen, ReasonScreen
from .model import ConsoleModel
from .views import ApprovalList


class DecisionActions(App[int]):
    """Approvals and workflow-run decisions; the app sets `model`, `store`, `operator`."""

    model: ConsoleModel
    store: Store | None
    operator: str
    pending_rerun: str | None

    # ------------------------------------------------------------------ approvals

    def _describe(self, approval_id: str) -> dict[str, Any] | None:
        a = self.model.approval(approval_id)
        if a is None:
            self.notify(f"approval {approval_id!r}: not pending (already decided, or no such id)",
                        severity="error")
        return a

    def request_approve(self, approval_id: str) -> None:
        """`a`: confirm (focus on No), then approve as the operator. An input gate asks
        for its JSON answer instead."""
        a = self._describe(approval_id)
        if a is None:
            return
        if a["kind"] == workflowdata.INPUT_GATE:
            self.request_answer(approval_id)
            return
        body = f"{a['title']}\n\n{a['prompt']}"
        if a.get("preview"):
            body += f"\n\n{a['preview']}"
        body += f"\n\nDecided by {self.operator}."

        def done(ok: bool | None) -> None:
            if ok:
                self.decide(approval_id, approve=True)

        self.push_screen(ConfirmScreen(f"Approve {approval_id}?", body, yes="Approve",
                                       destructive=True), done)

    def request_reject(self, approval_id: str) -> None:
        """`r`: ask a reason, confirm (focus on No), then reject as the operator."""
        a = self._describe(approval_id)
        if a is None:
            return

        def confirmed(reason: str, ok: bool | None) -> None:
            if ok:
                self.decide(approval_id, approve=False, reason=reason)

        def got_reason(reason: str | None) -> None:
            if not reason:
                return
            self.push_screen(
                ConfirmScreen(f"Reject {approval_id}?",
                              f"{a['title']}\n\nReason: {reason}\n\nDecided by {self.operator}.",
                              yes="Reject", destructive=True),
                partial(confirmed, reason))

        self.push_screen(ReasonScreen(f"Reject {approval_id}: why?", a["title"],
                                      placeholder="reason (recorded with the decision)"),
                         got_reason)

    def decide(self, approval_id: str, *, approve: bool, reason: str = "",
               always: bool = False) -> None:
        a = self.model.approval(approval_id)
        if a is not None and a["kind"] in workflowdata.GATE_KIND_SET:
            if approve and a["kind"] == workflowdata.INPUT_GATE:
                self.request_answer(approval_id)
                return
            # The run continues in this process until it ends or pauses again.
            self.run_worker(self._decide_gate(approval_id, approve, reason),
                            group="workflow-runs", exit_on_error=False)
            return
        self.run_worker(self._decide(approval_id, approve, reason, always), group="decide")

    async def _decide(self, approval_id: str, approve: bool, reason: str,
                      always: bool = False) -> None:
        if self.store is None:
            return
        approvals = Approvals(self.store)
        try:
            if approve:
                await approvals.approve(approval_id, by=self.operator, reason=reason,
                                        always=always)
            else:
                await approvals.reject(approval_id, by=self.operator, reason=reason,
                                       always=always)
        except ClawError as exc:
            self._not_decided(exc)
            return
        verb = ("approved" if approve else "rejected") + (" (always)" if always else "")
        self.notify(f"{approval_id} {verb} by {self.operator}", title="Decided")

    def _not_decided(self, exc: ClawError) -> None:
        """A refused decision; one lost to an earlier decision names who made it, and when."""
        lost = isinstance(exc, AlreadyDecided)
        self.notify(str(exc), title="Already decided" if lost else "Not decided",
                    severity="warning" if lost else "error", timeout=10 if lost else 5)

    # ------------------------------------------------------------------ workflows

    def request_answer(self, approval_id: str) -> None:
        """An input gate: the operator types JSON, checked against the gate's schema (in
        the runner's own words) before it is sent."""
        a = self._describe(approval_id)
        if a is None:
            return
        ctx = a.get("context") or {}

        def done(value: Any) -> None:
            if value is not None:
                self.run_worker(self._answer_gate(approval_id, value), group="workflow-runs",
                                exit_on_error=False)

        self.push_screen(JsonAnswerScreen(
            f"Answer {approval_id} · {a['title']}", a["prompt"], ctx.get("responseSchema"),
            ctx.get("defaults"), check=partial(workflowdata.input_problem, a)), done)

    def _gate_outcome(self, approval_id: str, outcome: dict[str, Any]) -> None:
        envelope = outcome.get("envelope") or {}
        run = outcome.get("subject")
        if not envelope.get("ok", True):
            err = envelope.get("error") or {}
            self.notify(f"{run}: {err.get('message')}", title=f"{approval_id} decided · run"
                        " failed", severity="error")
            return
        status = {"needs_approval": "waits for another approval",
                  "needs_input": "waits for an answer"}.get(str(envelope.get("status")),
                                                            str(outcome.get("run_status")))
        self.notify(f"{run} {status}", title=f"{approval_id} {outcome.get('decision')} by"
                    f" {self.operator}")

    async def _decide_gate(self, approval_id: str, approve: bool, reason: str) -> None:
        if self.store is None:
            return
        try:
            out = await workflowdata.decide_gate(self.store, approval_id, approve,
                                                 by=self.operator, reason=reason)
        except ClawError as exc:
            self._not_decided(exc)
            return
        self._gate_outcome(approval_id, out)

    async def _answer_gate(self, approval_id: str, value: Any) -> None:
        if self.store is None:
            return
        try:
            out = await workflowdata.answer_gate(self.store, approval_id, value,
                                                 by=self.operator)
        except ClawError as exc:
            self.notify(str(exc), title="Not answered", severity="error")
            return
        self._gate_outcome(approval_id, out)

    def open_approval(self, approval_id: str) -> None:
        self.call_later(self._open_approval, approval_id)

    async def _open_approval(self, approval_id: str) -> None:
        if self.current_mode != "approvals":
            await self.switch_mode("approvals")
        for lst in self.screen.query(ApprovalList):
            if approval_id in lst:
                lst.move_cursor_to_key(approval_id)

    def request_cancel_run(self, run_id: str) -> None:
        """`c` in mode 5: confirm (focus on No), then cancel the paused (or orphaned) run."""
        run = self.model.workflow(run_id)
        orphaned = run is not None and run.get("driver") == "gone"
        if run is None or (run["status"] != "paused" and not orphaned):
            self.notify(f"workflow run {run_id!r}: not waiting at a gate", severity="error")
            return

        def done(ok: bool | None) -> None:
            if ok:
                self.run_worker(self._cancel_run(run_id), group="workflow-ops")

        where = ("The process driving it is gone; the run ends 'cancelled'." if orphaned else
                 f"It waits at step {run['waiting_step']}; its gate is withdrawn and the run"
                 " ends 'cancelled'.")
        self.push_screen(ConfirmScreen(
            f"Cancel run {run_id}?",
            f"{run.get('name') or run.get('file')}\n\n{where}\n\nBy {self.operator}.",
            yes="Cancel run", no="Keep it", destructive=True), done)

    def request_recover_run(self, run_id: str, decision: str) -> None:
        """`t` (retry) / `k` (skip) in mode 5: confirm (focus on No), then settle the step a
        dead driver left interrupted; the run continues in this console."""
        run = self.model.workflow(run_id)
        if run is None or run["status"] != "paused" or run.get("gate_kind") != "interrupted":
            self.notify(f"workflow run {run_id!r}: no step interrupted by a dead driver",
                        severity="error")
            return
        step = run["waiting_step"]

        def done(ok: bool | None) -> None:
            if ok:
                self.run_worker(self._recover_run(run_id, decision), group="workflow-runs",
                                exit_on_error=False)

        what = (f"Step {step} runs again. It had started when its driver died, so it may"
                " already have had its effect." if decision == "retry" else
                f"Step {step} is left as it is, without a result; the run goes on after it.")
        self.push_screen(ConfirmScreen(
            f"{'Retry' if decision == 'retry' else 'Skip'} step {step} of {run_id}?",
            f"{run.get('name') or run.get('file')}\n\n{what}\n\nBy {self.operator}.",
            yes="Retry step" if decision == "retry" else "Skip step", no="Not now"), done)

    async def _recover_run(self, run_id: str, decision: str) -> None:
        if self.store is None:
            return
        try:
            envelope = await workflowdata.recover_run(self.store, run_id, decision,
                                                      by=self.operator)
        except ClawError as exc:
            self.notify(str(exc), title="Not settled", severity="error")
            return
        if not envelope.get("ok"):
            self.notify(envelope["error"]["message"], title=f"{run_id} failed",
                        severity="error")
            return
        self.notify(f"{run_id}: {decision} by {self.operator}; {envelope['status']}",
                    title="Workflow")

    def rerun_run(self, run_id: str, step: str) -> None:
        """A new run of `run_id` from `step` (mode 5's `R`, confirmed there), driven in this
        console until it ends or pauses (mode 5 selects it when it starts: `pending_rerun`);
        a refusal is core's one line."""
        self.pending_rerun = run_id
        self.run_worker(self._rerun_run(run_id, step), group="workflow-runs",
                        exit_on_error=False)

    async def _rerun_run(self, run_id: str, step: str) -> None:
        if self.store is None:
            return
        try:
            new, envelope = await workflowdata.rerun_run(self.store, run_id, step,
                                                         by=self.operator)
        except ClawError as exc:
            self.pending_rerun = None
            self.notify(str(exc), title="Not rerun", severity="error", timeout=10)
            return
        said = f"{new}: rerun of {run_id} from step {step}"
        if not envelope.get("ok"):
            self.notify(f"{said}; {envelope['error']['message']}", title=f"{new} failed",
                        severity="error")
            return
        self.notify(f"{said}; {envelope['status']}", title="Workflow")

    async def _cancel_run(self, run_id: str) -> None:
        if self.store is None:
            return
        try:
            await workflowdata.cancel_run(self.store, run_id, by=self.operator)
        except ClawError as exc:
            self.notify(str(exc), title="Not cancelled", severity="error")
            return
        self.notify(f"{run_id} cancelled by {self.operator}", title="Workflow")

    def start_workflow(self, file: str, args: dict[str, Any] | None = None, *,
                       show: bool = True, by: str | None = None) -> None:
        """`:workflow FILE [ARGS-JSON]`: run it here until it ends or waits at a gate; `show`
        switches to mode 5; `by` names who starts it (default: the operator)."""
        self.run_worker(self._start_workflow(file, args, show, by or self.operator),
                        group="workflow-runs", exit_on_error=False)

    async def _start_workflow(self, file: str, args: dict[str, Any] | None,
                              show: bool, by: str) -> None:
        if self.store is None:
            return
        envelope = await workflowdata.start_run(self.store, file, args, by=by)
        if not envelope["ok"]:
            self.notify(envelope["error"]["message"], title=f"Workflow {file} not run",
                        severity="error")
            return
        self.notify(f"{Path(file).name}: {envelope['status']}", title="Workflow")
        if show and self.current_mode != "workflows":
            await self.switch_mode("workflows")
