"""The console in Chromium (`clawtower console --web`) beside the console in a terminal
(issue 28): page load to the first painted Tasks mode, key -> repaint latency, memory per
web console.

One run, on a copy of the demo's store (`clawtower demo --headless --speed 0`: T-4 waits
for its approval), Debian's Chromium driven by Playwright (the system browser), 1280x800:

- page load: a new tab of a signed-in browser opens `/` (a new console process each time),
  from the navigation's start (the page's `performance.timeOrigin`) to the first animation
  frame painted after the websocket frame that carries the Tasks list (`Why it is here`);
  beside it, the same console started in a 120x40 pseudo-terminal (`clawtower --db COPY`,
  spawn -> the Tasks list on the screen; what bench_console_startup.py times), and the
  server without a browser (an aiohttp websocket client: connect -> the Tasks frame);
- key -> repaint: `2` / `1` alternately (Approvals / Tasks mode), from the page's keydown
  event to the second animation frame after the first websocket frame carrying the new
  mode's text (`Pending approvals` / `Why it is here`); beside it, the same console in the
  pty (the key written -> that text in its output), and the same console under
  Textual's pilot (120x40, headless driver, no engine): `pilot.press` -> the first frame
  the compositor hands to the display in the new mode (headless: it is not written);
- memory: PSS and RSS of each console process (`/proc/PID/smaps_rollup`) with N consoles
  open, and the server's own.

    .venv/bin/python benchmarks/bench_web_console.py [--reps 10] [--keys 40] [--consoles 4]
                                                       [--screenshot screenshots/web-console.png]
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from _common import (
    fmt_num,
    machine_info,
    median,
    parser,
    percentile,
    print_machine,
    print_table,
    reps_of,
    work_dir,
    write_json,
)
from bench_console_startup import ANSI, in_terminal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "helpers"))
from chromium import ARGS, CHROMIUM  # Debian's Chromium, started as the tests start it

TASKS, APPROVALS = "Why it is here", "Pending approvals"

# In the page: every websocket message's arrival, and the animation frames after it
# (xterm.js draws on the next frame after a write), with its text; every keydown's time.
INSTRUMENT = """
window.__frames = []; window.__keys = []; window.__open = null;
document.addEventListener('keydown', () => window.__keys.push(performance.now()), true);
const Native = window.WebSocket;
window.WebSocket = function (url, protocols) {
  const ws = new Native(url, protocols);
  ws.addEventListener('open', () => { window.__open = performance.now(); });
  ws.addEventListener('message', ev => {
    const at = performance.now();
    const text = typeof ev.data === 'string' ? ev.data : new TextDecoder().decode(ev.data);
    requestAnimationFrame(() => requestAnimationFrame(
      () => window.__frames.push([at, performance.now(), text])));
  });
  return ws;
};
window.WebSocket.prototype = Native.prototype;
window.__painted = (text, after) => {
  for (const f of window.__frames) if (f[0] >= after && f[2].includes(text)) return [f[0], f[1]];
  return null;
};
"""


def smaps(pid: int) -> dict[str, int]:
    """PSS and RSS of `pid` in KiB."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Rss", "Pss"):
                out[k.lower()] = int(v.split()[0])
    return out


def children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text(errors="replace")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


