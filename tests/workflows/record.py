"""Record the real Lobster CLI's normalised results as the golden files expected/NAME.json.

    .venv/bin/python tests/workflows/record.py            # every case
    .venv/bin/python tests/workflows/record.py CASE...    # just these
    .venv/bin/python tests/workflows/record.py --clawtower CASE...
        # write expected-clawtower/NAME.json from clawtower's result (a documented deviation)
    .venv/bin/python tests/workflows/record.py --check     # re-run, report drift, write nothing

Install the CLI first: scripts/install-peers.sh lobster.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness as h


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*")
    p.add_argument("--clawtower", action="store_true",
                   help="record clawtower's result into expected-clawtower/")
    p.add_argument("--check", action="store_true", help="compare only, write nothing")
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args()
    cli: h.Cli
    if a.clawtower:
        cli, out_dir = h.ClawtowerCli(), h.EXPECTED_CLAWTOWER
    else:
        missing = h.lobster_missing()
        if missing:
            print(f"cannot record: {missing}")
            return 1
        cli, out_dir = h.LobsterCli(), h.EXPECTED
    cases = h.load_cases()
    if a.cases:
        wanted = set(a.cases)
        unknown = wanted - {c.name for c in cases}
        if unknown:
            print(f"unknown cases: {sorted(unknown)}")
            return 1
        cases = [c for c in cases if c.name in wanted]
    runnable = []
    for c in cases:
        why = h.case_unavailable(c)
        if why:
            print(f"skip {c.name}: {why}")
        else:
            runnable.append(c)
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = list(pool.map(lambda c: h.run_case(c, cli), runnable))
    out_dir.mkdir(parents=True, exist_ok=True)
    drift = 0
    for c, res in zip(runnable, results, strict=True):
        path = out_dir / f"{c.name}.json"
        text = h.dump(res)
        old = path.read_text(encoding="utf-8") if path.exists() else None
        if a.check:
            same = old == text
            drift += not same
            print(f"{'same ' if same else 'DRIFT'} {c.name}")
            continue
        if old != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(h.REPO)}")
    if a.check and drift:
        print(f"{drift} case(s) differ from their golden files")
    return 1 if drift else 0


if __name__ == "__main__":
    raise SystemExit(main())
