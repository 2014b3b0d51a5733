"""`python -m clawtower.tui STORE.db`: open the console directly (as `clawtower` does)."""

from __future__ import annotations

import argparse
import sys

from clawtower.core import ClawError
from clawtower.core.config import default_db

from .app import run_console


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawtower.tui", description=__doc__)
    parser.add_argument("db", nargs="?", default=str(default_db()), help="the store file")
    parser.add_argument("--no-engine", action="store_true",
                        help="attach to the store without driving tasks")
    parser.add_argument("--config", "--agents", dest="config", metavar="FILE",
                        help="the agents file: a clawtower.yaml or a simulator script")
    parser.add_argument("--operator", help="your name on approvals (default: $USER)")
    args = parser.parse_args(argv)
    try:
        return run_console(args.db, run_engine=not args.no_engine, agents_file=args.config,
                           operator=args.operator)
    except ClawError as exc:
        print(f"clawtower: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
