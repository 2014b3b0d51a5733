"""`clawtower agents list|show` and `clawtower llm ask`: zero config (the simulator), a
clawtower.yaml with an Anthropic-compatible server on a local port (a scripted SSE server in a
thread), bad input, faults, and the real SmolLM2 server streaming through the CLI."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from chunks import ChunkRecorder
from cli_helpers import Result, Run, query, run_cli

CANARY = "sk-ant-canary-4d3c2b1a0f9e"


Streamed = Callable[..., tuple[int, ChunkRecorder, str]]


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Streamed:
    """Run main() with a chunk-recording stdout; returns (code, recorder, stderr)."""
    from clawtower.cli.main import main

    def call(*argv: str | Path) -> tuple[int, ChunkRecorder, str]:
        rec = ChunkRecorder()
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdout", rec)
        try:
            code = main([str(a) for a in argv])
        finally:
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
        return code, rec, capsys.readouterr().err

    return call


# -- a scripted Anthropic-compatible server ------------------------------------------------

@dataclass
class Scripted:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    stall_s: float = 0.0


@dataclass
class FakeServer:
    url: str
    replies: list[Scripted]
    requests: list[tuple[dict[str, str], dict[str, object]]] = field(default_factory=list)


def anthropic_sse(*pieces: str, input_tokens: int = 12, output_tokens: int = 9) -> bytes:
    events: list[dict[str, object]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message",
                                              "role": "assistant", "content": [],
                                              "model": "claude-test",
                                              "usage": {"input_tokens": input_tokens,
                                                        "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text",
                                                                      "text": ""}},
        {"type": "ping"},
        *({"type": "content_block_delta", "index": 0,
           "delta": {"type": "text_delta", "text": p}} for p in pieces),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"}]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    state = FakeServer(url="", replies=[])
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            state.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
            reply = state.replies.pop(0) if state.replies else Scripted(500, b"{}")
            self.send_response(reply.status)
            ctype = "text/event-stream" if reply.status == 200 else "application/json"
            self.send_header("content-type", ctype)
            for k, v in reply.headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            if reply.stall_s:
                stop.wait(reply.stall_s)
            self.wfile.write(reply.body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def write_config(home: Path, url: str, extra_agent: str = "", wall: float = 30) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "clawtower.yaml"
    cfg.write_text(
        "providers:\n"
        f"  claude: {{kind: anthropic, base_url: '{url}', api_key_env: CT_CLI_KEY,\n"
        "           models: [claude-test, claude-big], timeout_s: 30,\n"
        "           retries: {max: 1, backoff_s: 0, max_backoff_s: 1}, max_concurrency: 2}\n"
        "agents:\n"
        "  ada:\n"
        "    provider: claude\n"
        "    system: You answer in one line.\n"
        "    tools: [clock.*]\n"
        f"    budgets: {{max_tool_rounds: 2, max_tokens: 5000, max_wall_s: {wall}}}\n"
        "    price: {prompt: 3, completion: 15}\n"
        "    max_output_tokens: 100\n"
        f"{extra_agent}"
        "  ben: {}\n")
    return cfg


def usage_rows(db: Path) -> list[tuple[object, ...]]:
    return query(db, "SELECT subject, agent, model, calls, prompt_tokens, completion_tokens"
                     " FROM usage ORDER BY agent")


# -- zero config: the built-in simulator ---------------------------------------------------

def test_llm_ask_streams_offline_with_zero_config(streamed: Streamed, db: Path) -> None:
    code, out, err = streamed("llm", "ask", "--agent", "ada", "Ship on Friday?", "--db", db)
    assert code == 0, err
    assert len(out.chunks) > 1 and out.text.endswith("\n")  # streamed, flushed per chunk
    assert out.text.startswith('(simulated reply from ada, sim-standard) You asked:'
                               ' "Ship on Friday?"')
    assert err.startswith("ada · simulator/sim-standard · ") and err.endswith("· stop\n")
    (row,) = usage_rows(db)
    assert row[:4] == ("llm-ask", "ada", "sim-standard", 1)
    assert int(row[4]) > 0 and int(row[5]) > 0  # type: ignore[call-overload]
    (ev,) = query(db, "SELECT type, entity_id, actor FROM events")
    assert ev == ("agent.usage", "llm-ask", "ada")


def test_the_installed_script_streams_to_a_pipe(home: Path) -> None:
    p = run_cli(["llm", "ask", "--agent", "cyd", "Ship on Friday?"], home)
    assert p.returncode == 0, p.stderr
    assert "(simulated reply from cyd" in p.stdout
    assert p.stderr.startswith("cyd · simulator/sim-standard · ")
    assert (home / "clawtower.db").exists()


def test_agents_list_and_show_with_zero_config(run: Run) -> None:
    r = run("agents", "list")
    assert r.code == 0 and r.out.splitlines()[0].split() == [
        "NAME", "PROVIDER", "MODEL", "ROLE", "TOOLS", "BUDGETS"]
    assert {ln.split()[0] for ln in r.out.splitlines()[1:]} >= {"ada", "ben", "scribe"}
    rows = run("agents", "list", "--json").json()
    assert {a["name"]: a["provider"] for a in rows}["ada"] == "simulator"
    show = run("agents", "show", "scribe")
    assert show.code == 0 and "role: summarizer" in show.out
    assert "(built-in simulator)" in show.out


# -- a clawtower.yaml with an Anthropic-compatible endpoint ------------------------------------

def test_agents_list_and_show_from_the_config(run: Run, home: Path, server: FakeServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_CLI_KEY", CANARY)
    cfg = write_config(home, server.url)
    r = run("agents", "list")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].split()[:5] == ["ada", "claude", "claude-test", "participant", "clock.*"]
    assert "rounds 2, tokens 5000, wall 30s" in lines[1]
    assert lines[2].split()[:3] == ["ben", "simulator", "sim-standard"]
    show = run("agents", "show", "ada")
    assert show.code == 0
    assert f"config: {cfg}" in show.out and "key from $CT_CLI_KEY (set)" in show.out
    assert "price: $3 prompt, $15 completion per 1M tokens" in show.out
    assert "system: You answer in one line." in show.out
    data = run("agents", "show", "ada", "--json").json()
    assert data["provider_detail"]["api_key_env"] == "CT_CLI_KEY"
    assert data["provider_detail"]["key_set"] is True
    assert data["budgets"] == {"max_tool_rounds": 2, "max_tokens": 5000, "max_wall_s": 30}
    for out in (r.out, show.out, json.dumps(data), run("agents", "list", "--json").out):
        assert CANARY not in out


def test_llm_ask_streams_from_an_anthropic_server_and_records_cost(
        streamed: Streamed, home: Path, db: Path, server: FakeServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_CLI_KEY", CANARY)
    write_config(home, server.url)
    server.replies.append(Scripted(429, b'{"type": "error", "error": {"type":'
                                        b' "rate_limit_error", "message": "slow down"}}',
                                   {"retry-after": "0"}))
    server.replies.append(Scripted(body=anthropic_sse("Tues", "day, ", "after ", "the freeze.",
                                                      input_tokens=1000, output_tokens=200)))
    code, out, err = streamed("llm", "ask", "--agent", "ada", "When do we ship?", "--db", db)
    assert code == 0, err
    assert out.chunks == ["Tues", "day, ", "after ", "the freeze.", "\n"]
    assert err == "ada · claude/claude-test · 1000 in / 200 out tokens · $0.006000 · stop\n"
    assert len(server.requests) == 2  # the 429 was retried
    headers, body = server.requests[1]
    assert headers["x-api-key"] == CANARY and headers["anthropic-version"] == "2023-06-01"
    assert body["system"] == "You answer in one line." and body["max_tokens"] == 100
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "When do we ship?"}]}]
    assert usage_rows(db) == [("llm-ask", "ada", "claude-test", 1, 1000, 200)]
    (cost,) = query(db, "SELECT cost_usd FROM usage")[0]
    assert cost == pytest.approx(0.006)
    assert CANARY not in err


def test_llm_ask_401_is_one_line_without_the_key_and_records_nothing(
        run: Run, home: Path, db: Path, server: FakeServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_CLI_KEY", CANARY)
    write_config(home, server.url)
    server.replies.append(Scripted(401, json.dumps({"type": "error", "error": {
        "type": "authentication_error", "message": f"invalid x-api-key {CANARY}"}}).encode()))
    r = run("llm", "ask", "--agent", "ada", "hi", "--db", db)
    assert r.code == 1 and len(server.requests) == 1  # not retried
    assert r.err.count("\n") == 1 and r.err.startswith("clawtower: error: provider claude:"
                                                       " HTTP 401 (authentication failed;")
    assert "CT_CLI_KEY" in r.err and CANARY not in r.err + r.out
    assert usage_rows(db) == []


def test_llm_ask_missing_key_variable_names_provider_and_variable(
        run: Run, home: Path, db: Path, server: FakeServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CT_CLI_KEY", raising=False)
    write_config(home, server.url)
    r = run("llm", "ask", "--agent", "ada", "hi", "--db", db)
    assert (r.code, r.err) == (1, "clawtower: error: provider claude: the API key variable"
                                  " CT_CLI_KEY is not set\n")
    assert server.requests == []


def test_llm_ask_malformed_stream_is_a_clear_error(run: Run, home: Path, db: Path,
                                                   server: FakeServer,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_CLI_KEY", CANARY)
    write_config(home, server.url)
    server.replies.append(Scripted(body=b"event: message_start\n<html>proxy error</html>\n\n"))
    r = run("llm", "ask", "--agent", "ada", "hi", "--db", db)
    assert r.code == 1
    assert r.err.startswith("clawtower: error: provider claude: malformed SSE line:")


def test_llm_ask_is_bounded_by_the_agents_wall_clock_budget(
        run: Run, home: Path, db: Path, server: FakeServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CT_CLI_KEY", CANARY)
    write_config(home, server.url, wall=0.5)
    server.replies.append(Scripted(body=anthropic_sse("late"), stall_s=20))
    r = run("llm", "ask", "--agent", "ada", "hi", "--db", db)
    assert r.code == 1
    assert "0.5 s" in r.err and r.err.startswith("clawtower: error: ")
    assert usage_rows(db) == []


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "field"), [
    ("providers: {x: {kind: openai, base_url: 'http://h', api_key: sk-live-abcdef123456}}\n",
     "providers.x.api_key"),
    ("agents: {ada: {budgets: {max_wall_s: 0}}}\n", "agents.ada.budgets.max_wall_s"),
    ("agents: {ada: {provider: ghost}}\n", "agents.ada.provider"),
])
@pytest.mark.parametrize("argv", [("agents", "list"), ("llm", "ask", "--agent", "ada", "hi")])
def test_a_bad_config_is_exit_2_naming_file_and_field(run: Run, home: Path, db: Path,
                                                      text: str, field: str,
                                                      argv: tuple[str, ...]) -> None:
    home.mkdir()
    cfg = home / "clawtower.yaml"
    cfg.write_text(text)
    r = run(*argv, "--db", db) if argv[0] == "llm" else run(*argv)
    assert r.code == 2 and r.err.count("\n") == 1
    assert r.err.startswith(f"clawtower: error: {cfg}: field '{field}'")
    assert "sk-live-abcdef123456" not in r.err
    assert not db.exists()  # bad input writes nothing


def test_config_flag_and_variable(run: Run, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("agents: {from_flag: {}}\n")
    b = tmp_path / "b.yaml"
    b.write_text("agents: {from_env: {}}\n")
    monkeypatch.setenv("CLAWTOWER_CONFIG", str(b))
    assert run("agents", "list", "--json").json()[0]["name"] == "from_env"
    assert run("agents", "list", "--json", "--config", a).json()[0]["name"] == "from_flag"
    r = run("agents", "list", "--config", tmp_path / "nope.yaml")
    assert (r.code, r.err) == (2, f"clawtower: error: {tmp_path / 'nope.yaml'}: no such"
                                  " config file\n")


@pytest.mark.parametrize(("argv", "message"), [
    (("agents", "show", "bob"),
     "agent 'bob': no such agent in (built-in simulator) (known: ada, ben"),
    (("llm", "ask", "--agent", "bob", "hi"), "agent 'bob': no such agent"),
    (("llm", "ask", "--agent", "ada", "  "), "llm ask: TEXT is empty"),
    (("llm", "ask", "--agent", "ada", "hi", "--max-tokens", "0"), "--max-tokens"),
    (("llm", "ask", "--agent", "ada", "hi", "--temperature", "9"), "--temperature"),
])
def test_bad_arguments_are_exit_2(run: Run, db: Path, argv: tuple[str, ...],
                                  message: str) -> None:
    r: Result = run(*argv, "--db", db) if argv[0] == "llm" else run(*argv)
    assert r.code == 2 and message in r.err and r.err.count("\n") == 1
    assert not db.exists()


def test_llm_ask_reads_stdin_with_a_dash(streamed: Streamed, db: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO("Ship on Friday?\n"))
    code, _, err = streamed("llm", "ask", "--agent", "ben", "-", "--db", db,
                              "--subject", "S-1")
    assert code == 0, err
    assert usage_rows(db)[0][:2] == ("S-1", "ben")


# -- integration: the real llama-cpp-python server with SmolLM2 -----------------------------

def test_llm_ask_streams_a_real_reply_from_smollm2(streamed: Streamed, home: Path,
                                                   db: Path, llama: str) -> None:
    from llama_peer import ALIAS

    base = llama
    home.mkdir()
    (home / "clawtower.yaml").write_text(
        "providers:\n"
        f"  local: {{kind: openai, base_url: '{base}', models: [{ALIAS}], timeout_s: 120,"
        " retries: 1}\n"
        "agents:\n"
        "  smol:\n"
        "    provider: local\n"
        "    system: You are a helpful assistant. Answer briefly.\n"
        "    max_output_tokens: 48\n"
        "    temperature: 0\n"
        "    budgets: {max_wall_s: 120}\n"
        "    price: {prompt: 1, completion: 2}\n")
    code, out, err = streamed("llm", "ask", "--agent", "smol", "Name three colours.",
                              "--db", db)
    assert code == 0, err
    assert len(out.chunks) > 2 and out.text.strip()  # really streamed, in several pieces
    assert err.startswith(f"smol · local/{ALIAS} · ")
    ((subject, agent, model, calls, prompt, completion),) = usage_rows(db)
    assert (subject, agent, model, calls) == ("llm-ask", "smol", ALIAS, 1)
    assert int(prompt) > 0 and int(completion) > 0  # type: ignore[call-overload]
