"""The secret redaction captured content goes through (`capture_content`, `--content`): the
values of the variables the project config names for its secrets (each MCP server's
`env_from`, each provider's `api_key_env`) replaced by `[secret NAME]`, as the tool servers
redact what they print (core/tools/mcp.py). Content is sanitised for a terminal after this
(core/textsafe.py, in builder.py)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .builder import Redact

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

MIN_SECRET = 4  # shorter values would blank ordinary words


def redactor(secrets: Mapping[str, str]) -> Redact:
    """A Redact replacing each value of `secrets` (value -> the variable's name), longest
    first (a value inside another is not left half-replaced)."""
    pairs = sorted(((v, n) for v, n in secrets.items() if len(v) >= MIN_SECRET),
                   key=lambda p: -len(p[0]))

    def redact(_tool: str, text: str) -> str:
        for value, name in pairs:
            if value in text:
                text = text.replace(value, f"[secret {name}]")
        # the log clips long texts ("…"): a secret cut there leaves its start at the end
        body = text.removesuffix("…")
        if body != text:
            for value, name in pairs:
                for n in range(len(value) - 1, MIN_SECRET - 1, -1):
                    if body.endswith(value[:n]):
                        return body[:-n] + f"[secret {name}]…"
        return text
    return redact


def config_secrets(config: ClawtowerConfig,
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """value -> variable name, for every secret the config names that is set."""
    from ..tools.config import mcp_servers_from_data

    env = os.environ if environ is None else environ
    names: set[str] = set()
    for server in mcp_servers_from_data(config.mcp_servers, config.source).values():
        names.update(server.env_from.values())
    for provider in config.providers.values():
        if provider.api_key_env:
            names.add(provider.api_key_env)
    return {env[n]: n for n in sorted(names) if env.get(n)}


def config_redactor(config: ClawtowerConfig | None = None) -> Redact:
    """The redaction of the project config (default: the one `load_config` finds)."""
    if config is None:
        from ..agents.config import load_config

        config = load_config()
    return redactor(config_secrets(config))
