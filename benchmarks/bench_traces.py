"""`traces export` of a large log (issue 38): a flow of N subtasks, each executed as a session
turn (bench_flows.py's workload with `--turns`), then every trace in the store derived and sent
over OTLP/HTTP (protobuf, the OpenTelemetry SDK's exporter) to a receiver on loopback that
reads each request and answers 200. Timed: reading the log, deriving the spans, converting and
sending them (what `clawtower traces export` does). Target: 100,000 events in <= 10 s.

    .venv/bin/python benchmarks/bench_traces.py [--quick] [--sizes 2000,12000]
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from pathlib import Path
from typing import Any

import _common as cm
from bench_flows import ours, random_dag

from clawtower.core.store import open_store
from clawtower.core.traces.builder import derive
from clawtower.core.traces.otlp import export
from clawtower.core.traces.read import gc_paused, read_events, read_log, store_salt

TARGET_S_PER_100K = 10.0


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def export_all(path: Path, url: str, *, rows: bool = True) -> dict[str, float]:
    """What `traces export` does; `rows=False`: the log read as StoredEvents instead (the
    release before rows.py), for a before/after in one run."""
    store = await open_store(path)
    try:
        t0 = time.perf_counter()
        events: list[Any] = await (read_log(store) if rows else read_events(store))
        salt = await store_salt(store)
        t1 = time.perf_counter()
        if rows:
            with gc_paused():
                traces = derive(events, salt=salt)
        else:
            traces = derive(events, salt=salt)
        t2 = time.perf_counter()
        sent = await asyncio.to_thread(export, traces, url)
        t3 = time.perf_counter()
    finally:
        await store.close()
    return {"events": len(events), "spans": sent, "read_s": t1 - t0, "derive_s": t2 - t1,
            "send_s": t3 - t2, "total_s": t3 - t0,
            "s_per_100k_events": (t3 - t0) / len(events) * 100_000}


def main() -> None:
    p = cm.parser(__doc__ or "", reps=1)
    p.add_argument("--sizes", default="2000,12000", help="subtasks per flow")
    args = p.parse_args()
    sizes = [200] if args.quick else [int(x) for x in args.sizes.split(",")]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with cm.work_dir(args) as folder:
        for n in sizes:
            db = Path(folder) / f"traces-{n}.db"
            asyncio.run(ours(db, random_dag(n, 100), "normal", 100, turns=True))
            r = asyncio.run(export_all(db, url))
            print(f"{n:>7} subtasks  {r['events']:>8,} events  {r['spans']:>7,} spans  "
                  f"read {r['read_s']:.2f} s  derive {r['derive_s']:.2f} s  "
                  f"send {r['send_s']:.2f} s  total {r['total_s']:.2f} s  "
                  f"= {r['s_per_100k_events']:.1f} s per 100k events "
                  f"(target <= {TARGET_S_PER_100K:g})", flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
