"""Helpers shared by the benchmark scripts: arguments, statistics, tables, JSON, machine facts.

The benchmarks are scripts, not tests. Each runs our workload and its peer or floor in ONE
process run, interleaved over several repetitions, and reports medians and paired ratios:
on a shared, noisy 2-core machine only figures measured side by side in the same run hold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as `python benchmarks/bench_x.py` from anywhere
    sys.path.insert(0, str(REPO))


def parser(description: str, reps: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: small sizes, one repetition")
    p.add_argument("--reps", type=int, default=None,
                   help=f"repetitions of every workload (default {reps}; 1 with --quick)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--dir", metavar="DIR",
                   help="folder for the database files (default: a fresh temporary folder,"
                        " removed afterwards); it must be on a real disk for fsync to count")
    p.set_defaults(default_reps=reps)
    return p


def reps_of(args: argparse.Namespace) -> int:
    if args.reps is not None:
        return max(1, int(args.reps))
    return 1 if args.quick else int(args.default_reps)


@contextlib.contextmanager
def work_dir(args: argparse.Namespace) -> Iterator[Path]:
    if args.dir:
        d = Path(args.dir)
        d.mkdir(parents=True, exist_ok=True)
        yield d
        return
    d = Path(tempfile.mkdtemp(prefix="clawtower-bench-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


# ----------------------------------------------------------------------------- statistics


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank-with-interpolation percentile (q in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    if len(s) == 1:
        return float(s[0])
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (k - lo))


def spread(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    return f"{fmt_num(min(xs))}–{fmt_num(max(xs))}"


def fmt_num(x: float) -> str:
    if x != x:  # nan
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


# ----------------------------------------------------------------------------- output


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    print(f"\n{title}")
    line = "  ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in cells[1:]:
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, w) in enumerate(zip(r, widths, strict=True))))


def latency_report(title: str, results: dict[str, list[float]], key: str, what: str,
                   target_ms: float, floor_name: str, json_path: str | None) -> None:
    """A p50/p90/p99 table of `results` (ms), the line that compares `key`'s p50 with its
    target and with the floor's p50, and the JSON file when asked for."""
    rows = [[k, len(v), fmt_num(percentile(v, 50)), fmt_num(percentile(v, 90)),
             fmt_num(percentile(v, 99))] for k, v in results.items()]
    print_table(title, ["", "n", "p50", "p90", "p99"], rows)
    p50 = percentile(results[key], 50)
    fl = percentile(results["floor"], 50)
    print(f"\n{what} p50 {fmt_num(p50)} ms (target <= {target_ms:g} ms:"
          f" {'met' if p50 <= target_ms else 'NOT met'}); {floor_name} p50 {fmt_num(fl)} ms;"
          f" ratio {fmt_num(p50 / fl) if fl else '-'}x")
    write_json(json_path, {"results": {k: {"p50": percentile(v, 50), "p99": percentile(v, 99),
                                           "n": len(v)} for k, v in results.items()},
                           "machine": machine_info()})


def write_json(path: str | None, data: dict[str, Any]) -> None:
    if not path:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    print(f"\nJSON written to {path}")


def machine_info(db_dir: Path | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    with contextlib.suppress(Exception):
        import aiosqlite

        info["aiosqlite"] = aiosqlite.__version__
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    if db_dir is not None:
        info["db_dir"] = str(db_dir)
        with contextlib.suppress(OSError):
            best = ""
            fstype = "?"
            real = str(Path(db_dir).resolve())
            for line in Path("/proc/mounts").read_text().splitlines():
                parts = line.split()
                if len(parts) >= 3 and real.startswith(parts[1]) and len(parts[1]) > len(best):
                    best, fstype = parts[1], parts[2]
            info["db_fs"] = fstype
    return info


def print_machine(info: dict[str, Any]) -> None:
    print(f"machine: {info.get('cpus')} cpus ({info.get('cpu', '?')}), python {info['python']},"
          f" SQLite {info['sqlite']}, aiosqlite {info.get('aiosqlite', '?')},"
          f" db files on {info.get('db_fs', '?')} ({info.get('db_dir', '?')})")


# ----------------------------------------------------------------------------- memory


def _status_kib(field: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_mib() -> float:
    return _status_kib("VmRSS") / 1024.0


def peak_rss_mib() -> float:
    """The process's peak RSS (VmHWM): since start, or since the last reset_peak_rss()."""
    return _status_kib("VmHWM") / 1024.0


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
