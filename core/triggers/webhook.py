"""The HTTP face of `clawtower serve`: `POST /hooks/<expert>/<trigger>` and `GET /health`.

The ack path does the least that makes an event durable: authenticate (bearer token or
HMAC-SHA256 over the raw body), bound and parse the body, enrich (preset), key and dedupe,
and one append (batched with concurrent ones by the store's writer); the 202 is sent after
that commit. Processing happens later, in the trigger worker. Every refusal is a JSON
error (401, 404, 405, 409 for an inactive trigger, 413, 422), never a 500, and enqueues nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import ClawError, ValidationError
from ..limits import parse_json, printable
from ..store.interface import Store
from . import hookauth
from .catalog import Catalog
from .intake import accept
from .queue import BadEvent

NAME_MAX = 128


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": printable(message, 300)}, status_code=status)


class _TooLarge(Exception):
    pass


async def _body(request: Request, limit: int) -> bytes:
    """The raw body, refused once it passes `limit` bytes (whatever Content-Length says)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def build_app(store: Store, catalog: Catalog | None = None,
              clock: Callable[[], float] = time.time) -> Starlette:
    cat = catalog or Catalog()
    auth_cache: dict[str, tuple[float, dict[str, hookauth.HookAuth]]] = {}

    def auth_for(expert: str, trigger: str) -> hookauth.HookAuth | None:
        """The trigger's credentials, re-read when hooks.yaml changes (one stat a request)."""
        try:
            mtime = float(hookauth.hooks_file(expert).stat().st_mtime_ns)
        except OSError:
            mtime = -1.0
        hit = auth_cache.get(expert)
        if hit is None or hit[0] != mtime:
            hit = (mtime, hookauth.load(expert) if mtime >= 0 else {})
            auth_cache[expert] = hit
        return hit[1].get(trigger)

    async def health(request: Request) -> JSONResponse:
        depth = await store.fetchone(
            "SELECT count(*) AS n FROM trigger_items WHERE status IN ('queued', 'retry',"
            " 'running', 'paused')")
        return JSONResponse({"ok": True, "store": store.path,
                             "queued": depth["n"] if depth else 0})

    async def hook(request: Request) -> JSONResponse:
        expert = str(request.path_params.get("expert", ""))
        trigger = str(request.path_params.get("trigger", ""))
        if len(expert) > NAME_MAX or len(trigger) > NAME_MAX:
            return _error(404, "no such trigger")
        spec = cat.get(expert, trigger)
        if spec is None or spec.type != "webhook":
            return _error(404, f"no webhook trigger {expert}/{trigger}")
        if spec.inactive:
            return _error(409, f"{expert}/{trigger} is inactive: {spec.inactive}")
        try:
            auth = auth_for(expert, trigger)
        except ValidationError as exc:
            return _error(401, f"webhook credentials unusable: {exc}")
        limit = auth.max_bytes if auth is not None else hookauth.DEFAULT_MAX_BYTES
        try:
            body = await _body(request, limit)
        except _TooLarge:
            return _error(413, f"body larger than {limit} bytes")
        except ClientDisconnect:
            return _error(422, "the body ended early")
        headers = {k.lower(): v for k, v in request.headers.items()}
        why = hookauth.check(auth, headers, body, clock())
        if why is not None:
            return _error(401, why)
        try:
            text = body.decode("utf-8")
            payload = parse_json(text, "body", want=dict, max_bytes=limit)
        except UnicodeDecodeError as exc:
            return _error(422, f"body: not UTF-8 (byte {exc.start})")
        except ValidationError as exc:
            return _error(422, str(exc))
        idem = None
        sig = headers.get(hookauth.SIGNATURE_HEADER)
        if sig and auth is not None and auth.secret is not None and not headers.get(
                "authorization"):
            idem = f"hook-sig:{expert}/{trigger}:{sig.strip()[:200]}"
        try:
            out = await accept(store, spec, payload, "webhook", idem_key=idem)
        except BadEvent as exc:
            return _error(422, str(exc))
        except ClawError as exc:
            return _error(503, f"not stored: {exc}")
        if out["status"] == "replayed":
            return _error(401, "replayed request (this signature was already accepted)")
        body_out: dict[str, Any] = {"id": out["id"], "status": out["status"]}
        if out.get("duplicate_of"):
            body_out["duplicate_of"] = out["duplicate_of"]
        return JSONResponse(body_out, status_code=202)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, "not found")

    async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return _error(405, "method not allowed")

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        return _error(503, "internal error; nothing was stored")

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/hooks/{expert}/{trigger}", hook, methods=["POST"]),
    ], exception_handlers={404: not_found, 405: not_allowed, Exception: crashed})
