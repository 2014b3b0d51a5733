"""Faults of a harness end the turn with a reason, never a hang: codex-acp without a key
(the real `-32000 Authentication required`), a command that does not exist, a harness that
crashes, one that prints garbage on stdout and never answers; and the client's sandbox:
paths out of the workspace are refused, writes are effects (intent, then done)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from acp import RequestError
from acp_peers import codex_harness

from clawtower.core.acp.bridge import AcpTurn
from clawtower.core.acp.client import BridgeClient
from clawtower.core.acp.config import HarnessConfig
from clawtower.core.store import open_store
from clawtower.core.store.interface import Store

WAIT_S = 120.0


@pytest.fixture
async def acp_store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(str(tmp_path / "acp.db"))
    yield s
    await s.close()


def script_harness(name: str, code: str, **kw: object) -> HarnessConfig:
    return HarnessConfig.model_validate({"name": name, "command": sys.executable,
                                         "args": ["-c", code], **kw})


async def run(store: Store, h: HarnessConfig, tmp_path: Path) -> tuple[AcpTurn, object]:
    turn = AcpTurn(store, h, "hello", workspace=str(tmp_path))
    out = await asyncio.wait_for(turn.run(), WAIT_S)
    return turn, out


async def test_codex_without_a_key_reports_authentication(acp_store: Store,
                                                          tmp_path: Path) -> None:
    home = tmp_path / "home"  # no ~/.codex credentials, no OPENAI_API_KEY
    (home / ".codex").mkdir(parents=True)
    h = codex_harness(env={"HOME": str(home), "CODEX_HOME": str(home / ".codex")},
                      init_timeout_s=90)
    turn, out = await run(acp_store, h, tmp_path)
    assert out.status == "failed", out  # type: ignore[attr-defined]
    assert "authentication required (-32000)" in out.error.lower(), out  # type: ignore[attr-defined]
    run_row = await acp_store.fetchone("SELECT * FROM acp_runs WHERE id=?", (turn.run_id,))
    assert run_row is not None and run_row["status"] == "failed"
    assert "-32000" in run_row["error"] and "auth methods:" in run_row["error"]
    from clawtower.core import liveness
    assert run_row["grp"] and not liveness._group_members(int(run_row["grp"].split(":")[1]))


async def test_missing_command(acp_store: Store, tmp_path: Path) -> None:
    h = HarnessConfig(name="nope", command=str(tmp_path / "no-such-harness"))
    _, out = await run(acp_store, h, tmp_path)
    assert out.status == "failed" and "cannot start" in out.error, out  # type: ignore[attr-defined]


async def test_a_crashing_harness(acp_store: Store, tmp_path: Path) -> None:
    h = script_harness("crash", "import sys; sys.stderr.write('boom: out of cheese\\n');"
                                " sys.exit(3)")
    _, out = await run(acp_store, h, tmp_path)
    assert out.status == "failed", out  # type: ignore[attr-defined]
    assert "exited with code 3" in out.error and "out of cheese" in out.error, out  # type: ignore[attr-defined]


async def test_garbage_on_stdout_and_a_hang_time_out(acp_store: Store, tmp_path: Path) -> None:
    h = script_harness("garbage", "import sys, time; print('hello, I am not JSON-RPC');"
                                  " sys.stdout.flush(); time.sleep(600)", init_timeout_s=2)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    turn, out = await run(acp_store, h, tmp_path)
    assert loop.time() - t0 < 60
    assert out.status == "failed" and out.stop_reason == "timeout", out  # type: ignore[attr-defined]
    assert "initialize: no answer within 2s" in out.error  # type: ignore[attr-defined]
    row = await acp_store.fetchone("SELECT grp FROM acp_runs WHERE id=?", (turn.run_id,))
    from clawtower.core import liveness
    assert row is not None and not liveness._group_members(int(row["grp"].split(":")[1]))


def client(store: Store, workspace: Path) -> BridgeClient:
    return BridgeClient(store, run_id="acp-test", harness="t", workspace=str(workspace),
                        actor="t", permission_timeout_s=5,
                        child_env={"PATH": os.environ["PATH"]})


async def test_paths_out_of_the_workspace_are_refused(acp_store: Store, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    (ws / "link").symlink_to(tmp_path / "secret.txt")
    (ws / "dirlink").symlink_to(tmp_path)
    (ws / "ok.txt").write_text("one\ntwo\nthree\n")
    c = client(acp_store, ws)
    for bad in (str(tmp_path / "secret.txt"), str(ws / ".." / "secret.txt"), "../secret.txt",
                str(ws / "link"), str(ws / "dirlink" / "secret.txt"), "/etc/passwd"):
        with pytest.raises(RequestError) as err:
            await c.read_text_file("s", bad)
        assert "outside the workspace" in str(err.value), bad
        with pytest.raises(RequestError):
            await c.write_text_file("s", bad, "pwned")
    assert (tmp_path / "secret.txt").read_text() == "top secret"
    got = await c.read_text_file("s", str(ws / "ok.txt"), line=2, limit=1)
    assert got.content == "two\n"
    with pytest.raises(RequestError):
        await c.create_terminal("s", "true", cwd=str(tmp_path))
    await c.aclose()


async def test_writes_are_effects(acp_store: Store, tmp_path: Path) -> None:
    c = client(acp_store, tmp_path)
    await c.write_text_file("s", str(tmp_path / "sub" / "new.txt"), "héllo\n")
    assert (tmp_path / "sub" / "new.txt").read_text(encoding="utf-8") == "héllo\n"
    rows = await acp_store.fetchall("SELECT * FROM acp_writes")
    assert [(r["status"], r["sha256"]) for r in rows] == [
        ("written", hashlib.sha256("héllo\n".encode()).hexdigest())]
    types = [r["type"] for r in await acp_store.fetchall(
        "SELECT type FROM events WHERE entity_id='acp-test' ORDER BY seq")]
    assert types == ["acp.write_intended", "acp.write_done"]
    await c.aclose()


async def test_terminals_run_in_the_workspace(acp_store: Store, tmp_path: Path) -> None:
    c = client(acp_store, tmp_path)
    t = await c.create_terminal("s", "sh", args=["-c", "pwd; echo out; exit 4"])
    done = await c.wait_for_terminal_exit("s", t.terminal_id)
    assert done.exit_code == 4
    out = await c.terminal_output("s", t.terminal_id)
    assert out.output.split() == [str(tmp_path.resolve()), "out"]
    assert out.exit_status is not None and out.exit_status.exit_code == 4
    slow = await c.create_terminal("s", "sleep", args=["600"])
    await c.kill_terminal("s", slow.terminal_id)
    st = await c.wait_for_terminal_exit("s", slow.terminal_id)
    assert st.signal == "SIGKILL"
    await c.release_terminal("s", slow.terminal_id)
    await c.aclose()


async def test_recovery_settles_half_done_writes_by_digest(acp_store: Store,
                                                           tmp_path: Path) -> None:
    """A driver killed between a write's intent and its done: recovery marks the write
    found_written when the file holds the intended bytes, abandoned otherwise (never
    written again), and fails the run as interrupted."""
    from clawtower.core.acp import events as aev
    from clawtower.core.acp.bridge import recover
    from clawtower.core.events import NewEvent

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from clawtower.core import liveness
    driver = liveness.process_tag(dead.pid).rsplit(":", 1)[0] + ":1"  # gone
    written, lost = tmp_path / "written.txt", tmp_path / "lost.txt"
    written.write_text("new")
    lost.write_text("old")

    def digest(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    await acp_store.append([NewEvent(entity_id="acp-dead", actor="t", role="agent", payload=p)
                            for p in (
        aev.AcpRunStarted(harness="h", workspace=str(tmp_path), prompt="p", driver=driver),
        aev.AcpWriteIntended(idem_key="acp-dead:w1", path=str(written), sha256=digest("new"),
                             size=3),
        aev.AcpWriteIntended(idem_key="acp-dead:w2", path=str(lost), sha256=digest("new"),
                             size=3))])
    settled = await recover(acp_store)
    assert settled == [{"run": "acp-dead", "group_gone": True}]
    rows = {r["idem_key"]: r["status"] for r in await acp_store.fetchall(
        "SELECT * FROM acp_writes")}
    assert rows == {"acp-dead:w1": "found_written", "acp-dead:w2": "abandoned"}
    assert lost.read_text() == "old"
    run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE id='acp-dead'")
    assert run is not None and (run["status"], run["stop_reason"]) == ("failed", "interrupted")
    assert await recover(acp_store) == []  # once


async def test_a_running_session_worker_recovers_a_run_whose_driver_dies_later(
        acp_store: Store) -> None:
    """ACP recovery is part of the session worker's sweep, not only of its start: a run
    whose driver dies while this worker runs is settled without a restart."""
    from clawtower.core import liveness
    from clawtower.core.acp import events as aev
    from clawtower.core.events import NewEvent
    from clawtower.core.sessions.runner import SessionRunner
    from clawtower.core.sessions.skills import SkillSet

    runner = SessionRunner(acp_store, skills=SkillSet(), tools=False, lease_ttl_s=0.6)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        await asyncio.sleep(0)  # the worker's start-up recovery has nothing to settle
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        driver = liveness.process_tag(dead.pid).rsplit(":", 1)[0] + ":1"  # gone
        await acp_store.append([NewEvent(
            entity_id="acp-late", actor="t", role="agent",
            payload=aev.AcpRunStarted(harness="h", workspace=".", prompt="p", driver=driver))])
        async with asyncio.timeout(60):
            while True:
                run = await acp_store.fetchone("SELECT * FROM acp_runs WHERE id='acp-late'")
                if run is not None and run["status"] != "running":
                    break
                await acp_store.wait_for_change(await acp_store.last_seq(), 0.2)
        assert (run["status"], run["stop_reason"]) == ("failed", "interrupted")
    finally:
        stop.set()
        await task


async def test_a_cancelled_turn_ends_even_when_its_clean_up_hangs(
        acp_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling a turn (a session stopped, a worker or console stopping) kills the
    harness's group at once and ends within the clean-up's bound, even when the client's
    clean-up (its store flush, a terminal's reaping) never returns."""
    from clawtower.core import liveness
    from clawtower.core.acp import bridge

    async def hangs(self: BridgeClient) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(BridgeClient, "aclose", hangs)
    monkeypatch.setattr(bridge, "CLEANUP_S", 0.5)
    h = script_harness("mute", "import time; time.sleep(600)", init_timeout_s=300)
    turn = AcpTurn(acp_store, h, "hello", workspace=str(tmp_path))
    task = asyncio.create_task(turn.run())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while turn.proc is None:  # the harness started and the turn waits on its answer
        assert loop.time() < deadline and not task.done()
        await asyncio.sleep(0.05)
    pgid = turn.proc.pid
    await asyncio.sleep(0.2)
    task.cancel()
    t0 = loop.time()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    assert loop.time() - t0 < 10  # two bounds of 0.5 s and the harness's reaping
    assert not liveness._group_members(pgid)
    ended = await acp_store.fetchall("SELECT payload FROM events WHERE entity_id=? AND"
                                     " type='acp.run_finished'", (turn.run_id,))
    assert len(ended) == 1 and '"cancelled"' in ended[0]["payload"]
