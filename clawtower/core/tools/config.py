"""MCP servers as `clawtower.yaml` declares them (the `mcp_servers:` key; other keys are
someone else's and are left alone).

    mcp_servers:
      time:
        command: ~/.cache/clawtower-peers/mcp/bin/mcp-server-time
      git:
        command: mcp-server-git
        args: [--repository, /srv/repo]
        env: {GIT_PAGER: cat}            # literal values: never secrets
        env_from: {GITHUB_TOKEN: MY_GH}  # child variable <- the NAME of one of ours
        cwd: /srv/repo
        connect_timeout_s: 30
        call_timeout_s: 60
        pin: manual                      # manual (default) | auto: pin on first sight
                                         # (a later change still needs an approval)

The child gets only HOME LOGNAME PATH SHELL TERM USER (the SDK's default) plus `env` and
`env_from`: credentials are passed by naming the variable that holds them, so the file
never contains a secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import childenv
from ..config import config_path
from ..errors import ValidationError
from ..safe_yaml import load_file

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Namespaces of the built-in tools: a server may not take them.
RESERVED = frozenset({"clock", "json", "text"})


class McpServerConfig(BaseModel):
    """One stdio MCP server. Its tools are named `<server>.<tool>`."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    connect_timeout_s: float = Field(default=30.0, gt=0, le=600)
    list_timeout_s: float = Field(default=30.0, gt=0, le=600)
    call_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    pin: Literal["manual", "auto"] = "manual"
    enabled: bool = True

    @field_validator("env_from", mode="before")
    @classmethod
    def _env_from_list(cls, v: Any) -> Any:
        # `env_from: [A, B]` passes our A and B under the same names
        if isinstance(v, list):
            return {str(x): str(x) for x in v}
        return v

    _env_names = field_validator("env", "env_from")(childenv.check_env_names)
    _env_sources = field_validator("env_from")(childenv.check_env_sources)

    def resolved_env(self) -> dict[str, str]:
        """The child's extra variables. A missing `env_from` variable is an error naming the
        server and the variable (never its value)."""
        return childenv.resolve(self.env, self.env_from, f"mcp server {self.name!r}")

    def resolved_command(self) -> str:
        return os.path.expanduser(self.command)

    def resolved_cwd(self) -> str | None:
        return os.path.expanduser(self.cwd) if self.cwd else None


def mcp_servers_from_data(raw: Any, path: str | Path) -> dict[str, McpServerConfig]:
    """Parse the value of the `mcp_servers:` key (None = no servers). Errors name the file
    and the field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{path}: field 'mcp_servers': must be a mapping of name -> server")
    out: dict[str, McpServerConfig] = {}
    for name, body in raw.items():
        name = str(name)
        if not SERVER_NAME.match(name):
            raise ValidationError(
                f"{path}: field 'mcp_servers.{name}': a server name is letters, digits, _ and -")
        if name in RESERVED:
            raise ValidationError(
                f"{path}: field 'mcp_servers.{name}': the name is reserved for built-in tools")
        if not isinstance(body, dict):
            raise ValidationError(f"{path}: field 'mcp_servers.{name}': must be a mapping")
        try:
            cfg = McpServerConfig.model_validate({**body, "name": name})
        except pydantic.ValidationError as exc:
            from ..reader import schema_problem

            loc, msg = schema_problem(exc, McpServerConfig)
            raise ValidationError(
                f"{path}: field 'mcp_servers.{name}{'.' + loc if loc else ''}': {msg}"
            ) from None
        if cfg.enabled:
            out[name] = cfg
    return out


def load_mcp_servers(path: str | Path | None = None) -> dict[str, McpServerConfig]:
    """The MCP servers of the project config (core.config.config_path: --config, else
    $CLAWTOWER_CONFIG, else $CLAWTOWER_HOME/clawtower.yaml; a missing default file means no
    servers). Only the `mcp_servers:` key is read; the others are someone else's."""
    p, asked = config_path(path)
    if not p.exists():
        if asked:
            raise ValidationError(f"{p}: no such config file")
        return {}
    data = load_file(p)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: must be a mapping")
    return mcp_servers_from_data(data.get("mcp_servers"), p)
