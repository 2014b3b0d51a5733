"""HTTP providers keep one client (and its keep-alive connections) per event loop: a remote
provider then pays one TLS handshake per process, not one per model call."""

from __future__ import annotations

import asyncio
import json

import httpx

from clawtower.core.agents.completion import complete
from clawtower.core.agents.httpcommon import close_clients
from clawtower.core.agents.openai import OpenAIProvider
from clawtower.core.agents.provider import ChatMessage, ChatRequest

SSE = (b'data: {"choices":[{"delta":{"content":"hi"},"index":0}]}\n\n'
       b'data: {"choices":[{"delta":{},"finish_reason":"stop","index":0}]}\n\ndata: [DONE]\n\n')


def request(timeout_s: float = 5.0) -> ChatRequest:
    return ChatRequest(model="m", messages=[ChatMessage(role="user", content="x")],
                       timeout_s=timeout_s)


def test_one_client_per_loop_reused_across_calls_and_closed_with_the_command() -> None:
    timeouts: list[float | None] = []

    def handler(req: httpx.Request) -> httpx.Response:
        timeouts.append(req.extensions["timeout"]["read"])
        assert json.loads(req.content)["stream"] is True
        return httpx.Response(200, content=SSE,
                              headers={"content-type": "text/event-stream"})

    provider = OpenAIProvider("p", "http://llm.invalid/v1", retries=0,
                              transport=httpx.MockTransport(handler))

    async def two_calls() -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        clients = []
        for t in (5.0, 7.0):
            assert (await complete(provider, request(t))).text == "hi"
            async with provider._client(request()) as c:
                clients.append(c)
        first, second = clients
        await close_clients()
        assert first.is_closed
        return first, second

    a1, a2 = asyncio.run(two_calls())
    b1, _ = asyncio.run(two_calls())
    assert a1 is a2  # one client for every call of a loop
    assert b1 is not a1  # another loop (another command) gets its own
    assert timeouts == [5.0, 7.0, 5.0, 7.0]  # each request keeps its own timeout
