"""An OpenClaw Gateway agent as an ACP harness: `openclaw acp` is OpenClaw's own ACP server
on stdio, forwarding each prompt to a running Gateway's session `agent:<id>:<session>`.

    acp_agents:
      oc-main:
        openclaw: {url: ws://127.0.0.1:18789, token_file: ~/.openclaw/gateway.token,
                   agent: main}          # session: main (default), command: openclaw
        cwd: ~/.openclaw/workspace

expands to `openclaw acp --url URL --token-file F --session agent:main:main`. Its text, tool
calls and exec approvals (`session/request_permission`) arrive as for any harness. What
OpenClaw reports only on its stderr or its Gateway log is turned into one-line reasons here:
a Gateway that is down or refuses the token, a token file that is missing, and a turn that
ends `end_turn` with nothing said (the Gateway's model run failed: its bridge does not say so).
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# keep the ACP stream clean (OpenClaw's docs for `openclaw acp` under other clients), and no
# start-up respawn: the CLI re-executes itself (to add system CA certificates) as a child in
# a session of its own, which outlives the killed process group and keeps our pipes open
# (one orphan `openclaw-acp` per turn). A Gateway behind a private CA: set
# NODE_EXTRA_CA_CERTS in the harness's `env:`.
QUIET_ENV = {"OPENCLAW_HIDE_BANNER": "1", "OPENCLAW_SUPPRESS_NOTES": "1",
             "OPENCLAW_NO_RESPAWN": "1"}


def _blank(path: str) -> bool:
    """Whether a credentials file holds nothing but whitespace (an unreadable one is left
    to the harness, whose error names it)."""
    try:
        with open(path, "rb") as f:
            return not f.read(4097).strip()
    except OSError:
        return False


class OpenClawTarget(BaseModel):
    """Which Gateway, with which credentials, and which of its agents' sessions."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    token_file: str | None = None
    password_file: str | None = None
    agent: str = "main"
    session: str = "main"
    command: str = Field(default="openclaw", min_length=1)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("ws://", "wss://")):
            raise ValueError("the Gateway's WebSocket URL: ws://HOST:PORT or wss://...")
        return v

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        if not AGENT_ID.match(v):
            raise ValueError("an OpenClaw agent id: letters, digits, '_' and '-'")
        return v

    @field_validator("session")
    @classmethod
    def _session(cls, v: str) -> str:
        if not SESSION.match(v):
            raise ValueError("a session key's tail: letters, digits, '_', '.', ':', '-'")
        return v

    @property
    def session_key(self) -> str:
        return f"agent:{self.agent}:{self.session}"

    def argv(self) -> list[str]:
        out = [os.path.expanduser(self.command), "acp", "--url", self.url]
        if self.token_file:
            out += ["--token-file", os.path.expanduser(self.token_file)]
        if self.password_file:
            out += ["--password-file", os.path.expanduser(self.password_file)]
        return [*out, "--session", self.session_key]

    def who(self, harness: str) -> str:
        return f"acp agent {harness!r} (OpenClaw agent {self.agent!r} at {self.url})"

    def preflight(self, harness: str) -> str:
        """Why the turn cannot start (a credentials file that is not there), else ''."""
        for field, value in (("token_file", self.token_file),
                             ("password_file", self.password_file)):
            if value and not os.path.isfile(os.path.expanduser(value)):
                return (f"{self.who(harness)}: openclaw.{field}"
                        f" {value} does not exist (write the Gateway's gateway.auth token"
                        " there: `openclaw gateway auth-token --show` on the Gateway host)")
            if value and _blank(os.path.expanduser(value)):
                return (f"{self.who(harness)}: openclaw.{field} {value} is empty (write the"
                        " Gateway's gateway.auth token there: `openclaw gateway auth-token"
                        " --show` on the Gateway host)")
        return ""

    def explain(self, harness: str, reason: str) -> str:
        """A harness fault as a one-line reason naming the harness and what to run."""
        who = self.who(harness)
        low = reason.lower()
        if "unauthorized" in low or "token mismatch" in low or "password mismatch" in low:
            return (f"{who}: the Gateway refused the credentials in "
                    f"{self.token_file or self.password_file or '(none given)'}; put its"
                    " gateway.auth token there (`openclaw gateway auth-token --show`);"
                    " detail: " + _tail(reason))
        if "econnrefused" in low or "connect failed" in low:
            return (f"{who}: the Gateway is not running (connection refused); start it with"
                    " `openclaw gateway run` (then retry); detail: " + _tail(reason))
        if "gateway disconnected" in low:
            return (f"{who}: the Gateway went away mid-turn, so the turn's outcome is unknown;"
                    " check the session on the Gateway before retrying (is it running?"
                    " `openclaw gateway status`); detail: " + _tail(reason))
        if "admission closed" in low or "http 503" in low or "draining" in low:
            return (f"{who}: the Gateway is shutting down or restarting (it refuses new"
                    " connections); retry once `openclaw gateway status` says it runs; detail: "
                    + _tail(reason))
        if "cannot start" in low:
            return (f"{who}: {reason}; install OpenClaw (`npm install -g openclaw`) or set"
                    " openclaw.command to its path")
        return f"{who}: {reason}"

    def silent_turn(self, harness: str) -> str:
        return (f"{self.who(harness)}: the turn ended with no text and no tool call: the"
                " Gateway's model run failed"
                " (its ACP bridge does not say why); see `openclaw logs` on the Gateway host")


def _tail(reason: str, limit: int = 300) -> str:
    one = " ".join(reason.split())
    return one if len(one) <= limit else "…" + one[-limit:]


__all__ = ["QUIET_ENV", "OpenClawTarget"]
