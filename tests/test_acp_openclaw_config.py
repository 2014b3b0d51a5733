"""An `acp_agents:` entry that is an OpenClaw Gateway agent (core/acp/openclaw.py): the
`openclaw:` block expands to `openclaw acp --url --token-file --session agent:<id>:<s>`, its
errors name the file and field, and what OpenClaw says on stderr becomes a one-line reason
naming the harness and what to run. The real Gateway: tests/test_openclaw_peers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from clawtower.core.acp.bridge import run_prompt
from clawtower.core.acp.config import harness_from_data, load_harnesses
from clawtower.core.agents.config import load_config
from clawtower.core.errors import ValidationError
from clawtower.core.store.interface import Store
from clawtower.core.tools.config import load_mcp_servers

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "openclaw" / "clawtower.yaml"


def _oc(**kw: object) -> dict[str, object]:
    return {"openclaw": {"url": "ws://127.0.0.1:18789", **kw}}


def test_the_openclaw_block_expands_to_openclaw_acp(monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness_from_data({**_oc(token_file="~/gw.token", agent="design", session="bug-1",
                                 command="~/bin/openclaw"), "args": ["--verbose"]}, "oc", "f")
    home = str(Path.home())
    assert h.argv() == [f"{home}/bin/openclaw", "acp", "--url", "ws://127.0.0.1:18789",
                        "--token-file", f"{home}/gw.token", "--session",
                        "agent:design:bug-1", "--verbose"]
    pw = harness_from_data(_oc(password_file="/p"), "oc", "f")
    assert pw.argv() == ["openclaw", "acp", "--url", "ws://127.0.0.1:18789",
                         "--password-file", "/p", "--session", "agent:main:main"]
    monkeypatch.setenv("OPENCLAW_STATE_DIR", "/srv/oc-state")
    monkeypatch.setenv("SECRET_THING", "x")
    env = h.child_env()
    assert env["OPENCLAW_STATE_DIR"] == "/srv/oc-state"  # which install: passed through
    assert env["OPENCLAW_HIDE_BANNER"] == "1" and "SECRET_THING" not in env
    plain = harness_from_data({"command": "agent"}, "a", "f")
    assert "OPENCLAW_STATE_DIR" not in plain.child_env()  # only for OpenClaw harnesses


@pytest.mark.parametrize(("body", "message"), [
    ({}, "field 'acp_agents.oc': give `command` (the harness to start) or `openclaw:`"),
    ({"command": "x", **_oc()}, "`command` and `openclaw:` exclude each other"),
    ({"openclaw": {"url": "http://h:1"}},
     "field 'acp_agents.oc.openclaw.url': the Gateway's WebSocket URL"),
    ({"openclaw": {"token_file": "/t"}}, "field 'acp_agents.oc.openclaw.url': Field required"),
    (_oc(agent="a b"), "field 'acp_agents.oc.openclaw.agent': an OpenClaw agent id"),
    (_oc(session="x y"), "field 'acp_agents.oc.openclaw.session': a session key's tail"),
    (_oc(token="inline"),
     "field 'acp_agents.oc.openclaw.token': unknown field (did you mean 'token_file'?)"),
])
def test_bad_openclaw_entries_name_the_file_and_field(tmp_path: Path, body: dict[str, object],
                                                      message: str) -> None:
    import yaml

    p = tmp_path / "clawtower.yaml"
    p.write_text(yaml.safe_dump({"acp_agents": {"oc": body}}))
    with pytest.raises(ValidationError) as err:
        load_harnesses(p)
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


# what `openclaw acp` 2026.9.6 prints on stderr (seen against a real Gateway), as the
# bridge reports it
REFUSED = ("initialize: the harness exited with code 1; stderr: gateway connect failed:"
           " GatewayClientRequestError: unauthorized: gateway token mismatch (use this"
           " gateway's gateway.auth.token or pair the device) | ACP bridge failed:"
           " unauthorized: gateway token mismatch")
# the Gateway killed (-9) mid-turn; the Gateway draining after SIGTERM
GONE = ("session/prompt: harness error -32603: Internal error ({'details': 'Gateway"
        " disconnected: 1006: '})")
DRAINING = ("initialize: the harness exited with code 1; stderr: ACP bridge failed: gateway"
            " rejected websocket upgrade (HTTP 503): Gateway websocket admission closed")
DOWN = ("initialize: the harness exited with code 1; stderr: ACP bridge failed: connect"
        " ECONNREFUSED 127.0.0.1:18199")


def test_openclaw_faults_become_a_reason_naming_the_harness_and_what_to_run() -> None:
    t = harness_from_data(_oc(token_file="/t", agent="main"), "oc", "f").openclaw
    assert t is not None
    who = "acp agent 'oc' (OpenClaw agent 'main' at ws://127.0.0.1:18789): "
    refused = t.explain("oc", REFUSED)
    assert refused.startswith(who + "the Gateway refused the credentials in /t")
    assert "openclaw gateway auth-token --show" in refused and "token mismatch" in refused
    down = t.explain("oc", DOWN)
    assert down.startswith(who + "the Gateway is not running") and "openclaw gateway run" in down
    gone = t.explain("oc", GONE)
    assert gone.startswith(who + "the Gateway went away mid-turn") and "1006" in gone
    draining = t.explain("oc", DRAINING)
    assert draining.startswith(who + "the Gateway is shutting down or restarting")
    missing = t.explain("oc", "cannot start 'openclaw': No such file or directory")
    assert "npm install -g openclaw" in missing
    other = t.explain("oc", "session/prompt: harness error -32603: boom")
    assert other == who + "session/prompt: harness error -32603: boom"


async def test_a_missing_token_file_fails_the_turn_before_starting_anything(
        store: Store, tmp_path: Path) -> None:
    h = harness_from_data(_oc(token_file=str(tmp_path / "nope"),
                              command=str(tmp_path / "no-openclaw")), "oc", "f")
    out = await run_prompt(store, h, "hello", workspace=str(tmp_path))
    assert out.status == "failed"
    assert out.error.startswith("acp agent 'oc' (OpenClaw agent 'main' at ws://")
    assert f"openclaw.token_file {tmp_path / 'nope'} does not exist" in out.error
    run = await store.fetchone("SELECT * FROM acp_runs WHERE id=?", (out.run_id,))
    assert run is not None and run["status"] == "failed" and run["grp"] == ""


def test_the_example_config_loads() -> None:
    harnesses = load_harnesses(EXAMPLE)
    assert harnesses["oc-main"].argv()[1:] == [
        "acp", "--url", "ws://127.0.0.1:18789", "--token-file",
        str(Path.home() / ".openclaw/gateway.token"), "--session", "agent:main:main"]
    server = load_mcp_servers(EXAMPLE)["openclaw"]
    assert server.args[:2] == ["mcp", "serve"] and server.pin == "manual"
    assert load_config(EXAMPLE).agents["inbox-reader"].tools == [
        "openclaw.conversations_list", "openclaw.messages_read"]
