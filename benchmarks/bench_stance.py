"""Stance parsing time per reply: the CommonMark parser beside the one before it and a regex.

Every meeting reply is parsed once. Three parsers, interleaved in one run over the same
replies:

  ours     core/meetings/stance.py: markdown-it-py decides what is the author's own prose
  before   the hand-written line scanner it replaced (loaded from git, `--before REV`;
           the column is skipped when git or the revision is not there)
  regex    the seed's floor: one case-insensitive regex search over the raw text, which
           credits quoted, fenced and look-alike markers alike

Replies are generated (seeded) the way models write them: paragraphs of prose, sometimes a
bullet list, a fenced snippet or a quote of another agent, the marker on the last line.
"typical" is ~1 KB, "long" ~6 KB; "hostile" are four ~40 KB replies built to make a Markdown
parser work (backtick runs, link openers, fullwidth quote prefixes, zero-width lines). Reports
the median microseconds per reply and ratios.

    .venv/bin/python benchmarks/bench_stance.py [--quick] [--reps N] [--before REV] [--json P]
"""

from __future__ import annotations

import importlib.util
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import (
    REPO,
    machine_info,
    median,
    parser,
    print_machine,
    print_table,
    reps_of,
    write_json,
)

from clawtower.core.meetings.stance import parse_stance

BEFORE = "4a84ebd"  # the last commit with the hand-written scanner
SEED_REGEX = re.compile(r"\[STANCE:\s*(AGREE|DISAGREE|NEUTRAL)\]", re.IGNORECASE)
WORDS = ["the", "migration", "plan", "looks", "sound", "but", "rollback", "path", "needs", "a",
         "budget", "and", "tests", "cover", "most", "of", "schema", "change", "although",
         "latency", "worries", "me", "little", "on", "cache", "side", "we", "should", "keep",
         "feature", "flag", "until", "canary", "is", "green"]


def sentence(r: random.Random) -> str:
    words = [r.choice(WORDS) for _ in range(r.randint(6, 18))]
    return " ".join(words).capitalize() + "."


def reply(r: random.Random, paragraphs: int) -> str:
    parts: list[str] = []
    for _ in range(paragraphs):
        parts.append("\n".join(" ".join(sentence(r) for _ in range(2))
                               for _ in range(r.randint(1, 3))))
        pick = r.random()
        if pick < 0.2:
            parts.append("\n".join(f"- {sentence(r)}" for _ in range(r.randint(2, 4))))
        elif pick < 0.3:
            parts.append("```python\n" + "\n".join(f"x = {i}  # {r.choice(WORDS)}"
                                                   for i in range(r.randint(2, 6))) + "\n```")
        elif pick < 0.4:
            parts.append(f"> {r.choice(['alice', 'bob'])} wrote: {sentence(r)}\n"
                         f"> [STANCE: {r.choice(['AGREE', 'DISAGREE'])}]")
    parts.append(f"[STANCE: {r.choice(['AGREE', 'DISAGREE', 'NEUTRAL'])}]")
    return "\n\n".join(parts)


def hostile(size: int) -> list[str]:
    """Replies of about `size` characters built to make a Markdown parser work: runs of
    backticks, link openers, fullwidth quote prefixes and zero-width lines."""
    units = ["`" * 7 + " x ", "[a](", "＞ x\n", "\u200bx\n"]
    return [unit * (size // len(unit)) + "\n[STANCE: AGREE]" for unit in units]


def regex_floor(text: str) -> str:
    found = SEED_REGEX.findall(text)
    return found[-1].upper() if found else "UNKNOWN"


def load_before(rev: str) -> ModuleType | None:
    """The parser as it was at `rev`, imported from `git show` (None when unavailable)."""
    try:
        source = subprocess.run(["git", "show", f"{rev}:core/meetings/stance.py"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"before: skipped ({rev} not available: {exc})")
        return None
    path = Path(tempfile.mkdtemp(prefix="clawtower-bench-")) / "stance_before.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("stance_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["stance_before"] = module
    spec.loader.exec_module(module)
    return module


def per_reply_us(fn: Callable[[str], object], texts: list[str]) -> float:
    start = time.perf_counter()
    for text in texts:
        fn(text)
    return (time.perf_counter() - start) / len(texts) * 1e6


def main() -> None:
    p = parser(__doc__ or "", reps=7)
    p.add_argument("--before", default=BEFORE, help=f"git revision of the old parser ({BEFORE})")
    args = p.parse_args()
    reps = reps_of(args)
    n = 100 if args.quick else 1_000
    info = machine_info()
    print_machine(info)
    r = random.Random(20261123)
    sets = {"typical": [reply(r, r.randint(2, 4)) for _ in range(n)],
            "long": [reply(r, r.randint(14, 20)) for _ in range(n // 4)],
            "hostile": hostile(10_000 if args.quick else 40_000)}
    parsers: dict[str, Callable[[str], object]] = {"ours": parse_stance, "regex": regex_floor}
    before = load_before(args.before)
    if before is not None:
        parsers["before"] = before.parse_stance
    out: dict[str, Any] = {"machine": info, "reps": reps, "replies": {}}
    rows = []
    for name, texts in sets.items():
        size = sum(len(t) for t in texts) / len(texts)
        times: dict[str, list[float]] = {k: [] for k in parsers}
        for rep in range(reps):
            order = list(parsers) if rep % 2 == 0 else list(reversed(parsers))
            for k in order:
                times[k].append(per_reply_us(parsers[k], texts))
        med = {k: median(v) for k, v in times.items()}
        out["replies"][name] = {"count": len(texts), "mean_chars": size,
                                **{f"{k}_us": v for k, v in med.items()}}
        rows.append([f"{name} ({size:,.0f} chars)", f"{med['ours']:.0f}",
                     f"{med['before']:.0f}" if "before" in med else "-",
                     f"{med['regex']:.1f}",
                     f"{med['ours'] / med['before']:.1f}x" if "before" in med else "-",
                     f"{med['ours'] / med['regex']:.0f}x"])
    print_table(f"stance parse time per reply, median of {reps} (µs)",
                ["replies", "ours", "before", "regex", "ours / before", "ours / regex"], rows)
    write_json(args.json, out)


if __name__ == "__main__":
    main()
