"""The real ACP agents installed by scripts/install-peers.sh (`acp`): Zed's example agent
(run by tsx), codex-acp and claude-agent-acp. Missing -> tests skip with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clawtower.core.acp.config import HarnessConfig

PEERS = Path(os.environ.get("CLAWTOWER_PEERS", str(Path.home() / ".cache/clawtower-peers")))
ACP = PEERS / "acp" / "node_modules"
TSX = ACP / ".bin" / "tsx"
ZED_AGENT = ACP / "@zed-industries/agent-client-protocol/typescript/examples/agent.ts"
CODEX = ACP / ".bin" / "codex-acp"
CLAUDE = ACP / ".bin" / "claude-agent-acp"
HINT = "run scripts/install-peers.sh acp"


def need(*paths: Path) -> None:
    for p in paths:
        if not p.exists():
            pytest.skip(f"ACP peer missing: {p} ({HINT})")


def zed_harness(**kw: object) -> HarnessConfig:
    need(TSX, ZED_AGENT)
    return HarnessConfig.model_validate({"name": "zed-example", "command": str(TSX),
                                         "args": [str(ZED_AGENT)], **kw})


def codex_harness(**kw: object) -> HarnessConfig:
    need(CODEX)
    return HarnessConfig.model_validate({"name": "codex", "command": str(CODEX), **kw})


def claude_harness(**kw: object) -> HarnessConfig:
    need(CLAUDE)
    return HarnessConfig.model_validate({"name": "claude", "command": str(CLAUDE), **kw})
