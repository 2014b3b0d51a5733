"""The Anthropic Messages-compatible provider over httpx.MockTransport, replaying SSE
transcripts shaped like the API's own (event names, pings, input_json_delta pieces)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from clawtower.core.agents.anthropic import AnthropicProvider, convert_messages
from clawtower.core.agents.completion import complete
from clawtower.core.agents.provider import (
    ChatMessage,
    ChatRequest,
    ProviderError,
    StreamEvent,
    ToolCall,
    ToolSpec,
)

CANARY = "sk-ant-canary-0c9d8e7f6a5b"
WEATHER = ToolSpec(name="get_weather", description="Weather for a city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]})
Handler = Callable[[httpx.Request], httpx.Response]


def req(text: str = "hi", **kw: object) -> ChatRequest:
    return ChatRequest(model="claude-test", messages=[ChatMessage(role="user", content=text)],
                       timeout_s=5, **kw)


def provider(handler: Handler, **kw: object) -> AnthropicProvider:
    opts: dict[str, object] = {"retries": 2, "backoff_s": 0.0}
    opts.update(kw)
    return AnthropicProvider("claude", "http://anthropic.test",
                             transport=httpx.MockTransport(handler),
                             **opts)  # type: ignore[arg-type]


def sse(*events: dict[str, object]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def stream_response(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})


def start(input_tokens: int = 25) -> dict[str, object]:
    return {"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "content": [],
        "model": "claude-test", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}


def text_block(index: int, *pieces: str) -> list[dict[str, object]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}},
            *({"type": "content_block_delta", "index": index,
               "delta": {"type": "text_delta", "text": p}} for p in pieces),
            {"type": "content_block_stop", "index": index}]


def tool_block(index: int, tid: str, name: str, *pieces: str) -> list[dict[str, object]]:
    return [{"type": "content_block_start", "index": index,
             "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}}},
            *({"type": "content_block_delta", "index": index,
               "delta": {"type": "input_json_delta", "partial_json": p}} for p in pieces),
            {"type": "content_block_stop", "index": index}]


def end(stop_reason: str = "end_turn", output_tokens: int = 15) -> list[dict[str, object]]:
    return [{"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                "stop_sequence": None},
             "usage": {"output_tokens": output_tokens}},
            {"type": "message_stop"}]


PING: dict[str, object] = {"type": "ping"}


async def events_of(p: AnthropicProvider, request: ChatRequest) -> list[StreamEvent]:
    return [e async for e in p.stream(request)]


# -- streaming ---------------------------------------------------------------------------

async def test_text_stream_headers_body_and_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_ANT_KEY", "k-123456")
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return stream_response(sse(start(25), PING, *text_block(0, "Hello", ", ", "world!"),
                                   *end("end_turn", 15)))

    p = provider(handler, api_key_env="CT_ANT_KEY")
    request = ChatRequest(model="claude-test", timeout_s=5, max_tokens=64, temperature=0.2,
                          messages=[ChatMessage(role="system", content="Be brief."),
                                    ChatMessage(role="user", content="Hi")])
    events = await events_of(p, request)
    assert [e.text for e in events if e.kind == "text"] == ["Hello", ", ", "world!"]
    assert [e.kind for e in events][-2:] == ["usage", "done"]
    usage = events[-2].usage
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (25, 15)
    assert events[-1].finish_reason == "stop"
    r = seen[0]
    assert r.url == "http://anthropic.test/v1/messages" and r.method == "POST"
    assert r.headers["x-api-key"] == "k-123456"
    assert r.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in r.headers
    body = json.loads(r.content)
    assert body == {"model": "claude-test", "max_tokens": 64, "stream": True,
                    "temperature": 0.2, "system": "Be brief.",
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}


async def test_tool_use_with_input_json_delta_pieces() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return stream_response(sse(
            start(), *text_block(0, "Let me check", " the weather."),
            *tool_block(1, "toolu_01A", "get_weather", "", '{"ci', 'ty": "San Fra',
                        'ncisco"}'),
            *tool_block(2, "toolu_01B", "get_weather", '{"city": "Oslo"}'),
            *end("tool_use", 89)))

    result = await complete(provider(handler), req(tools=[WEATHER], tool_choice="auto"))
    assert result.text == "Let me check the weather."
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("toolu_01A", "get_weather", {"city": "San Francisco"}),
        ("toolu_01B", "get_weather", {"city": "Oslo"})]
    assert result.finish_reason == "tool_calls" and result.usage.completion_tokens == 89
    assert seen[0]["tools"] == [{"name": "get_weather", "description": "Weather for a city",
                                 "input_schema": WEATHER.parameters}]
    assert seen[0]["tool_choice"] == {"type": "auto"}


@pytest.mark.parametrize(("choice", "sent"), [
    ("auto", {"type": "auto"}), ("required", {"type": "any"}), ("any", {"type": "any"}),
    ("none", {"type": "none"}), ("get_weather", {"type": "tool", "name": "get_weather"}),
])
async def test_tool_choice_shapes(choice: str, sent: dict[str, str]) -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return stream_response(sse(start(), *text_block(0, "ok"), *end()))

    await complete(provider(handler), req(tools=[WEATHER], tool_choice=choice))
    assert seen[0]["tool_choice"] == sent


async def test_a_tool_use_block_without_deltas_keeps_its_start_input() -> None:
    body = sse(start(), {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Rome"}}},
        {"type": "content_block_stop", "index": 0}, *end("tool_use"))
    result = await complete(provider(lambda r: stream_response(body)), req(tools=[WEATHER]))
    assert [(c.id, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("toolu_9", {"city": "Rome"})]


async def test_response_schema_is_a_forced_tool_whose_input_is_the_text() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return stream_response(sse(start(), *tool_block(0, "toolu_j", "json_response",
                                                        '{"n"', ": 4}"), *end("tool_use")))

    result = await complete(provider(handler), req(response_schema=schema))
    assert json.loads(result.text) == {"n": 4} and result.tool_calls == []
    assert result.finish_reason == "stop"
    assert seen[0]["tool_choice"] == {"type": "tool", "name": "json_response"}
    assert seen[0]["tools"][0]["input_schema"] == schema  # type: ignore[index]


def test_history_conversion_tool_use_and_tool_result_blocks() -> None:
    system, messages = convert_messages([
        ChatMessage(role="system", content="You are terse."),
        ChatMessage(role="user", content="Weather in Oslo and Rome?"),
        ChatMessage(role="assistant", content="Checking.", tool_calls=[
            ToolCall(id="toolu_1", name="get_weather", arguments='{"city": "Oslo"}'),
            ToolCall(id="toolu_2", name="get_weather", arguments="")]),
        ChatMessage(role="tool", tool_call_id="toolu_1", content="-3 C"),
        ChatMessage(role="tool", tool_call_id="toolu_2", content="error: no city"),
        ChatMessage(role="user", content="And tomorrow?"),
        ChatMessage(role="user", content=""),  # empty text blocks are refused by the API
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="system", content="Answer in one line."),
    ])
    assert system == "You are terse.\n\nAnswer in one line."
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo and Rome?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3 C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "error: no city"},
            {"type": "text", "text": "And tomorrow?"}]},
    ]


async def test_non_streaming_chat() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "Sure."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                         "input": {"city": "Oslo"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 7}})

    result = await provider(handler).chat(req(tools=[WEATHER]))
    assert seen[0]["stream"] is False and seen[0]["max_tokens"] == 1024
    assert result.text == "Sure." and result.finish_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [
        ("get_weather", {"city": "Oslo"})]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (10, 7)


# -- errors and retries ----------------------------------------------------------------------

async def test_error_event_mid_stream_names_its_type() -> None:
    body = sse(start(), *text_block(0, "Hel")[:2],
               {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    texts: list[str] = []
    with pytest.raises(ProviderError) as exc:
        async for e in provider(lambda r: stream_response(body)).stream(req()):
            texts.append(e.text)
    assert texts == ["Hel"]
    assert str(exc.value) == "provider claude: stream error: overloaded_error: Overloaded"
    assert exc.value.retryable


@pytest.mark.parametrize("status", [429, 500, 529])
async def test_retried_statuses_then_success_honouring_retry_after(
        status: int, monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(s: float) -> None:
        waits.append(s)
        await real_sleep(0)

    monkeypatch.setattr("clawtower.core.agents.httpcommon.asyncio.sleep", fake_sleep)
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(status, headers={"retry-after": "2"}, json={
                "type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        return stream_response(sse(start(), *text_block(0, "ok"), *end()))

    p = provider(handler, backoff_s=0.25, max_backoff_s=10)
    request = req()
    request.timeout_s = 60
    assert (await complete(p, request)).text == "ok"
    assert calls == 2 and waits == [2.0]


async def test_backoff_is_capped_by_max_backoff_and_the_retries_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def fake_sleep(s: float) -> None:
        waits.append(s)

    monkeypatch.setattr("clawtower.core.agents.httpcommon.asyncio.sleep", fake_sleep)
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(529, headers={"retry-after": "3600"}, json={
            "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})

    p = provider(handler, retries=3, backoff_s=1, max_backoff_s=5)
    request = req()
    request.timeout_s = 60
    with pytest.raises(ProviderError) as exc:
        await complete(p, request)
    assert calls == 4 and waits == [5, 5, 5]
    assert str(exc.value) == "provider claude: HTTP 529: overloaded_error: Overloaded"


async def test_a_retry_that_would_pass_the_deadline_is_not_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def fake_sleep(s: float) -> None:
        waits.append(s)

    monkeypatch.setattr("clawtower.core.agents.httpcommon.asyncio.sleep", fake_sleep)
    p = provider(lambda r: httpx.Response(429, headers={"retry-after": "30"}, json={}),
                 retries=5, max_backoff_s=60)
    with pytest.raises(ProviderError, match="HTTP 429"):
        await complete(p, req())  # timeout_s=5 < 30
    assert waits == []


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_are_not_retried_and_never_carry_the_key(
        status: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CT_ANT_KEY", CANARY)
    calls = 0
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        sent.append(request.headers["x-api-key"])
        # a hostile or careless server echoing the key must not leak it through our error
        return httpx.Response(status, json={"type": "error", "error": {
            "type": "authentication_error", "message": f"invalid x-api-key {CANARY}"}})

    caplog.set_level(logging.DEBUG)
    p = provider(handler, api_key_env="CT_ANT_KEY")
    with pytest.raises(ProviderError) as exc:
        await complete(p, req())
    assert calls == 1 and sent == [CANARY] and not exc.value.retryable
    message = str(exc.value)
    assert message.startswith(f"provider claude: HTTP {status} (authentication failed; check"
                              " the key in CT_ANT_KEY)")
    for text in (message, repr(exc.value.args), repr(p), caplog.text):
        assert CANARY not in text


async def test_secret_canary_never_leaves_through_any_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The key echoed in a 500 body, in a mid-stream error event and in a malformed line."""
    monkeypatch.setenv("CT_ANT_KEY", CANARY)
    caplog.set_level(logging.DEBUG)
    bodies = [
        (500, json.dumps({"error": {"message": f"upstream saw {CANARY}"}}).encode()),
        (200, sse(start(), {"type": "error", "error": {"type": "api_error",
                                                       "message": f"key={CANARY}"}})),
        (200, f"event: message_start\nbogus {CANARY}\n\n".encode()),
        (200, f"data: {{not json {CANARY}\n\n".encode()),
    ]
    for status, body in bodies:
        p = provider(lambda r, s=status, b=body: stream_response(b, s),  # type: ignore[misc]
                     api_key_env="CT_ANT_KEY", retries=0)
        with pytest.raises(ProviderError) as exc:
            await complete(p, req())
        assert "provider claude" in str(exc.value)
        assert CANARY not in str(exc.value) and CANARY not in repr(exc.value.args)
    assert CANARY not in caplog.text


