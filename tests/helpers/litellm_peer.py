"""The real LiteLLM proxy (1.100.0) on a free port, serving the Anthropic Messages API
(`POST /v1/messages`) and bridging it to the real llama-cpp-python server with SmolLM2.

Installed by scripts/install-peers.sh (`litellm`, and `llama` for the backend) into
$CLAWTOWER_PEERS (default ~/.cache/clawtower-peers). When either is missing, tests that need
it skip with the reason (printed with -rs). The proxy runs in its own process group, killed
at teardown; its config lives in a temp dir. No master key: the proxy needs none without a
database, so any x-api-key (or none) is accepted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from llama_peer import ALIAS, PEERS, _free_port, llama_server
from llama_peer import missing_reason as llama_missing
from procs import die_with_parent

VENV = PEERS / "litellm"
LITELLM = VENV / "bin" / "litellm"
MODEL = "claude-smol"  # the proxy's model name, routed to openai/<ALIAS> on the llama server
READY_S = 120  # ~7-10 s on a quiet machine; the bound is for a loaded one

CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{alias}
      api_base: {api_base}
      api_key: unused
litellm_settings:
  # 1.100.0 answers /v1/messages for openai/* models through the Responses API
  # (POST /v1/responses), which llama-cpp-python does not serve: use chat completions
  use_chat_completions_url_for_anthropic_messages: true
  telemetry: false
  num_retries: 0     # the client under test does its own retrying
router_settings:
  disable_cooldowns: true   # one failed call must not bench the only deployment
"""


def missing_reason() -> str | None:
    if not LITELLM.exists():
        return (f"peer missing: no LiteLLM proxy venv at {VENV}"
                " (run scripts/install-peers.sh litellm)")
    probe = subprocess.run([str(VENV / "bin" / "python"), "-c", "import litellm.proxy"],
                           capture_output=True, timeout=120, check=False)
    if probe.returncode != 0:
        return f"peer missing: litellm.proxy does not import in {VENV}"
    return llama_missing()


# A LiteLLM proxy callback (written next to the config at fixture time; it runs in the
# proxy's own venv, so it is text here, not a module of ours). Claude Code sends `system` and
# message content as lists of text blocks; LiteLLM 1.100.0 passes them on as OpenAI content
# parts, and llama-cpp-python's server accepts only a string for a system message (HTTP 500
# "Input should be a valid string"). Joining text-only lists into one string, before the
# Anthropic -> OpenAI translation, is what lets the request through.
FLATTEN_MODULE = """\
from litellm.integrations.custom_logger import CustomLogger


def _text(blocks):
    if isinstance(blocks, list) and all(
            isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        return "\\n\\n".join(b.get("text", "") for b in blocks)
    return blocks


class FlattenTextParts(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        if "system" in data:
            data["system"] = _text(data["system"])
        for m in data.get("messages") or []:
            if isinstance(m, dict) and "content" in m:
                m["content"] = _text(m["content"])
        return data


flatten = FlattenTextParts()
"""

CATCH_ALL = """\
  - model_name: "*"
    litellm_params:
      model: openai/{alias}
      api_base: {api_base}
      api_key: unused
"""


@contextlib.contextmanager
def litellm_proxy(catch_all: bool = False, flatten: bool = False,
                  n_ctx: int = 4096) -> Iterator[str]:
    """Start the llama server and the proxy in front of it; yield the proxy's base URL (no
    /v1, as Anthropic SDKs take it). Skip the caller when a peer is missing. `catch_all`:
    every model name is routed to SmolLM2 too (for harnesses that pick their own model).
    `flatten`: text-only content lists become strings (FLATTEN_MODULE). `n_ctx`: the llama
    server's context."""
    reason = missing_reason()
    if reason:
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    with llama_server(n_ctx) as llama_base, tempfile.TemporaryDirectory(prefix="litellm-") as tmp:
        config = Path(tmp) / "config.yaml"
        text = CONFIG.format(model=MODEL, alias=ALIAS, api_base=llama_base)
        if catch_all:
            text = text.replace("litellm_settings:", CATCH_ALL.format(
                alias=ALIAS, api_base=llama_base) + "litellm_settings:", 1)
        if flatten:
            (Path(tmp) / "clawtower_flatten.py").write_text(FLATTEN_MODULE)
            text = text.replace("litellm_settings:\n", "litellm_settings:\n"
                                "  callbacks: clawtower_flatten.flatten\n", 1)
        config.write_text(text)
        log_path = Path(tmp) / "proxy.log"
        port = _free_port()
        env = dict(os.environ)
        env.update(LITELLM_LOCAL_MODEL_COST_MAP="True",  # no fetch of the price list (offline)
                   NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [str(LITELLM), "--config", str(config), "--host", "127.0.0.1",
                 "--port", str(port), "--num_workers", "1"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                start_new_session=True, preexec_fn=die_with_parent)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + READY_S
            while True:
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-800:]
                    pytest.fail(f"LiteLLM proxy exited with {proc.returncode}: {tail}")
                try:
                    if httpx.get(f"{base}/health/liveliness", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"LiteLLM proxy not ready within {READY_S} s")
                time.sleep(0.2)
            yield base
        finally:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    # workers that outlived the parent still belong to the group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
