"""The console as the engine's host in a child process (scripts/console_host.py: the real
console, headless), for the kill -9 tests and scripts/kill_soak.py's `--host console`."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers.procs import ROOT, Child, child_env, stop

ENTRY = ROOT / "scripts" / "console_host.py"


class Consoled(Child):
    """Started once its engine runs (`READY`); `until_idle`: it quits by itself once the
    engine is idle (`wait`)."""

    def __init__(self, home: Path, db: Path, until_idle: bool = False) -> None:
        # stderr to a file: a pipe nobody reads could fill and block the console
        self.err = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed with the object)
        self.proc = subprocess.Popen(
            [sys.executable, str(ENTRY), str(db), *(["--until-idle"] if until_idle else [])],
            env=child_env(CLAWTOWER_HOME=str(home), CLAWTOWER_OPERATOR="tester"),
            stdout=subprocess.PIPE, stderr=self.err, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.kill()
            raise AssertionError(f"the console did not start: {line!r} {self.stderr()}")

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read()[-2000:]

    def stop(self) -> int:
        """SIGTERM: the console quits as `q` would (its workers hand over)."""
        return stop(self.proc, "console", timeout=60)
