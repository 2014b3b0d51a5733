"""The HTTP face of `clawtower serve`: `POST /hooks/<expert>/<trigger>` and `GET /health`.

The ack path does the least that makes an event durable: authenticate (bearer token or
HMAC-SHA256 over the raw body), bound and parse the body, enrich (preset), key and dedupe,
and one append (batched with concurrent ones by the store's writer); the 202 is sent after
that commit. Processing happens later, in the trigger worker. Every refusal is a JSON
error (401, 404, 405, 409 for an inactive trigger, 413, 422, 429), never a 500, and enqueues
nothing.

A caller that has not authenticated learns nothing about the server: its refusals are fixed
messages with an `error_id`; the detail (which check failed, a broken hooks.yaml and its
path) goes to the log and to a `trigger.auth_failed` event under that id. Refused
credentials are rate-limited per address and trigger, counted in the store so every `serve`
process on it counts together (core/triggers/ratelimit.py).
A bearer sender makes its deliveries replay-safe with an `Idempotency-Key` header (or an
`idempotencyKey` body field): the key is the trigger's dedupe key (the trigger's own
`dedupe_key`, when it declares one, wins), checked in the append's transaction.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import ClawError, StorageFault, ValidationError
from ..events import NewEvent
from ..limits import check_text, parse_json, printable
from ..store.interface import Store, WriteTx
from ..tasks.permissions import Role
from . import events as tev
from . import hookauth
from .catalog import Catalog
from .intake import accept
from .queue import ACTOR, BadEvent
from .ratelimit import FailureLimiter, hook_scope

NAME_MAX = 128
IDEMPOTENCY_HEADER = "idempotency-key"
IDEMPOTENCY_FIELD = "idempotencyKey"
IDEMPOTENCY_MAX = 200
UNAUTHORIZED = "unauthorized"
log = logging.getLogger("clawtower.webhook")


#: what a 503 for a storage fault asks a sender to wait before trying again (seconds)
RETRY_AFTER_S = 5


def _error(status: int, message: str, error_id: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": printable(message, 300)}
    if error_id is not None:
        body["error_id"] = error_id
    return JSONResponse(body, status_code=status, headers=headers)


def new_error_id() -> str:
    return f"E-{secrets.token_hex(6)}"


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


def idempotency_key(headers: dict[str, str], payload: dict[str, Any]) -> str | None:
    """The sender's Idempotency-Key (header first, else the body's `idempotencyKey`)."""
    given: Any = headers.get(IDEMPOTENCY_HEADER)
    field = "Idempotency-Key header"
    if given is None:
        given, field = payload.get(IDEMPOTENCY_FIELD), f"body field {IDEMPOTENCY_FIELD}"
        if given is None:
            return None
        if not isinstance(given, str):
            raise ValidationError(f"{field}: must be a string")
    key = check_text(str(given).strip(), field, max_chars=IDEMPOTENCY_MAX, one_line=True)
    if not key:
        raise ValidationError(f"{field}: empty")
    return key


def build_app(store: Store, catalog: Catalog | None = None,
              clock: Callable[[], float] = time.time,
              limiter: FailureLimiter | None = None) -> Starlette:
    cat = catalog or Catalog()
    limits = limiter or FailureLimiter()
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
        queued = depth["n"] if depth else 0
        fault = store.fault
        if fault is not None:  # reads go on; writes wait for the storage (nothing is lost)
            return JSONResponse({"ok": False, "store": fault.describe(), "queued": queued},
                                status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})
        return JSONResponse({"ok": True, "queued": queued})

    def log_refusal(payload: tev.HookAuthFailed | tev.HookAuthThrottled) -> None:
        """The detail an unauthenticated caller was not told: in the log (and the events)."""
        log.warning("webhook %s/%s from %s refused [%s]: %s", payload.expert, payload.trigger,
                    payload.address, payload.error_id,
                    printable(getattr(payload, "reason", "throttled"), 500))

    async def refuse(expert: str, trigger: str, address: str, reason: str,
                     count: bool = True) -> JSONResponse:
        """401 with a fixed message; `count`: the refusal counts towards the 429. The refusal,
        its count in the shared window and the start of a throttle episode are one write."""
        eid = new_error_id()
        scope = hook_scope(expert, trigger)
        entity = f"hook:{expert}/{trigger}"
        failed = tev.HookAuthFailed(expert=expert, trigger=trigger, address=address,
                                    reason=printable(reason, 500), error_id=eid,
                                    counted=count, window_s=limits.window_s)
        log_refusal(failed)

        def write(tx: WriteTx) -> tev.HookAuthThrottled | None:
            tripped = limits.fail(tx, scope, address) if count else None
            tx.emit(NewEvent(entity_id=entity, actor=ACTOR, role=Role.SYSTEM.value,
                             payload=failed))
            if tripped is None:
                return None
            throttled = tev.HookAuthThrottled(  # "*": the trigger, from any address that failed
                expert=expert, trigger=trigger, address=address if tripped == "address"
                else "*", failures=limits.limit if tripped == "address"
                else limits.trigger_limit, window_s=limits.window_s,
                retry_after=float(limits.retry_after_tx(tx, scope, address) or 0),
                error_id=eid)
            tx.emit(NewEvent(entity_id=entity, actor=ACTOR, role=Role.SYSTEM.value,
                             payload=throttled))
            return throttled

        try:
            if (throttled := await store.execute(write, hold=False)) is not None:
                log_refusal(throttled)
        except ClawError as exc:  # the refusal stands; only its record (and count) is lost
            log.warning("webhook refusal %s not recorded: %s", eid, exc)
        return _error(401, UNAUTHORIZED, eid)

    async def hook(request: Request) -> JSONResponse:
        expert = str(request.path_params.get("expert", ""))
        trigger = str(request.path_params.get("trigger", ""))
        if len(expert) > NAME_MAX or len(trigger) > NAME_MAX:
            return _error(404, "not found")
        spec = cat.get(expert, trigger)
        if spec is None or spec.type != "webhook":
            return _error(404, "not found")
        address = request.client.host if request.client is not None else "unknown"
        try:  # the shared failure window: one read of the store, before any credential
            wait = await limits.retry_after(store, hook_scope(expert, trigger), address)
        except ClawError as exc:  # fail closed: nothing could be stored either
            eid = new_error_id()
            log.error("webhook %s/%s: failure window unreadable [%s]: %s", expert, trigger,
                      eid, exc)
            return _error(503, "not stored; nothing was queued", eid)
        if wait is not None:
            return _error(429, "too many failed attempts", headers={"Retry-After": str(wait)})
        try:
            auth = auth_for(expert, trigger)
        except ValidationError as exc:  # the operator's mistake: not counted against anyone
            return await refuse(expert, trigger, address,
                                f"webhook credentials unusable: {exc}", count=False)
        limit = auth.max_bytes if auth is not None else hookauth.DEFAULT_MAX_BYTES
        try:
            body = await _body(request, limit)
        except _TooLarge:
            return _error(413, "body too large")
        except ClientDisconnect:
            return _error(422, "the body ended early")
        headers = {k.lower(): v for k, v in request.headers.items()}
        why = hookauth.check(auth, headers, body, clock())
        if why is not None:
            return await refuse(expert, trigger, address, why)
        # authenticated from here on: refusals may say what is wrong with the request
        if spec.inactive:
            return _error(409, f"{expert}/{trigger} is inactive: {spec.inactive}")
        try:
            text = body.decode("utf-8")
            payload = parse_json(text, "body", want=dict, max_bytes=limit)
            idem_given = idempotency_key(headers, payload)
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
            out = await accept(store, spec, payload, "webhook", idem_key=idem,
                               idempotency=idem_given, hold=False)  # answer, never wait
        except BadEvent as exc:
            return _error(422, str(exc))
        except StorageFault as exc:  # the sender retries later; the engine goes on
            eid = new_error_id()
            log.error("webhook %s/%s not stored [%s]: %s", expert, trigger, eid, exc)
            return _error(503, f"not stored ({exc.cause}); nothing was queued", eid,
                          headers={"Retry-After": str(RETRY_AFTER_S)})
        except ClawError as exc:
            eid = new_error_id()
            log.error("webhook %s/%s not stored [%s]: %s", expert, trigger, eid, exc)
            return _error(503, "not stored; nothing was queued", eid)
        if out["status"] == "replayed":
            return await refuse(expert, trigger, address,
                                "replayed request (this signature was already accepted)")
        body_out: dict[str, Any] = {"id": out["id"], "status": out["status"]}
        if out.get("duplicate_of"):
            body_out["duplicate_of"] = out["duplicate_of"]
        return JSONResponse(body_out, status_code=202)

    async def not_found(request: Request, exc: Exception) -> JSONResponse:
        return _error(404, "not found")

    async def not_allowed(request: Request, exc: Exception) -> JSONResponse:
        return _error(405, "method not allowed")

    async def crashed(request: Request, exc: Exception) -> JSONResponse:
        eid = new_error_id()
        log.error("webhook request failed [%s]: %r", eid, exc)
        return _error(503, "internal error; nothing was stored", eid)

    return Starlette(routes=[
        Route("/health", health, methods=["GET"]),
        Route("/hooks/{expert}/{trigger}", hook, methods=["POST"]),
    ], exception_handlers={404: not_found, 405: not_allowed, Exception: crashed})
