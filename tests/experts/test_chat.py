"""`expert chat`: an expert as an ordinary session (core.experts.chat on core.sessions), on our
acme package bound to the SDK test server, turns on the deterministic simulator: the spec
(prompt, allow-list), a turn calling a bound tool, a manual-tier and an unbound tool refused
by the policy, the CLI one-shot and piped-stdin paths, and bad input creating nothing."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from clawtower.cli.main import main
from clawtower.core.errors import NotFound, ValidationError
from clawtower.core.experts import home
from clawtower.core.experts.bindings import write_binding
from clawtower.core.experts.chat import open_chat, spec_name
from clawtower.core.sessions.service import Sessions
from clawtower.core.store import open_store
from tests.helpers.session_helpers import event_types, runner

from .conftest import ACME

SERVER = Path(__file__).resolve().parent.parent / "helpers" / "sales_mcp_server.py"
NAME = "acme-support-expert"


@pytest.fixture
def expert_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("CLAWTOWER_HOME", str(h))
    home.install(str(ACME))
    return h


def bind_all(tmp_path: Path) -> None:
    env = {"SALES_MCP_CALLS": str(tmp_path / "calls.jsonl")}
    write_binding(NAME, "helpdesk", {"type": "mcp", "command": sys.executable,
                                     "args": [str(SERVER)], "env": env,
                                     "operations": {"get_customer": "lookup_customer"}})
    write_binding(NAME, "kb", {"type": "mcp", "command": sys.executable, "args": [str(SERVER)],
                               "env": env})


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    p = tmp_path / "calls.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


async def test_chat_session_calls_bound_tools_and_refuses_the_rest(
        expert_home: Path, tmp_path: Path) -> None:
    bind_all(tmp_path)
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sid = await open_chat(store, NAME, by="tester")
        sessions = Sessions(store)
        s = await sessions.get(sid)
        assert s["agent"] == spec_name(NAME) and s["status"] == "idle"
        spec = await sessions.spec(spec_name(NAME))
        assert spec.source == f"expert:{NAME}"
        prompt = spec.config.defaults.system_prompt or ""
        assert "## Tool Approval Policy" in prompt and "## How to Operate" in prompt
        # exactly the bound declared operations, renamed ones under their bound name, each
        # at the package's tier (overrides, then the default: confirm)
        assert sorted(spec.config.policy.tools or []) == sorted([
            "helpdesk.get_ticket", "helpdesk.lookup_customer", "helpdesk.list_overdue",
            "helpdesk.add_internal_note", "helpdesk.set_priority", "helpdesk.send_reply",
            "kb.search_articles", "kb.get_article"])
        gate = spec.config.policy.approval
        assert gate is not None and gate.timeout_s == 12 * 3600
        assert gate.on_timeout == "escalate"
        assert {n: gate.tier(n) for n in ("helpdesk.get_ticket", "helpdesk.lookup_customer",
                                          "helpdesk.set_priority", "helpdesk.send_reply",
                                          "kb.get_article")} == {
            "helpdesk.get_ticket": "auto", "helpdesk.lookup_customer": "auto",
            "helpdesk.set_priority": "confirm", "helpdesk.send_reply": "manual",
            "kb.get_article": "confirm"}
        r, rec = runner(store)
        try:
            await sessions.send(sid, '#call helpdesk.get_ticket {"ticket_id": "T-7"}')
            assert await r.run_until_idle(120, {sid})
            # the model saw the expert's prompt and only its allowed tools (the server also
            # offers get_email, send_reply, ...)
            assert rec.requests[0].messages[0].content == prompt
            assert rec.tools_seen(0) == sorted(spec.config.policy.tools or [])
            await sessions.send(sid, '#call helpdesk.send_reply {"ticket_id": "T-7",'
                                     ' "body": "hi"}')
            assert await r.run_until_idle(120, {sid})
            await sessions.send(sid, '#call helpdesk.get_email {"message_id": "x"}')
            assert await r.run_until_idle(120, {sid})
        finally:
            await r.aclose()
        replies = [m["text"] for m in (await sessions.get(sid))["messages"]
                   if m["role"] == "assistant"]
        assert len(replies) == 3
        assert replies[0].startswith("helpdesk.get_ticket answered:") and "T-7" in replies[0]
        assert "Cannot log in after the SSO change" in replies[0]
        # manual tier: a draft the model is told about, never executed
        assert "helpdesk.send_reply: drafted for an operator (manual tier)" in replies[1]
        assert "NOT executed" in replies[1]
        assert [e["payload"]["name"] for e in await event_types(store, "turn.tool_drafted")
                ] == ["helpdesk.send_reply"]
        assert f"helpdesk.get_email: not allowed for {spec_name(NAME)}" in replies[2]
        assert "the call was not made" in replies[2]
        assert [c["tool"] for c in calls(tmp_path)] == ["get_ticket"]
        refused = await event_types(store, "permission.refused")
        assert {e["payload"]["target"] for e in refused} == {"helpdesk.get_email"}
        # a second chat is a new session on the same (updated) spec
        sid2 = await open_chat(store, NAME)
        assert sid2 != sid and len(await sessions.specs()) == 1
    finally:
        await store.close()


async def test_bad_input_creates_no_session(expert_home: Path, tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        with pytest.raises(NotFound, match="'nobody': not installed"):
            await open_chat(store, "nobody")
        with pytest.raises(ValidationError, match=r"tools\.helpdesk: not bound"):
            await open_chat(store, NAME)
        write_binding(NAME, "helpdesk", {"type": "mcp", "command": sys.executable,
                                         "args": [str(SERVER)]})
        with pytest.raises(ValidationError, match=r"tools\.kb: not bound"):
            await open_chat(store, NAME)
        write_binding(NAME, "kb", {"type": "skill", "skill": "kb-skill"})
        with pytest.raises(ValidationError, match=r"tools\.kb: a skill binding"):
            await open_chat(store, NAME)
        assert await Sessions(store).list() == [] and await Sessions(store).specs() == []
    finally:
        await store.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


def test_cli_one_shot_and_piped_stdin(expert_home: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bind_all(tmp_path)
    db = str(tmp_path / "cli.db")
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "--message",
                         '#call kb.search_articles {"query": "sso"}')
    assert code == 0, err
    assert out.startswith("kb.search_articles answered:") and "kb-12" in out
    assert "S-1: chat with acme-support-expert" in err
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "--json", "-m", "hello")
    assert code == 0, err
    one = json.loads(out)
    assert one["session"] == "S-2" and one["agent"] == spec_name(NAME)
    assert one["reply"] == f'{spec_name(NAME)}: got it: "hello"' and one["error"] is None
    # piped stdin: one message per line, blank lines skipped, /quit ends (the rest unread)
    monkeypatch.setattr(sys, "stdin", io.StringIO(
        'first question\n\n#call helpdesk.send_reply {"ticket_id": "T-1", "body": "x"}\n'
        "/quit\nnever sent\n"))
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "--json")
    assert code == 0, err
    lines = [json.loads(x) for x in out.splitlines()]
    assert [x["session"] for x in lines] == ["S-3", "S-3"]
    assert lines[0]["reply"] == f'{spec_name(NAME)}: got it: "first question"'
    assert "helpdesk.send_reply: drafted for an operator" in lines[1]["reply"]
    # end of input ends the loop too (no /quit), in text mode
    monkeypatch.setattr(sys, "stdin", io.StringIO("one\ntwo\n"))
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db)
    assert code == 0, err
    assert out.splitlines() == [f'{spec_name(NAME)}: got it: "one"',
                                f'{spec_name(NAME)}: got it: "two"']
    code, out, _ = run(capsys, "session", "show", "S-3", "--db", db, "--json")
    texts = [m["text"] for m in json.loads(out)["messages"] if m["role"] == "user"]
    assert texts == ["first question",
                     '#call helpdesk.send_reply {"ticket_id": "T-1", "body": "x"}']
    assert [c["tool"] for c in calls(tmp_path)] == ["search_articles"]


def test_cli_bad_input(expert_home: Path, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "bad.db")
    code, out, err = run(capsys, "expert", "chat", "nobody", "--db", db, "-m", "hi")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "expert 'nobody': not installed" in err
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", "hi")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "bindings.yaml:tools.helpdesk: not bound" in err
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", "  ")
    assert code == 2 and "--message: the message is empty" in err
    bind_all(tmp_path)
    code, out, err = run(capsys, "expert", "chat", NAME, "--db", db, "-m", "hi", "--model",
                         "simulator/nope")
    assert code == 2 and err.count("\n") == 1 and "no model 'nope'" in err
    code, out, _ = run(capsys, "session", "list", "--db", db, "--json")
    assert code == 0 and json.loads(out) == []


async def test_bindings_changed_after_the_chat_opened(expert_home: Path, tmp_path: Path
                                                      ) -> None:
    """The worker reads the bindings per turn: a rebind is used by the next turn (a new
    server registry, the old one closed with the runner); a binding removed meanwhile fails
    the turn with a message naming the tool, and the session goes on."""
    bind_all(tmp_path)
    store = await open_store(str(tmp_path / "db.sqlite"))
    try:
        sid = await open_chat(store, NAME)
        sessions = Sessions(store)
        spec = await sessions.spec(spec_name(NAME))
        r, _ = runner(store)
        try:
            first = r.registry_for(spec)
            assert first is r.registry_for(spec)  # kept while the bindings are the same
            assert first is not None and sorted(first.servers) == ["helpdesk", "kb"]
            other = tmp_path / "other.jsonl"
            write_binding(NAME, "kb", {"type": "mcp", "command": sys.executable,
                                       "args": [str(SERVER)],
                                       "env": {"SALES_MCP_CALLS": str(other)}})
            second = r.registry_for(spec)
            assert second is not first
            await sessions.send(sid, '#call kb.search_articles {"query": "sso"}')
            assert await r.run_until_idle(120, {sid})
            assert [json.loads(x)["tool"] for x in other.read_text().splitlines()] == [
                "search_articles"]
            path = home.bindings_path(NAME)
            path.write_text(path.read_text().split("\n  kb:")[0] + "\n")
            await sessions.send(sid, "still there?")
            assert await r.run_until_idle(120, {sid})
        finally:
            await r.aclose()
        s = await sessions.get(sid)
        assert [j["status"] for j in s["jobs"]] == ["done", "failed"]
        assert "bindings.yaml:tools.kb: not bound" in s["jobs"][-1]["error"]
        assert s["status"] == "idle"
    finally:
        await store.close()
