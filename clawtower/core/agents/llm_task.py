"""llm-task: one JSON-only model call, validated against a JSON Schema, repaired once.

Behaves like OpenClaw's llm-task (reference/openclaw.md) with one deliberate difference: when
the reply is not valid JSON or does not match the schema, the model gets ONE repair attempt
that shows it the errors; only when the repaired reply still fails do we raise, with
OpenClaw's wording:

    LLM returned invalid JSON
    LLM JSON did not match schema: <errors>

The request carries the schema as `response_schema` (providers use json_schema or
json_object + schema, whichever the server accepts; the simulator answers it offline), and the
messages are OpenClaw's: a JSON-only system prompt and `TASK:\\n<prompt>\\n\\nINPUT_JSON:\\n...`.
Workflows' `llm.invoke` / `llm_task.invoke` steps call `run_llm_task`.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from pydantic import BaseModel, Field

from ..errors import ClawError, ValidationError
from .completion import complete
from .provider import (
    ChatMessage,
    ChatRequest,
    ChatResult,
    Provider,
    ProviderError,
    Usage,
)
from .usage import UsageRecorder

SYSTEM_PROMPT = ("You are a JSON-only function. Return ONLY a valid JSON value. Do not wrap in"
                 " markdown fences. Do not include commentary. Do not call tools.")

INVALID_JSON = "LLM returned invalid JSON"
SCHEMA_MISMATCH = "LLM JSON did not match schema"
MAX_ERRORS = 8  # validation errors listed in a message (the rest are counted)


class LlmTaskError(ClawError):
    """The model's reply was unusable after the repair attempt. `text` is the last reply."""

    def __init__(self, message: str, *, text: str = "", errors: list[str] | None = None,
                 usage: Usage | None = None) -> None:
        super().__init__(message)
        self.text = text
        self.errors = list(errors or [])
        self.usage = usage or Usage()


class LlmTaskInvalidJson(LlmTaskError):
    """`LLM returned invalid JSON`."""


class LlmTaskSchemaMismatch(LlmTaskError):
    """`LLM JSON did not match schema: <errors>`."""


class LlmTaskResult(BaseModel):
    data: Any  # the parsed, validated JSON value
    text: str  # the raw reply it was parsed from
    usage: Usage = Field(default_factory=Usage)  # summed over both calls when repaired
    model: str
    provider: str
    repaired: bool = False
    calls: int = 1
    cost_usd: float = 0.0

    def details(self) -> dict[str, Any]:
        """OpenClaw's result `details`: {json, provider, model}."""
        return {"json": self.data, "provider": self.provider, "model": self.model}


_FENCE = re.compile(r"^\s*```[A-Za-z0-9_+-]*[ \t]*\r?\n?(.*?)\r?\n?```\s*$", re.DOTALL)


def strip_fences(text: str) -> str:
    """The JSON inside a ```json ... ``` (or bare ```) fence; other text stripped of blanks."""
    match = _FENCE.match(text)
    return (match.group(1) if match else text).strip()


def check_schema(schema: dict[str, Any]) -> None:
    """Raise ValidationError when `schema` is not a valid JSON Schema (not the model's fault)."""
    if not isinstance(schema, dict):
        raise ValidationError("schema: must be a JSON object")
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/" + "/".join(str(p) for p in exc.path) if exc.path else "(root)"
        raise ValidationError(f"schema: invalid JSON Schema at {where}: {exc.message}"
                              ) from None


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Every validation error as "<json pointer>: <message>", in a stable order."""
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema)
    found = sorted(validator.iter_errors(value),
                   key=lambda e: ([str(p) for p in e.absolute_path], e.message))
    return [f"{'/' + '/'.join(str(p) for p in e.absolute_path) if e.absolute_path else '/'}:"
            f" {e.message}" for e in found]


def format_errors(errors: list[str]) -> str:
    shown = "; ".join(errors[:MAX_ERRORS])
    more = len(errors) - MAX_ERRORS
    return shown + (f"; and {more} more" if more > 0 else "")


def user_message(prompt: str, input: Any) -> str:
    """OpenClaw's user message: the task, then the input as indented JSON."""
    return f"TASK:\n{prompt}\n\nINPUT_JSON:\n{json.dumps(input, indent=2, ensure_ascii=False)}\n"


