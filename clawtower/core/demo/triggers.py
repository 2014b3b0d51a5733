"""The experts and triggers part of `clawtower demo` (modes 6, 8 and 2): install the example
expert `examples/experts/incident-desk` into the demo's home, bind its `statuspage` tool to
the example MCP server, give its webhook a token, and fire the webhook once through the
webhook endpoint `clawtower serve` runs (in process, over ASGI: authentication, body
parsing and the one durable append), then run the engine's trigger worker until the
invocation's run waits at its confirm gate, in Approvals.

Nothing here is faked: the run is the expert's compiled process, driven as any trigger
invocation is; after an approval an engine (the console's, `serve`) resumes it and the
notice is posted to the example status page.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from .. import config
from ..assets import asset
from ..errors import ValidationError
from ..experts import home
from ..experts.bindings import write_binding
from ..store.interface import Store
from ..triggers import hookauth
from ..triggers.background import TriggerWorkers
from ..triggers.catalog import Catalog
from ..triggers.worker import expert_executor
from ..workers import build_engine

EXPERT = "incident-desk"
WEBHOOK = "alert_fired"
ALERT: dict[str, Any] = {"alert": {
    "id": "alert-2041", "service": "invoices-api",
    "summary": "Invoice PDFs fail to render for some customers (error rate 12%)"}}


def examples_dir() -> Path:
    return asset("examples", "experts")


def _ours(source: Path) -> bool:
    """Whether the installed `incident-desk` came from `source` (the demo's own copy)."""
    try:
        recorded = json.loads((config.home() / "expert-config" / EXPERT /
                               "source.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded.get("source") == str(source.resolve())


def install(source: Path | None = None) -> str | None:
    """Install (or refresh) the example expert and bind its tool; None when done, else why
    it was left alone (an expert of that name installed from elsewhere is never touched)."""
    src = (source or examples_dir() / EXPERT).resolve()
    if not (src / "expert.yaml").is_file():  # an installed wheel has no examples/
        return f"no example package at {src}"
    if (home.experts_dir() / EXPERT / "expert.yaml").is_file():
        if not _ours(src):
            return (f"an expert named {EXPERT!r} is already installed from elsewhere; the demo"
                    " leaves it alone")
        home.remove(EXPERT)  # the demo's own earlier copy: state and bindings are kept
    home.install(str(src))
    server = examples_dir() / "statuspage_server.py"
    write_binding(EXPERT, "statuspage", {
        "type": "mcp", "command": sys.executable,
        "args": [str(server), "--data", str(config.home() / "statuspage.json")]})
    return None


async def fire_webhook(store: Store, payload: dict[str, Any] | None = None) -> str:
    """POST the alert to `/hooks/incident-desk/alert_fired` as a monitoring system would
    (a Bearer token written with the trigger's credentials); returns the invocation id."""
    import httpx

    from ..triggers.webhook import build_app

    token = hookauth.write(EXPERT, WEBHOOK, token=hookauth.RANDOM).token
    app = build_app(store, Catalog())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://demo") as client:
        r = await client.post(f"/hooks/{EXPERT}/{WEBHOOK}", json=payload or ALERT,
                              headers={"Authorization": f"Bearer {token}"})
    if r.status_code != 202:
        raise ValidationError(f"demo: the {EXPERT} webhook answered {r.status_code}: {r.text}")
    return str(r.json()["id"])


async def run_until_gate(store: Store, item_id: str, *, by: str,
                         timeout_s: float = 60.0) -> str:
    """Run the engine's trigger worker until nothing can move without a human (invocation
    `item_id`'s run waits at the confirm gate: `paused`); returns its status. Runs are
    started as `by`."""
    engine = build_engine(store, None, workers=["triggers"],
                          trigger_executor=expert_executor(store, by=by, actor=by))
    idle = await engine.run_until_idle(timeout_s)
    row = await store.fetchone("SELECT status FROM trigger_items WHERE id=?", (item_id,))
    worker = engine.get("triggers")
    errors = [*engine.errors, *(worker.errors if isinstance(worker, TriggerWorkers) else [])]
    if errors:
        raise ValidationError(f"demo: the {EXPERT} run: {errors[-1]}")
    status = str(row["status"]) if row else "missing"
    if not idle:
        raise ValidationError(f"demo: the {EXPERT} run did not reach its gate in"
                              f" {timeout_s:g} s (invocation {item_id} is {status})")
    return status


async def seed_expert(store: Store, *, by: str) -> dict[str, Any]:
    """Install the example expert and fire its webhook once, up to its confirm gate.
    Returns {"skipped": why} or {"item": id, "status": ...}."""
    why = await asyncio.to_thread(install)
    if why is not None:
        return {"skipped": why}
    item = await fire_webhook(store)
    return {"item": item, "status": await run_until_gate(store, item, by=by)}
