"""The real llama-cpp-python server with SmolLM2-135M-Instruct, started on a free port.

Installed by scripts/install-peers.sh into $CLAWTOWER_PEERS (default ~/.cache/clawtower-peers).
When it is missing, tests that need it skip with the reason (printed with -rs).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from procs import die_with_parent, stop_group

PEERS = Path(os.environ.get("CLAWTOWER_PEERS", Path.home() / ".cache" / "clawtower-peers"))
PYTHON = PEERS / "llama" / "bin" / "python"
MODEL = PEERS / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS = "smollm2"
# one thread: the suite runs on every core (xdist), and llama.cpp's threads wait for each
# other at every step, so two threads on a busy 2-core machine take ~1.8x as long as one
THREADS = os.environ.get("CLAWTOWER_LLAMA_THREADS", "1")


def missing_reason() -> str | None:
    if not PYTHON.exists():
        return (f"peer missing: no llama-cpp-python venv at {PEERS / 'llama'}"
                " (run scripts/install-peers.sh llama)")
    if not MODEL.exists() or MODEL.stat().st_size == 0:
        return f"peer missing: no model at {MODEL} (run scripts/install-peers.sh llama)"
    probe = subprocess.run([str(PYTHON), "-c", "import llama_cpp.server"], capture_output=True,
                           timeout=60, check=False)
    if probe.returncode != 0:
        return f"peer missing: llama_cpp.server does not import in {PYTHON}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(n_ctx: int = 4096, embedding: bool = False) -> Iterator[str]:
    """Yield the server's base URL (…/v1); skip the caller when the peer is missing.
    `n_ctx`: the context in tokens (SmolLM2-135M is trained to 8192; the KV cache grows
    with it, so tests keep the default unless their prompt needs more). `embedding`: serve
    `/embeddings` too, mean-pooled (SmolLM2's GGUF names no pooling, so without the override
    llama.cpp answers one vector per token)."""
    reason = missing_reason()
    if reason:
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    port = _free_port()
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in the finally below)
        prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "llama_cpp.server", "--model", str(MODEL), "--model_alias", ALIAS,
         "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port),
         "--n_ctx", str(n_ctx), "--n_threads", THREADS,
         *(["--embedding", "true", "--kv_overrides", "llama.pooling_type=int:1"]
           if embedding else [])],
        stdout=log, stderr=subprocess.STDOUT,
        # its own group, gone with the test process (tests/helpers/reaper.py covers the rest)
        start_new_session=True, preexec_fn=die_with_parent)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = Path(log.name).read_text(errors="replace")[-800:]
                pytest.fail(f"llama server exited with {proc.returncode}: {tail}")
            try:
                if httpx.get(f"{base}/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama server not ready within 60 s")
            time.sleep(0.1)
        yield base
    finally:
        stop_group(proc)
        log.close()
        os.unlink(log.name)
