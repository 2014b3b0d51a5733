"""The `telemetry:` part of clawtower.yaml: live export of traces to an OTLP/HTTP collector.

    telemetry:
      otlp_endpoint: http://127.0.0.1:6006/v1/traces   # none: no live export
      headers_env: OTLP_HEADERS     # the NAME of a variable holding k=v,k2=v2 (an API key)
      service_name: clawtower       # resource service.name (and Phoenix's project)
      capture_content: false        # prompts, replies, tool arguments: only when true

Kept free of the OpenTelemetry SDK: the config loader imports it on every command."""

from __future__ import annotations

import re
from typing import Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import ValidationError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class TelemetryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    otlp_endpoint: str | None = None
    headers_env: str | None = None
    service_name: str = Field(default="clawtower", min_length=1, max_length=200)
    capture_content: bool = False
    interval_s: float = Field(default=1.0, gt=0, le=3600)  # at most one export per interval
    timeout_s: float = Field(default=10.0, gt=0, le=600)  # per batch, retries included

    @field_validator("otlp_endpoint")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http(s) URL")
        return v

    @field_validator("headers_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not ENV_NAME.match(v):
            raise ValueError("must be the NAME of an environment variable")
        return v


def telemetry_config(raw: Any, path: str) -> TelemetryConfig:
    if raw is None:
        return TelemetryConfig()
    if not isinstance(raw, dict):
        raise ValidationError(f"{path}: field 'telemetry': must be a mapping")
    try:
        return TelemetryConfig.model_validate(raw)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ValidationError(f"{path}: field 'telemetry.{where}': {err['msg']}") from None