def _repair_message(problem: str, schema: dict[str, Any] | None) -> str:
    schema_text = (f"\n\nThe JSON Schema it must match:\n{json.dumps(schema, indent=2)}"
                   if schema is not None else "")
    return (f"Your reply could not be used: {problem}.{schema_text}\n\nReturn ONLY the corrected"
            " JSON value: no markdown fences, no commentary.")


async def _call(provider: Provider, request: ChatRequest) -> ChatResult:
    """Nothing to stream here: a provider's non-streaming `chat` when it has one (servers such
    as llama-cpp-python report usage only there), else the collected stream."""
    chat = getattr(provider, "chat", None)
    if callable(chat):
        result = await chat(request)
        if isinstance(result, ChatResult):
            return result
    return await complete(provider, request)


def _parse(text: str, schema: dict[str, Any] | None) -> tuple[Any, str | None, list[str]]:
    """(value, problem, errors): problem is None when the value is usable."""
    try:
        value = json.loads(strip_fences(text))
    except ValueError as exc:
        return None, f"{INVALID_JSON} ({exc})", []
    if schema is None:
        return value, None, []
    errors = schema_errors(schema, value)
    if errors:
        return value, f"{SCHEMA_MISMATCH}: {format_errors(errors)}", errors
    return value, None, []


async def run_llm_task(
    provider: Provider,
    *,
    model: str,
    prompt: str,
    input: Any = None,
    schema: dict[str, Any] | None = None,
    max_tokens: int | None = None,
    timeout_s: float = 60,
    temperature: float | None = None,
    metadata: dict[str, Any] | None = None,
    recorder: UsageRecorder | None = None,
    repair: bool = True,
) -> LlmTaskResult:
    """One JSON-only call (plus at most one repair call); returns the validated value.

    `timeout_s` bounds each call. `metadata` travels on the request (routing, simulator
    scripts: `labels`, `agent`). `recorder` appends one `agent.usage` event per call.
    Raises ValidationError for a bad schema, ProviderError when a call fails or times out,
    LlmTaskInvalidJson / LlmTaskSchemaMismatch when the reply is still unusable."""
    if not prompt or not prompt.strip():
        raise ValidationError("llm-task: prompt is required")
    if schema is not None:
        check_schema(schema)
    if timeout_s <= 0:
        raise ValidationError("llm-task: timeout_s must be positive")
    messages = [ChatMessage(role="system", content=SYSTEM_PROMPT),
                ChatMessage(role="user", content=user_message(prompt, input))]
    md = {"purpose": "llm_task", **(metadata or {})}
    total = Usage()
    cost = 0.0
    text = ""
    problem: str | None = None
    errors: list[str] = []
    attempts = 2 if repair else 1
    for attempt in range(attempts):
        request = ChatRequest(model=model, messages=list(messages), response_schema=schema,
                              max_tokens=max_tokens, temperature=temperature,
                              timeout_s=timeout_s, metadata={**md, "round": attempt})
        try:
            async with asyncio.timeout(timeout_s):
                result = await _call(provider, request)
        except TimeoutError:
            raise ProviderError(provider.name, f"{model}: llm-task timed out after"
                                f" {timeout_s:g} s", retryable=True) from None
        total = Usage(prompt_tokens=total.prompt_tokens + result.usage.prompt_tokens,
                      completion_tokens=total.completion_tokens + result.usage.completion_tokens)
        if recorder is not None:
            cost += await recorder.record(model, "llm_task", result.usage)
        text = result.text
        value, problem, errors = _parse(text, schema)
        if problem is None:
            return LlmTaskResult(data=value, text=text, usage=total, model=model,
                                 provider=provider.name, repaired=attempt > 0,
                                 calls=attempt + 1, cost_usd=cost)
        messages += [ChatMessage(role="assistant", content=text),
                     ChatMessage(role="user", content=_repair_message(problem, schema))]
    if errors:
        raise LlmTaskSchemaMismatch(f"{SCHEMA_MISMATCH}: {format_errors(errors)}", text=text,
                                    errors=errors, usage=total)
    raise LlmTaskInvalidJson(INVALID_JSON, text=text, usage=total)


__all__ = ["INVALID_JSON", "SCHEMA_MISMATCH", "SYSTEM_PROMPT", "LlmTaskError",
           "LlmTaskInvalidJson", "LlmTaskResult", "LlmTaskSchemaMismatch", "check_schema",
           "run_llm_task", "schema_errors", "strip_fences", "user_message"]