async def painted(page: Any, text: str, after: float, timeout: float = 30
                  ) -> tuple[float, float]:
    """(the websocket frame with `text` arrived, it was painted), in the page's ms."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        t = await page.evaluate("([t, a]) => window.__painted(t, a)", [text, after])
        if t is not None:
            return float(t[0]), float(t[1])
        await asyncio.sleep(0.01)
    raise SystemExit(f"the page never painted {text!r}")


async def browser_side(base: str, link: str, server: subprocess.Popen[str], reps: int,
                       keys: int, consoles: int, shot: str | None) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
        await ctx.add_init_script(INSTRUMENT)
        page = await ctx.new_page()
        await page.goto(link)  # signs in (the cookie), then `/`: the warm-up load
        await painted(page, TASKS, 0)
        loads, opens, arrivals = [], [], []
        for _ in range(reps):
            tab = await ctx.new_page()
            await tab.goto(base + "/")
            arrived, paint = await painted(tab, TASKS, 0)
            loads.append(paint)
            arrivals.append(arrived)
            opens.append(float(await tab.evaluate("window.__open")))
            await tab.close()
        await page.click("#terminal")
        latencies, key_arrivals = [], []
        for i in range(keys + 2):  # the first two warm both screens
            key, text = ("2", APPROVALS) if i % 2 == 0 else ("1", TASKS)
            n = await page.evaluate("window.__keys.length")
            await page.keyboard.press(key)
            while (down := await page.evaluate(f"window.__keys[{n}]")) is None:
                await asyncio.sleep(0.005)
            arrived, t = await painted(page, text, float(down))
            if i >= 2:
                latencies.append(t - float(down))
                key_arrivals.append(arrived - float(down))
            await asyncio.sleep(0.15)
        if shot:
            await page.keyboard.press("2")
            await asyncio.sleep(1.5)
            await page.screenshot(path=shot)
        tabs = []
        for _ in range(consoles - 1):
            tab = await ctx.new_page()
            await tab.goto(base + "/")
            await painted(tab, TASKS, 0)
            tabs.append(tab)
        await asyncio.sleep(2)  # engines settle
        mem = [smaps(p) for p in children(server.pid)]
        server_mem = smaps(server.pid)
        await browser.close()
    return {"loads": loads, "opens": opens, "arrivals": arrivals, "latencies": latencies,
            "key_arrivals": key_arrivals, "mem": mem, "server_mem": server_mem}


def pty_keys(argv: list[str], env: dict[str, str], keys: int) -> list[float]:
    """The same console in a 120x40 pseudo-terminal (engine and all, as in the browser):
    a key written to the terminal -> its output shows the new mode's text, ms."""
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.execve(argv[0], argv, env)

    def until(text: str, timeout: float = 30) -> float:
        raw, end = "", time.perf_counter() + timeout
        while time.perf_counter() < end:
            if select.select([fd], [], [], 0.01)[0]:
                raw += os.read(fd, 1 << 16).decode("utf-8", "replace")
                if text in ANSI.sub("", raw):
                    return time.perf_counter()
        raise SystemExit(f"the terminal console never showed {text!r}")

    out = []
    try:
        until(TASKS, 60)
        time.sleep(1.5)
        while select.select([fd], [], [], 0.2)[0]:
            os.read(fd, 1 << 16)
        for i in range(keys + 2):
            key, text = ("2", APPROVALS) if i % 2 == 0 else ("1", TASKS)
            t0 = time.perf_counter()
            os.write(fd, key.encode())
            t = until(text)
            if i >= 2:
                out.append((t - t0) * 1000)
            time.sleep(0.15)
            while select.select([fd], [], [], 0)[0]:
                os.read(fd, 1 << 16)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    return out


async def raw_side(base: str, link: str, reps: int) -> list[float]:
    """The server and the console without a browser: an aiohttp websocket client, connect ->
    the binary frame carrying the Tasks list, ms (what the page's own work is added to)."""
    import aiohttp

    out = []
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(link, allow_redirects=False) as r:
            if r.status != 303:
                raise SystemExit(f"sign-in: {r.status}")
        for _ in range(reps):
            t0 = time.perf_counter()
            ws = await http.ws_connect(base + "/ws?width=142&height=44")
            seen = ""
            while TASKS not in seen:
                m = await ws.receive()
                if m.type != aiohttp.WSMsgType.BINARY:
                    raise SystemExit(f"the console closed: {m}")
                seen += m.data.decode("utf-8", "replace")
            out.append((time.perf_counter() - t0) * 1000)
            await ws.close()
    return out


async def pilot_side(db: Path, keys: int) -> list[float]:
    """The same console under Textual's pilot: press -> the first frame the compositor
    hands to the display with the new mode on screen (headless: nothing is written)."""
    from clawtower.tui.app import ClawtowerApp

    app = ClawtowerApp(str(db), run_engine=False, operator="bench")
    frames: list[tuple[float, str]] = []
    native = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None:
            frames.append((time.perf_counter(), app.current_mode))
        native(screen, renderable)

    app._display = display  # type: ignore[method-assign]
    out = []
    async with app.run_test(size=(120, 40)) as pilot:
        while not app.query("TaskList") or not frames:
            await asyncio.sleep(0.05)
        await asyncio.sleep(1)
        for i in range(keys + 2):
            key, mode = ("2", "approvals") if i % 2 == 0 else ("1", "tasks")
            n = len(frames)
            t0 = time.perf_counter()
            await pilot.press(key)
            while not (hit := [t for t, m in frames[n:] if m == mode]):
                await asyncio.sleep(0.001)
            if i >= 2:
                out.append((hit[0] - t0) * 1000)
            await asyncio.sleep(0.15)
    return out


