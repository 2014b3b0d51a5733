"""SIGKILL a test run holding servers, again and again, and count what it left behind: the
README's "what is killed" figures (issue 27). Each round is tests/test_run_reaper.py's
`kill_a_run`: a child pytest run (tests/helpers/held_servers.py) holds a pgserver PostgreSQL
server, the llama.cpp server (with --llama, when the peer is installed), a child in its own
session without the run's environment and a daemon; its pytest process is killed and the
processes and folders still there after 15 s are counted.

    .venv/bin/python scripts/kill_test_runs.py [--rounds N] [--llama]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "helpers")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--llama", action="store_true", help="hold the llama.cpp server too")
    args = ap.parse_args()
    from test_run_reaper import kill_a_run

    held: collections.Counter[str] = collections.Counter()
    left: collections.Counter[str] = collections.Counter()
    folders = 0
    slowest = 0.0
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="clawtower-killrun-") as tmp:
            out = kill_a_run(Path(tmp), workers=i % 2, llama=args.llama)
        held.update(out["held"])  # type: ignore[arg-type]
        left.update(out["left"])  # type: ignore[arg-type]
        folders += len(out["folders_left"])  # type: ignore[arg-type]
        slowest = max(slowest, float(out["seconds"]))  # type: ignore[arg-type]
        print(f"round {i + 1} ({i % 2} xdist workers): {out}", flush=True)
    print(f"{args.rounds} runs killed with SIGKILL; processes held {dict(held)};"
          f" left after 15 s: {sum(left.values())} {dict(left)}; folders left: {folders};"
          f" all gone within {slowest:.1f} s")
    return 1 if left or folders else 0


if __name__ == "__main__":
    sys.exit(main())
