"""Draw screenshots/phoenix-flow.png: the demo's finished flow (F-1, the Q3 briefing) as
Arize Phoenix shows it after `clawtower traces export`.

    .venv/bin/python scripts/phoenix_screenshot.py [--out screenshots/phoenix-flow.png]

Seeds a temporary store with the demo's flows (core/demo/flows.py), starts the Phoenix peer
(scripts/install-peers.sh phoenix) on loopback with its data in the same folder, exports
every trace through the OTLP/HTTP exporter the CLI uses, waits until Phoenix has ingested
the flow's spans, opens the flow's trace in Debian's Chromium (Playwright) and saves the
page. Needs the `otel` and `test` extras and the phoenix and chromium peers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from chromium import ARGS, CHROMIUM  # noqa: E402
from phoenix_peer import phoenix_server, spans_of  # noqa: E402

from clawtower.core.demo.flows import seed_flows  # noqa: E402
from clawtower.core.store import open_store  # noqa: E402
from clawtower.core.traces import load  # noqa: E402
from clawtower.core.traces.otlp import export  # noqa: E402
from clawtower.core.traces.spans import Trace  # noqa: E402

PROJECT = "clawtower-demo"


async def flow_traces(folder: Path) -> list[Trace]:
    """The demo's two flows (the finished briefing and the failed one), as derived."""
    store = await open_store(folder / "clawtower.db")
    try:
        await seed_flows(store, ROOT / "examples" / "demo" / "agents.yaml", live=False)
        return [t for t in await load(store) if t.kind == "flow"]
    finally:
        await store.close()


async def shoot(url: str, out: Path) -> None:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1600, "height": 1000})
            await page.goto(url, wait_until="networkidle", timeout=60_000)
            await page.get_by_text("invoke_workflow F-1").first.wait_for(timeout=60_000)
            await page.wait_for_timeout(1000)  # the span tree's rows finish drawing
            await page.screenshot(path=str(out))
        finally:
            await browser.close()


def main(out: Path) -> None:
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM} (scripts/install-peers.sh chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["CLAWTOWER_HOME"] = tmp
        traces = asyncio.run(flow_traces(folder))
        (brief,) = [t for t in traces if t.root == "F-1"]
        with phoenix_server(folder / "phoenix") as base:
            export(traces, base, service_name=PROJECT, timeout_s=60)
            spans = spans_of(base, PROJECT, sum(len(t.spans) for t in traces), timeout_s=120)
            print(f"phoenix holds {len(spans)} spans of {len(traces)} flow traces")
            projects = httpx.get(f"{base}/v1/projects", timeout=10).json()["data"]
            (project,) = [p for p in projects if p["name"] == PROJECT]
            asyncio.run(shoot(f"{base}/projects/{project['id']}/traces/{brief.trace_id}", out))
    print(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots" / "phoenix-flow.png"))
    main(Path(parser.parse_args().out).resolve())