def main() -> int:
    p = parser(__doc__.splitlines()[0], reps=10)
    p.add_argument("--keys", type=int, default=40, help="key presses timed (default 40)")
    p.add_argument("--consoles", type=int, default=4,
                   help="web consoles open for the memory figure (default 4)")
    p.add_argument("--screenshot", metavar="PNG", help="save mode 2 in Chromium to PNG")
    args = p.parse_args()
    reps = reps_of(args)
    keys = 6 if args.quick else args.keys
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"no Chromium at {CHROMIUM} (scripts/install-peers.sh chromium)")
    exe = str(Path(sys.executable).parent / "clawtower")
    info = machine_info()
    print_machine(info)
    with work_dir(args) as d:
        home = d / "home"
        env = {**os.environ, "CLAWTOWER_HOME": str(home), "TZ": "UTC", "PYTHONUNBUFFERED": "1",
               "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        made = subprocess.run([exe, "demo", "--headless", "--speed", "0"], env=env,
                              capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise SystemExit(f"demo --headless: exit {made.returncode}: {made.stderr[-500:]}")
        db = home / "clawtower.db"
        template = d / "template.db"
        shutil.copyfile(db, template)
        # the terminal console's whole-process start, as bench_console_startup.py does it
        term = []
        for i in range(reps + 1):
            copy = d / "term.db"
            shutil.copyfile(template, copy)
            for suffix in ("-wal", "-shm"):
                Path(f"{copy}{suffix}").unlink(missing_ok=True)
            marks = in_terminal([exe, "--db", str(copy)], env, {"rows": TASKS})
            if i:
                term.append(marks["rows"])
        print(f"terminal start: {[round(x) for x in term]} ms", flush=True)
        shutil.copyfile(template, copy)
        term_keys = pty_keys([exe, "--db", str(copy)], env, keys)
        print(f"terminal key -> screen: {[round(x, 1) for x in term_keys]} ms", flush=True)
        pilot = asyncio.run(pilot_side(template, keys))
        print(f"pilot key -> frame: {[round(x, 1) for x in pilot]} ms", flush=True)
        raw: list[float] = []
        for side in ("raw", "browser"):  # a fresh server (and token link) for each
            server = subprocess.Popen([exe, "console", "--web", "--port", "0", "--by",
                                       "alice", "--rotate-token", "--max-consoles",
                                       str(max(8, args.consoles + 2))],
                                      env=env, stdout=subprocess.PIPE, text=True)
            try:
                assert server.stdout is not None
                lines = [server.stdout.readline() for _ in range(3)]
                m = re.search(r"web console on (http://\S+?)/ ", lines[0])
                if not m or "?token=" not in lines[2]:
                    raise SystemExit(f"console --web: {lines}")
                if side == "raw":
                    raw = asyncio.run(raw_side(m.group(1), lines[2].strip(), reps + 1))[1:]
                    print(f"websocket client: {[round(x) for x in raw]} ms", flush=True)
                else:
                    web = asyncio.run(browser_side(m.group(1), lines[2].strip(), server,
                                                   reps, keys, args.consoles,
                                                   args.screenshot))
            finally:
                server.send_signal(signal.SIGTERM)
                server.wait(timeout=60)
    lat, loads = web["latencies"], web["loads"]
    rows = [
        ["page load -> Tasks painted (Chromium)", len(loads), fmt_num(median(loads)),
         fmt_num(percentile(loads, 90))],
        ["  of which: websocket open", len(web["opens"]), fmt_num(median(web["opens"])),
         fmt_num(percentile(web["opens"], 90))],
        ["  of which: the Tasks frame arrives", len(web["arrivals"]),
         fmt_num(median(web["arrivals"])), fmt_num(percentile(web["arrivals"], 90))],
        ["connect -> Tasks frame (websocket client)", len(raw), fmt_num(median(raw)),
         fmt_num(percentile(raw, 90))],
        ["spawn -> Tasks on screen (terminal, pty)", len(term), fmt_num(median(term)),
         fmt_num(percentile(term, 90))],
        ["key -> repaint (Chromium)", len(lat), fmt_num(median(lat)),
         fmt_num(percentile(lat, 90))],
        ["  of which: key -> the frame arrives", len(web["key_arrivals"]),
         fmt_num(median(web["key_arrivals"])), fmt_num(percentile(web["key_arrivals"], 90))],
        ["key -> on screen (terminal, pty)", len(term_keys), fmt_num(median(term_keys)),
         fmt_num(percentile(term_keys, 90))],
        ["key -> repaint (pilot, headless)", len(pilot), fmt_num(median(pilot)),
         fmt_num(percentile(pilot, 90))],
    ]
    print_table("the console in Chromium beside the terminal, ms", ["what", "n", "p50", "p90"],
                rows)
    pss = [m["pss"] / 1024 for m in web["mem"]]
    rss = [m["rss"] / 1024 for m in web["mem"]]
    print(f"\nmemory with {len(pss)} web consoles open: PSS per console median"
          f" {fmt_num(median(pss))} MiB (RSS {fmt_num(median(rss))} MiB); the server"
          f" {fmt_num(web['server_mem']['pss'] / 1024)} MiB PSS")
    write_json(args.json, {"page_load_ms": loads, "ws_open_ms": web["opens"],
                           "tasks_frame_ms": web["arrivals"], "terminal_start_ms": term,
                           "key_frame_arrives_ms": web["key_arrivals"],
                           "raw_websocket_tasks_ms": raw,
                           "key_terminal_ms": term_keys,
                           "key_repaint_browser_ms": lat, "key_repaint_pilot_ms": pilot,
                           "console_mem_kib": web["mem"], "server_mem_kib": web["server_mem"],
                           "machine": info})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
