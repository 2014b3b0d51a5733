"""Test helpers: specs and a driver that walks a task through the phases via the typed API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawtower.core.approvals import Approvals
from clawtower.core.clock import FakeClock
from clawtower.core.store.interface import Store
from clawtower.core.tasks import commands as c
from clawtower.core.tasks.permissions import Role
from clawtower.core.tasks.phases import Phase, backoff_seconds
from clawtower.core.tasks.service import Tasks
from clawtower.core.tasks.spec import TaskSpec

P = Phase
ORCH = "orch"

GOOD_SPEC = TaskSpec(
    title="Add the answer endpoint",
    goal="Serve the answer to everything over HTTP.",
    scope_in=["api"], scope_out=["ui"], inputs=["nothing"],
    outputs=["src/answer.py", "tests/test_answer.py"],
    acceptance_criteria=["GET /answer returns 42 as JSON", "The endpoint answers within 50 ms"],
    risks=["none known"],
)
WEAK_SPEC = TaskSpec(goal="Make it better.", outputs=["src/"],
                     acceptance_criteria=["it works", "looks good"])
NO_CRITERIA_SPEC = TaskSpec(goal="Make it better.", outputs=["src/"])


def good_spec(**changes: Any) -> TaskSpec:
    return GOOD_SPEC.model_copy(update=changes)


async def events(store: Store, after: int = 0) -> list[Any]:
    return await store.events_after(after, limit=1_000_000)


class Driver:
    """Walks tasks through the protocol with the right role for each write."""

    def __init__(self, store: Store, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock
        self.tasks = Tasks(store)
        self.approvals = Approvals(store)

    async def new(self, spec: TaskSpec = GOOD_SPEC) -> str:
        return await self.tasks.create(spec)

    async def get(self, tid: str) -> dict[str, Any]:
        return await self.tasks.get(tid)

    async def phase(self, tid: str) -> str:
        return str((await self.tasks.get(tid))["phase"])

    async def move(self, tid: str, dst: Phase | str, reason: str = "test",
                   **kw: Any) -> dict[str, Any]:
        return await self.tasks.transition(tid, dst, reason, actor=ORCH,
                                           role=Role.ORCHESTRATOR, **kw)

    async def spec_review(self, tid: str, verdict: str = "approved") -> int:
        findings = [] if verdict == "approved" else [{"ref": "src/a.py:1", "text": "fix it"}]
        return await self.tasks.review(tid, role=Role.SPEC_REVIEWER, reviewer="checker",
                                       verdict=verdict, findings=findings)

    async def quality_review(self, tid: str, verdict: str = "approve") -> int:
        findings = [] if verdict == "approve" else [{"ref": None, "text": "rework it"}]
        return await self.tasks.review(tid, role=Role.QUALITY_REVIEWER, reviewer="critic",
                                       verdict=verdict, findings=findings,
                                       details={"risk": "low"})

    async def finish(self, tid: str, ok: bool, reason: str = "") -> None:
        n = (await self.get(tid))["attempts"]
        await self.tasks.finish_attempt(tid, n, ok=ok, reason=reason or ("" if ok else "boom"),
                                        actor="builder")

    async def plan_effect(self, tid: str, kind: str = "notify") -> str:
        n = (await self.get(tid))["attempts"]
        eid = await self.tasks.plan_effect(tid, n, kind, f"{kind} the world", actor="builder",
                                           target=f"{kind}://somewhere")
        assert eid
        return eid

    async def latest_approval(self, tid: str) -> dict[str, Any]:
        return (await self.get(tid))["approvals"][-1]

    async def perform_effects(self, tid: str) -> list[str]:
        keys = []
        for e in (await self.get(tid))["side_effects"]:
            if e["status"] == "done":
                continue
            key = await self.store.execute(lambda tx, e=e: c.effect_intent(
                tx, tid, e["effect_id"], ORCH, Role.ORCHESTRATOR))
            await self.store.execute(lambda tx, e=e: c.effect_done(
                tx, tid, e["effect_id"], "ok", ORCH, Role.ORCHESTRATOR))
            keys.append(key)
        return keys

    async def to(self, tid: str, target: Phase, *, effects: bool = False) -> None:
        """Bring a fresh task (in spec_draft) to `target` along the canonical path."""
        if target == P.SPEC_DRAFT:
            return
        if target == P.FAILED:
            await self.move(tid, P.FAILED)
            return
        await self.move(tid, P.SPEC_REVIEW)
        if target == P.SPEC_REVIEW:
            return
        await self.spec_review(tid, "approved")
        await self.move(tid, P.EXECUTION_READY)
        if target == P.EXECUTION_READY:
            return
        if target == P.CIRCUIT_OPEN:
            await self.move(tid, P.CIRCUIT_OPEN)
            return
        await self.move(tid, P.EXECUTING)
        if target == P.EXECUTING:
            return
        if target == P.RETRYING:
            await self.finish(tid, ok=False)
            await self.move(tid, P.RETRYING)
            return
        if effects:
            await self.plan_effect(tid, "notify")
            await self.plan_effect(tid, "deploy")
        await self.finish(tid, ok=True)
        await self.move(tid, P.SPEC_GATE)
        if target == P.SPEC_GATE:
            return
        await self.spec_review(tid, "approved")
        await self.move(tid, P.QUALITY_GATE)
        if target == P.QUALITY_GATE:
            return
        await self.quality_review(tid, "approve")
        if target == P.COMPLETED:
            assert not effects
            await self.move(tid, P.COMPLETED)
            return
        assert effects, "awaiting_approval and ready_to_resume need planned effects"
        await self.move(tid, P.AWAITING_APPROVAL)
        if target == P.AWAITING_APPROVAL:
            return
        a = await self.latest_approval(tid)
        await self.approvals.approve(a["id"], by="alice")  # its phase follows in its commit
        assert (await self.get(tid))["phase"] == P.READY_TO_RESUME
        assert target == P.READY_TO_RESUME

    async def satisfy(self, tid: str, src: Phase, dst: Phase) -> None:
        """Store the evidence the guard of `src -> dst` asks for (task already in `src`)."""
        pair = (src, dst)
        if pair == (P.SPEC_REVIEW, P.EXECUTION_READY):
            await self.spec_review(tid, "approved")
        elif pair == (P.EXECUTING, P.SPEC_GATE):
            await self.finish(tid, ok=True)
        elif pair == (P.EXECUTING, P.RETRYING):
            await self.finish(tid, ok=False)
        elif pair == (P.RETRYING, P.EXECUTING):
            self.clock.advance(backoff_seconds((await self.get(tid))["attempts"]))
        elif pair == (P.SPEC_GATE, P.QUALITY_GATE):
            await self.spec_review(tid, "approved")
        elif pair == (P.SPEC_GATE, P.EXECUTION_READY):
            await self.spec_review(tid, "changes_requested")
        elif pair in ((P.QUALITY_GATE, P.COMPLETED), (P.QUALITY_GATE, P.AWAITING_APPROVAL)):
            await self.quality_review(tid, "approve")
        elif pair == (P.QUALITY_GATE, P.EXECUTION_READY):
            await self.quality_review(tid, "rework")
        elif pair == (P.AWAITING_APPROVAL, P.READY_TO_RESUME):
            # the decision alone (the approvals list would move the task in its commit)
            a = await self.latest_approval(tid)
            await self.store.execute(lambda tx: c.decide_approval(tx, a["id"], True, "alice",
                                                                  ""))
        elif pair == (P.READY_TO_RESUME, P.COMPLETED):
            await self.perform_effects(tid)


def needs_effects(src: Phase, dst: Phase) -> bool:
    return src in (P.AWAITING_APPROVAL, P.READY_TO_RESUME) or \
        (src, dst) == (P.QUALITY_GATE, P.AWAITING_APPROVAL)


def workflow_file(folder: Path, steps: int) -> Path:
    """`steps` in-process steps (no child process), each safe to run again after a crash."""
    path = folder / f"steps{steps}.lobster"
    body = "".join(f"  - id: s{i}\n    pipeline: json\n    x-idempotent: true\n"
                   for i in range(steps))
    path.write_text(f"name: load\nsteps:\n{body}")
    return path
