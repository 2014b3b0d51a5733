"""A chat model for LangGraph's "each node an agent's model call" columns (issue 36).

Our agent workloads run every node or child as a session turn: one call of the zero-latency
simulator, a prompt built, a reply recorded. LangGraph's plain columns run node functions
that call nothing. Beside them, this column runs the smallest node a LangGraph user writes
for an agent step: one `invoke` of a LangChain chat model on the task's messages, its reply
kept in the state. `InstantChat` answers at once, as the simulator does (the same reply
shape, with token usage), so what is measured is LangChain's and LangGraph's own path for a
model call (message objects, callbacks, the reply's metadata), not a model.

Imported only where LangGraph is installed (`.venv-bench`; benchmarks/requirements-peers.txt).
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult


class InstantChat(BaseChatModel):
    """Replies `worker: got it: "<the last message, clipped>"` with token usage, no I/O."""

    @property
    def _llm_type(self) -> str:
        return "instant"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        text = str(messages[-1].content)
        reply = f'worker: got it: "{" ".join(text.split())[:60]}"'
        prompt = sum(len(str(m.content).split()) for m in messages)
        completion = len(reply.split())
        msg = AIMessage(content=reply, usage_metadata={
            "input_tokens": prompt, "output_tokens": completion,
            "total_tokens": prompt + completion})
        return ChatResult(generations=[ChatGeneration(message=msg)])


CHAT = InstantChat()


def ask(task: str, agent: str = "worker") -> str:
    """One agent step as a LangGraph node takes it: the agent's system message and the task,
    one model call, the reply's text."""
    reply = CHAT.invoke([SystemMessage(content=f"You are {agent}."),
                         HumanMessage(content=task)])
    return str(reply.content)
