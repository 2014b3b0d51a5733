"""What the HTTP providers (openai.py, anthropic.py) share: the key read from the environment
variable NAMED in config and scrubbed from every error, bounded retries with backoff, the
per-provider concurrency limit, and a strict server-sent-events reader with a deadline.

Retries: 408, 429, 5xx (Anthropic's 529 "overloaded" included), timeouts and connect errors,
at most `retries` more attempts, waiting backoff_s * 2**attempt or the server's Retry-After
(whichever is longer), never more than max_backoff_s, and never past the call's deadline.
401/403 and other 4xx are not retried. Nothing is retried once a stream has started.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import os
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from .provider import ChatRequest, ProviderError

SSE_FIELDS = ("data", "event", "id", "retry")
MAX_ERROR_CHARS = 300
MIN_SCRUB_CHARS = 4  # a shorter "key" would mangle every message it appears in


def clip(raw: bytes | str) -> str:
    """One line, at most MAX_ERROR_CHARS: what an error may quote of a server's answer."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = " ".join(text.split())
    return text[:MAX_ERROR_CHARS] + ("..." if len(text) > MAX_ERROR_CHARS else "")


def retry_after_s(value: str | None) -> float:
    """Retry-After as seconds (delta-seconds or an HTTP date); 0 when absent or unreadable."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 0.0
    return max(0.0, when.timestamp() - time.time())


def error_detail(raw: bytes) -> str:
    """The message of a JSON error body (OpenAI's and Anthropic's shapes), else the body."""
    detail = ""
    try:
        data = json.loads(raw)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            kind = str(err.get("type") or "")
            msg = str(err.get("message") or "")
            detail = f"{kind}: {msg}" if kind and msg and data.get("type") == "error" else msg
        elif isinstance(err, str):
            detail = err
        elif isinstance(data, dict) and "detail" in data:
            detail = json.dumps(data["detail"])
    except ValueError:
        pass
    return clip(detail or raw) or "(no body)"


_LIVE: weakref.WeakSet[HTTPProvider] = weakref.WeakSet()


async def close_clients() -> None:
    """Close the current loop's client of every HTTP provider (a command calls it before its
    loop ends, so no connection is left for the garbage collector)."""
    for provider in list(_LIVE):
        await provider.aclose()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every client: httpx would load the CA bundle again for
    each new AsyncClient (~25 ms a call, measured by benchmarks/bench_stream_overhead.py)."""
    return httpx.create_ssl_context()


@dataclass(frozen=True)
class SSEEvent:
    event: str  # "message" when the server named none
    data: str


