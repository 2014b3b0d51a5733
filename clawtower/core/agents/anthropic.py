"""An Anthropic Messages-compatible provider over httpx (streaming SSE and non-streaming).

POST {base_url}/v1/messages (a base_url ending in /v1 is not doubled) with `x-api-key` (the
key read at call time from the variable NAMED in config) and `anthropic-version: 2023-06-01`.

Our ChatMessage history is converted to the Messages shape: system messages become the
top-level `system`; an assistant message with tool calls becomes text + `tool_use` blocks;
`tool` messages become `tool_result` blocks of a user message; consecutive messages of one
role are merged (the API wants user and assistant to alternate). Tools are sent with
`input_schema`; tool_choice "auto" -> {type: auto}, "required"/"any" -> {type: any}, "none" ->
{type: none}, any other value names one tool -> {type: tool, name}.

A `response_schema` (structured output) is asked for the Anthropic way: one forced tool whose
input_schema is the schema; its input comes back as the reply's text (JSON).

Streaming: message_start (input usage), content_block_start / content_block_delta (text_delta,
input_json_delta pieces) / content_block_stop, message_delta (stop_reason, output usage),
message_stop, ping; an `error` event mid-stream is a ProviderError naming its type. Consecutive
tool_use blocks with one id are one call in pieces (LiteLLM's proxy, bridging a backend that
repeats the id in every tool-call delta, opens a block per delta): their JSON is joined. Stop
reasons map to ours: end_turn/stop_sequence -> stop, tool_use -> tool_calls, max_tokens ->
length (others pass through).

Retries, deadlines, concurrency and key handling: see httpcommon.py (529 "overloaded" is a
5xx, so retried).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from .httpcommon import HTTPProvider, clip
from .provider import ChatMessage, ChatRequest, ChatResult, StreamEvent, ToolCall, Usage

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 1024  # the Messages API requires max_tokens
JSON_TOOL = "json_response"  # the forced tool that carries a response_schema answer
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls",
                "max_tokens": "length"}
RETRYABLE_STREAM_ERRORS = ("overloaded_error", "api_error", "rate_limit_error", "timeout_error")


@dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    initial: Any = None
    index: int = 0


class AnthropicProvider(HTTPProvider):
    """A Provider for any Anthropic Messages-compatible `/v1/messages` endpoint."""

    kind = "anthropic"

    # -- public API ------------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> ChatResult:
        """One non-streaming call."""
        raw = await self._post_read(request, self._url(),
                                    lambda: self._body(request, stream=False))
        try:
            data = json.loads(raw)
            blocks = data["content"]
            if not isinstance(blocks, list):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise self._error(f"malformed response: {clip(raw)}") from None
        texts: list[str] = []
        calls: list[ToolCall] = []
        for i, b in enumerate(blocks):
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text":
                texts.append(str(b.get("text") or ""))
            elif b.get("type") == "tool_use":
                args = json.dumps(b.get("input") if b.get("input") is not None else {})
                if request.response_schema is not None and b.get("name") == JSON_TOOL:
                    texts.append(args)
                else:
                    calls.append(ToolCall(id=str(b.get("id") or f"toolu_{i}"),
                                          name=str(b.get("name") or ""), arguments=args))
        usage = _usage(data.get("usage"), Usage())
        finish = _finish(data.get("stop_reason"), request)
        return ChatResult(text="".join(texts), tool_calls=calls, usage=usage,
                          finish_reason=finish, model=str(data.get("model") or request.model),
                          provider=self.name)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """SSE streaming: text as it comes; each tool call when its block ends; usage last."""
        deadline = self._deadline(request)
        async with self._slot(deadline), self._client(request) as client:
            resp = await self._post(client, request, self._url(),
                                    lambda: self._body(request, stream=True), deadline)
            try:
                async for event in self._events(request, resp, deadline):
                    yield event
            finally:
                await resp.aclose()

    # -- HTTP ------------------------------------------------------------------------------

    def _url(self) -> str:
        # the SDKs' base_url has no /v1; a configured ".../v1" is taken as meant, not doubled
        if self.base_url.endswith("/v1"):
            return f"{self.base_url}/messages"
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        headers["anthropic-version"] = API_VERSION
        key = self._key()
        if key:
            headers["x-api-key"] = key
        return headers

    def _body(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        system, messages = convert_messages(request.messages)
        body: dict[str, Any] = {"model": request.model, "messages": messages,
                                "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
                                "stream": stream}
        if system:
            body["system"] = system
        tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                 for t in request.tools]
        choice = _tool_choice(request.tool_choice)
        if request.response_schema is not None:
            tools.append({"name": JSON_TOOL, "description": "Answer with JSON matching the schema.",
                          "input_schema": request.response_schema})
            choice = {"type": "tool", "name": JSON_TOOL}
        if tools:
            body["tools"] = tools
        if choice is not None and (tools or choice["type"] == "none"):
            body["tool_choice"] = choice
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    # -- SSE -------------------------------------------------------------------------------

    async def _events(self, request: ChatRequest, resp: httpx.Response,
                      deadline: float) -> AsyncIterator[StreamEvent]:
        blocks: dict[int, _Block] = {}
        held: _Block | None = None  # an ended tool_use block the next one may continue
        usage: Usage | None = None
        finish: str | None = None
        started = stopped = False
        async for sse in self._sse(resp, deadline):
            data = self._json(sse.data)
            kind = str(data.get("type") or sse.event)
            if kind == "ping":
                continue
            if kind == "error":
                err = data.get("error")
                etype = str(err.get("type") or "error") if isinstance(err, dict) else "error"
                emsg = str(err.get("message") or "") if isinstance(err, dict) else str(err)
                raise self._error(f"stream error: {etype}: {clip(emsg)}",
                                  retryable=etype in RETRYABLE_STREAM_ERRORS)
            if kind == "message_start":
                started = True
                message = data.get("message") if isinstance(data.get("message"), dict) else {}
                usage = _usage((message or {}).get("usage"), usage or Usage())
                continue
            if not started:
                raise self._error(f"malformed SSE: {kind!r} before message_start")
            if held is not None and kind in ("message_delta", "message_stop"):
                yield _tool_event(held, request)
                held = None
            if kind == "content_block_start":
                index, block = _index(data), data.get("content_block")
                if not isinstance(block, dict):
                    raise self._error(f"malformed SSE data: {clip(sse.data)}")
                b = _Block(kind=str(block.get("type") or ""), id=str(block.get("id") or ""),
                           name=str(block.get("name") or ""), initial=block.get("input"),
                           index=index)
                blocks[index] = b
                if held is not None and not _continues(held, b):
                    yield _tool_event(held, request)
                    held = None
                if b.kind == "text" and block.get("text"):
                    yield StreamEvent(kind="text", text=str(block["text"]))
            elif kind == "content_block_delta":
                index, delta = _index(data), data.get("delta")
                if not isinstance(delta, dict) or index not in blocks:
                    raise self._error(f"malformed SSE: a delta for no open block: {clip(sse.data)}")
                dtype = delta.get("type")
                if dtype == "text_delta":
                    text = str(delta.get("text") or "")
                    if text:
                        yield StreamEvent(kind="text", text=text)
                elif dtype == "input_json_delta":
                    blocks[index].parts.append(str(delta.get("partial_json") or ""))
                # thinking_delta, signature_delta, citations_delta: not ours to show
            elif kind == "content_block_stop":
                index = _index(data)
                closed = blocks.pop(index, None)
                if closed is None:
                    raise self._error(f"malformed SSE: stop of no open block: {clip(sse.data)}")
                if closed.kind == "tool_use":
                    if held is not None and _continues(held, closed):
                        held.parts.extend(closed.parts)
                    else:
                        if held is not None:
                            yield _tool_event(held, request)
                        held = closed
            elif kind == "message_delta":
                delta = data.get("delta")
                if isinstance(delta, dict) and delta.get("stop_reason"):
                    finish = _finish(delta["stop_reason"], request)
                usage = _usage(data.get("usage"), usage or Usage())
            elif kind == "message_stop":
                stopped = True
                break
            # unknown event types are skipped, as the API's versioning policy asks
        if not started:
            raise self._error("empty stream: the server answered 200 and sent no message")
        if not stopped:
            raise self._error("malformed SSE: the stream ended before message_stop",
                              retryable=True)
        if usage is not None:
            yield StreamEvent(kind="usage", usage=usage)
        yield StreamEvent(kind="done", finish_reason=finish or "stop")


def _continues(held: _Block, block: _Block) -> bool:
    """Whether `block` is more of the tool call in `held` (a tool_use block with its id)."""
    return block.kind == "tool_use" and bool(block.id) and block.id == held.id


def _tool_event(block: _Block, request: ChatRequest) -> StreamEvent:
    """An ended tool_use block as our event: a tool call, or the JSON answer's text."""
    args = "".join(block.parts) or json.dumps(block.initial or {})
    if request.response_schema is not None and block.name == JSON_TOOL:
        return StreamEvent(kind="text", text=args)
    return StreamEvent(kind="tool_call", tool_call=ToolCall(
        id=block.id or f"toolu_{block.index}", name=block.name, arguments=args))


