"""`traces export` over OTLP/HTTP (protobuf, through the OpenTelemetry SDK's exporter) to a
receiver on loopback that decodes what arrives: names, parents, kinds, attributes and times
as derived; open spans held back; exporting twice sends the same ids; a collector that
answers 500 is retried, one that is down is one error naming the URL."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from trace_helpers import collector, session_tree

from clawtower.core.errors import ValidationError
from clawtower.core.store import open_store
from clawtower.core.traces import load
from clawtower.core.traces.otlp import ExportFailed, export, traces_url

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")


async def test_export_sends_what_was_derived_and_the_same_ids_twice(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    sid = await session_tree(db)
    store = await open_store(db)
    try:
        traces = await load(store)
    finally:
        await store.close()
    (trace,) = traces
    with collector() as (got, url):
        sent = await asyncio.to_thread(export, traces, url, service_name="ct-test")
        assert sent == len(trace.spans) == len(got.spans)
        assert set(got.paths) == {"/v1/traces"}
        assert got.resources[0]["service.name"] == "ct-test"
        assert got.resources[0]["openinference.project.name"] == "ct-test"
        mine = {s.span_id: s for s in trace.spans}
        for r in got.spans:
            s = mine[r["span_id"]]
            assert r["trace_id"] == trace.trace_id and r["name"] == s.name
            assert r["parent_id"] == s.parent_id
            assert r["start"] == int(s.start * 1e9) and r["end"] == int(s.end * 1e9)  # type: ignore[operator]
            assert r["attributes"]["openinference.span.kind"] == s.kind
            assert r["attributes"]["clawtower.trace.root"] == sid
            assert r["scope"] == "clawtower"
            # CLIENT (3) for a model call, INTERNAL (1) otherwise
            assert r["kind"] == (3 if s.kind == "LLM" else 1)
        by_name: dict[str, list[dict[str, object]]] = {}
        for r in got.spans:
            by_name.setdefault(str(r["name"]), []).append(r)
        (wait,) = by_name["approval clock.now"]
        (tool,) = by_name["execute_tool clock.now"]
        assert wait["parent_id"] == tool["span_id"]
        assert wait["attributes"]["clawtower.approval.decided_by"] == "bob"  # type: ignore[index]
        assert tool["attributes"]["gen_ai.tool.name"] == "clock.now"  # type: ignore[index]
        assert tool["attributes"]["clawtower.tool.tier"] == "confirm"  # type: ignore[index]
        chat = by_name["chat sim-standard"][0]["attributes"]
        assert chat["gen_ai.operation.name"] == "chat"  # type: ignore[index]
        assert chat["gen_ai.usage.input_tokens"] > 0  # type: ignore[index,operator]
        assert chat["llm.token_count.prompt"] == chat["gen_ai.usage.input_tokens"]  # type: ignore[index]
        assert len(by_name["session S-2 (worker)"]) == 1
        first = sorted(r["span_id"] for r in got.spans)
        got.spans.clear()
        store = await open_store(db)
        try:
            again = await load(store)
        finally:
            await store.close()
        await asyncio.to_thread(export, again, url)
        assert sorted(r["span_id"] for r in got.spans) == first


async def test_open_spans_are_held_back(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    await session_tree(db, decide=False)
    store = await open_store(db)
    try:
        traces = await load(store)
    finally:
        await store.close()
    with collector() as (got, url):
        sent = await asyncio.to_thread(export, traces, url)
        names = {r["name"] for r in got.spans}
    assert sent == sum(1 for s in traces[0].spans if not s.open)
    assert "execute_tool clock.now" not in names and "approval clock.now" not in names
    assert "session S-1 (lead)" in names


async def test_a_500_is_retried_and_a_collector_that_is_down_is_one_error(
        tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    await session_tree(db)
    store = await open_store(db)
    try:
        traces = await load(store)
    finally:
        await store.close()
    with collector(fail=1) as (got, url):
        sent = await asyncio.to_thread(export, traces, url, timeout_s=10)
        assert got.posts == 2 and len(got.spans) == sent
    with pytest.raises(ExportFailed, match=r"http://127\.0\.0\.1:9/v1/traces"):
        await asyncio.to_thread(export, traces, "http://127.0.0.1:9", timeout_s=0.5)
    with pytest.raises(ValidationError, match="not an http"):
        traces_url("ftp://x")
    assert traces_url("http://h:4318/custom/path") == "http://h:4318/custom/path"
