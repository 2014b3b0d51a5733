"""The live trace exporter (core/traces/live.py), a worker of the engine: it sends each span
once its end is logged, keeps its position in the store (a restart sends nothing again),
waits out a collector that is down and loses nothing, and is built by `build_engine` when
clawtower.yaml has `telemetry.otlp_endpoint`."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from session_helpers import run_idle, sim_config
from trace_helpers import collector, session_tree

from clawtower.core.errors import ValidationError
from clawtower.core.events import NewEvent
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from clawtower.core.traces import load
from clawtower.core.traces.config import TelemetryConfig
from clawtower.core.traces.events import TracesExported
from clawtower.core.traces.live import SHARE, TracesWorker
from clawtower.core.workers import build_engine

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")


async def test_each_span_once_across_restarts_and_new_work(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    store = await open_store(db)
    try:
        with collector() as (got, url):
            cfg = TelemetryConfig(otlp_endpoint=url, timeout_s=5)
            w = TracesWorker(store, cfg)
            assert await w.step() == 24 and len(got.spans) == 24
            assert await w.step() == 0  # its own position event brings nothing new
            assert await w.idle()
            positions = await store.fetchall(
                "SELECT entity_id FROM events WHERE type='traces.exported'")
            assert len(positions) == 1
            from clawtower.core.describe import event_summary

            (mark,) = [e for e in await store.events_after(0, 10_000)
                       if e.type == "traces.exported"]
            assert event_summary(mark) == (f"sent 24 span(s) of 1 trace(s) to {url}"
                                           f" (the log up to {mark.seq - 1})")
            # a restart: the position is read back from the store, nothing is sent again
            again = TracesWorker(store, cfg)
            assert await again.step() == 0 and len(got.spans) == 24
            # new work: only its spans go (and the top-level session's span, its end moved)
            await Sessions(store).send(sid, "hello again", sender="alice")
            await run_idle(store, sid)
            n = await again.step()
            assert n == 3 and len(got.spans) == 27
            counts = Counter(r["span_id"] for r in got.spans)
            (twice,) = [k for k, c in counts.items() if c > 1]
            (root,) = [r for r in got.spans if r["span_id"] == twice][:1]
            assert root["name"] == f"session {sid} (lead)"
            (trace,) = await load(store)
            assert {s.span_id for s in trace.spans} == set(counts)
            # the position events replay (no projection of their own)
            assert await store.verify_projections() == []
    finally:
        await store.close()


async def test_a_collector_that_is_down_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    await session_tree(db)
    store = await open_store(db)
    try:
        with collector() as (got, url):
            pass  # stopped: its port refuses now
        w = TracesWorker(store, TelemetryConfig(otlp_endpoint=url, timeout_s=0.3))
        with pytest.raises(Exception, match="did not take the spans"):
            await w.step()
        assert w.position == 0
        assert await store.fetchall("SELECT seq FROM events WHERE type='traces.exported'") == []
        with collector(fail=1) as (got, url2):  # up again (answering 500 once)
            w2 = TracesWorker(store, TelemetryConfig(otlp_endpoint=url2, timeout_s=5))
            assert await w2.step() == 24 and len(got.spans) == 24
    finally:
        await store.close()


async def test_the_engine_exports_live_when_configured(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "db.sqlite")
    try:
        with collector() as (got, url):
            cfg = sim_config({"telemetry": {"otlp_endpoint": url, "interval_s": 0.05,
                                            "service_name": "live-test"}})
            engine = build_engine(store, None, workers=["sessions", "traces"], config=cfg)
            assert [w.name for w in engine.workers] == ["sessions", "traces"]
            sessions = Sessions(store)
            from session_helpers import spec

            await spec(sessions, "clerk", policy={"tools": ["clock.now"]})
            sid = await sessions.create(agent="clerk", by="alice")
            await sessions.send(sid, '#call clock.now {"timezone": "UTC"}', sender="alice")
            task = asyncio.create_task(engine.run())
            try:
                for _ in range(200):
                    if any(r["name"] == "execute_tool clock.now" for r in got.spans) and \
                            any(r["name"].startswith("session ") for r in got.spans):
                        break
                    await asyncio.sleep(0.05)
            finally:
                engine.stop()
                await task
            names = Counter(r["name"] for r in got.spans)
            assert names["execute_tool clock.now"] == 1
            assert names["invoke_agent clerk"] == 1 and names["chat sim-standard"] == 2
            assert got.resources[0]["service.name"] == "live-test"
        # without an endpoint there is no trace worker
        plain = build_engine(store, None, workers=["sessions", "traces"], config=sim_config())
        assert [w.name for w in plain.workers] == ["sessions"]
    finally:
        await store.close()


@pytest.mark.parametrize("collector_up", [True, False])
async def test_while_the_log_grows_the_exporter_takes_at_most_its_share(
        tmp_path: Path, collector_up: bool) -> None:
    """A step that took C seconds of CPU waits C * (1 / SHARE - 1) while the log keeps
    growing (deriving holds the GIL the agents need), and goes once the log has been quiet
    for interval_s; a step whose collector is down spent its CPU too (retrying it at the
    backoff's pace alone would derive the whole log every few seconds)."""
    db = tmp_path / "db.sqlite"
    await session_tree(db)
    store = await open_store(db)
    loop = asyncio.get_running_loop()

    def send(traces: list[object]) -> int:
        until = time.thread_time() + 0.3  # the encoding's CPU time: the step's cost
        while time.thread_time() < until:
            pass
        if not collector_up:
            raise ConnectionError("the collector did not take the spans")
        return len(traces)

    w = TracesWorker(store, TelemetryConfig(otlp_endpoint="http://127.0.0.1:9",
                                            interval_s=0.5), send=send)
    stepped: list[tuple[float, float]] = []  # (began, ended)
    starts: list[float] = []
    step = w.step

    async def timed() -> int:
        began = loop.time()
        starts.append(began)
        try:
            return await step()
        finally:
            stepped.append((began, loop.time()))

    w.step = timed  # type: ignore[method-assign]
    growing = True

    async def grow() -> None:  # agents at work: the log changes every few ms
        while growing:
            await store.append([NewEvent(entity_id="other", actor="t", role="system",
                                         payload=TracesExported(endpoint="x", seq=0, spans=0,
                                                                traces=0))])
            await asyncio.sleep(0.01)

    stop = asyncio.Event()
    writer = asyncio.create_task(grow())
    task = asyncio.create_task(w.run(stop))
    try:
        while not stepped:
            await asyncio.sleep(0.01)
        (_, ended), = stepped
        pace = w.cost * (1 / SHARE - 1)
        assert pace >= 5.7
        await asyncio.sleep(1.5)
        assert len(starts) == 1  # the log kept changing: no step before the pace
        growing = False
        await writer
        while len(stepped) < 2:
            await asyncio.sleep(0.01)
        assert stepped[1][0] < ended + pace  # quiet: it went before the pace
        assert await w.idle()  # all sent, or the collector refuses: the log keeps it
    finally:
        growing = False
        stop.set()
        await task
        await store.close()


async def test_a_slow_collector_is_a_wait_not_a_cost(tmp_path: Path) -> None:
    """The pace counts the steps' CPU time: a collector that takes a second to answer does
    not hold the next step back 19 seconds, and every span arrives once."""
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    store = await open_store(db)
    try:
        with collector(delay_s=1.0) as (got, url):
            w = TracesWorker(store, TelemetryConfig(otlp_endpoint=url, interval_s=0.05,
                                                    timeout_s=30))
            stop = asyncio.Event()
            task = asyncio.create_task(w.run(stop))
            try:
                while len(got.spans) < 24:
                    await asyncio.sleep(0.01)
                assert w.cost < 0.5  # the second it waited on the collector is not in it
                await Sessions(store).send(sid, "hello again", sender="alice")
                await run_idle(store, sid)
                while len(got.spans) < 27:  # the pace after the first step: CPU time * 19
                    await asyncio.sleep(0.01)
            finally:
                stop.set()
                await task
            assert len(got.spans) == 27 and got.posts == 2
    finally:
        await store.close()


def test_telemetry_config_errors_name_the_field() -> None:
    with pytest.raises(ValidationError, match=r"test: field 'telemetry.otlp_endpoint'"):
        sim_config({"telemetry": {"otlp_endpoint": "localhost:4318"}})
    with pytest.raises(ValidationError, match=r"field 'telemetry.headers_env'"):
        sim_config({"telemetry": {"otlp_endpoint": "http://h", "headers_env": "a b"}})
    with pytest.raises(ValidationError, match=r"field 'telemetry.sample'"):
        sim_config({"telemetry": {"sample": 1}})
    assert sim_config().telemetry.otlp_endpoint is None
