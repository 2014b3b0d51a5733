"""`clawtower serve` stopped by SIGTERM at any moment of its start-up exits 0 with one line,
not the default death (143): before the store opens, with the store open, with the engine
built but nothing run yet, and while the webhook server starts. The start-up holds
(CLAWTOWER_SERVE_HOLD, cli/serve.py) put the signal at a known point without sleeping."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from pathlib import Path
from typing import IO

import pytest
from cli_helpers import CLAWTOWER, child_env, query


def _serve(home: Path, hold: str = "") -> subprocess.Popen[str]:
    env = {**child_env(home), "CLAWTOWER_SERVE_HOLD": hold}
    return subprocess.Popen([str(CLAWTOWER), "serve", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(stream: IO[str] | None, text: str, timeout: float = 60) -> list[str]:
    """Lines of `stream` up to the one containing `text` (read in a thread: a serve that
    never says it fails the test instead of hanging it)."""
    assert stream is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in iter(stream.readline, ""):
            lines.put(line)
            if text in line:
                return
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"serve did not say {text!r} in {timeout} s: {seen}")
        assert line, f"serve ended before {text!r}: {seen}"
        seen.append(line)
        if text in line:
            return seen


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("serve did not stop on SIGTERM")
    return proc.returncode, out, err


@pytest.mark.parametrize("hold, message", [
    ("parsed", "clawtower: stopped by SIGTERM during start-up\n"),  # before the store opens
    ("store", "clawtower: stopped by SIGTERM during start-up\n"),  # store open, no engine
    ("engine", "clawtower: stopped during start-up\n"),  # engine built, nothing run, no HTTP
])
def test_sigterm_at_a_start_up_point_exits_0_with_one_line(home: Path, hold: str,
                                                           message: str) -> None:
    proc = _serve(home, hold)
    _wait_for(proc.stderr, f"clawtower: start-up hold {hold}")
    code, out, err = _stop(proc)
    assert code == 0, (out, err)
    assert out.endswith(message), out
    assert out.count("stopped") == 1 and "webhooks on" not in out, out
    assert "Traceback" not in err, err
    db = home / "clawtower.db"
    if hold in ("parsed", "store"):
        assert not db.exists()  # nothing was written: a missing store is made by a first write
    else:  # nothing ran: no lease left held
        assert query(db, "SELECT count(*) FROM leases WHERE released = 0")[0][0] == 0


def test_sigterm_right_after_the_engine_line_exits_0(home: Path) -> None:
    """Before the webhook server is up (or just after: either way a clean 0)."""
    proc = _serve(home)
    _wait_for(proc.stdout, "clawtower: engine on")
    code, out, err = _stop(proc)
    assert code == 0, (out, err)
    assert "Traceback" not in err, err
