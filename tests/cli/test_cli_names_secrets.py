"""Issue 34, part 5: a name is checked wherever one is made from user input (operators,
specs from OpenClaw: the one name rule of core/limits.py, no `.`/`..`); an empty token or
secret is refused, never read as "make a random one"; errors name the option at fault and
the range that applies. Every refusal is one stderr line, exit 2, nothing written."""

from __future__ import annotations

import errno
import socket
import time
from pathlib import Path

import pytest
from cli_helpers import Run, digest

from clawtower.core.triggers import hookauth
from tests.helpers.hook_expert import TOKEN, install_hook_expert

CLAWTOWER_YAML = """providers:
  local:
    kind: openai
    base_url: http://127.0.0.1:9/v1
    models: [smollm2]
"""


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# -- operator names ----------------------------------------------------------------------

@pytest.mark.parametrize("by", ["../x", "..", ".", "a/b", "al ice", "x" * 65])
def test_console_web_refuses_a_by_that_is_not_a_name(
        run: Run, db: Path, home: Path, by: str) -> None:
    r = run("console", "--web", "--by", by, "--port", "0", "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and line.startswith("clawtower: error: --by:"), line
    assert "is not a name" in line
    assert r.out == "" and not db.exists()
    assert not (home / "console-tokens.yaml").exists()


def test_console_web_refuses_a_bad_operator_from_the_environment(
        run: Run, db: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWTOWER_OPERATOR", "../x")
    r = run("console", "--web", "--port", "0", "--db", db)
    assert r.code == 2 and "$CLAWTOWER_OPERATOR: '../x' is not a name" in _one_line(r.err)
    assert not db.exists() and not (home / "console-tokens.yaml").exists()


@pytest.mark.parametrize("argv", [["approve", "deadbeef"], ["reject", "deadbeef",
                                                               "--reason", "no"]])
def test_approve_and_reject_refuse_a_by_that_is_not_a_name(
        run: Run, seeded: Path, argv: list[str]) -> None:
    from cli_helpers import state

    before = state(seeded)
    r = run(*argv, "--by", "../x", "--db", seeded)
    assert r.code == 2 and _one_line(r.err).startswith("clawtower: error: --by:")
    assert state(seeded) == before


@pytest.mark.parametrize("value, says", [
    ("", "$CLAWTOWER_OPERATOR: set but empty"),  # CLAWTOWER_OPERATOR=$WHO, WHO unset
    ("..", "$CLAWTOWER_OPERATOR: '..' is not a name"),
])
def test_a_bad_or_empty_operator_variable_refuses_before_anything_is_written(
        run: Run, seeded: Path, monkeypatch: pytest.MonkeyPatch, value: str,
        says: str) -> None:
    from cli_helpers import state

    before = state(seeded)
    monkeypatch.setenv("CLAWTOWER_OPERATOR", value)
    r = run("task", "cancel", "T-1", "--reason", "r", "--db", seeded)
    assert r.code == 2 and says in _one_line(r.err)
    assert state(seeded) == before

def test_a_login_name_that_is_not_a_name_is_refused_saying_what_to_set(
        run: Run, seeded: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli_helpers import state

    before = state(seeded)
    monkeypatch.delenv("CLAWTOWER_OPERATOR")
    monkeypatch.setattr("getpass.getuser", lambda: "john doe")
    r = run("task", "cancel", "T-1", "--reason", "r", "--db", seeded)
    line = _one_line(r.err)
    assert r.code == 2 and "your login name: 'john doe' is not a name" in line, line
    assert "set $CLAWTOWER_OPERATOR" in line and state(seeded) == before
    r = run("task", "cancel", "T-1", "--reason", "r", "--by", "john.doe", "--db", seeded)
    assert r.code == 0 and "cancel by john.doe" in r.out, r.err


@pytest.mark.parametrize("name", ["../x", "..", "a b"])
def test_a_trigger_name_that_is_not_a_name_is_refused_at_install(
        run: Run, tmp_path: Path, name: str) -> None:
    from clawtower.core.experts import home as experts
    from tests.helpers.hook_expert import write_hook_expert

    pkg = write_hook_expert(tmp_path, triggers=f"  - name: '{name}'\n    type: webhook\n"
                                               "    process: note\n")
    r = run("expert", "install", pkg)
    assert r.code == 2 and f"triggers[0].name: '{name}' is not a name" in r.err, r.err
    assert not (experts.experts_dir() / "hook-expert").exists()


# -- OpenClaw agent ids ---------------------------------------------------------------

@pytest.mark.parametrize("text, field", [
    ("{agents: {entries: {'.': {}}}}", "agents.entries.."),
    ("{agents: {entries: {'..': {}, ok: {}}}}", "agents.entries..."),
    ("{agents: {list: [{id: 'ok'}, {id: '..'}]}}", "agents.list[1]"),
    ("{agents: {list: [{id: '.'}]}}", "agents.list[0]"),
])
def test_openclaw_ids_dot_and_dotdot_are_refused(
        run: Run, db: Path, tmp_path: Path, text: str, field: str) -> None:
    cfg = tmp_path / "clawtower.yaml"
    cfg.write_text(CLAWTOWER_YAML)
    oc = tmp_path / "openclaw.json"
    oc.write_text(text)
    r = run("agents", "spec", "import", "--openclaw", oc, "--config", cfg, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and str(oc) in line and f"field '{field}'" in line, line
    assert "name '.'" in line or "name '..'" in line, line
    assert not db.exists() or run("agents", "spec", "list", "--json", "--db", db
                                  ).json() == []


# -- empty secrets -----------------------------------------------------------------------

def _authentic(token: str) -> bool:
    auth = hookauth.load("hook-expert")["inbound"]
    headers = {"authorization": f"Bearer {token}"}
    return hookauth.check(auth, headers, b"{}", time.time()) is None


@pytest.mark.parametrize("argv, option", [
    (["--token", ""], "--token"),  # `--token "$TOKEN"` with TOKEN unset
    (["--token", "   "], "--token"),
    (["--secret", ""], "--secret"),
    (["--token-file", ""], "--token-file"),  # `--token-file "$F"` with F unset
    (["--secret-file", ""], "--secret-file"),
])
def test_an_empty_token_or_secret_is_refused_and_the_old_one_still_works(
        run: Run, db: Path, tmp_path: Path, home: Path, argv: list[str],
        option: str) -> None:
    install_hook_expert(tmp_path)
    hooks = hookauth.hooks_file("hook-expert")
    before = digest(hooks)
    assert _authentic(TOKEN)
    r = run("triggers", "auth", "hook-expert", "inbound", *argv, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and line.startswith(f"clawtower: error: {option}:"), line
    assert r.out == "" and digest(hooks) == before  # nothing written
    assert _authentic(TOKEN)


def test_an_empty_token_file_is_refused(run: Run, db: Path, tmp_path: Path) -> None:
    install_hook_expert(tmp_path)
    before = digest(hookauth.hooks_file("hook-expert"))
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    r = run("triggers", "auth", "hook-expert", "inbound", "--token-file", empty, "--db", db)
    assert r.code == 2 and "--token-file: empty" in _one_line(r.err)
    assert digest(hookauth.hooks_file("hook-expert")) == before and _authentic(TOKEN)


def test_token_without_a_value_still_makes_a_random_one(run: Run, db: Path,
                                                       tmp_path: Path) -> None:
    install_hook_expert(tmp_path)
    r = run("triggers", "auth", "hook-expert", "inbound", "--token", "--db", db)
    assert r.code == 0 and "(random" in r.out, r.err
    new = hookauth.load("hook-expert")["inbound"].token
    assert new and new != TOKEN and new not in r.out and not _authentic(TOKEN)


def test_the_core_refuses_an_empty_credential_too(tmp_path: Path) -> None:
    from clawtower.core.errors import ValidationError

    install_hook_expert(tmp_path)
    before = digest(hookauth.hooks_file("hook-expert"))
    for kw in ({"token": ""}, {"secret": " "}):
        with pytest.raises(ValidationError, match="empty"):
            hookauth.write("hook-expert", "inbound", **kw)  # type: ignore[arg-type]
    assert digest(hookauth.hooks_file("hook-expert")) == before


def test_an_empty_gateway_token_file_is_refused_at_import(
        run: Run, db: Path, tmp_path: Path) -> None:
    oc = tmp_path / "openclaw.json"
    oc.write_text("{agents: {entries: {main: {tools: {allow: []}}}}}")
    empty = tmp_path / "gw.token"
    empty.write_text("")
    r = run("agents", "spec", "import", "--openclaw", oc, "--gateway", "ws://127.0.0.1:1",
            "--token-file", empty, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and "--token-file" in line and "empty" in line, line
    assert not db.exists()

def test_empty_secrets_from_the_environment_and_credential_files_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clawtower.core.acp.openclaw import OpenClawTarget
    from clawtower.core.agents.openai import OpenAIProvider
    from clawtower.core.childenv import resolve
    from clawtower.core.errors import ValidationError

    monkeypatch.setenv("CT_EMPTY_SECRET", "")
    with pytest.raises(ValidationError, match="GH_TOKEN: the variable"
                                              " CT_EMPTY_SECRET is set but empty"):
        resolve({}, {"GH_TOKEN": "CT_EMPTY_SECRET"}, "mcp server gh")
    key = OpenAIProvider("local", "http://llm.test/v1", api_key_env="CT_EMPTY_SECRET")._key
    with pytest.raises(Exception, match="CT_EMPTY_SECRET is set but empty"):
        key()
    empty = tmp_path / "gw.token"
    empty.write_text("\n")
    target = OpenClawTarget(url="ws://127.0.0.1:1", token_file=str(empty))
    assert "openclaw.token_file" in target.preflight("oc") and \
        "is empty" in target.preflight("oc")
    empty.write_text("t0ken\n")
    assert target.preflight("oc") == ""

@pytest.mark.parametrize("argv, option", [
    (["--openclaw", ""], "--openclaw"),  # read ~/.openclaw/openclaw.json instead
    (["--openclaw", "OC", "--gateway", ""], "--gateway"),  # imported without it
])
def test_an_empty_openclaw_path_or_gateway_is_refused(
        run: Run, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        argv: list[str], option: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    default = tmp_path / ".openclaw" / "openclaw.json"
    default.parent.mkdir()
    default.write_text("{agents: {entries: {main: {tools: {allow: []}}}}}")
    argv = [str(default) if a == "OC" else a for a in argv]
    r = run("agents", "spec", "import", *argv, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and line.startswith(f"clawtower: error: {option}:"), line
    assert not db.exists()
    r = run("agents", "spec", "import", "--openclaw", "--db", db)  # no value: the default
    assert r.code == 0 and r.out.startswith("main: new (ag-") and str(default) in r.out, r.err


# -- console --web options: the option at fault, the range that applies ------------------

@pytest.mark.parametrize("argv, message", [
    (["--host", "bad_host!"], "--host: 'bad_host!' is not an IP address or a host name"),
    (["--host", ""], "--host: '' is not an IP address or a host name"),
    (["--idle-minutes", "nan"], "--idle-minutes: must be a number between 0.01 and 10080"),
    (["--idle-minutes", "0"], "--idle-minutes: must be a number between 0.01 and 10080"),
    (["--auth-window", "inf"], "--auth-window: must be a number between 1 and 86400"),
    (["--port", "70000"], "--port: must be between 0 and 65535"),
    (["--max-consoles", "0"], "--max-consoles: must be between 1 and 1000"),
    (["--auth-failures", "-1"], "--auth-failures: must be between 1 and 10000"),
])
def test_console_web_errors_name_the_option_and_its_range(
        run: Run, db: Path, home: Path, argv: list[str], message: str) -> None:
    r = run("console", "--web", *argv, "--db", db)
    line = _one_line(r.err)
    assert r.code == 2 and line.startswith(f"clawtower: error: {message}"), line
    assert "1e+12" not in line and not db.exists()
    assert not (home / "console-tokens.yaml").exists()


def test_a_failed_bind_blames_the_option_at_fault() -> None:
    from clawtower.cli.console import bind_error

    gai = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert bind_error(gai, "nosuch.invalid", 8788).startswith("--host nosuch.invalid:")
    notours = OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    assert bind_error(notours, "10.9.9.9", 8788).startswith("--host 10.9.9.9:")
    taken = OSError(errno.EADDRINUSE, "Address already in use")
    assert bind_error(taken, "127.0.0.1", 8788).startswith("--port 8788:")


# -- an OpenClaw agent without an allow-list --------------------------------------------

def test_an_openclaw_agent_without_an_allow_list_imports_saying_it_may_call_every_tool(
        run: Run, db: Path, tmp_path: Path) -> None:
    oc = tmp_path / "openclaw.json"
    oc.write_text("{agents: {entries: {open: {}, shut: {tools: {allow: []}}}}}")
    r = run("agents", "spec", "import", "--openclaw", oc, "--db", db)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    at = lines.index(next(x for x in lines if x.startswith("open: new")))
    assert lines[at + 1].startswith("  may call every tool: no tools.allow in"
                                    " agents.entries.open.tools"), r.out
    assert "may call every tool" not in "".join(x for x in lines if "shut" in x)
    assert r.out.count("may call every tool") == 1
    rows = {a["name"]: a for a in run("agents", "spec", "import", "--openclaw", oc,
                                      "--db", db, "--json").json()["agents"]}
    assert rows["open"]["notes"] and rows["shut"]["notes"] == []
    assert rows["open"]["status"] == "unchanged"  # said again on every import
