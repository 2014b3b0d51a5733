"""The tool registry: built-in tools, the per-agent allow-list (what the model sees and may
call), argument errors, unknown tools. MCP tools here come from the fake SDK server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp_peers import calls_received, fake_config

from clawtower.core.clock import FakeClock
from clawtower.core.tools.registry import ToolRegistry, allowed, matches
from clawtower.core.tools.types import ToolBox


def test_globs_and_allow_semantics() -> None:
    assert matches("time.get_current_time", ["time.*"])
    assert not matches("timex.now", ["time.*"])
    assert allowed("clock.now", None)  # no allow-list: everything
    assert not allowed("clock.now", [])  # an empty one: nothing
    assert allowed("clock.now", ["*"]) and not allowed("clock.now", ["*"], deny=["clock.*"])


async def test_builtins_run_and_are_pinned(clock: FakeClock) -> None:
    reg = ToolRegistry(None, clock=clock)
    listing = await reg.list_tools()
    assert [(t.name, t.source, t.status) for t in listing.tools] == [
        ("clock.now", "builtin", "pinned"), ("json.query", "builtin", "pinned"),
        ("text.count", "builtin", "pinned")]
    r = await reg.call("clock.now", '{"timezone": "Europe/Paris"}')
    assert not r.is_error and r.structured["timezone"] == "Europe/Paris"
    assert r.structured["unix"] == clock.now()
    assert r.structured["iso"].endswith("+01:00") or r.structured["iso"].endswith("+02:00")
    r = await reg.call("clock.now", "")  # empty arguments are {}
    assert r.structured["timezone"] == "UTC"
    r = await reg.call("clock.now", '{"timezone": "Mars/Olympus"}')
    assert (r.is_error, r.error_kind) == (True, "failed") and "Mars/Olympus" in r.content
    doc = {"items": [{"name": "a"}, {"name": "b/c"}]}
    r = await reg.call("json.query", json.dumps({"document": doc, "pointer": "/items/1/name"}))
    assert r.structured == "b/c"
    r = await reg.call("json.query", json.dumps({"document": json.dumps(doc),
                                                 "pointer": "/items/0"}))
    assert r.structured == {"name": "a"}
    r = await reg.call("json.query", json.dumps({"document": doc, "pointer": "/items/7"}))
    assert r.is_error and "no index '7'" in r.content
    r = await reg.call("json.query", json.dumps({"document": "{not json"}))
    assert r.is_error and "not JSON" in r.content
    r = await reg.call("text.count", '{"text": "two words\\nand three"}')
    assert r.structured == {"characters": 19, "words": 4, "lines": 2}


@pytest.mark.parametrize(("args", "expect"), [
    ("{nope", "clock.now: the arguments are not JSON"),
    ("[1, 2]", "clock.now: the arguments must be a JSON object, not list"),
    ('"text"', "clock.now: the arguments must be a JSON object, not str"),
    ('{"timezone": 5}', "clock.now: invalid arguments: timezone: 5 is not of type 'string'"),
    ('{"zone": "UTC"}', "clock.now: invalid arguments: (root): Additional properties"),
])
async def test_bad_arguments_are_error_results_naming_the_tool(args: str, expect: str) -> None:
    r = await ToolRegistry(None).call("clock.now", args)
    assert (r.is_error, r.error_kind) == (True, "arguments")
    assert r.content.startswith(expect), r.content


async def test_schema_errors_list_several_problems() -> None:
    r = await ToolRegistry(None).call("json.query", '{"pointer": 3, "x": 1}')
    assert r.error_kind == "arguments"
    assert "'document' is a required property" in r.content and "pointer: 3 is not" in r.content


async def test_unknown_tools() -> None:
    reg = ToolRegistry(None)
    for name in ("nope", "clock.later", "git.status"):
        r = await reg.call(name, "{}")
        assert (r.is_error, r.error_kind) == (True, "unknown")
        assert r.content.startswith(f"{name}: no such tool (known: clock.now, json.query")


async def test_allow_list_filters_what_the_model_sees(store: Any, tmp_path: Path) -> None:
    async with ToolRegistry(store, {"fake": fake_config(tmp_path, pin="auto")}) as reg:
        box: ToolBox = reg.toolbox(["clock.*", "fake.echo", "fake.pro*"], agent="ada")
        names = [s.name for s in await box.specs()]
        assert names == ["clock.now", "fake.echo", "fake.progress"]
        spec = next(s for s in await box.specs() if s.name == "fake.echo")
        assert spec.description == "Echo the text back."
        assert spec.parameters["required"] == ["text"]
        everything = [s.name for s in await reg.toolbox(None).specs()]
        assert {"json.query", "fake.crash", "fake.hang", "fake.fail"} <= set(everything)
        denied = [s.name for s in await reg.toolbox(["*"], deny=["fake.*"]).specs()]
        assert denied == ["clock.now", "json.query", "text.count"]
        assert await reg.toolbox([]).specs() == []


async def test_a_disallowed_call_never_reaches_the_server(store: Any, tmp_path: Path) -> None:
    async with ToolRegistry(store, {"fake": fake_config(tmp_path, pin="auto")}) as reg:
        box = reg.toolbox(["fake.echo"], agent="ada")
        assert [s.name for s in await box.specs()] == ["fake.echo"]
        ok = await box.call("fake.echo", '{"text": "hi"}')
        assert (ok.is_error, ok.content, ok.structured["echo"]) == (False, "hi", "hi")
        for name in ("fake.crash", "fake.hang", "clock.now", "fake.nope"):
            r = await box.call(name, "{}")
            assert (r.is_error, r.error_kind) == (True, "policy"), name
            assert r.content == (f"{name}: not allowed for ada (not in its tool allow-list);"
                                 " the call was not made")
        assert calls_received(tmp_path) == ["echo"]  # the server only ever got the allowed one
        refusals = await store.fetchall("SELECT actor, action, target FROM refusals ORDER BY seq")
        assert refusals == [{"actor": "ada", "action": "tool.call", "target": n}
                            for n in ("fake.crash", "fake.hang", "clock.now", "fake.nope")]


async def test_the_allow_list_only_starts_the_servers_it_can_match(store: Any,
                                                                   tmp_path: Path) -> None:
    servers = {"fake": fake_config(tmp_path, pin="auto"),
               "other": fake_config(tmp_path, name="other", pin="auto")}
    async with ToolRegistry(store, servers) as reg:
        assert [s.name for s in await reg.toolbox(["clock.now", "oth*.echo"]).specs()] == [
            "clock.now", "other.echo"]
        assert (reg.servers["fake"].starts, reg.servers["other"].starts) == (0, 1)


async def test_mcp_argument_errors_never_reach_the_server(store: Any, tmp_path: Path) -> None:
    async with ToolRegistry(store, {"fake": fake_config(tmp_path, pin="auto")}) as reg:
        box = reg.toolbox(["fake.*"])
        for args, kind in (("not json", "arguments"), ('{"text": 3}', "arguments"),
                           ("{}", "arguments"), ("[]", "arguments")):
            r = await box.call("fake.echo", args)
            assert (r.is_error, r.error_kind) == (True, kind)
            assert r.content.startswith("fake.echo: ")
        r = await box.call("fake.nope", "{}")
        assert r.error_kind == "unknown" and "server 'fake' lists block, crash, echo" in r.content
        assert calls_received(tmp_path) == []
        r = await box.call("fake.fail", "{}")  # the tool's own error: a result, not a fault
        assert (r.is_error, r.error_kind, r.content) == (True, "failed", "it failed")


def test_a_schema_is_checked_once_and_keyed_by_its_content(monkeypatch) -> None:
    """Issue 36: checking a tool's schema against its meta-schema cost ~1.5 ms per call; it
    is done once per schema now, and a schema changed in place is checked again."""
    import jsonschema

    from clawtower.core.tools import registry

    checks = 0
    real = jsonschema.Draft202012Validator.check_schema

    def counted(schema):  # type: ignore[no-untyped-def]
        nonlocal checks
        checks += 1
        return real(schema)

    monkeypatch.setattr(jsonschema.Draft202012Validator, "check_schema", staticmethod(counted))
    monkeypatch.setattr(registry, "_VALIDATORS", {})
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
              "required": ["n"]}
    for _ in range(5):
        assert registry.schema_errors("t.x", schema, {"n": 3}) is None
    bad = registry.schema_errors("t.x", schema, {"n": 12})
    assert bad is not None and "n: 12 is greater than the maximum of 9" in bad.content
    assert checks == 1
    schema["properties"]["n"]["maximum"] = 20  # the same dict, changed: a new check
    assert registry.schema_errors("t.x", schema, {"n": 12}) is None
    assert checks == 2
    broken = {"type": "object", "properties": {"n": {"type": 7}}}
    for _ in range(2):
        out = registry.schema_errors("t.x", broken, {"n": 1})
        assert out is not None and "input schema is invalid" in out.content
    assert checks == 3  # the broken one is checked once too
