"""Our AnthropicProvider against a REAL Anthropic Messages server: the LiteLLM proxy 1.100.0
(tests/helpers/litellm_peer.py) translating /v1/messages to the llama-cpp-python server with
SmolLM2-135M (tests/helpers/llama_peer.py). Skips with the reason when a peer is missing.

What this server does, as seen here (1.100.0 over llama-cpp-python 0.3.36):
- streaming: message_start says 0 input tokens; message_delta carries input AND output
  tokens (our usage fold keeps both); text arrives one token a text_delta.
- a forced tool call (tool_choice {type: tool, name}) works, streamed and not. Streamed, the
  proxy opens a new tool_use block for every delta llama sends (llama repeats the call's id in
  each), all with the same id: one call in pieces. Our provider emitted each piece as a call
  (a bug, fixed in core/agents/anthropic.py; the recorded shape is replayed below, so the
  fix is covered without the peers too).
- response_schema (our forced `json_response` tool) therefore works too: llama constrains
  a forced tool's arguments with a grammar built from the schema.
- an unknown model is HTTP 400 with the proxy's message: not retried.
- (not tested: tool_choice auto while streaming: llama fails it and the proxy turns that into
  an empty end_turn reply, which says nothing about our client.)
The model is tiny and cannot reason: the tests assert shapes, never what it says.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from chunks import ChunkRecorder

from clawtower.core.agents.anthropic import AnthropicProvider
from clawtower.core.agents.completion import complete
from clawtower.core.agents.provider import (
    ChatMessage,
    ChatRequest,
    ProviderError,
    StreamEvent,
    ToolSpec,
)

# one xdist worker (--dist loadgroup) runs these: one LiteLLM proxy (the module's fixture)
pytestmark = pytest.mark.xdist_group("litellm")

TIMEOUT_S = 240.0  # the 2-core machine may be busy; these are bounds, not expectations
WEATHER = ToolSpec(name="get_weather", description="Weather for a city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]})
COLOUR = {"type": "object", "properties": {"colour": {"type": "string"},
                                           "hex": {"type": "string"}},
          "required": ["colour", "hex"]}


class CountingTransport(httpx.AsyncBaseTransport):
    """The real network transport, counting the requests it sends."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    from litellm_peer import litellm_proxy

    with litellm_proxy() as base:
        yield base


def provider(base: str, **kw: object) -> AnthropicProvider:
    opts: dict[str, object] = {"timeout_s": TIMEOUT_S, "retries": 1, "backoff_s": 0.0}
    opts.update(kw)
    return AnthropicProvider("litellm", base, **opts)  # type: ignore[arg-type]


def ask(text: str, model: str = "", **kw: object) -> ChatRequest:
    from litellm_peer import MODEL

    opts: dict[str, object] = {"max_tokens": 24, "temperature": 0.0, "timeout_s": TIMEOUT_S}
    opts.update(kw)
    return ChatRequest(model=model or MODEL, messages=[
        ChatMessage(role="system", content="You are a helpful assistant. Answer briefly."),
        ChatMessage(role="user", content=text)], **opts)  # type: ignore[arg-type]


async def collect(events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [e async for e in events]


# -- the real proxy ------------------------------------------------------------------------

async def test_a_plain_reply_streams_with_usage(proxy: str) -> None:
    events = await collect(provider(proxy).stream(ask("Name three colours.")))
    texts = [e.text for e in events if e.kind == "text"]
    assert len(texts) >= 1 and "".join(texts).strip()
    assert [e.kind for e in events[-2:]] == ["usage", "done"]
    usage = events[-2].usage
    assert usage is not None
    # message_start says 0 input tokens; message_delta brings both counts
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert events[-1].finish_reason in ("stop", "length")  # max_tokens 24 may cut it


async def test_a_plain_reply_without_streaming(proxy: str) -> None:
    from litellm_peer import MODEL

    result = await provider(proxy).chat(ask("Name three colours."))
    assert result.text.strip() and not result.tool_calls
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.finish_reason in ("stop", "length")
    assert (result.model, result.provider) == (MODEL, "litellm")


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "chat"])
async def test_a_forced_tool_call_comes_back_whole(proxy: str, streamed: bool) -> None:
    p = provider(proxy)
    request = ask("What is the weather in Paris?", tools=[WEATHER], tool_choice="get_weather",
                  max_tokens=40)
    result = await (complete(p, request) if streamed else p.chat(request))
    # one call, not one per streamed piece (the proxy splits it over many tool_use blocks)
    (call,) = result.tool_calls
    assert call.name == "get_weather" and call.id
    args = json.loads(call.arguments)  # whole JSON, joined from the pieces
    assert isinstance(args, dict) and isinstance(args["city"], str)  # grammar-constrained
    assert result.finish_reason == "tool_calls"


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "chat"])
async def test_a_response_schema_answer_is_json(proxy: str, streamed: bool) -> None:
    p = provider(proxy)
    request = ask("Name a colour and its hex code.", response_schema=COLOUR, max_tokens=60)
    result = await (complete(p, request) if streamed else p.chat(request))
    answer = json.loads(result.text)  # the forced json_response tool's input, as text
    assert isinstance(answer, dict) and set(COLOUR["required"]) <= set(answer)
    assert not result.tool_calls and result.finish_reason == "stop"


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "chat"])
async def test_an_unknown_model_is_a_clear_error_sent_once(proxy: str, streamed: bool) -> None:
    transport = CountingTransport()
    p = provider(proxy, retries=3, transport=transport)
    request = ask("hi", model="claude-no-such-model")
    with pytest.raises(ProviderError) as caught:
        await (complete(p, request) if streamed else p.chat(request))
    err = caught.value
    assert err.provider == "litellm" and str(err).startswith("provider litellm: HTTP 400: ")
    assert "Invalid model name" in str(err) and "claude-no-such-model" in str(err)
    assert not err.retryable and transport.sent == 1  # a 400 is final: asked once


