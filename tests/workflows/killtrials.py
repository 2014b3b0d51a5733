"""kill -9 at random moments of `clawtower workflow run` and of everything that continues it.

One trial drives one run of FLOW to its end through the CLI, one command at a time: `run`,
then whatever the run needs next (`recover ID` to adopt it after its driver died, `resume
--approve yes` at the gate, `resume --response-json` at the input, and the operator's
`recover ID --retry|--skip` when an interrupted step may not be repeated: skip when its line
is already in the file, retry when it is not). Each command is SIGKILLed after a random
delay with probability `kill_prob`. Afterwards every line must be in out.txt exactly once and
the run must have ended ok.

    python -m tests.workflows.killtrials --trials 40   # prints the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CLAWTOWER = str(Path(sys.executable).with_name("clawtower"))

# Shell steps append a line each. a, c, e and f may not be repeated (no marker): one killed
# mid-flight waits for the operator. b and d are marked safe to repeat (they check first).
# f leaves a background child in its process group: the adopter has to end it.
FLOW = """\
name: kill-trials
steps:
  - id: a
    run: sleep 0.2; echo a >> out.txt
  - id: b
    x-idempotent: true
    run: grep -qx b out.txt || { sleep 0.1; echo b >> out.txt; }
  - id: gate
    approval: "go on?"
  - id: c
    run: echo c >> out.txt; sleep 0.2
  - id: ask
    input:
      prompt: "who?"
      responseSchema:
        type: object
        required: [name]
        properties: {name: {type: string}}
  - id: d
    x-idempotent: true
    run: grep -qx d out.txt || { sleep 0.1; echo d >> out.txt; }
  - id: f
    run: (sleep 0.3; echo f >> out.txt) & wait
  - id: e
    run: sleep 0.1; echo e >> out.txt; cat out.txt
"""
LINES = ["a", "b", "c", "d", "f", "e"]


@dataclass
class Figures:
    trials: int = 0
    kill_points: int = 0  # commands actually SIGKILLed while running
    kills_by_command: dict[str, int] = field(default_factory=dict)
    commands: int = 0
    adoptions: int = 0  # `recover ID` runs that took a dead driver's run over
    completed: int = 0
    completed_after_adoption: int = 0  # trials that needed at least one adoption
    paused_with_reason: int = 0  # interrupted steps that waited for the operator
    reasons_naming_step: int = 0
    auto_reruns: int = 0  # interrupted steps re-run because marked safe to repeat
    operator_retry: int = 0
    operator_skip: int = 0
    duplicate_lines: int = 0
    missing_lines: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _state(db: Path) -> dict[str, Any] | None:
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        conn.row_factory = sqlite3.Row
        try:
            row = conn.execute("SELECT * FROM workflow_runs ORDER BY num DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # killed before the schema was there
            return None
        return dict(row) if row else None
    finally:
        conn.close()


def _count(db: Path, sql: str, params: tuple[Any, ...] = ()) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(sql, params).fetchone()[0])
    finally:
        conn.close()


def _lines(out: Path) -> list[str]:
    return out.read_text().split() if out.exists() else []


def trial(workdir: Path, rng: random.Random, figures: Figures, kill_prob: float = 0.6,
          max_delay_s: float = 1.5, max_commands: int = 80) -> None:
    """One run, killed at random points, driven to its end; figures updated."""
    flow = workdir / "flow.lobster"
    flow.write_text(FLOW)
    db, out = workdir / "store.db", workdir / "out.txt"
    figures.trials += 1
    adopted = False
    for _ in range(max_commands):
        run = _state(db)
        if run is None:
            what, argv = "run", ["workflow", "run", str(flow)]
        elif run["status"] == "ok":
            break
        elif run["status"] == "running":
            what, argv = "recover", ["workflow", "recover", run["id"]]
        elif run["status"] == "paused" and run["gate"] == "approval":
            what, argv = "approve", ["workflow", "resume", "--id", run["approval_id"],
                                     "--approve", "yes"]
        elif run["status"] == "paused" and run["gate"] == "input":
            what, argv = "answer", ["workflow", "resume", "--id", run["approval_id"],
                                    "--response-json", '{"name": "ops"}']
        elif run["status"] == "paused" and run["gate"] == "interrupted":
            done = run["waiting_step"] in _lines(out)
            what, argv = "decide", ["workflow", "recover", run["id"],
                                    "--skip" if done else "--retry"]
        else:
            figures.failures.append(f"{workdir.name}: run ended {run['status']}:"
                                    f" {run['error']}")
            return
        before = _count(db, "SELECT count(*) FROM events WHERE type='workflow.adopted'"
                        " OR type='workflow.interrupted'") if db.exists() and run else 0
        figures.commands += 1
        proc = subprocess.Popen([CLAWTOWER, *argv, "--db", str(db)], cwd=workdir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        killed = False
        if rng.random() < kill_prob:
            try:
                proc.wait(rng.uniform(0, max_delay_s))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
        _stdout, stderr = proc.communicate(timeout=300)  # reaped: its pid is gone now
        if killed and proc.returncode == -signal.SIGKILL:
            figures.kill_points += 1
            figures.kills_by_command[what] = figures.kills_by_command.get(what, 0) + 1
        elif proc.returncode != 0:
            figures.failures.append(f"{workdir.name}: {' '.join(argv)} exited"
                                    f" {proc.returncode}: {stderr.strip()[:300]}")
            return
        if what == "recover" and db.exists():
            after = _count(db, "SELECT count(*) FROM events WHERE type='workflow.adopted'"
                           " OR type='workflow.interrupted'")
            if after > before:
                adopted = True
                figures.adoptions += after - before
    else:
        figures.failures.append(f"{workdir.name}: not finished after {max_commands} commands")
        return
    figures.auto_reruns += _count(db, "SELECT count(*) FROM events WHERE"
                                  " type='workflow.adopted' AND"
                                  " json_extract(payload, '$.rerun')")
    figures.paused_with_reason += _count(db, "SELECT count(*) FROM events WHERE"
                                         " type='workflow.interrupted'")
    figures.reasons_naming_step += _count(
        db, "SELECT count(*) FROM events WHERE type='workflow.interrupted' AND"
        " instr(json_extract(payload, '$.reason'),"
        " 'step ' || json_extract(payload, '$.step_id') || ' was interrupted') = 1")
    for decision in ("retry", "skip"):
        n = _count(db, "SELECT count(*) FROM events WHERE type='workflow.recovered' AND"
                   " json_extract(payload, '$.decision')=?", (decision,))
        if decision == "retry":
            figures.operator_retry += n
        else:
            figures.operator_skip += n
    lines = _lines(out)
    for line in LINES:
        n = lines.count(line)
        figures.duplicate_lines += max(0, n - 1)
        figures.missing_lines += int(n == 0)
    if sorted(lines) != sorted(LINES):
        figures.failures.append(f"{workdir.name}: out.txt holds {lines}")
        return
    figures.completed += 1
    figures.completed_after_adoption += int(adopted)


def run_trials(n: int, seed: int, root: Path, **kw: Any) -> Figures:
    rng = random.Random(seed)
    figures = Figures()
    started = time.monotonic()
    for i in range(n):
        workdir = root / f"trial-{i:03d}"
        workdir.mkdir()
        trial(workdir, rng, figures, **kw)
    figures.seconds = round(time.monotonic() - started, 1)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = run_trials(a.trials, a.seed, Path(tmp))
    print(json.dumps(asdict(figures), indent=2))


if __name__ == "__main__":
    main()
