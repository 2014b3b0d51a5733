"""The environment of a child process we start (an MCP server, an ACP harness): `env`
holds literal values, `env_from` names variables of ours whose values the child gets under
its own names, so a config file never holds a secret. One set of checks for both."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from .errors import ValidationError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_env_names(v: dict[str, str]) -> dict[str, str]:
    """A pydantic validator's body for `env` / `env_from`: every key a variable name."""
    for key in v:
        if not ENV_NAME.match(key):
            raise ValueError(f"{key!r} is not an environment variable name")
    return v


def check_env_sources(v: dict[str, str]) -> dict[str, str]:
    """A pydantic validator's body for `env_from`: every value names one of our variables."""
    for key, source in v.items():
        if not ENV_NAME.match(source):
            raise ValueError(f"{key}: {source!r} is not an environment variable name")
    return v


def resolve(env: Mapping[str, str], env_from: Mapping[str, str], who: str) -> dict[str, str]:
    """`env` plus each `env_from` variable's value; a variable of ours that is not set, or
    set but empty, is a ValidationError naming `who` and the variable (never a value)."""
    out = dict(env)
    for child, ours in env_from.items():
        value = os.environ.get(ours)
        if value is None:
            raise ValidationError(f"{who}: env_from.{child}: the variable {ours} is not set")
        if not value.strip():  # env_from carries secrets: an empty one is a mistake
            raise ValidationError(f"{who}: env_from.{child}: the variable {ours} is set but"
                                  " empty")
        out[child] = value
    return out
