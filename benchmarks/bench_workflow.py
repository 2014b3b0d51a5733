"""Workflow CLI, whole process: `clawtower workflow` vs the real `lobster` CLI on one workflow.

The workflow (written to the work folder): three shell steps (`echo`, a JSON-producing
`node -e`, a step reading the previous one's json on stdin), an approval gate fed by that
json, and one step after the gate. One repetition, for each CLI:

  run     `... run --file wf.lobster --args-json '{"who":"team"}'`  -> needs_approval
  resume  `... resume --token T --approve yes`                       -> ok, checked output
  start   the CLI doing nothing useful (`lobster version`, `clawtower --help`): the floor;
          "run + resume - 2 x start" estimates the work beyond starting the interpreter

each as a fresh process, exactly as a script or an agent would call it. The CLIs alternate
which goes first from one repetition to the next, and every envelope is checked (a wrong
status or output aborts the benchmark). Reported: median and range of each phase in ms, and
the ratio clawtower ÷ Lobster of the medians of run, resume and run + resume. Both CLIs keep
their state for the whole benchmark (Lobster: one LOBSTER_STATE_DIR; clawtower: one --db), as
a user's would.

Lobster comes from scripts/install-peers.sh lobster ($CLAWTOWER_PEERS/lobster, or
$LOBSTER_BIN); without it the Lobster column is skipped with the reason.

    .venv/bin/python benchmarks/bench_workflow.py [--quick] [--reps N] [--json PATH]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as cm

PEERS = Path(os.environ.get("CLAWTOWER_PEERS", Path.home() / ".cache" / "clawtower-peers"))
LOBSTER = Path(os.environ.get("LOBSTER_BIN",
                              PEERS / "lobster" / "node_modules" / ".bin" / "lobster"))

WORKFLOW = """\
name: bench-workflow
args:
  who: {default: nobody}
steps:
  - id: hello
    run: echo "hello ${who}"
  - id: plan
    run: node -e 'console.log(JSON.stringify({who:process.env.LOBSTER_ARG_WHO, files:2}))'
  - id: count
    stdin: $plan.json
    run: cat
  - id: gate
    stdin: $count.json
    approval: Apply the plan?
  - id: apply
    run: 'echo "applied for $plan.json.who: $gate.approved"'
