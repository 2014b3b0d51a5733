"""Child process of bench_triggers.py: serves webhooks until SIGTERM.

`floor`: a minimal starlette endpoint that does nothing but answer 202 (same uvicorn
settings). `ours`: the trigger runtime of `clawtower serve` (webhook, queue, worker) on a
store, with an executor that journals each invocation's start and end instead of running an
expert process (the queue, not the process, is what is measured; the benchmark checks the
journal for losses, duplicates and per-key order).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def floor() -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hook(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"id": "x", "status": "queued"}, status_code=202)

    app = Starlette(routes=[Route("/hooks/{expert}/{trigger}", hook, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    print("PORT", server.servers[0].sockets[0].getsockname()[1], flush=True)
    await task


async def ours(db: str, journal: str) -> None:
    from clawtower.core.store import open_store
    from clawtower.core.triggers.service import Runtime

    out = open(journal, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    async def executor(item: dict[str, Any], spec: Any, on_start: Any,
                       env: dict[str, str]) -> dict[str, Any]:
        out.write(json.dumps({"id": item["id"], "lane": item["lane"], "at": time.time(),
                              "ev": "start"}) + "\n")
        await asyncio.sleep(0.001)
        out.write(json.dumps({"id": item["id"], "at": time.time(), "ev": "end"}) + "\n")
        return {"ok": True, "status": "ok", "output": []}

    store = await open_store(db)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    rt = Runtime(store, port=0, executor=executor, capacity=64)
    ready = asyncio.Event()
    task = asyncio.create_task(rt.run(stop, ready))
    await ready.wait()
    print("PORT", rt.bound_port, flush=True)
    await task
    await store.close()
    out.close()


if __name__ == "__main__":
    if sys.argv[1] == "floor":
        asyncio.run(floor())
    else:
        asyncio.run(ours(sys.argv[2], sys.argv[3]))
