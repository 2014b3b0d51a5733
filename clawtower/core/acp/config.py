"""ACP harnesses as `clawtower.yaml` declares them (the `acp_agents:` key; other keys are
someone else's and are left alone), or inline in an agent spec (`defaults.acp`).

    acp_agents:
      zed-example:
        command: ~/.cache/clawtower-peers/acp/node_modules/.bin/tsx
        args: [<...>/@zed-industries/agent-client-protocol/typescript/examples/agent.ts]
      claude:
        command: claude-agent-acp
        env: {ANTHROPIC_BASE_URL: http://127.0.0.1:4000}
        env_from: {ANTHROPIC_API_KEY: MY_KEY}   # child variable <- the NAME of one of ours
        cwd: /srv/repo                          # the workspace (default: the current dir)
        permission_timeout_s: 600               # unanswered -> `cancelled`
        turn_timeout_s: 1800                    # a hung harness ends the turn
      oc-main:                                  # an OpenClaw Gateway agent (core/acp/openclaw.py)
        openclaw: {url: ws://127.0.0.1:18789, token_file: ~/.openclaw/gateway.token, agent: main}

Like MCP servers, a harness gets only a trimmed environment (HOME LOGNAME PATH SHELL TERM
USER) plus `env` and `env_from`, so the file never holds a secret.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .. import childenv
from ..config import config_path
from ..errors import ValidationError
from ..safe_yaml import load_file
from .openclaw import QUIET_ENV, OpenClawTarget

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
OPENCLAW_INHERITED = ("OPENCLAW_HOME", "OPENCLAW_STATE_DIR", "OPENCLAW_CONFIG_PATH")


class HarnessConfig(BaseModel):
    """One ACP agent, started over stdio."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    command: str = ""  # required unless `openclaw:` says which Gateway agent to run
    openclaw: OpenClawTarget | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    env_from: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    init_timeout_s: float = Field(default=60.0, gt=0, le=600)
    permission_timeout_s: float = Field(default=600.0, gt=0, le=86400)
    turn_timeout_s: float = Field(default=1800.0, gt=0, le=86400)

    _env_names = field_validator("env", "env_from")(childenv.check_env_names)
    _env_sources = field_validator("env_from")(childenv.check_env_sources)

    @model_validator(mode="after")
    def _command_or_openclaw(self) -> HarnessConfig:
        if self.openclaw is None and not self.command:
            raise ValueError("give `command` (the harness to start) or `openclaw:` (a Gateway"
                             " agent: url, token_file, agent)")
        if self.openclaw is not None and self.command:
            raise ValueError("`command` and `openclaw:` exclude each other (the openclaw"
                             " binary is `openclaw.command`)")
        return self

    def argv(self) -> list[str]:
        extra = [os.path.expanduser(a) for a in self.args]
        if self.openclaw is not None:
            return [*self.openclaw.argv(), *extra]
        return [os.path.expanduser(self.command), *extra]

    def child_env(self) -> dict[str, str]:
        """The harness's environment. A missing `env_from` variable is an error naming the
        harness and the variable (never a value)."""
        out = {k: os.environ[k] for k in INHERITED if k in os.environ}
        if self.openclaw is not None:  # which OpenClaw install (not secrets), and quiet
            out.update({k: os.environ[k] for k in OPENCLAW_INHERITED if k in os.environ})
            out.update(QUIET_ENV)
        out.update(childenv.resolve(self.env, self.env_from, f"acp agent {self.name!r}"))
        return out

    def workspace(self, cwd: str | None = None) -> str:
        """The directory the harness works in (and is confined to): `cwd`, else the
        harness's `cwd`, else the current directory; absolute, symlinks resolved."""
        raw = cwd or (os.path.expanduser(self.cwd) if self.cwd else None) or os.getcwd()
        return str(Path(raw).resolve())


def harness_from_data(body: Any, name: str, where: str) -> HarnessConfig:
    if not isinstance(body, dict):
        raise ValidationError(f"{where}: must be a mapping (command, args, env, cwd, ...)")
    try:
        return HarnessConfig.model_validate({**body, "name": name})
    except pydantic.ValidationError as exc:
        from ..reader import schema_problem

        loc, msg = schema_problem(exc, HarnessConfig)
        if loc and where.endswith("'"):  # inside the quoted field path: 'acp_agents.x.loc'
            where = f"{where[:-1]}.{loc}'"
        elif loc:
            where = f"{where}.{loc}"
        raise ValidationError(f"{where}: {msg}") from None


def harnesses_from_data(raw: Any, path: str | Path) -> dict[str, HarnessConfig]:
    """Parse the value of the `acp_agents:` key (None = none). Errors name file and field."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValidationError(f"{path}: field 'acp_agents': must be a mapping of name -> agent")
    out: dict[str, HarnessConfig] = {}
    for name, body in raw.items():
        name = str(name)
        if not NAME.match(name):
            raise ValidationError(f"{path}: field 'acp_agents.{name}': a name is letters,"
                                  " digits, '.', '_' and '-'")
        out[name] = harness_from_data(body, name, f"{path}: field 'acp_agents.{name}'")
    return out


def load_harnesses(path: str | Path | None = None) -> dict[str, HarnessConfig]:
    """The harnesses of the project config (--config, $CLAWTOWER_CONFIG, else
    $CLAWTOWER_HOME/clawtower.yaml; a missing default file means none)."""
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
    return harnesses_from_data(data.get("acp_agents"), p)


def harness(name: str, path: str | Path | None = None) -> HarnessConfig:
    found = load_harnesses(path)
    if name not in found:
        known = ", ".join(sorted(found)) or "none configured (see `acp_agents:` in clawtower.yaml)"
        raise ValidationError(f"acp agent {name!r}: no such agent (known: {known})")
    return found[name]


__all__ = ["HarnessConfig", "harness", "harness_from_data", "harnesses_from_data",
           "load_harnesses"]
