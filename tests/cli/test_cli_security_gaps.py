"""The smaller edges: `triggers auth` never echoes a credential (a fingerprint instead; file
and stdin forms), `expert bind` refuses a tool the package never declared, a path after an
id is refused, and out-of-range numbers are reported by one helper that never prints the
64-bit storage limits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from cli_helpers import Run

from clawtower.core.limits import range_message
from clawtower.core.triggers import hookauth
from tests.helpers.hook_expert import install_hook_expert

INT64 = ("9223372036854775807", "9223372036854775808")


def test_triggers_auth_prints_a_fingerprint_never_the_secret(
        run: Run, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_hook_expert(tmp_path)
    typed = "typed-secret-0123456789-CANARY"
    r = run("triggers", "auth", "hook-expert", "inbound", "--secret", typed, "--db", db)
    assert r.code == 0 and typed not in r.out + r.err
    assert r.out.startswith("secret: sha256:") and "hooks.yaml" in r.err
    assert hookauth.load("hook-expert")["inbound"].secret == typed
    token_file = tmp_path / "tok"
    token_file.write_text("file-token-0123456789-CANARY\n")
    r = run("triggers", "auth", "hook-expert", "inbound", "--token-file", token_file,
            "--db", db)
    assert r.code == 0 and "CANARY" not in r.out + r.err
    assert hookauth.load("hook-expert")["inbound"].token == "file-token-0123456789-CANARY"
    monkeypatch.setattr("sys.stdin", io.StringIO("stdin-secret-0123456789-CANARY\n"))
    r = run("triggers", "auth", "hook-expert", "mail", "--secret-file", "-", "--db", db)
    assert r.code == 0 and "CANARY" not in r.out + r.err
    assert hookauth.load("hook-expert")["mail"].secret == "stdin-secret-0123456789-CANARY"
    r = run("triggers", "auth", "hook-expert", "inbound", "--token")  # random
    assert r.code == 0 and hookauth.load("hook-expert")["inbound"].token not in r.out
    assert "random" in r.out
    for argv, why in (
            (["--token", "x" * 20, "--token-file", token_file], "not both"),
            (["--token-file", "-", "--secret-file", "-"], "both read stdin"),
            (["--token-file", tmp_path / "missing"], "no such file")):
        r = run("triggers", "auth", "hook-expert", "inbound", *argv, "--db", db)
        assert r.code == 2 and why in r.err, r.err


def test_expert_bind_refuses_a_tool_the_package_never_declared(
        run: Run, tmp_path: Path, home: Path) -> None:
    install_hook_expert(tmp_path, extra="requires:\n  tools: [feed]\n")
    r = run("expert", "bind", "hook-expert", "../../x", "--mcp", "sh")
    assert r.code == 2 and "declares no tool '../../x'" in r.err and "feed" in r.err, r.err
    assert not (home / "expert-config" / "hook-expert" / "bindings.yaml").exists() or \
        "../../x" not in (home / "expert-config" / "hook-expert" / "bindings.yaml").read_text()
    assert run("expert", "bind", "hook-expert", "feed", "--mcp", "sh").code == 0


def test_a_path_after_an_id_is_refused(run: Run, db: Path) -> None:
    assert run("session", "new", "--db", db).code == 0  # the store exists
    for ident in ("F-1/root/../../x", "F-1/./root", "F-1//root", "F-1/root/.."):
        r = run("flow", "show", ident, "--db", db)
        assert r.code == 2 and "not a path" in r.err, (ident, r.err)
    r = run("flow", "show", "F-1/root/x", "--db", db)
    assert r.code == 2 and "no such flow 'F-1'" in r.err


def test_range_messages_never_print_the_int64_limits(run: Run, db: Path) -> None:
    huge = "99999999999999999999999"
    for argv in (["flow", "run", "lead", "x", "--max-depth", huge],
                 ["flow", "run", "lead", "x", "--max-depth", "-1"],
                 ["flow", "run", "lead", "x", "--max-depth", "-" + huge]):
        r = run(*argv, "--db", db)
        assert r.code == 2 and "--max-depth: must be between 1 and 1000000" in r.err, r.err
        assert not any(n in r.err for n in INT64), r.err
    r = run("events", "--after", "-3", "--db", db)  # (0, MAX_SEQ): only the lower bound
    assert r.code == 2 and "must be at least 0" in r.err and not any(n in r.err for n in INT64)
    r = run("triggers", "history", "--limit", huge, "--db", db)
    assert r.code == 2 and not any(n in r.err for n in INT64), r.err
    assert range_message("--n", -(1 << 63), (1 << 63) - 1, 10**30).endswith("out of range")
    assert "at most 5" in range_message("--n", -(1 << 63), 5, 9)


def test_triggers_list_shows_refused_credentials_of_the_last_hour(
        run: Run, db: Path, tmp_path: Path) -> None:
    import asyncio

    from clawtower.core.events import NewEvent
    from clawtower.core.store import open_store
    from clawtower.core.triggers import events as tev

    install_hook_expert(tmp_path)

    async def refusals() -> None:
        store = await open_store(str(db))
        try:
            for i, addr in enumerate(("10.0.0.1", "10.0.0.1", "10.0.0.2")):
                p = tev.HookAuthFailed(expert="hook-expert", trigger="inbound", address=addr,
                                       reason="bad bearer token", error_id=f"E-{i}")
                await store.execute(lambda tx, p=p: tx.emit(NewEvent(
                    entity_id="hook:hook-expert/inbound", actor="triggers", role="system",
                    payload=p)))
        finally:
            await store.close()

    asyncio.run(refusals())
    out = run("triggers", "list", "--db", db).out
    inbound = next(ln for ln in out.splitlines() if ln.startswith("hook-expert/inbound"))
    assert "auth failures (1h) 3" in inbound
    mail = next(ln for ln in out.splitlines() if ln.startswith("hook-expert/mail"))
    assert "auth failures (1h) 0" in mail
    rows = run("triggers", "list", "--json", "--db", db).json()
    got = {r["trigger"]: r["auth_failures_1h"] for r in rows}
    assert got["inbound"] == 3 and got["mail"] == 0
    events = run("events", "--db", db).out
    assert "hook-expert/inbound webhook from 10.0.0.2 refused [E-2]: bad bearer token" in events
