"""The README walks (issue 27): every fenced `sh` block the README marks runnable is run, in
order, in one fresh home, and each command's output is compared loosely with the comment
lines under it. A step that exits non-zero (unless `# exit N` says so) or prints something
else fails here, naming the README line.

The convention (README, "The command line", **README doctest**):
- a block is runnable when the line right before its ```sh fence is `<!-- doctest -->`;
- each line is a command (a trailing `\\` continues it; a `# ...` after a command is a shell
  comment and is not checked);
- a whole-line `# exit N` under a command is the exit code it must give (default 0);
- every other whole-line `# text` under a command is a line it must print (stdout or stderr),
  compared loosely: whitespace collapsed, every number matches any number, and `...` (or
  `…`) matches anything; the expected lines must appear in that order.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARK = "<!-- doctest -->"
STEP_TIMEOUT_S = 60


@dataclass
class Step:
    """One command of a runnable block, where it is in the README, and what it must do."""

    line: int
    command: str
    exit: int = 0
    expect: list[str] = field(default_factory=list)


def runnable_steps(text: str) -> list[Step]:
    """The commands of every block marked runnable, in README order."""
    lines = text.splitlines()
    steps: list[Step] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != MARK:
            i += 1
            continue
        fence = i + 1
        if fence >= len(lines) or lines[fence].strip() not in ("```sh", "```bash"):
            raise ValueError(f"README.md:{i + 1}: {MARK} must be right before a ```sh fence")
        i = fence + 1
        pending = ""
        while i < len(lines) and lines[i].strip() != "```":
            raw = lines[i].rstrip()
            stripped = raw.strip()
            if pending:
                pending += "\n" + raw
            elif stripped.startswith("#") and steps and steps[-1].line > fence:
                _expectation(steps[-1], stripped, i + 1)
            elif stripped.startswith("#"):
                raise ValueError(f"README.md:{i + 1}: an expected line before any command")
            elif stripped:
                pending = raw
                start = i + 1
            if pending and not pending.endswith("\\"):
                steps.append(Step(start, pending))
                pending = ""
            i += 1
        if i >= len(lines):
            raise ValueError(f"README.md:{fence + 1}: a runnable block is never closed")
        i += 1
    return steps


def _expectation(step: Step, comment: str, line: int) -> None:
    text = comment[1:].strip()
    code = re.fullmatch(r"exit (\d+)", text)
    if code:
        step.exit = int(code.group(1))
    elif text:
        step.expect.append(text)


def _loose(text: str) -> str:
    return " ".join(re.sub(r"\d+(?:\.\d+)?", "0", text).split())


def printed(expected: str, output: list[str], start: int = 0) -> int | None:
    """The index of the first output line at or after `start` that the expected line
    matches loosely, or None."""
    parts = [_loose(p) for p in re.split(r"\.\.\.|…", expected) if p.strip()]
    for n in range(start, len(output)):
        have, at = _loose(output[n]), 0
        for part in parts:
            found = have.find(part, at)
            if found < 0:
                break
            at = found + len(part)
        else:
            return n
    return None


def check(step: Step, code: int, output: str) -> list[str]:
    """What is wrong with one step's result (empty: it did what the README says)."""
    where = f"README.md:{step.line}: `{step.command}`"
    problems = []
    if code != step.exit:
        problems.append(f"{where} exited {code}, the README expects {step.exit}")
    lines, at = output.splitlines(), 0
    for want in step.expect:
        n = printed(want, lines, at)
        if n is None:
            problems.append(f"{where} did not print {want!r}")
        else:
            at = n + 1
    if problems:
        problems.append("its output was:\n" + output)
    return problems


def fresh_env(tmp: Path) -> dict[str, str]:
    """A new user's environment: a fresh home, this checkout's `clawtower`, nothing of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWTOWER_")}
    env.update(HOME=str(tmp / "user"), CLAWTOWER_HOME=str(tmp / "user" / ".clawtower"),
               CLAWTOWER_OPERATOR="readme", PYTHONUNBUFFERED="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    (tmp / "user").mkdir()
    return env


def fresh_checkout(tmp: Path) -> Path:
    """A working directory like a fresh clone's root: the README's relative paths
    (`examples/...`) resolve, and whatever a step writes (`flow export F-1 workspaces`)
    lands here, not in the repository."""
    work = tmp / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return work


def test_the_readme_walks(tmp_path: Path) -> None:
    steps = runnable_steps(README.read_text(encoding="utf-8"))
    assert len(steps) >= 5, "the README marks no runnable blocks"
    env, cwd = fresh_env(tmp_path), fresh_checkout(tmp_path)
    for step in steps:
        r = subprocess.run(["bash", "-c", step.command], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        problems = check(step, r.returncode, r.stdout + r.stderr)
        assert not problems, "\n".join(problems)


SAMPLE = """\
text

<!-- doctest -->
```sh
clawtower task create spec.yaml   # a shell comment
# T-1
clawtower task show T-99 \\
    --json
# exit 2
# task 'T-99': ...
```

```sh
not marked
```
"""


def test_the_convention_is_read_as_documented() -> None:
    a, b = runnable_steps(SAMPLE)
    assert (a.line, a.command, a.exit, a.expect) == (
        5, "clawtower task create spec.yaml   # a shell comment", 0, ["T-1"])
    assert (b.line, b.command, b.exit, b.expect) == (
        7, "clawtower task show T-99 \\\n    --json", 2, ["task 'T-99': ..."])


@pytest.mark.parametrize(("code", "output", "wrong"), [
    (0, "T-1\n", []),
    (0, "T-12\n", []),  # a number matches any number
    (1, "T-1\n", ["exited 1, the README expects 0"]),
    (0, "T-one\n", ["did not print 'T-1'"]),
    (0, "", ["did not print 'T-1'"]),
])
def test_a_step_that_does_something_else_fails(code: int, output: str,
                                               wrong: list[str]) -> None:
    problems = check(Step(5, "clawtower task create spec.yaml", 0, ["T-1"]), code, output)
    assert [p for p in problems if not p.startswith("its output")] == [
        f"README.md:5: `clawtower task create spec.yaml` {w}" for w in wrong]


def test_loose_matching() -> None:
    out = ["  root [done] lead · 0.91s · 398 tok · Briefing ready: revenue up 12%, costs flat"]
    assert printed("root [done] lead · 0.86s · 410 tok · Briefing ready: ...", out) == 0
    assert printed("root [done] writer · ...", out) is None
    assert printed("Briefing ready ... lead", out) is None  # parts keep their order
    assert printed("a", ["a", "b", "a"], start=1) == 2


def test_a_mark_must_sit_on_a_sh_fence() -> None:
    mislaid = re.escape("README.md:1: <!-- doctest --> must be right before")
    with pytest.raises(ValueError, match=mislaid):
        runnable_steps("<!-- doctest -->\n\n```sh\nls\n```\n")
    with pytest.raises(ValueError, match="never closed"):
        runnable_steps("<!-- doctest -->\n```sh\nls\n")