def convert_messages(messages: list[ChatMessage]) -> tuple[str, list[dict[str, Any]]]:
    """Our history as (system, Messages API messages)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "system":
            if m.content:
                system.append(m.content)
        elif m.role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "",
                          "content": m.content}])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for c in m.tool_calls:
                blocks.append({"type": "tool_use", "id": c.id, "name": c.name,
                               "input": _input(c.arguments)})
            add("assistant", blocks)
        elif m.content:  # the API refuses empty text blocks
            add("user", [{"type": "text", "text": m.content}])
    return "\n\n".join(system), out


def _input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the object the API wants (bad JSON is kept, wrapped)."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_value": value}


def _tool_choice(choice: str | None) -> dict[str, str] | None:
    if choice is None:
        return None
    if choice == "auto":
        return {"type": "auto"}
    if choice in ("required", "any"):
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    return {"type": "tool", "name": choice}


def _finish(reason: Any, request: ChatRequest) -> str:
    if reason == "tool_use" and request.response_schema is not None:
        return "stop"  # the forced JSON tool is the answer, not a call to run
    return STOP_REASONS.get(str(reason), str(reason)) if reason else "stop"


def _index(data: dict[str, Any]) -> int:
    try:
        return int(data.get("index", 0))
    except (TypeError, ValueError):
        return -1


def _usage(data: Any, base: Usage) -> Usage:
    """Fold a usage object in: message_start carries input tokens (plus cache reads and
    writes), message_delta the cumulative output tokens (and sometimes input again)."""
    if not isinstance(data, dict):
        return base
    prompt = sum(int(data.get(k) or 0) for k in (
        "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    prompt = prompt or base.prompt_tokens  # a delta saying 0 input tokens changes nothing
    completion = int(data["output_tokens"] or 0) if "output_tokens" in data else \
        base.completion_tokens
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


__all__ = ["API_VERSION", "AnthropicProvider", "convert_messages"]
