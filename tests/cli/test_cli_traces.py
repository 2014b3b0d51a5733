"""`clawtower trace ID` (a waterfall, --json) and `clawtower traces export` from the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cli_helpers import Run
from trace_helpers import collector, session_tree


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    db = tmp_path / "tree.db"
    asyncio.run(session_tree(db))
    return db


def test_trace_prints_a_waterfall(run: Run, tree: Path) -> None:
    r = run("trace", "S-1", "--db", tree, "--width", "24")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].startswith("trace ") and "session S-1" in lines[0]
    assert "24 spans" in lines[0]
    rows = lines[2:]
    assert rows[0].startswith("session S-1 (lead)")
    assert any(x.startswith("    session S-2 (worker)") for x in rows)  # under the turn
    (wait,) = [x for x in rows if "approval clock.now" in x]
    assert wait.startswith("      approval") and "WAIT approved by bob" in wait
    assert all(len(x.split("│")[1]) == 24 for x in rows)
    assert any("tokens " in x for x in rows if "chat sim-standard" in x)
    same = run("trace", "S-4", "--db", tree, "--width", "24")  # a child session names it too
    assert same.out == r.out


def test_trace_json(run: Run, tree: Path) -> None:
    r = run("trace", "S-1", "--db", tree, "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["root"] == "S-1" and data["kind"] == "session"
    assert len(data["spans"]) == 24
    assert {s["attributes"]["openinference.span.kind"] for s in data["spans"]} == {
        "AGENT", "LLM", "TOOL", "CHAIN"}


def test_unknown_id_is_one_line_exit_2(run: Run, tree: Path) -> None:
    r = run("trace", "F-9", "--db", tree)
    assert r.code == 2 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1 and "'F-9'" in r.err
    r = run("trace", "S-1", "--db", tree, "--width", "3")
    assert r.code == 2 and "--width" in r.err


def test_traces_export(run: Run, tree: Path) -> None:
    with collector() as (got, url):
        r = run("traces", "export", "--endpoint", url, "--db", tree, "--json", "S-1")
        assert r.code == 0, r.err
        assert json.loads(r.out) == {"sent": 24, "open": 0, "traces": 1}
        assert len(got.spans) == 24
        got.spans.clear()
        last = max(s["first_seq"] for s in json.loads(
            run("trace", "S-1", "--db", tree, "--json").out)["spans"])
        r = run("traces", "export", "--endpoint", url, "--db", tree, "--since", str(last - 3))
        assert r.code == 0 and r.out.startswith("sent ")
        assert 0 < len(got.spans) < 24
        got.spans.clear()
        r = run("traces", "export", "--endpoint", url, "--db", tree, "--since",
                "2999-01-01T00:00:00")
        assert r.code == 0 and got.spans == [] and r.out.startswith("sent 0 spans")
        r = run("traces", "export", "--endpoint", url, "--db", tree, "--since",
                "2000-01-01T00:00:00+02:00")
        assert r.code == 0 and len(got.spans) == 24
        r = run("traces", "export", "--endpoint", url, "--db", tree, "--since", "yesterday")
        assert r.code == 2 and "--since 'yesterday'" in r.err
    r = run("traces", "export", "--endpoint", "http://127.0.0.1:9", "--db", tree,
            "--timeout", "0.5")
    assert r.code == 1 and "127.0.0.1:9/v1/traces" in r.err
    assert len(r.err.strip().splitlines()) == 1
    r = run("traces", "export", "--endpoint", "nope", "--db", tree)
    assert r.code == 2 and "'nope'" in r.err
    r = run("traces", "export", "--endpoint", "http://127.0.0.1:9", "--db", tree, "S-77")
    assert r.code == 2 and "'S-77'" in r.err


def test_content_is_redacted_by_the_configs_secrets(run: Run, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "secret.db"
    asyncio.run(session_tree(db, message="#spawn 1 worker use key9-XYZ-secret-42 here"))
    config = tmp_path / "clawtower.yaml"
    config.write_text("providers:\n  local:\n    kind: openai\n"
                      "    base_url: http://127.0.0.1:9/v1\n    api_key_env: TRACE_TEST_KEY\n"
                      "    models: [m]\n")
    monkeypatch.setenv("TRACE_TEST_KEY", "key9-XYZ-secret-42")
    r = run("trace", "S-1", "--db", db, "--json")
    assert r.code == 0 and "key9" not in r.out and "input.value" not in r.out  # no content
    r = run("trace", "S-1", "--db", db, "--json", "--content", "--config", config)
    assert r.code == 0, r.err
    assert "key9-XYZ-secret-42" not in r.out
    assert "use [secret TRACE_TEST_KEY] here" in r.out
    # the same through the top level's --config
    r = run("--config", config, "trace", "S-1", "--db", db, "--json", "--content")
    assert r.code == 0 and "[secret TRACE_TEST_KEY]" in r.out and "key9" not in r.out
