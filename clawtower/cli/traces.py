"""`clawtower trace ID`: a trace as a waterfall; `clawtower traces export`: OTLP/HTTP.

Both read the event log (core/traces), never write: a trace is derived from the log each
time, so it is complete after a crash and the same on every run."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from .common import with_store

if TYPE_CHECKING:
    from clawtower.core.store import Store
    from clawtower.core.traces import Trace
    from clawtower.core.traces.builder import Redact


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser("trace", help="show a trace as a waterfall (spans from the log)")
    t.add_argument("id", metavar="ID", help="a session, flow, workflow run, meeting, task or"
                   " trigger invocation id, or a trace id")
    t.add_argument("--json", action="store_true", help="the trace's spans as JSON")
    t.add_argument("--width", type=int, default=40, metavar="N", help="bar width (default 40)")
    t.add_argument("--content", action="store_true",
                   help="include prompts, replies and tool arguments (secrets redacted, sanitised)")
    _config_option(t)
    t.set_defaults(handler=cmd_trace)

    g = subparsers.add_parser("traces", help="export traces (OpenTelemetry, OTLP/HTTP)")
    sub = g.add_subparsers(dest="traces_command", required=True, metavar="COMMAND")
    e = sub.add_parser("export", help="send the traces in the store to an OTLP/HTTP endpoint")
    e.add_argument("ids", nargs="*", metavar="ID", help="only these traces (default: all)")
    e.add_argument("--endpoint", required=True, metavar="URL",
                   help="OTLP/HTTP endpoint (a base URL gets /v1/traces)")
    e.add_argument("--since", default="", metavar="SEQ|TIME",
                   help="only spans that ended after event SEQ, or at or after TIME"
                   " (ISO 8601, UTC unless it says)")
    e.add_argument("--service-name", default="clawtower", metavar="NAME",
                   help="resource service.name (and Phoenix project)")
    e.add_argument("--headers-env", metavar="VAR",
                   help="environment variable holding headers as k=v,k2=v2 (an API key)")
    e.add_argument("--content", action="store_true",
                   help="include prompts, replies and tool arguments (secrets redacted, sanitised)")
    _config_option(e)
    e.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the collector (default 10)")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    e.set_defaults(handler=cmd_export)


def _config_option(p: argparse.ArgumentParser) -> None:
    """`--config FILE`: whose secrets `--content` redacts (left unset when not given, so the
    top level's --config still counts)."""
    p.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE",
                   help="the project config whose secrets --content redacts")


def _redact(args: argparse.Namespace) -> Redact | None:
    if not args.content:
        return None
    from clawtower.core.agents.config import load_config
    from clawtower.core.traces.redact import config_redactor

    return config_redactor(load_config(getattr(args, "config", None)))


def _width(n: int) -> int:
    from clawtower.core.errors import ValidationError

    if not 10 <= n <= 400:
        raise ValidationError(f"--width {n}: give 10 to 400")
    return n


def _since(text: str) -> tuple[str, float] | None:
    """`--since`: ("seq", N) for a number, ("time", unix seconds) for an ISO 8601 time."""
    from datetime import UTC, datetime

    from clawtower.core.errors import ValidationError

    if not text:
        return None
    if text.isdigit():
        return "seq", int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"--since {text!r}: give an event seq or an ISO 8601 time"
                              " (2026-11-28T12:00:00Z)") from None
    return "time", (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


async def cmd_trace(args: argparse.Namespace) -> int:
    from clawtower.core.traces import find_trace
    from clawtower.core.traces.waterfall import render

    width = _width(args.width)
    redact = _redact(args)

    async def run(store: Store) -> int:
        trace = await find_trace(store, args.id, capture_content=args.content,
                                 redact=redact)
        if args.json:
            sys.stdout.write(json.dumps(trace.as_json(), sort_keys=True) + "\n")
        else:
            sys.stdout.write("\n".join(render(trace, width=width)) + "\n")
        return 0

    return await with_store(args, run, read_only=True)


async def cmd_export(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses

    from clawtower.core.errors import NotFound, ValidationError
    from clawtower.core.traces import load
    from clawtower.core.traces.otlp import export, headers_from, traces_url
    from clawtower.core.traces.read import matcher

    traces_url(args.endpoint)  # a bad URL is a usage error before the store is read
    since = _since(args.since)
    redact = _redact(args)
    headers: dict[str, str] = {}
    if args.headers_env:
        if args.headers_env not in os.environ:
            raise ValidationError(f"--headers-env {args.headers_env}: not set")
        headers = headers_from(os.environ[args.headers_env])

    async def run(store: Store) -> int:
        traces = await load(store, capture_content=args.content, redact=redact)
        if args.ids:
            chosen: list[Trace] = []
            for ident in args.ids:
                found = [t for t in traces if matcher(ident)(t)]
                if not found:
                    raise NotFound(f"trace {ident!r}: no such trace")
                chosen.extend(t for t in found if t not in chosen)
            traces = chosen
        if since is not None:
            kind, value = since
            traces = [dataclasses.replace(t, spans=tuple(
                s for s in t.spans if (s.last_seq > value if kind == "seq"
                                       else s.end is not None and s.end >= value)))
                      for t in traces]
        n = await asyncio.to_thread(export, traces, args.endpoint, headers=headers,
                                    service_name=args.service_name, timeout_s=args.timeout)
        held = sum(1 for t in traces for s in t.spans if s.open)
        if args.json:
            sys.stdout.write(json.dumps({"sent": n, "open": held, "traces": len(traces)})
                             + "\n")
        else:
            sys.stdout.write(f"sent {n} spans of {len(traces)} traces"
                             + (f" ({held} open spans held back)" if held else "") + "\n")
        return 0

    return await with_store(args, run, read_only=True)
