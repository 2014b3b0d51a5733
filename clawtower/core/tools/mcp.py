"""One stdio MCP server, through the `mcp` SDK's Client: started on demand, kept alive and
reused, restarted after a crash, shut down cleanly. Every wait is bounded.

The SDK's Client is an async context manager built on an anyio task group, so it must be
entered and exited by one task: a runner task owns it for the connection's whole life, and
callers (any task) use the connected client. The transport's read stream is watched: when
the server's stdout ends (it exited or crashed), the connection is marked dead and the
next use starts a fresh process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO, cast

import anyio
import mcp_types
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp.shared.message import SessionMessage

from ..errors import ValidationError
from .config import McpServerConfig
from .mcpfaults import McpServerError, ProgressFn, ToolProgress

log = logging.getLogger(__name__)

CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
INVALID_PARAMS = -32602
STDERR_TAIL = 300  # characters of the server's stderr quoted in a crash error
PROBE_TIMEOUT_S = 5.0  # after a timed-out call: does the server still answer anything?
STOP_TIMEOUT_S = 10.0  # the SDK's own shutdown is bounded at ~6 s (close stdin, TERM, KILL)


@dataclass(frozen=True)
class McpCallResult:
    content: str
    structured: Any | None
    is_error: bool


def content_text(blocks: list[Any]) -> str:
    """The text the model is shown for a result's content blocks."""
    out: list[str] = []
    for b in blocks:
        kind = getattr(b, "type", "")
        if kind == "text":
            out.append(str(b.text))
        elif kind == "image" or kind == "audio":
            out.append(f"[{kind} {getattr(b, 'mime_type', '')}, {len(b.data)} base64 chars]")
        elif kind == "resource":
            res = b.resource
            text = getattr(res, "text", None)
            out.append(str(text) if text is not None else f"[resource {res.uri}]")
        elif kind == "resource_link":
            out.append(f"[resource link {b.uri}" + (f": {b.name}" if b.name else "") + "]")
        else:
            out.append(f"[{kind or type(b).__name__} content]")
    return "\n".join(out)