class HTTPProvider:
    """Base of the HTTP providers: key, errors, retries, concurrency, SSE."""

    kind = "http"

    def __init__(
        self,
        name: str,
        base_url: str,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        retries: int = 2,
        max_concurrency: int = 4,
        *,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.retries = max(0, retries)
        self.max_concurrency = max_concurrency
        self.backoff_s = max(0.0, backoff_s)
        self.max_backoff_s = max(0.0, max_backoff_s)
        self._transport = transport
        self._sem = asyncio.Semaphore(max_concurrency)
        # One client (and its keep-alive connections) per event loop: a client's connections
        # belong to the loop that opened them, and the CLI runs a loop per command.
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                                 httpx.AsyncClient] = weakref.WeakKeyDictionary()
        _LIVE.add(self)

    def __repr__(self) -> str:  # never the key, only the variable's name
        return (f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r},"
                f" api_key_env={self.api_key_env!r})")

    # -- the key and errors ---------------------------------------------------------------

    def _key(self) -> str | None:
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if value is None:
            raise self._error(f"the API key variable {self.api_key_env} is not set")
        if not value.strip():
            raise self._error(f"the API key variable {self.api_key_env} is set but empty")
        return value

    def _error(self, message: str, *, retryable: bool = False) -> ProviderError:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key and len(key) >= MIN_SCRUB_CHARS:
            message = message.replace(key, "***")
        return ProviderError(self.name, message, retryable=retryable)

    def _http_error(self, status: int, raw: bytes) -> ProviderError:
        detail = error_detail(raw)
        if status in (401, 403):
            return self._error(f"HTTP {status} (authentication failed; check the key in"
                               f" {self.api_key_env or 'no key configured'}): {detail}")
        return self._error(f"HTTP {status}: {detail}",
                           retryable=status in (408, 429) or status >= 500)

    # -- HTTP -----------------------------------------------------------------------------

    def _deadline(self, request: ChatRequest) -> float:
        return time.monotonic() + self._timeout(request)

    @contextlib.asynccontextmanager
    async def _slot(self, deadline: float) -> AsyncIterator[None]:
        """One of the provider's max_concurrency slots; the wait counts against the call's
        deadline, like everything else the call does."""
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._sem.acquire()
        except TimeoutError:
            raise self._error(f"no free slot before the call's deadline ({self.max_concurrency}"
                              " calls already in flight: max_concurrency)",
                              retryable=True) from None
        try:
            yield
        finally:
            self._sem.release()

    def _timeout(self, request: ChatRequest) -> float:
        return min(self.timeout_s, request.timeout_s)

    @contextlib.asynccontextmanager
    async def _client(self, request: ChatRequest) -> AsyncIterator[httpx.AsyncClient]:
        """This loop's client, made on first use and kept (a new client per call cost ~1 ms
        and a new connection; benchmarks/bench_stream_overhead.py). Timeouts are per request."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout_s),
                                       transport=self._transport, trust_env=False,
                                       verify=_ssl_context())
            self._clients[loop] = client
        yield client

    async def aclose(self) -> None:
        """Close this loop's client and its connections (the CLI calls it before its loop
        ends; otherwise they close when the loop is collected)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()

    def _headers(self) -> dict[str, str]:
        """Every request's headers, the key's included (subclasses add theirs)."""
        return {"Accept": "application/json, text/event-stream"}

    def _refused(self, status: int, request: ChatRequest) -> bool:
        """A hook: True to send again at once (a changed body), not counted as a retry."""
        return False

    async def _post(self, client: httpx.AsyncClient, request: ChatRequest, url: str,
                    body: Callable[[], dict[str, Any]], deadline: float) -> httpx.Response:
        """POST with bounded retries; returns a response with status < 400 (body unread)."""
        attempt = 0
        while True:
            retry_after = 0.0
            try:
                resp = await client.send(
                    client.build_request("POST", url, json=body(), headers=self._headers(),
                                         timeout=httpx.Timeout(self._timeout(request))),
                    stream=True)
            except httpx.TimeoutException:
                err = self._error(f"timed out after {self._timeout(request):g} s ({url})",
                                  retryable=True)
            except httpx.TransportError as exc:
                err = self._error(f"cannot reach {url}: {type(exc).__name__}: {exc}",
                                  retryable=True)
            else:
                if resp.status_code < 400:
                    return resp
                try:
                    raw = await resp.aread()
                except httpx.HTTPError:
                    raw = b""
                await resp.aclose()
                if self._refused(resp.status_code, request):
                    continue
                err = self._http_error(resp.status_code, raw)
                retry_after = retry_after_s(resp.headers.get("retry-after"))
            if not err.retryable or attempt >= self.retries:
                raise err
            wait = min(max(self.backoff_s * (2 ** attempt), retry_after), self.max_backoff_s)
            if time.monotonic() + wait >= deadline:
                raise err
            await asyncio.sleep(wait)
            attempt += 1

    async def _post_read(self, request: ChatRequest, url: str,
                         body: Callable[[], dict[str, Any]]) -> bytes:
        """A non-streaming call: slot, retries and deadline as for a stream; the whole body."""
        deadline = self._deadline(request)
        async with self._slot(deadline), self._client(request) as client:
            resp = await self._post(client, request, url, body, deadline)
            try:
                return await resp.aread()
            except httpx.HTTPError as exc:
                raise self._error(f"reading the response failed: {type(exc).__name__}",
                                  retryable=True) from None
            finally:
                await resp.aclose()

    # -- SSE ------------------------------------------------------------------------------

    async def _sse(self, resp: httpx.Response, deadline: float) -> AsyncIterator[SSEEvent]:
        """Each server-sent event (multi-line data joined with newlines); comments skipped;
        a line that is not an SSE field is a malformed stream; every read bounded."""
        data: list[str] = []
        event = ""
        lines = resp.aiter_lines()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._error("stream exceeded its deadline", retryable=True)
            try:
                async with asyncio.timeout(left):
                    line = await anext(lines)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise self._error("stream exceeded its deadline", retryable=True) from None
            except httpx.HTTPError as exc:
                raise self._error(f"stream broke: {type(exc).__name__}: {exc}",
                                  retryable=True) from None
            if not line:
                if data:
                    yield SSEEvent(event or "message", "\n".join(data))
                data, event = [], ""
                continue
            if line.startswith(":"):
                continue  # a comment / keep-alive
            field, sep, value = line.partition(":")
            if not sep or field not in SSE_FIELDS:
                raise self._error(f"malformed SSE line: {clip(line)}")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                data.append(value)
            elif field == "event":
                event = value
        if data:
            yield SSEEvent(event or "message", "\n".join(data))

    def _json(self, data: str) -> dict[str, Any]:
        """One event's data as a JSON object, or a malformed-stream error."""
        try:
            obj = json.loads(data)
        except ValueError:
            raise self._error(f"malformed SSE data: {clip(data)}") from None
        if not isinstance(obj, dict):
            raise self._error(f"malformed SSE data: {clip(data)}")
        return obj


__all__ = ["HTTPProvider", "SSEEvent", "clip", "error_detail", "retry_after_s"]
