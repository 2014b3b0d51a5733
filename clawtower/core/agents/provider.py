"""The provider interface: what every model backend implements.

Designed for real models (streaming, tool calls, token usage, structured output), so the
HTTP providers of a later issue slot in beside the simulator without changing callers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..errors import ClawError


class ProviderError(ClawError):
    """A model call failed. `retryable` says whether backing off and retrying may help."""

    def __init__(self, provider: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(f"provider {provider}: {message}")
        self.provider = provider
        self.retryable = retryable


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    arguments: str  # JSON text, as models send it; validated by the tool layer


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatRequest(BaseModel):
    model: str
    messages: list[ChatMessage]
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: str | None = None
    response_schema: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    timeout_s: float = 60.0
    # what the call is for (task, purpose, round...): routing and simulation, never control
    metadata: dict[str, Any] = Field(default_factory=dict)


class StreamEvent(BaseModel):
    kind: Literal["text", "tool_call", "usage", "done"]
    text: str = ""
    tool_call: ToolCall | None = None
    usage: Usage | None = None
    finish_reason: str | None = None


class ChatResult(BaseModel):
    text: str
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str
    provider: str


class Provider(Protocol):
    name: str

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]: ...