class _WatchedRead:
    """The transport's read stream, reporting its end (the server's stdout closed)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
            return item
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def _transport(params: StdioServerParameters, errlog: TextIO,
                     on_end: Callable[[], None]) -> AsyncIterator[Any]:
    async with stdio_client(params, errlog=errlog) as (read, write):
        yield _WatchedRead(read, on_end), write


class McpServer:
    """A lazily started, reused connection to one stdio MCP server."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.name = config.name
        self._client: Client | None = None
        self._runner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._dead = False
        self._lock = asyncio.Lock()
        self._stderr: TextIO | None = None
        self.starts = 0  # how many processes were started (restarts = starts - 1)
        self.connect_seconds: float | None = None  # the last start's spawn + handshake time
        self._secrets: dict[str, str] = {}  # env_from values -> their variable's name

    def redact(self, text: str) -> str:
        """`text` with the values passed through `env_from` replaced by their names: what a
        server prints or returns never carries a secret into errors, events or the model."""
        for value, name in self._secrets.items():
            text = text.replace(value, f"[secret {name}]")
        return text

    def _redact_value(self, value: Any) -> Any:
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self._redact_value(v) for v in value]
        if isinstance(value, dict):
            return {k: self._redact_value(v) for k, v in value.items()}
        return value

    # ----------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        return self._client is not None and not self._dead

    def _error(self, kind: str, message: str) -> McpServerError:
        return McpServerError(self.name, kind, self.redact(message))

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-STDERR_TAIL:]

    async def _connected(self) -> Client:
        async with self._lock:
            if self._client is not None and not self._dead:
                return self._client
            if self._runner is not None:  # crashed or half-closed: clean up first
                await self._shutdown()
            return await self._start()

    async def _start(self) -> Client:
        cfg = self.config
        params = StdioServerParameters(command=cfg.resolved_command(), args=list(cfg.args),
                                       env=cfg.resolved_env() or None, cwd=cfg.resolved_cwd())
        env = params.env or {}
        self._secrets = {env[child]: ours for child, ours in cfg.env_from.items()
                         if len(env.get(child, "")) >= 4}
        self._stderr = cast(TextIO, tempfile.TemporaryFile(  # noqa: SIM115 (closed on shutdown)
            mode="w+", encoding="utf-8", errors="replace"))
        self._stop = asyncio.Event()
        self._dead = False
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        t0 = time.monotonic()
        self.starts += 1
        self._runner = asyncio.create_task(self._run(params, ready), name=f"mcp:{self.name}")
        # whatever the runner reports after we stopped waiting is retrieved, never "lost"
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            async with asyncio.timeout(cfg.connect_timeout_s):  # not wait_for (core/aio.py)
                client = await asyncio.shield(ready)
        except TimeoutError:
            await self._shutdown()
            raise self._error("timeout", f"did not finish connecting within"
                                         f" {cfg.connect_timeout_s:g}s of starting"
                                         f" {cfg.command}") from None
        except OSError as exc:
            await self._shutdown()
            raise self._error("start", f"cannot start {cfg.command!r}: {exc.strerror or exc}"
                              ) from None
        except Exception as exc:  # the handshake failed: the process exited or spoke garbage
            tail = self.stderr_tail()
            await self._shutdown()
            raise self._error("start", f"failed while connecting ({_describe(exc)})"
                              + (f"; stderr: {tail}" if tail else "")) from None
        self.connect_seconds = time.monotonic() - t0
        self._client = client
        return client

    async def _run(self, params: StdioServerParameters, ready: asyncio.Future[Client]) -> None:
        assert self._stderr is not None
        try:
            transport = _transport(params, self._stderr, self._mark_dead)
            async with Client(transport, read_timeout_seconds=self.config.call_timeout_s,
                              cache=None) as client:
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # handed to the starter, or the end
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception)
                                    else RuntimeError(_describe(exc)))
        finally:
            self._dead = True

    def _mark_dead(self) -> None:
        self._dead = True

    async def _shutdown(self) -> None:
        connected = self._client is not None
        runner, self._runner = self._runner, None
        self._client = None
        self._dead = True
        if runner is not None:
            self._stop.set()
            # a connected client leaves through the SDK's own shutdown (close stdin, TERM,
            # KILL); one still connecting is cancelled at once (the SDK still reaps it)
            done, _ = await asyncio.wait({runner}, timeout=STOP_TIMEOUT_S if connected else 0)
            if not done:
                runner.cancel()
                await asyncio.wait({runner}, timeout=STOP_TIMEOUT_S)
            if runner.done() and not runner.cancelled():
                runner.exception()  # retrieved: a crashed server's error was already reported
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()
            self._stderr = None

    async def aclose(self) -> None:
        async with self._lock:
            await self._shutdown()

    # ----------------------------------------------------------------- requests

    def _fault(self, exc: BaseException, what: str, timeout_s: float) -> McpServerError:
        """Turn a failed request into an error naming the server."""
        if isinstance(exc, TimeoutError) or (isinstance(exc, MCPError)
                                             and exc.code == REQUEST_TIMEOUT):
            return self._error("timeout", f"{what}: no answer within {timeout_s:g}s")
        if self._dead or (isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED):
            self._dead = True
            tail = self.stderr_tail()
            return self._error("crashed", f"{what}: the server exited (connection closed)"
                               + (f"; stderr: {tail}" if tail else "")
                               + "; it is restarted on next use")
        if isinstance(exc, MCPError) and exc.code == INVALID_PARAMS and "nknown tool" in str(exc):
            return self._error("unknown", f"{what}: {exc}")
        return self._error("protocol", f"{what}: {_describe(exc)}")

    async def list_tools(self) -> list[mcp_types.Tool]:
        client = await self._connected()
        timeout = self.config.list_timeout_s
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(timeout):
                for _ in range(100):  # pages
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
        except (Exception, TimeoutError) as exc:
            raise self._fault(exc, "tools/list", timeout) from None
        return tools

    async def call_tool(self, tool: str, arguments: dict[str, Any],
                        progress: ProgressFn | None = None,
                        timeout_s: float | None = None) -> McpCallResult:
        """Call `tool` (the server's own name). A tool's own failure is a result with
        is_error; a server fault raises McpServerError."""
        client = await self._connected()
        timeout = timeout_s or self.config.call_timeout_s
        full = f"{self.name}.{tool}"

        report = progress

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if report is None:
                return
            try:
                r = report(ToolProgress(full, progress, total, message))
                if r is not None:
                    await r
            except Exception:  # a listener's bug must not break the call
                log.exception("progress callback failed for %s", full)

        try:
            # the SDK's read timeout answers first; ours is the backstop for anything else
            async with asyncio.timeout(timeout + 5):
                result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout,
                                                progress_callback=on_progress)
        except (Exception, TimeoutError) as exc:
            fault = self._fault(exc, f"tools/call {tool}", timeout)
            if fault.kind == "timeout" and not await self._still_answers(client):
                # wedged, not just one slow tool: stop it; the next use starts a fresh one
                await self._stop_wedged(client)
                fault = self._error("timeout", f"tools/call {tool}: no answer within"
                                               f" {timeout:g}s, and no answer to tools/list"
                                               f" either: stopped; it is restarted on next use")
            raise fault from None
        return McpCallResult(content=self.redact(content_text(list(result.content))),
                             structured=self._redact_value(result.structured_content),
                             is_error=bool(result.is_error))


    async def _still_answers(self, client: Client) -> bool:
        """Whether the server still answers at all (a tools/list: `ping` is gone from
        protocol 2026-07-28). Any reply, even an error reply, counts."""
        try:
            async with asyncio.timeout(min(PROBE_TIMEOUT_S, self.config.list_timeout_s)):
                await client.list_tools()
            return True
        except MCPError as exc:
            return exc.code not in (REQUEST_TIMEOUT, CONNECTION_CLOSED)
        except (Exception, TimeoutError):
            return False

    async def _stop_wedged(self, client: Client) -> None:
        async with self._lock:
            if self._client is client:  # not already replaced by another caller
                await self._shutdown()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["McpServer", "McpServerError", "ToolProgress", "ValidationError", "content_text"]