def test_llm_ask_streams_through_the_proxy(proxy: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from litellm_peer import MODEL

    from clawtower.cli.main import main

    home, db = tmp_path / "home", tmp_path / "store.db"
    home.mkdir()
    (home / "clawtower.yaml").write_text(
        "providers:\n"
        f"  lite: {{kind: anthropic, base_url: '{proxy}', models: [{MODEL}],"
        f" timeout_s: {TIMEOUT_S:g}, retries: 1}}\n"
        "agents:\n"
        "  smol:\n"
        "    provider: lite\n"
        "    system: You are a helpful assistant. Answer briefly.\n"
        "    max_output_tokens: 32\n"
        "    temperature: 0\n"
        f"    budgets: {{max_wall_s: {TIMEOUT_S:g}}}\n"
        "    price: {prompt: 1, completion: 2}\n")
    monkeypatch.setenv("CLAWTOWER_HOME", str(home))
    monkeypatch.setenv("CLAWTOWER_OPERATOR", "tester")
    out = ChunkRecorder()
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdout", out)
    try:
        code = main(["llm", "ask", "--agent", "smol", "Name three colours.", "--db", str(db)])
    finally:
        monkeypatch.setattr(sys, "stdout", sys.__stdout__)
    err = capsys.readouterr().err
    assert code == 0, err
    assert len(out.chunks) > 1 and "".join(out.chunks).strip()  # streamed, in pieces
    assert err.startswith(f"smol · lite/{MODEL} · ")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT subject, agent, model, calls, prompt_tokens,"
                            " completion_tokens FROM usage").fetchall()
    ((subject, agent, model, calls, prompt, completion),) = rows
    assert (subject, agent, model, calls) == ("llm-ask", "smol", MODEL, 1)
    assert prompt > 0 and completion > 0


# -- the proxy's tool-call shape, replayed (runs without the peers) ------------------------

def _recorded_fragmented_tool_call(name: str, pieces: list[str]) -> bytes:
    """The SSE LiteLLM 1.100.0 sent for one forced call over llama-cpp-python: a tool_use
    block per piece, every block with the same id, then an empty one (abridged ids)."""
    tid = "call__0_get_weather_cmpl-90f15fe3"
    events: list[dict[str, object]] = [{"type": "message_start", "message": {
        "id": "msg_ae1ab0d3", "type": "message", "role": "assistant", "content": [],
        "model": "smollm2", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0}}}]
    for i, piece in enumerate([*pieces, None]):
        events.append({"type": "content_block_start", "index": i, "content_block": {
            "type": "tool_use", "id": tid, "name": name, "input": {}}})
        if piece is not None:
            events.append({"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta", "partial_json": piece}})
        events.append({"type": "content_block_stop", "index": i})
    events += [{"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"input_tokens": 14, "output_tokens": 72}},
               {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _replay(body: bytes) -> AnthropicProvider:
    transport = httpx.MockTransport(lambda _: httpx.Response(
        200, content=body, headers={"content-type": "text/event-stream"}))
    return AnthropicProvider("litellm", "http://proxy.test", transport=transport)


async def test_replayed_tool_call_pieces_are_one_call() -> None:
    pieces = ["{", ' "', "city", '":', ' "', "Paris", '"', " }", " "]
    p = _replay(_recorded_fragmented_tool_call("get_weather", pieces))
    events = await collect(p.stream(ChatRequest(
        model="claude-smol", messages=[ChatMessage(role="user", content="weather?")],
        tools=[WEATHER], tool_choice="get_weather")))
    calls = [e.tool_call for e in events if e.kind == "tool_call"]
    assert len(calls) == 1 and calls[0] is not None
    assert calls[0].name == "get_weather" and calls[0].id == "call__0_get_weather_cmpl-90f15fe3"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    assert [e.kind for e in events] == ["tool_call", "usage", "done"]
    assert events[-1].finish_reason == "tool_calls"
    assert events[-2].usage is not None and events[-2].usage.prompt_tokens == 14


async def test_replayed_json_answer_pieces_are_one_json_text() -> None:
    pieces = ['{ "colour"', ': "red", "hex"', ' : "#FF0000" }']
    p = _replay(_recorded_fragmented_tool_call("json_response", pieces))
    result = await complete(p, ChatRequest(
        model="claude-smol", messages=[ChatMessage(role="user", content="a colour")],
        response_schema=COLOUR))
    assert json.loads(result.text) == {"colour": "red", "hex": "#FF0000"}  # not '{...}{}'
    assert not result.tool_calls and result.finish_reason == "stop"
