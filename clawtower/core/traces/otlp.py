"""Sending traces to an OpenTelemetry collector over OTLP/HTTP (protobuf).

The one module of core/traces that touches the OpenTelemetry SDK (the optional extra
`otel`), and only inside its functions: our span records become the SDK's ReadableSpans
with our own ids and times, handed to its OTLP exporter. Open spans are never sent."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..errors import ClawError, ValidationError
from .spans import SEMCONV, Span, Trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

BATCH = 2048  # spans a request (~1-2 MB): 4x the SDK default, ~10% less time sending 37k
MISSING = ("traces export needs the OpenTelemetry SDK and its OTLP exporter: pip install"
           " 'clawtower[otel]'")


class ExportFailed(ClawError):
    """The collector did not take the spans (down, or it answered an error)."""


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of `endpoint`: a base URL gets `/v1/traces`."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValidationError(f"--endpoint {endpoint!r}: not an http(s) URL")
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


_PLAIN = (bool, int, float, str)


def _value(v: Any) -> Any:
    if type(v) in _PLAIN:
        return v
    if isinstance(v, list | tuple) and all(isinstance(x, str) for x in v):
        return list(v)
    return json.dumps(v, sort_keys=True, default=str)


def readable_spans(traces: Iterable[Trace], *, service_name: str = "clawtower",
                   version: str = "") -> list[ReadableSpan]:
    """Every closed span of `traces` as an SDK ReadableSpan (our ids, our times)."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
    except ImportError as exc:
        raise ValidationError(MISSING) from exc
    created = Resource.create({"service.name": service_name,
                               "openinference.project.name": service_name})

    class OneResource(Resource):
        """Every span's resource: the SDK's encoder groups spans by it, hashing it per span
        (a JSON dump of its attributes each time); this one hashes once."""

        _hash = hash(created)

        def __hash__(self) -> int:
            return self._hash

    resource = OneResource(created.attributes, created.schema_url)
    scope = InstrumentationScope("clawtower", version or None,
                                 schema_url=f"https://opentelemetry.io/schemas/{SEMCONV}")
    flags = TraceFlags(TraceFlags.SAMPLED)
    out: list[ReadableSpan] = []

    contexts: dict[tuple[str, str], SpanContext] = {}  # a parent's is shared, not remade

    def ctx(trace_id: str, span_id: str) -> SpanContext:
        c = contexts.get((trace_id, span_id))
        if c is None:
            c = contexts[trace_id, span_id] = SpanContext(
                int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=flags)
        return c

    def convert(t: Trace, s: Span) -> ReadableSpan:
        assert s.end is not None
        attrs = {k: _value(v) for k, v in s.attributes.items() if v is not None}
        attrs["clawtower.trace.root"] = t.root
        kind = SpanKind.CLIENT if attrs.get("gen_ai.operation.name") == "chat" \
            else SpanKind.INTERNAL
        status = Status(StatusCode.ERROR, s.error) if s.error else Status(StatusCode.OK)
        return ReadableSpan(
            name=s.name, context=ctx(s.trace_id, s.span_id),
            parent=ctx(s.trace_id, s.parent_id) if s.parent_id else None,
            resource=resource, attributes=attrs, kind=kind, status=status,
            start_time=int(s.start * 1e9), end_time=int(s.end * 1e9),
            instrumentation_scope=scope)

    for t in traces:
        out.extend(convert(t, s) for s in t.spans if not s.open)
    return out


def export(traces: Iterable[Trace], endpoint: str, *, headers: Mapping[str, str] | None = None,
           service_name: str = "clawtower", timeout_s: float = 10.0) -> int:
    """Send the closed spans of `traces` to `endpoint` (OTLP/HTTP protobuf), in batches;
    returns how many were sent. Blocking (run it in a thread). ExportFailed when the
    collector did not take a batch within `timeout_s` (retried with backoff)."""
    url = traces_url(endpoint)
    spans = readable_spans(traces, service_name=service_name)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult
    except ImportError as exc:
        raise ValidationError(MISSING) from exc
    exporter = OTLPSpanExporter(endpoint=url, headers=dict(headers or {}), timeout=timeout_s)
    # the exporter logs each retry as a multi-line warning; the caller says one line
    log = logging.getLogger("opentelemetry.exporter.otlp.proto.http")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        for i in range(0, len(spans), BATCH):
            deadline = time.monotonic() + timeout_s
            pause = 0.5
            # the exporter retries what it deems transient (unreachable, 429, 502-504);
            # any other refusal (a 500) is tried again here, with backoff, until the timeout
            while exporter.export(spans[i:i + BATCH]) is not SpanExportResult.SUCCESS:
                if time.monotonic() + pause > deadline:
                    raise ExportFailed(f"{url}: the collector did not take the spans (sent"
                                       f" {i} of {len(spans)})")
                time.sleep(pause)
                pause = min(pause * 2, 8.0)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
        log.setLevel(level)
    return len(spans)


def headers_from(text: str) -> dict[str, str]:
    """`k=v,k2=v2` (OTEL_EXPORTER_OTLP_HEADERS' form) as a dict."""
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise ValidationError(f"headers: {part.strip()!r} is not key=value")
        out[k.strip()] = v.strip()
    return out