async def test_missing_key_variable_names_provider_and_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CT_ANT_ABSENT", raising=False)
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(200)

    with pytest.raises(ProviderError,
                       match=r"^provider claude: the API key variable CT_ANT_ABSENT is not set$"):
        await complete(provider(handler, api_key_env="CT_ANT_ABSENT"), req())
    assert calls == 0


async def test_unreachable_endpoint_retries_then_names_the_provider() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ProviderError, match=r"provider claude: cannot reach .*/v1/messages"):
        await complete(provider(handler, retries=1), req())
    assert calls == 2


@pytest.mark.parametrize(("body", "match"), [
    (b"event: message_start\nthis is not sse\n\n", "malformed SSE line"),
    (b"event: message_start\ndata: {not json\n\n", "malformed SSE data"),
    (b"<html>502 bad gateway</html>\n", "malformed SSE line"),
    (sse(*text_block(0, "x")), "before message_start"),
    (sse(start(), *text_block(0, "half")), "ended before message_stop"),
    (sse(start(), {"type": "content_block_delta", "index": 3,
                   "delta": {"type": "text_delta", "text": "x"}}), "no open block"),
    (b"", "empty stream"),
])
async def test_malformed_streams_are_clear_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProviderError, match=f"^provider claude: .*{match}"):
        await complete(provider(lambda r: stream_response(body), retries=0), req())


