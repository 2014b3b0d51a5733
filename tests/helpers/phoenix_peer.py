"""A real Arize Phoenix server (`phoenix serve`) on a free port, with its data in a folder of
the test: its OTLP/HTTP receiver is `{base}/v1/traces`, its REST API reads the spans back.

Installed by scripts/install-peers.sh phoenix into $CLAWTOWER_PEERS (its own venv, never a
dependency of ours). When it is missing, the test skips with the reason."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_peer import _free_port as free_port
from procs import die_with_parent, stop_group

PEERS = Path(os.environ.get("CLAWTOWER_PEERS", Path.home() / ".cache" / "clawtower-peers"))
PHOENIX = PEERS / "phoenix" / "bin" / "phoenix"
START_S = 120  # ~20 s on a quiet 2-core machine; more beside a running suite


@contextlib.contextmanager
def phoenix_server(workdir: Path, port: int | None = None) -> Iterator[str]:
    """Yield the server's base URL; skip the caller when the peer is missing. `port`: the
    same as a server before it (with the same `workdir`: the same data) to restart it."""
    if not PHOENIX.exists():
        reason = f"peer missing: no Phoenix at {PHOENIX} (run scripts/install-peers.sh phoenix)"
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    port = port or free_port()
    grpc = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / "phoenix.log", "wb")  # noqa: SIM115 (closed in the finally below)
    env = {**os.environ, "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(grpc),
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_WORKING_DIR": str(workdir),
           "PHOENIX_TELEMETRY_ENABLED": "false"}
    proc = subprocess.Popen([str(PHOENIX), "serve"], stdout=log, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True, preexec_fn=die_with_parent)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if proc.poll() is not None:
                tail = (workdir / "phoenix.log").read_text(errors="replace")[-1500:]
                pytest.fail(f"phoenix exited with {proc.returncode}: {tail}")
            try:
                if httpx.get(f"{base}/v1/projects", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"phoenix not ready within {START_S} s")
            time.sleep(0.5)
        yield base
    finally:
        stop_group(proc)
        log.close()


def spans_of(base: str, project: str, expect: int,
             timeout_s: float = 30) -> list[dict[str, Any]]:
    """Every span of `project`, once `expect` of them are readable (Phoenix ingests in the
    background)."""
    deadline = time.monotonic() + timeout_s
    while True:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, str | int] = {"limit": 1000}
            if cursor:
                params["cursor"] = cursor
            r = httpx.get(f"{base}/v1/projects/{project}/spans", params=params, timeout=10)
            if r.status_code == 404:
                break
            r.raise_for_status()
            body = r.json()
            out.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                break
        if len(out) >= expect or time.monotonic() > deadline:
            return out
        time.sleep(0.5)
