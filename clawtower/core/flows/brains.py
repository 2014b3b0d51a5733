"""How an agent answers its flow turns. A Brain decides (execute or decompose), does the
work of an executed task, and writes a coordinator's synthesis.

`ModelBrain` runs the agent's model: the decision is an llm-task call validated against the
decision schema (the agents it may delegate to are an enum there), the work and the
synthesis are plain completions. With the simulator, decisions and texts are scripted per
task id (`scripts: {<subtask id>: {llm_task: [{answer: ...}], ask: [{text: ...}]}}`).
`PlanBrain` answers from a Python table without a model: zero-latency agents for
benchmarks and tests of the scheduler itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..agents.completion import complete
from ..agents.config import SIMULATOR, ClawtowerConfig
from ..agents.llm_task import run_llm_task
from ..agents.provider import ChatMessage, ChatRequest
from ..agents.usage import Price, UsageRecorder
from ..errors import ClawError
from ..sessions.specs import SIM_MODELS, AgentSpec
from ..store.interface import Store
from .plan import FlowLimits, decision_schema
from .service import WorkItem


class AgentFailed(ClawError):
    """The agent could not do its task; the message becomes the task's ERROR."""


@dataclass
class Decision:
    action: str  # execute | decompose
    subtasks: list[dict[str, Any]] = field(default_factory=list)
    tokens: int = 0


@dataclass
class Answer:
    text: str
    tokens: int = 0


class Brain(Protocol):
    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision: ...

    async def work(self, item: WorkItem) -> Answer: ...

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer: ...


DECIDE_PROMPT = (
    "You are agent {agent}. Decide whether to do this task yourself (action \"execute\") or"
    " to split it into subtasks for other agents (action \"decompose\": each subtask has an"
    " id, one of the agents listed in INPUT_JSON.agents, an instruction, and depends_on: ids"
    " of subtasks whose results it needs).\n\nTask: {task}")
WORK_SYSTEM = "You are agent {agent}. Do the task and answer with its result only."
SYNTH_SYSTEM = ("You are agent {agent}. Your subtasks are done. Combine their results into"
                " the answer to your task.")


def synthesis_prompt(item: WorkItem, replies: list[dict[str, Any]]) -> str:
    lines = [f"Task: {item.instruction}", "", "Results of the subtasks:"]
    lines += [f"- {r['local_id']} ({r['agent']}): {r['result']}" for r in replies]
    return "\n".join(lines)


class ModelBrain:
    """The agents' own models, as their specs name them (provider, model, temperature)."""

    def __init__(self, store: Store, config: ClawtowerConfig,
                 specs: Mapping[str, AgentSpec]) -> None:
        self.store = store
        self.config = config
        self.specs = specs  # shared with the engine, which refreshes it
        self._widths: dict[str, int] = {}
        self._defaults = {SIMULATOR: SIM_MODELS[0], **{
            n: p.models[0] for n, p in config.providers.items() if p.models}}

    def _model(self, agent: str) -> tuple[Any, str, AgentSpec]:
        spec = self.specs.get(agent)
        if spec is None:
            raise AgentFailed(f"agent {agent!r}: no such agent spec")
        d = spec.config.defaults
        provider = d.provider or SIMULATOR
        model = d.model or self._defaults.get(provider, "")
        return self.config.provider(provider), model, spec

    async def _width(self, flow_id: str) -> int:
        """The flow's width limit (its decision schema caps the subtasks with it)."""
        if flow_id not in self._widths:
            row = await self.store.fetchone("SELECT limits FROM flows WHERE id=?", (flow_id,))
            limits = FlowLimits.from_dict(json.loads(row["limits"])) if row else FlowLimits()
            self._widths[flow_id] = limits.max_width
        return self._widths[flow_id]

    def _recorder(self, item: WorkItem, spec: AgentSpec) -> UsageRecorder:
        p = spec.config.defaults.price
        return UsageRecorder(self.store, item.flow_id, spec.name,
                             Price(p.prompt, p.completion) if p is not None else None)

    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision:
        provider, model, spec = self._model(item.agent)
        schema = decision_schema(delegates, force_split=item.split and item.depth == 0,
                                 max_width=await self._width(item.flow_id))
        res = await run_llm_task(
            provider, model=model, prompt=DECIDE_PROMPT.format(agent=spec.name,
                                                              task=item.instruction),
            input={"task": item.instruction, "context": item.context, "agents": delegates},
            schema=schema, temperature=spec.config.defaults.temperature,
            timeout_s=spec.config.context_policy.budgets.max_wall_s,
            max_tokens=spec.config.defaults.max_output_tokens,
            metadata={"labels": [item.local_id], "agent": spec.name, "task": item.task_id},
            recorder=self._recorder(item, spec))
        data = res.data if isinstance(res.data, dict) else {}
        action = str(data.get("action", "execute"))
        subs = data.get("subtasks") or []
        return Decision(action=action, subtasks=list(subs) if action == "decompose" else [],
                        tokens=res.usage.total)

    async def _ask(self, item: WorkItem, system: str, user: str) -> Answer:
        provider, model, spec = self._model(item.agent)
        d = spec.config.defaults
        request = ChatRequest(model=model, messages=[
            ChatMessage(role="system", content="\n\n".join(
                x for x in (d.system_prompt, system.format(agent=spec.name)) if x)),
            ChatMessage(role="user", content=user)],
            temperature=d.temperature, max_tokens=d.max_output_tokens,
            timeout_s=spec.config.context_policy.budgets.max_wall_s,
            metadata={"purpose": "ask", "labels": [item.local_id], "agent": spec.name,
                      "task": item.task_id})
        result = await complete(provider, request)
        await self._recorder(item, spec).record(model, "flow", result.usage)
        return Answer(text=result.text.strip(), tokens=result.usage.total)

    async def work(self, item: WorkItem) -> Answer:
        ctx = json.dumps(item.context, ensure_ascii=False) if item.context else ""
        return await self._ask(item, WORK_SYSTEM, item.instruction + (
            f"\n\nContext: {ctx}" if ctx and ctx != "{}" else ""))

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer:
        return await self._ask(item, SYNTH_SYSTEM, synthesis_prompt(item, replies))


class PlanBrain:
    """Answers from `plans` (task id or subtask id -> list of subtask dicts) without a model:
    a task found there decomposes, any other executes; ids in `fail` fail."""

    def __init__(self, plans: Mapping[str, list[dict[str, Any]]] | None = None,
                 fail: Mapping[str, str] | None = None) -> None:
        self.plans = dict(plans or {})
        self.fail = dict(fail or {})

    def _plan(self, item: WorkItem) -> list[dict[str, Any]] | None:
        return self.plans.get(item.task_id, self.plans.get(item.local_id))

    async def decide(self, item: WorkItem, delegates: list[str]) -> Decision:
        plan = self._plan(item)
        return Decision("decompose", plan) if plan is not None else Decision("execute")

    async def work(self, item: WorkItem) -> Answer:
        reason = self.fail.get(item.task_id, self.fail.get(item.local_id))
        if reason is not None:
            raise AgentFailed(reason)
        return Answer(f"{item.agent} did {item.local_id}")

    async def synthesize(self, item: WorkItem, replies: list[dict[str, Any]]) -> Answer:
        return Answer(f"{item.agent} combined {len(replies)} results")


__all__ = ["AgentFailed", "Answer", "Brain", "Decision", "ModelBrain", "PlanBrain",
           "synthesis_prompt"]