async def test_a_stalled_stream_hits_the_deadline() -> None:
    async def stalled() -> AsyncIterator[bytes]:
        yield sse(start(), *text_block(0, "a")[:2])
        await asyncio.sleep(30)

    p = provider(lambda r: httpx.Response(200, content=stalled(),
                                          headers={"content-type": "text/event-stream"}),
                 retries=0)
    request = req()
    request.timeout_s = 0.3
    with pytest.raises(ProviderError, match="provider claude: stream exceeded its deadline"):
        await asyncio.wait_for(complete(p, request), 5)


async def test_concurrency_is_limited_per_provider() -> None:
    gate = asyncio.Event()
    in_flight = peak = 0

    async def slow() -> AsyncIterator[bytes]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await gate.wait()
        in_flight -= 1  # (httpx never closes a finished body's generator: count here)
        yield sse(start(), *text_block(0, "ok"), *end())

    p = provider(lambda r: httpx.Response(200, content=slow(),
                                          headers={"content-type": "text/event-stream"}),
                 max_concurrency=2)
    tasks = [asyncio.create_task(complete(p, req())) for _ in range(5)]
    for _ in range(50):
        await asyncio.sleep(0)
    assert peak == 2
    gate.set()
    results = await asyncio.gather(*tasks)
    assert [r.text for r in results] == ["ok"] * 5 and peak == 2


