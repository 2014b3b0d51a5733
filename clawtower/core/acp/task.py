"""A task's implementation step run by an ACP harness (seed 000: "launch work through ACP,
not prompt-only relays"): the executor worker of the orchestrator hands the attempt to
`AcpExecutor`, which prompts the harness with the task's spec, records its heartbeat, keeps
the run's plans and diffs as artifacts of the attempt (evidence for the reviewers), and
finishes the attempt as the executor: a harness that fails (authentication, crash, hang,
refusal) fails the attempt with its reason, so the task's stored retry and circuit-breaker
rules apply as for any executor. The run id is kept as a non-authoritative reference.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..store.interface import Store
from ..tasks.service import Tasks
from .bridge import AcpTurn
from .config import HarnessConfig
from .views import run_detail


def task_prompt(task: dict[str, Any], attempt: int, resume: Any) -> str:
    spec = task["spec"]
    lines = [f"Task {task['id']} (attempt {attempt}): {task['title']}",
             f"Goal: {spec.get('goal', '')}"]
    for key, label in (("scope_in", "In scope"), ("scope_out", "Out of scope"),
                       ("inputs", "Inputs"), ("outputs", "Outputs"),
                       ("acceptance_criteria", "Acceptance criteria"), ("risks", "Risks")):
        items = spec.get(key) or []
        if items:
            lines.append(f"{label}:\n" + "\n".join(f"- {x}" for x in items))
    if resume:
        lines.append(f"Resume from: {json.dumps(resume, sort_keys=True)}")
    lines.append("Work only inside this workspace, against the declared inputs and outputs.")
    return "\n\n".join(lines)


class AcpExecutor:
    """Orchestrator(..., executor=AcpExecutor(store, harness, workspace))."""

    def __init__(self, store: Store, harness: HarnessConfig, workspace: str | None = None
                 ) -> None:
        self.store = store
        self.harness = harness
        self.workspace = workspace

    async def __call__(self, task: dict[str, Any], attempt: dict[str, Any], name: str) -> None:
        tid, n = task["id"], attempt["n"]
        t = Tasks(self.store)
        resume = attempt.get("checkpoint")
        await t.heartbeat(tid, n, actor=name, note="started" if not resume else "resumed")
        turn = AcpTurn(self.store, self.harness, task_prompt(task, n, resume),
                       workspace=self.workspace, subject=tid, actor=name)
        await t.checkpoint(tid, n, {"acp_run": turn.run_id, "harness": self.harness.name},
                           actor=name)
        out = await turn.run()
        d = await run_detail(self.store, out.run_id)
        for e in d["evidence"]:
            body = json.dumps(e["body"], sort_keys=True)
            what = e["body"].get("path", "") if e["kind"] == "diff" else "plan"
            await t.artifact(tid, n, f"{e['kind']}: {what}",
                             f"acp://{out.run_id}/{e['kind']}/{e['seq']}", actor=name,
                             digest=hashlib.sha256(body.encode()).hexdigest(),
                             summary=body[:500])
        await t.finish_attempt(tid, n, ok=out.ok, reason=out.error or out.stop_reason,
                               actor=name,
                               output={"summary": out.text[:2000], "acp_run": out.run_id,
                                       "stop_reason": out.stop_reason,
                                       "model": f"acp/{self.harness.name}"})


__all__ = ["AcpExecutor", "task_prompt"]
