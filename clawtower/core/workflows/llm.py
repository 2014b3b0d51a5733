"""`llm.invoke` / `llm_task.invoke` pipeline stages through clawtower's agent providers.

The agent comes from the project config (core/agents/config.py); with no config the built-in
simulator answers, so workflows with LLM stages run offline and deterministically.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .pipeline import LlmAnswer, LlmCall

if TYPE_CHECKING:
    from ..store.interface import Store

# The run whose step is calling (set by the Workflows service around a run): its tokens and
# cost are recorded under the run's id, like a task's or a meeting's.
CURRENT_RUN: ContextVar[str | None] = ContextVar("clawtower_workflow_run", default=None)


def config_llm(agent_name: str | None = None, config_path: str | None = None, *,
               store: Store | None = None) -> LlmCall:
    """An LlmCall answering with `agent_name` (default: the first agent of the config);
    with a `store`, every model call's usage is an `agent.usage` event of the run."""

    async def call(prompt: str, items: list[Any], schema: dict[str, Any] | None,
                   model: str) -> LlmAnswer:
        # imported at the first LLM stage: a run without one never loads providers/jsonschema
        from ..agents.config import load_config
        from ..agents.llm_task import run_llm_task
        from ..agents.usage import UsageRecorder

        cfg = load_config(config_path)
        name = agent_name or sorted(cfg.agents)[0]
        agent = cfg.agent(name)
        provider = cfg.provider(agent.provider)
        run_id = CURRENT_RUN.get()
        recorder = (UsageRecorder(store, run_id, name, agent.unit_price)
                    if store is not None and run_id else None)
        result = await run_llm_task(provider, model=model or agent.model, prompt=prompt,
                                    input=items or None, schema=schema,
                                    metadata={"agent": name}, recorder=recorder)
        usage = {"promptTokens": result.usage.prompt_tokens,
                 "completionTokens": result.usage.completion_tokens}
        price = agent.unit_price
        return LlmAnswer(data=result.data, text=result.text, model=result.model, usage=usage,
                         cost_usd=price.cost(result.usage) if price is not None else 0.0)

    return call