@pytest.mark.parametrize("base", ["http://h.test", "http://h.test/", "http://h.test/v1",
                                  "http://h.test/v1/"])
async def test_base_url_with_or_without_v1(base: str) -> None:
    urls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        urls.append(str(request.url))
        return stream_response(sse(start(), *text_block(0, "ok"), *end()))

    p = AnthropicProvider("claude", base, transport=httpx.MockTransport(handler))
    await complete(p, req())
    assert urls == ["http://h.test/v1/messages"]


def test_retry_after_header_forms() -> None:
    import email.utils
    import time

    from clawtower.core.agents.httpcommon import retry_after_s

    assert retry_after_s("2") == 2.0 and retry_after_s("0.5") == 0.5
    assert retry_after_s(None) == 0.0 and retry_after_s("soon") == 0.0
    assert retry_after_s("-3") == 0.0
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < retry_after_s(later) <= 121
    assert retry_after_s(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0


async def test_waiting_for_a_concurrency_slot_is_bounded_by_the_deadline() -> None:
    gate = asyncio.Event()

    async def held() -> AsyncIterator[bytes]:
        await gate.wait()
        yield sse(start(), *text_block(0, "ok"), *end())

    p = provider(lambda r: httpx.Response(200, content=held(),
                                          headers={"content-type": "text/event-stream"}),
                 max_concurrency=1)
    first = asyncio.create_task(complete(p, req()))
    for _ in range(20):
        await asyncio.sleep(0)
    second = req()
    second.timeout_s = 0.2
    with pytest.raises(ProviderError, match="provider claude: no free slot before the call's"
                                            " deadline"):
        await asyncio.wait_for(complete(p, second), 5)
    gate.set()
    assert (await first).text == "ok"
    assert (await complete(p, req())).text == "ok"  # the slot was given back
