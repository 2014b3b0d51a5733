"""Cold start of read commands, whole processes, beside `python -c pass` (issue 27, item 8).

Target: a read command (`approvals`, `task list`, `session show S-1`, `session list`, `flow
list`, `workflow list`, `triggers list`, `memory list`, `memory search`; issue 39) completes in
<= 0.25 s on a quiet machine. Each repetition runs every command once as a fresh process, in a
rotated order, against the same small store (the headless demo's: tasks, approvals, sessions), and
`python -c pass` in the same loop: the floor is CPython's own start-up on this machine at
this moment, so the ratio holds on a noisy shared machine where the absolute figures do not.

`--serve` also times `clawtower serve --port 0` until it says its webhook server is up
(`webhooks on ...`), then stops it with SIGTERM (its exit code must be 0).

`--before DIR` runs every command a second time with DIR (a checkout of an older commit,
e.g. `git worktree add /tmp/before main`) first on PYTHONPATH, in the same loop: before and
after side by side.

    .venv/bin/python benchmarks/bench_startup.py [--reps 20] [--before DIR] [--json PATH]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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

TARGET_MS = 250.0
# every read command of issue 39's target (the demo store has flows; no workflow run, trigger
# or memory, and no config file: `memory search` says no embedding provider is configured)
COMMANDS = (("approvals",), ("task", "list"), ("session", "show", "S-1"), ("session", "list"),
            ("flow", "list"), ("workflow", "list"), ("triggers", "list"), ("memory", "list"),
            ("memory", "search", "agent:planner", "briefing"))
# --other-reads: read commands outside the target, for the record (most still build models)
OTHER_READS = (("task", "show", "T-1"), ("meeting", "list"), ("events",))


def clawtower() -> str:
    exe = Path(sys.executable).parent / "clawtower"
    return str(exe) if exe.exists() else "clawtower"


def run(argv: list[str], env: dict[str, str]) -> float:
    """Wall-clock ms of one whole process; its exit code must be 0."""
    t = time.perf_counter()
    out = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, check=False)
    ms = (time.perf_counter() - t) * 1000
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {out.returncode}: {out.stderr.strip()}")
    return ms


def serve_until_up(db: Path, env: dict[str, str]) -> float:
    """ms from the spawn of `serve` to its `webhooks on` line; stopped with SIGTERM."""
    t = time.perf_counter()
    proc = subprocess.Popen([clawtower(), "serve", "--port", "0", "--db", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "webhooks on" in line:
            ms = (time.perf_counter() - t) * 1000
            break
    else:
        raise SystemExit(f"serve ended without its webhook line: {proc.stderr.read()}")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"serve: exit {proc.returncode} on SIGTERM: {err[-500:]}")
    return ms


def main() -> int:
    p = parser(__doc__.splitlines()[0], reps=20)
    p.add_argument("--before", metavar="DIR",
                   help="a checkout of an older tree, run first on PYTHONPATH beside this one")
    p.add_argument("--other-reads", action="store_true",
                   help="also time the other read commands (task show, meeting list, ...)")
    p.add_argument("--serve", action="store_true",
                   help="also time `serve` until its webhook server is up")
    args = p.parse_args()
    reps = reps_of(args)
    with work_dir(args) as d:
        db = d / "demo.db"
        env = {**os.environ, "HOME": str(d), "CLAWTOWER_HOME": str(d / "home"),
               "CLAWTOWER_DB": str(db), "NO_COLOR": "1"}
        env.pop("PYTHONPATH", None)
        made = subprocess.run([clawtower(), "demo", "--headless", "--speed", "0", "--db",
                               str(db)], env=env, capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise SystemExit(f"demo --headless: exit {made.returncode}: {made.stderr[-500:]}")
        sides = {"after": env}
        if args.before:
            sides = {"before": {**env, "PYTHONPATH": str(Path(args.before).resolve())},
                     "after": env}
        jobs: dict[str, list[str]] = {"python -c pass": [sys.executable, "-c", "pass"]}
        envs: dict[str, dict[str, str]] = {"python -c pass": env}
        for side, side_env in sides.items():
            for cmd in COMMANDS + (OTHER_READS if args.other_reads else ()):
                name = f"{' '.join(cmd)} ({side})" if args.before else " ".join(cmd)
                jobs[name] = [clawtower(), *cmd]
                envs[name] = side_env
        for name, argv in jobs.items():  # warm-up: page cache, .pyc files
            run(argv, envs[name])
        times: dict[str, list[float]] = {name: [] for name in jobs}
        names = list(jobs)
        for i in range(reps):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                times[name].append(run(jobs[name], envs[name]))
            if args.serve:
                for side, side_env in sides.items():
                    name = f"serve until up ({side})" if args.before else "serve until up"
                    times.setdefault(name, []).append(serve_until_up(db, side_env))
    floor = median(times["python -c pass"])
    rows = [[name, len(v), fmt_num(median(v)), spread(v), fmt_num(median(v) / floor)]
            for name, v in times.items()]
    print_table(f"whole-process wall clock, ms, {reps} repetitions (median, range, ÷ floor)",
                ["command", "n", "median", "range", "÷ python -c pass"], rows)
    worst = max(median(v) for k, v in times.items()
                if tuple(k.split(" (")[0].split()) in COMMANDS and "(before)" not in k)
    print(f"\nslowest read command median {fmt_num(worst)} ms (target <= {TARGET_MS:g} ms:"
          f" {'met' if worst <= TARGET_MS else 'NOT met'}); python -c pass {fmt_num(floor)} ms")
    write_json(args.json, {"results": {k: {"median": median(v), "min": min(v), "max": max(v),
                                           "n": len(v)} for k, v in times.items()},
                           "machine": machine_info(), "repo": str(REPO)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
