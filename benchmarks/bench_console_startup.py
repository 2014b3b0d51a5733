"""Console time to first paint, whole processes in a terminal (issue 27, item 8: the console
was blank ~6 s before Tasks painted).

Target: the frame and the first mode paint <= 0.6 s after `clawtower` starts (issue 39; it
was <= 1 s in issue 27). Each repetition
starts the real entry point, `clawtower --db COPY` (the console, with its engine, on a fresh
copy of the demo's store), in a pseudo-terminal of 120x40, reads what it draws and records,
as wall-clock ms since the spawn:

- frame: the mode bar is on the screen (its text `Approvals`);
- rows: the Tasks list shows a task (`T-1`): the store has loaded.

Then the process is killed (the store is a throw-away copy). `clawtower demo --db NEW` is timed
the same way for reference: it seeds the demo store behind its painted frame (`rows` then
waits for the seeding). `--before DIR`
runs the same with DIR (a checkout of an older commit) first on PYTHONPATH, in the same loop,
alternating. `python -c pass` is timed in the loop as the floor of a process start, and a
minimal Textual app (a static line with the word and a footer) as the floor of any Textual
app's first paint on this machine.

The children write bytecode (the variable PYTHONDONTWRITEBYTECODE that this workplace sets is
dropped for them): an installed package has its .pyc files (pip compiles them), and round 0,
untimed, writes them for a checkout.

    .venv/bin/python benchmarks/bench_console_startup.py [--reps 10] [--before DIR] [--no-demo]
"""

from __future__ import annotations

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

from _common import (
    REPO,
    fmt_num,
    machine_info,
    median,
    parser,
    print_table,
    reps_of,
    spread,
    work_dir,
    write_json,
)

TARGET_MS = 600.0
ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[\]P^_].*?(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
CONSOLE = {"frame": "Approvals", "rows": "T-1"}
FLOOR_APP = """from textual.app import App
from textual.widgets import Footer, Static


class Floor(App):
    def compose(self):
        yield Static("1 Tasks  2 Approvals")
        yield Footer()


Floor().run()
"""
DEMO = {"frame": "Approvals", "rows": "T-1"}


def in_terminal(argv: list[str], env: dict[str, str], markers: dict[str, str],
                timeout: float = 60) -> dict[str, float]:
    """ms since the spawn at which each marker's text was first on the screen."""
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:  # the child: a 120x40 terminal, then the command
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.execve(argv[0], argv, env)
    seen: dict[str, float] = {}
    raw = ""
    try:
        while len(seen) < len(markers) and time.perf_counter() - t0 < timeout:
            if not select.select([fd], [], [], 0.02)[0]:
                continue
            try:
                raw += os.read(fd, 1 << 16).decode("utf-8", "replace")
            except OSError:
                break
            text = ANSI.sub("", raw)
            for name, needle in markers.items():
                if name not in seen and needle in text:
                    seen[name] = (time.perf_counter() - t0) * 1000
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)
    missing = set(markers) - set(seen)
    if missing:
        raise SystemExit(f"{' '.join(argv)}: never showed {sorted(missing)}:"
                         f" {ANSI.sub('', raw)[-1500:]}")
    return seen


def fresh_copy(template: Path, db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
        src = Path(f"{template}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{db}{suffix}")


def main() -> int:
    p = parser(__doc__.splitlines()[0], reps=10)
    p.add_argument("--before", metavar="DIR",
                   help="a checkout of an older tree, run first on PYTHONPATH beside this one")
    p.add_argument("--no-demo", action="store_true", help="time the console only")
    args = p.parse_args()
    reps = reps_of(args)
    exe = str(Path(sys.executable).parent / "clawtower")
    with work_dir(args) as d:
        template = d / "demo.db"
        env = {**os.environ, "HOME": str(d), "CLAWTOWER_HOME": str(d / "home"), "TZ": "UTC",
               "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # installed packages have their .pyc
        floor_app = d / "textual_floor.py"
        floor_app.write_text(FLOOR_APP)
        made = subprocess.run([exe, "demo", "--headless", "--speed", "0", "--db",
                               str(template)], env=env, capture_output=True, text=True,
                              check=False)
        if made.returncode != 0:
            raise SystemExit(f"demo --headless: exit {made.returncode}: {made.stderr[-500:]}")
        sides = {"after": env}
        if args.before:
            sides = {"before": {**env, "PYTHONPATH": str(Path(args.before).resolve())},
                     "after": env}
        results: dict[str, dict[str, list[float]]] = {}
        floor: list[float] = []
        for i in range(reps + 1):  # round 0 warms the page cache and the .pyc files
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            for side in order:
                db = d / f"run-{side}.db"
                fresh_copy(template, db)
                jobs = [("console", [exe, "--db", str(db)], CONSOLE)]
                if side == "after":
                    jobs.append(("textual floor", [sys.executable, str(floor_app)],
                                 {"frame": "Approvals"}))
                if not args.no_demo:
                    fresh = d / f"demo-{side}-{i}.db"
                    jobs.append(("demo", [exe, "demo", "--db", str(fresh)], DEMO))
                for what, argv, markers in jobs:
                    marks = in_terminal(argv, sides[side], markers)
                    if i:
                        for k, v in marks.items():
                            results.setdefault(f"{what} ({side})", {}).setdefault(
                                k, []).append(v)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            if i:
                floor.append((time.perf_counter() - t) * 1000)
    rows = [["python -c pass", "", len(floor), fmt_num(median(floor)), spread(floor)]]
    for name, marks in results.items():
        for mark, v in marks.items():
            rows.append([name, mark, len(v), fmt_num(median(v)), spread(v)])
    print_table(f"console start in a 120x40 terminal, ms since the spawn, {reps} repetitions",
                ["command", "on screen", "n", "median", "range"], rows)
    frame = median(results["console (after)"]["frame"])
    textual_floor = median(results["textual floor (after)"]["frame"])
    print(f"\nconsole frame median {fmt_num(frame)} ms (target <= {TARGET_MS:g} ms:"
          f" {'met' if frame <= TARGET_MS else 'NOT met'}); a minimal Textual app"
          f" {fmt_num(textual_floor)} ms (ratio {frame / textual_floor:.2f}); python -c pass"
          f" {fmt_num(median(floor))} ms")
    write_json(args.json, {"results": {s: {k: {"median": median(v), "n": len(v)}
                                           for k, v in m.items()} for s, m in results.items()},
                           "floor_ms": median(floor), "machine": machine_info(),
                           "repo": str(REPO)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
