"""Helpers for tests that run child Python processes."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HELPERS = Path(__file__).resolve().parent


def child_env(**extra: str) -> dict[str, str]:
    """Environment for child Python processes: the repo and the helpers importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(HELPERS), env.get("PYTHONPATH", "")) if p)
    env.pop("HYPOTHESIS_PROFILE", None)
    env.update(extra)
    return env


def stop(proc: subprocess.Popen[str], what: str | None = None, timeout: float = 10) -> int:
    """SIGTERM, then SIGKILL after `timeout` s; the exit code. With `what` (e.g. "serve"),
    a process that ignores SIGTERM fails the test: stopping cleanly is what is tested."""
    proc.terminate()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)
        if what is not None:
            pytest.fail(f"{what} did not stop on SIGTERM")
        return proc.returncode


PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A Popen preexec_fn: the child gets SIGTERM when the test process dies (Linux
    PR_SET_PDEATHSIG, also on SIGKILL; elsewhere a no-op: tests/helpers/reaper.py covers).
    Start the child from the main thread: the signal follows the thread that forked it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """Stop a child started with start_new_session=True, and whatever else is in its group:
    SIGTERM, then SIGKILL after `timeout` s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout)


class Child:
    """A helper process of a test or script (`proc`): killed with SIGKILL, or waited for
    until it quits by itself."""

    proc: subprocess.Popen[str]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        """Until it quits by itself; its exit code."""
        self.proc.communicate(timeout=timeout)
        return self.proc.returncode
