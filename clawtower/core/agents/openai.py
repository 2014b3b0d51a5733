"""An OpenAI-compatible chat-completions provider over httpx (non-streaming and SSE).

Handles what real servers do differently:
- streamed tool-call deltas in OpenAI's style (id and name once, arguments in pieces) and in
  the repeated-id style (llama-cpp-python repeats id and name in every chunk): merged by
  index, else by id;
- JSON output: `response_format: json_schema` first; a server that answers it with an error
  (llama-cpp-python: 500) gets llama-cpp's `{"type": "json_object", "schema": ...}` instead,
  remembered for the provider's lifetime;
- usage from the response, or from the final chunk of a stream (`stream_options.include_usage`).

Bounded retries with exponential backoff on 429, 5xx, timeouts and connect errors (never once
a stream has started to yield). Every wait is bounded: httpx timeouts for connect/read/write,
plus a deadline per call. Errors are ProviderError naming the provider.

The API key is read at call time from the environment variable NAMED in config; its value is
never put in an error, a log line, an event or the repr (errors are scrubbed of it too).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from .httpcommon import HTTPProvider, clip
from .provider import ChatRequest, ChatResult, StreamEvent, ToolCall, Usage


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


class OpenAIProvider(HTTPProvider):
    """A Provider for any OpenAI-compatible `/chat/completions` endpoint."""

    kind = "openai"

    # json_schema until the server refuses it, then json_object + schema (per instance)
    json_mode: Literal["json_schema", "json_object"] = "json_schema"

    # -- public API ------------------------------------------------------------------------

    async def chat(self, request: ChatRequest) -> ChatResult:
        """One non-streaming call."""
        raw = await self._post_read(request, f"{self.base_url}/chat/completions",
                                    lambda: self._body(request, False, self.json_mode))
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError):
            raise self._error(f"malformed response: {clip(raw)}") from None
        calls = [
            ToolCall(id=str(c.get("id") or f"call_{i}"),
                     name=str((c.get("function") or {}).get("name") or ""),
                     arguments=_arguments((c.get("function") or {}).get("arguments")))
            for i, c in enumerate(message.get("tool_calls") or [])
        ]
        return ChatResult(text=str(message.get("content") or ""), tool_calls=calls,
                          usage=_usage(data.get("usage")),
                          finish_reason=str(choice.get("finish_reason") or "stop"),
                          model=str(data.get("model") or request.model), provider=self.name)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """SSE streaming: text as it comes, tool calls (merged) and usage at the end."""
        deadline = self._deadline(request)
        async with self._slot(deadline), self._client(request) as client:
            resp = await self._open(client, request, stream=True, deadline=deadline)
            try:
                async for event in self._events(resp, deadline):
                    yield event
            finally:
                await resp.aclose()

    # -- HTTP ------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _refused(self, status: int, request: ChatRequest) -> bool:
        if (request.response_schema is not None and self.json_mode == "json_schema"
                and status not in (401, 403, 429)):
            self.json_mode = "json_object"  # remembered: this server wants json_object
            return True
        return False

    async def _open(self, client: httpx.AsyncClient, request: ChatRequest, *, stream: bool,
                    deadline: float) -> httpx.Response:
        return await self._post(client, request, f"{self.base_url}/chat/completions",
                                lambda: self._body(request, stream, self.json_mode), deadline)

    def _body(self, request: ChatRequest, stream: bool,
              mode: Literal["json_schema", "json_object"]) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            msg: dict[str, Any] = {"role": m.role, "content": m.content}
            if m.tool_calls:
                # "" rather than null: llama-cpp-python answers 500 to a null content
                msg["content"] = m.content
                msg["tool_calls"] = [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls]
            if m.tool_call_id is not None:
                msg["tool_call_id"] = m.tool_call_id
            messages.append(msg)
        body: dict[str, Any] = {"model": request.model, "messages": messages, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}}
                for t in request.tools]
        if request.tool_choice is not None:
            if request.tool_choice in ("auto", "none", "required"):
                body["tool_choice"] = request.tool_choice
            else:
                body["tool_choice"] = {"type": "function",
                                       "function": {"name": request.tool_choice}}
        if request.response_schema is not None:
            if mode == "json_schema":
                body["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "response", "schema": request.response_schema, "strict": True}}
            else:
                body["response_format"] = {"type": "json_object",
                                           "schema": request.response_schema}
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    # -- SSE -------------------------------------------------------------------------------

    async def _events(self, resp: httpx.Response, deadline: float) -> AsyncIterator[StreamEvent]:
        calls: dict[Any, _PartialCall] = {}
        order: list[Any] = []
        usage: Usage | None = None
        finish: str | None = None
        done = False
        seen = 0
        async for sse in self._sse(resp, deadline):
            seen += 1
            if sse.data.strip() == "[DONE]":
                done = True
                break
            chunk = self._json(sse.data)
            if "error" in chunk:
                err = chunk["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                raise self._error(f"stream error: {clip(str(msg))}")
            if chunk.get("usage"):
                usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                text = delta.get("content")
                if text:
                    yield StreamEvent(kind="text", text=str(text))
                for piece in delta.get("tool_calls") or []:
                    _merge(calls, order, piece)
                if choice.get("finish_reason"):
                    finish = str(choice["finish_reason"])
        if not done and finish is None and not seen:
            # measured with llama-cpp-python: a request that fails once the stream has begun
            # (a prompt over n_ctx, tool_choice "auto") answers 200 and sends nothing at all
            raise self._error("empty stream: the server answered 200 and sent no events"
                              " (it probably failed after starting; see its log)")
        if not done and finish is None:
            raise self._error("malformed SSE: the stream ended before a finish_reason or [DONE]",
                              retryable=True)
        for i, key in enumerate(order):
            c = calls[key]
            yield StreamEvent(kind="tool_call", tool_call=ToolCall(
                id=c.id or f"call_{i}", name=c.name, arguments=c.arguments))
        if usage is not None:
            yield StreamEvent(kind="usage", usage=usage)
        yield StreamEvent(kind="done", finish_reason=finish or "stop")


def _merge(calls: dict[Any, _PartialCall], order: list[Any], piece: dict[str, Any]) -> None:
    """Fold one streamed tool-call delta into the calls so far (both delta styles)."""
    fn = piece.get("function") or {}
    cid = piece.get("id") or ""
    if piece.get("index") is not None:
        key: Any = ("index", piece["index"])
    elif cid:
        key = next((k for k in order if calls[k].id == cid), ("id", cid))
    else:
        key = order[-1] if order else ("index", 0)
    if key not in calls:
        calls[key] = _PartialCall()
        order.append(key)
    call = calls[key]
    if cid and not call.id:
        call.id = str(cid)
    name = fn.get("name")
    if name and not call.name:
        call.name = str(name)  # repeated-id style repeats the name: keep the first
    args = fn.get("arguments")
    if args:
        call.arguments += args if isinstance(args, str) else json.dumps(args)


def _arguments(args: Any) -> str:
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args)


def _usage(data: Any) -> Usage:
    if not isinstance(data, dict):
        return Usage()
    return Usage(prompt_tokens=int(data.get("prompt_tokens") or 0),
                 completion_tokens=int(data.get("completion_tokens") or 0))


__all__ = ["OpenAIProvider"]
