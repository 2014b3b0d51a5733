"""Stores with something to trace, built on the simulator (tests/test_traces*.py)."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from session_helpers import run_idle, spec

from clawtower.core.approvals import Approvals
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store

WAIT_S = 0.2  # how long the operator takes to approve the tool call


async def session_tree(path: Path, *, decide: bool = True, message: str = "") -> str:
    """A lead session that spawns three workers, then calls a confirm-tier tool that bob
    approves after WAIT_S (unless `decide` is False: it is left waiting). Returns its id."""
    store = await open_store(path)
    try:
        sessions = Sessions(store)
        await spec(sessions, "lead", policy={
            "tools": ["spawn_subagent", "clock.now"], "subagents": ["worker"],
            "approval": {"default": "auto", "tools": {"clock.*": "confirm"}}})
        await spec(sessions, "worker", policy={"tools": []})
        sid = await sessions.create(agent="lead", by="alice")
        await sessions.send(sid, message or "#spawn 3 worker check one shard each",
                            sender="alice")
        await run_idle(store, sid)
        await sessions.send(sid, '#call clock.now {"timezone": "UTC"}', sender="alice")
        await run_idle(store, sid)
        if decide:
            approval = (await Approvals(store).pending())[0]
            await asyncio.sleep(WAIT_S)
            await Approvals(store).approve(approval["id"], by="bob", reason="fine")
            await run_idle(store, sid)
        return sid
    finally:
        await store.close()


class Collector:
    """An OTLP/HTTP receiver on loopback: decodes each POSTed ExportTraceServiceRequest
    (protobuf) into span dicts. `fail` requests are answered 500 first; each answer waits
    `delay_s` (a slow collector)."""

    def __init__(self, fail: int = 0, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self.posts = 0
        self.fail = fail
        self.paths: list[str] = []

    def receive(self, path: str, body: bytes) -> int:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        time.sleep(self.delay_s)
        self.posts += 1
        self.paths.append(path)
        if self.fail > 0:
            self.fail -= 1
            return 500
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            self.resources.append({a.key: _any(a.value) for a in rs.resource.attributes})
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append({
                        "name": s.name, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_id": s.parent_span_id.hex() or None, "kind": s.kind,
                        "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                        "status": s.status.code, "scope": ss.scope.name,
                        "attributes": {a.key: _any(a.value) for a in s.attributes}})
        return 200


def _any(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_any(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


@contextmanager
def collector(fail: int = 0, delay_s: float = 0.0) -> Iterator[tuple[Collector, str]]:
    got = Collector(fail, delay_s)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            code = got.receive(self.path, body)
            self.send_response(code)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