"""
EXPECTED_OUTPUT = ["applied for team: true\n"]


class Side:
    def __init__(self, name: str, base: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name, self.base, self.env, self.cwd = name, base, env, cwd

    def call(self, args: list[str]) -> tuple[float, dict[str, Any], int]:
        t0 = time.perf_counter()
        proc = subprocess.run([*self.base, *args], env=self.env, cwd=self.cwd,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                              check=False)
        dt = (time.perf_counter() - t0) * 1e3
        try:
            envelope = json.loads(proc.stdout)
        except ValueError:
            envelope = {"stdout": proc.stdout.decode(errors="replace"),
                        "stderr": proc.stderr.decode(errors="replace")}
        return dt, envelope, proc.returncode

    def start(self) -> float:
        t0 = time.perf_counter()
        subprocess.run([*self.base, *self.floor_args], env=self.env, cwd=self.cwd,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=True)
        return (time.perf_counter() - t0) * 1e3

    floor_args: list[str] = []
    run_prefix: list[str] = []
    resume_prefix: list[str] = []

    def cycle(self, wf: Path) -> dict[str, float]:
        t_run, env, rc = self.call([*self.run_prefix, "--file", str(wf),
                                    "--args-json", '{"who":"team"}'])
        if rc != 0 or env.get("status") != "needs_approval":
            raise RuntimeError(f"{self.name} run: exit {rc}, {env}")
        token = env["requiresApproval"]["resumeToken"]
        t_res, env, rc = self.call([*self.resume_prefix, "--token", token, "--approve", "yes"])
        if rc != 0 or env.get("status") != "ok" or env.get("output") != EXPECTED_OUTPUT:
            raise RuntimeError(f"{self.name} resume: exit {rc}, {env}")
        t_start = self.start()
        return {"run_ms": t_run, "resume_ms": t_res, "total_ms": t_run + t_res,
                "start_ms": t_start, "beyond_start_ms": t_run + t_res - 2 * t_start}


def clawtower_side(d: Path) -> Side:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOBSTER_", "CLAWTOWER_"))}
    env["PYTHONPATH"] = str(cm.REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["CLAWTOWER_HOME"] = str(d / "home")
    s = Side("clawtower", [sys.executable, "-m", "clawtower.cli.main",
                           "--db", str(d / "clawtower.db")], env, d)
    s.run_prefix, s.resume_prefix = ["workflow", "run"], ["workflow", "resume"]
    s.floor_args = ["--help"]
    return s


def lobster_side(d: Path) -> tuple[Side | None, str]:
    if not LOBSTER.exists():
        return None, (f"Lobster column skipped: {LOBSTER} not installed"
                      " (run scripts/install-peers.sh lobster)")
    if shutil.which("node") is None:
        return None, "Lobster column skipped: node is not on PATH"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOBSTER_", "CLAWTOWER_"))}
    for sub in ("state", "cache"):
        (d / f"lobster-{sub}").mkdir(exist_ok=True)
    env["LOBSTER_STATE_DIR"] = str(d / "lobster-state")
    env["LOBSTER_CACHE_DIR"] = str(d / "lobster-cache")
    s = Side("lobster", [str(LOBSTER)], env, d)
    s.run_prefix, s.resume_prefix = ["run", "--mode", "tool"], ["resume"]
    s.floor_args = ["version"]
    version = subprocess.run([str(LOBSTER), "version"], capture_output=True, text=True,
                             check=False, env=env).stdout.strip()
    return s, f"Lobster {version or '?'} at {LOBSTER}, node {node_version()}"


def node_version() -> str:
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return "?"


def main() -> None:
    p = cm.parser(__doc__.splitlines()[0], reps=15)
    p.add_argument("--warmup", type=int, default=1, help="unmeasured repetitions (default 1)")
    args = p.parse_args()
    reps = cm.reps_of(args)
    with cm.work_dir(args) as d:
        info = cm.machine_info(d)
        cm.print_machine(info)
        wf = d / "bench.lobster"
        wf.write_text(WORKFLOW, encoding="utf-8")
        ours = clawtower_side(d)
        peer, note = lobster_side(d)
        print(note)
        print(f"{reps} measured repetitions after {args.warmup} warm-up, CLIs alternating")
        rows: dict[str, list[dict[str, float]]] = {"clawtower": [], "lobster": []}
        for i in range(args.warmup + reps):
            sides = [ours] + ([peer] if peer else [])
            if i % 2:
                sides.reverse()
            for side in sides:
                res = side.cycle(wf)
                if i >= args.warmup:
                    rows[side.name].append(res)

    def col(name: str, key: str) -> list[float]:
        return [r[key] for r in rows[name]]

    keys = [("run_ms", "run -> needs_approval"), ("resume_ms", "resume --approve yes -> ok"),
            ("total_ms", "run + resume"), ("start_ms", "bare start (floor)"),
            ("beyond_start_ms", "run + resume - 2 x bare start")]
    table = []
    ratios: dict[str, float | None] = {}
    for key, label in keys:
        mine = col("clawtower", key)
        theirs = col("lobster", key)
        ratio = cm.median(mine) / cm.median(theirs) if theirs else None
        ratios[key] = ratio
        table.append([label, f"{cm.median(mine):.0f}", cm.spread(mine),
                      f"{cm.median(theirs):.0f}" if theirs else "-", cm.spread(theirs),
                      f"{ratio:.2f}" if ratio else "-"])
    cm.print_table("workflow CLI, whole process, ms (median, range)",
                   ["phase", "clawtower", "range", "lobster", "range", "clawtower ÷ lobster"],
                   table)
    if ratios.get("total_ms"):
        print(f"\nclawtower run + resume median ÷ lobster = {ratios['total_ms']:.2f}"
              " (interleaved, same run)")
    cm.write_json(args.json, {
        "benchmark": "workflow_cli", "machine": info, "reps": reps, "warmup": args.warmup,
        "workflow": WORKFLOW, "peer_note": note, "ours": rows["clawtower"],
        "peer": rows["lobster"],
        "medians_ms": {side: {k: cm.median(col(side, k)) for k, _ in keys}
                       for side in ("clawtower", "lobster") if rows[side]},
        "ratio_ours_vs_peer": ratios,
    })


if __name__ == "__main__":
    main()
