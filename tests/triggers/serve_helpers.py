"""Run `clawtower serve` as a child process and talk to it over real HTTP."""

from __future__ import annotations

import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.procs import child_env, stop

CLAWTOWER = Path(sys.executable).with_name("clawtower")

URL_RE = re.compile(r"webhooks on http://127\.0\.0\.1:(\d+)/")


class Served:
    def __init__(self, home: Path, db: Path, extra: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [str(CLAWTOWER), "serve", "--db", str(db), "--port", "0", *(extra or [])],
            env=child_env(CLAWTOWER_HOME=str(home), CLAWTOWER_OPERATOR="tester"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        deadline = time.monotonic() + 60
        self.port = 0
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise AssertionError(f"serve exited: {''.join(self.err)}") from None
                continue
            m = URL_RE.search(line)
            if m:
                self.port = int(m.group(1))
                break
        assert self.port, "serve did not report its webhook port"
        self.url = f"http://127.0.0.1:{self.port}"

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)

    def stop(self) -> int:
        return stop(self.proc, "serve", timeout=30)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def wait_rows(db: Path, sql: str, want: Callable[[list[dict[str, Any]]], bool],
              timeout: float = 120.0, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    got: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        if db.exists():
            try:
                got = rows(db, sql, params)
            except sqlite3.OperationalError:
                got = []
            if want(got):
                return got
        time.sleep(0.2)
    raise AssertionError(f"timed out: {sql} -> {got[:5]}")
