"""Client overhead per streamed token: our OpenAI provider vs raw httpx, same stream, one run.

A small SSE server (a plain asyncio HTTP/1.1 server in a child process, so its work does
not share the clients' event loop) answers every POST /v1/chat/completions with N
OpenAI-style `chat.completion.chunk` events (one token each, chunked transfer encoding,
a final chunk with finish_reason and usage, then `data: [DONE]`), prebuilt, so the model is
never the bottleneck: what is measured is the client reading and decoding the stream.

  ours  `OpenAIProvider.stream(request)`, iterated to the end (text events, usage, done)
  raw   httpx: a fresh AsyncClient (as the provider makes one per call), `client.stream(
        "POST", ...)`, `aiter_lines()`, `json.loads` of every `data:` line, the delta's
        content appended: the least a correct client does
  raw shared-client  the same with ONE AsyncClient kept across requests: what a provider
        reusing its client would pay (creating an AsyncClient loads the CA bundle, ~25 ms)

Both run interleaved, request by request, for each stream length; reported: median time per
request, per token (µs), and the paired ratio ours ÷ raw. The per-token figure of a long
stream is dominated by per-chunk work; the short stream shows the fixed per-request cost.
With --llama (when the peer is installed) the same pair also reads the real llama-cpp-python
server with SmolLM2 (64 tokens, temperature 0): there the model is the bottleneck.

    .venv/bin/python benchmarks/bench_stream_overhead.py [--quick] [--reps N] [--llama]
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
import subprocess
import sys
import time
from typing import Any

import _common as cm
import httpx

from clawtower.core.agents.openai import OpenAIProvider
from clawtower.core.agents.provider import ChatMessage, ChatRequest

LENGTHS = (16, 1024)


# --------------------------------------------------------------------------- the server


def build_body(n: int) -> bytes:
    """The whole chunked-encoded SSE body for n tokens."""
    out = bytearray()

    def chunk(data: str) -> None:
        raw = f"data: {data}\n\n".encode()
        out.extend(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")

    for i in range(n):
        chunk(json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                          "model": "bench", "choices": [{"index": 0, "delta": {
                              "content": f"tok{i % 10} "}, "finish_reason": None}]}))
    chunk(json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0,
                      "model": "bench", "choices": [{"index": 0, "delta": {},
                                                     "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": n,
                                "total_tokens": n + 5}}))
    chunk("[DONE]")
    out.extend(b"0\r\n\r\n")
    return bytes(out)


async def serve(port: int) -> None:
    bodies: dict[int, bytes] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                n = int(body.get("max_tokens") or 16)
                if n not in bodies:
                    bodies[n] = build_body(n)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
                writer.write(bodies[n])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- the clients


def request(n: int, model: str = "bench") -> ChatRequest:
    return ChatRequest(model=model, messages=[ChatMessage(role="user", content="Count.")],
                       max_tokens=n, temperature=0.0, timeout_s=120)


async def ours(provider: OpenAIProvider, n: int, model: str = "bench") -> tuple[float, int]:
    t0 = time.perf_counter()
    pieces = 0
    async for event in provider.stream(request(n, model)):
        if event.kind == "text":
            pieces += 1
    return time.perf_counter() - t0, pieces


async def raw(base: str, n: int, model: str = "bench",
              shared: httpx.AsyncClient | None = None) -> tuple[float, int]:
    body = {"model": model, "messages": [{"role": "user", "content": "Count."}],
            "max_tokens": n, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    parts: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        client = shared or await stack.enter_async_context(httpx.AsyncClient(timeout=120))
        resp = await stack.enter_async_context(
            client.stream("POST", f"{base}/chat/completions", json=body))
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk: Any = json.loads(data)
            choices = chunk.get("choices") or []
            if choices:
                content = (choices[0].get("delta") or {}).get("content")
                if content:
                    parts.append(content)
    return time.perf_counter() - t0, len(parts)


async def measure(base: str, lengths: tuple[int, ...], reps: int, model: str = "bench",
                  warmup: int = 3) -> list[dict[str, Any]]:
    provider = OpenAIProvider("bench", base, timeout_s=120, retries=0)
    shared = httpx.AsyncClient(timeout=120)
    rows = []
    for n in lengths:
        for _ in range(warmup):
            await ours(provider, n, model)
            await raw(base, n, model)
            await raw(base, n, model, shared)
        t_ours: list[float] = []
        t_raw: list[float] = []
        t_shared: list[float] = []
        ratios: list[float] = []
        ratios_shared: list[float] = []
        tokens = 0
        for i in range(reps):
            sides = [("ours", functools.partial(ours, provider, n, model)),
                     ("raw", functools.partial(raw, base, n, model)),
                     ("shared", functools.partial(raw, base, n, model, shared))]
            if i % 2:  # alternate the order
                sides.reverse()
            got: dict[str, float] = {}
            for name, fn in sides:
                t, k = await fn()
                got[name] = t
                tokens = max(tokens, k)
            t_ours.append(got["ours"])
            t_raw.append(got["raw"])
            t_shared.append(got["shared"])
            ratios.append(got["ours"] / got["raw"])
            ratios_shared.append(got["ours"] / got["shared"])
        rows.append({"shared_ms": cm.median(t_shared) * 1e3,
                     "shared_us_per_token": cm.median(t_shared) / max(tokens, 1) * 1e6,
                     "ratio_shared": cm.median(ratios_shared),
                     "tokens": tokens, "requested": n, "ours_ms": cm.median(t_ours) * 1e3,
                     "raw_ms": cm.median(t_raw) * 1e3,
                     "ours_us_per_token": cm.median(t_ours) / max(tokens, 1) * 1e6,
                     "raw_us_per_token": cm.median(t_raw) / max(tokens, 1) * 1e6,
                     "extra_us_per_token": (cm.median(t_ours) - cm.median(t_raw))
                     / max(tokens, 1) * 1e6,
                     "ratio": cm.median(ratios), "ratio_range": cm.spread(ratios),
                     "reps": reps})
    await shared.aclose()
    return rows


def table(title: str, rows: list[dict[str, Any]]) -> None:
    cm.print_table(title, ["tokens", "ours ms", "raw ms", "raw shared-client ms",
                           "ours µs/tok", "raw µs/tok", "extra µs/tok", "ours ÷ raw (range)",
                           "ours ÷ raw shared"],
                   [[r["tokens"], cm.fmt_num(r["ours_ms"]), cm.fmt_num(r["raw_ms"]),
                     cm.fmt_num(r["shared_ms"]),
                     cm.fmt_num(r["ours_us_per_token"]), cm.fmt_num(r["raw_us_per_token"]),
                     cm.fmt_num(r["extra_us_per_token"]),
                     f"{r['ratio']:.2f} ({r['ratio_range']})",
                     f"{r['ratio_shared']:.2f}"] for r in rows])


async def main_async(args: Any) -> dict[str, Any]:
    reps = cm.reps_of(args)
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the SSE server did not start")
        base = f"http://127.0.0.1:{port}/v1"
        lengths = (16, 256) if args.quick else LENGTHS
        local = await measure(base, lengths, reps)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    table(f"Local SSE server, {reps} paired requests per length", local)
    out: dict[str, Any] = {"local": local}
    if args.llama:
        sys.path.insert(0, str(cm.REPO / "tests" / "helpers"))
        from llama_peer import ALIAS, llama_server, missing_reason

        reason = missing_reason()
        if reason:
            print(f"\nllama column skipped: {reason}")
        else:
            import pytest  # llama_server skips through pytest; only reached when installed

            _ = pytest
            with llama_server() as base:
                real = await measure(base, (64,), max(3, reps // 4), model=ALIAS, warmup=1)
            table("Real llama-cpp-python server, SmolLM2-135M, 64 tokens", real)
            out["llama"] = real
    return out


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        asyncio.run(serve(int(sys.argv[2])))
        return
    p = cm.parser(__doc__.splitlines()[0], reps=40)
    p.add_argument("--llama", action="store_true",
                   help="also read the real llama-cpp-python server (when installed)")
    args = p.parse_args()
    info = cm.machine_info()
    print(f"machine: {info.get('cpus')} cpus ({info.get('cpu', '?')}), python {info['python']},"
          f" httpx {httpx.__version__}")
    results = asyncio.run(main_async(args))
    cm.write_json(args.json, {"machine": info, **results})


if __name__ == "__main__":
    main()
