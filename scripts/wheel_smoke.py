"""Install clawtower the way users do and use it from elsewhere (issue 41; `.ci/run` runs it).

Builds the sdist and the wheel (`python -m build`: the wheel is built from the sdist, so a
file missing from either fails here), checks that the wheel installs exactly one top-level
package (`clawtower`) plus its script, installs it into a fresh venv outside the checkout,
and from an empty temporary directory, with a fresh `$CLAWTOWER_HOME`, runs:
`clawtower --version`, the headless demo, `clawtower init`, the flow and the workflow that
`init` prints (the workflow's gate approved), and the console in a pseudo-terminal until its
first paint shows the Tasks mode in the shipped default theme's colours.

    .venv/bin/python scripts/wheel_smoke.py [--keep] [--wheel DIST.whl]

Prints one line per check with its time; exits 1 naming the first check that failed."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Failed(Exception):
    pass


def step(name: str, argv: list[str], *, cwd: Path, env: dict[str, str],
         timeout: float = 300, want: int = 0) -> str:
    t0 = time.monotonic()
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    took = time.monotonic() - t0
    if out.returncode != want:
        raise Failed(f"{name}: exit {out.returncode} (wanted {want})\n$ {' '.join(argv)}\n"
                     f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    print(f"ok  {name} ({took:.1f} s)", flush=True)
    return out.stdout


def build(tmp: Path) -> Path:
    dist = tmp / "dist"
    step("python -m build (sdist, then the wheel from it)",
         [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], cwd=tmp,
         env=dict(os.environ), timeout=600)
    wheels = sorted(dist.glob("clawtower-*.whl"))
    if len(wheels) != 1 or not list(dist.glob("clawtower-*.tar.gz")):
        raise Failed(f"build: expected one wheel and one sdist in {dist}: "
                     f"{sorted(p.name for p in dist.iterdir())}")
    return wheels[0]


def check_wheel(wheel: Path) -> str:
    """Exactly one top-level package of ours, its dist-info and the `clawtower` script; the
    shipped data (themes, the demo, examples, the init project) inside the package."""
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    info = [t for t in tops if t.endswith(".dist-info")]
    if tops - set(info) != {"clawtower"} or len(info) != 1:
        raise Failed(f"wheel: top-level entries {sorted(tops)} (want clawtower + dist-info)")
    for need in ("clawtower/themes/clawtower-dark.yaml", "clawtower/examples/demo/agents.yaml",
                 "clawtower/examples/workflows/release.lobster", "clawtower/tui/app.tcss",
                 "clawtower/project/clawtower.yaml"):
        if need not in names:
            raise Failed(f"wheel: {need} is missing")
    junk = [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".db"))]
    if junk:
        raise Failed(f"wheel: ships build leftovers: {junk[:5]}")
    eps = zipfile.ZipFile(wheel).read(f"{info[0]}/entry_points.txt").decode()
    if "clawtower = clawtower.cli.main:main" not in eps:
        raise Failed(f"wheel: the clawtower script is not clawtower.cli.main:main: {eps}")
    print(f"ok  the wheel holds one top-level package, clawtower ({len(names)} files)")
    return info[0]


def console_first_paint(env: dict[str, str], cwd: Path, bin_dir: Path) -> None:
    """The console in a pseudo-terminal: its first frame shows the Tasks mode painted in the
    shipped default theme's surface and panel colours (clawtower-dark; Textual's own theme
    if the themes did not ship)."""
    import pty

    theme = (bin_dir.parent / "lib").glob("python*/site-packages/clawtower/themes/"
                                           "clawtower-dark.yaml")
    text = next(iter(theme)).read_text(encoding="utf-8")
    wanted = []  # the theme's surface (the screen) and panel (the mode bar) as backgrounds
    for key in ("surface", "panel"):
        m = re.search(rf'^{key}:\s*"#([0-9a-fA-F]{{6}})"', text, re.M)
        if m is None:
            raise Failed(f"console: the shipped clawtower-dark theme has no {key}")
        rgb = ";".join(str(int(m.group(1)[i:i + 2], 16)) for i in (0, 2, 4))
        wanted.append(f"48;2;{rgb}m".encode())
    pid, fd = pty.fork()
    if pid == 0:  # the child: the console, as a user opens it
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update({**env, "TERM": "xterm-256color", "COLORTERM": "truecolor",
                           "COLUMNS": "110", "LINES": "32"})
        os.execv(str(bin_dir / "clawtower"), [str(bin_dir / "clawtower"), "console"])
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 32, 110, 0, 0))
    t0 = time.monotonic()
    seen = b""
    painted = False
    try:
        while time.monotonic() - t0 < 90:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
                plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen)
                if all(w in seen for w in wanted) and b"Tasks" in plain:
                    painted = True
                    break
        took = time.monotonic() - t0
        if not painted:
            plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][0-9A-Za-z]", "",
                           seen.decode("utf-8", "replace"))
            words = " ".join(w for w in re.split(r"[\s\u2500-\u257f]+", plain) if w)
            raise Failed(f"console: no first paint with the Tasks mode in clawtower-dark "
                         f"({wanted}) within 90 s; its words: {words[-1500:]}")
        os.write(fd, b"q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.waitstatus_to_exitcode(status) != 0:
                    raise Failed(f"console: exit {os.waitstatus_to_exitcode(status)} after q")
                break
            with contextlib.suppress(OSError):
                select.select([fd], [], [], 0.2) and os.read(fd, 65536)
        else:
            raise Failed("console: still running 20 s after q")
        print(f"ok  the console's first paint, the Tasks mode in clawtower-dark ({took:.1f} s)")
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)
        os.close(fd)


def init_commands(printed: str) -> list[str]:
    """The commands `clawtower init` tells a user to try next, as printed (indented lines
    starting with `clawtower`), comments cut."""
    out = []
    for line in printed.splitlines():
        text = line.strip().split("  #")[0].strip()
        if text.startswith("clawtower ") and line.startswith(" "):  # not the console alone
            out.append(text)
    return out


def run(tmp: Path, wheel: Path | None) -> None:
    wheel = wheel or build(tmp)
    info = check_wheel(wheel)
    venv = tmp / "venv"
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
           and not k.startswith("CLAWTOWER_")}
    step("a fresh venv", [sys.executable, "-m", "venv", str(venv)], cwd=tmp, env=env)
    bin_dir = venv / "bin"
    step("pip install the wheel (and its dependencies)",
         [str(bin_dir / "pip"), "install", "-q", str(wheel)], cwd=tmp, env=env, timeout=900)
    work = tmp / "elsewhere"
    work.mkdir()
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
           "CLAWTOWER_HOME": str(tmp / "home")}
    record = next((venv / "lib").glob(f"python*/site-packages/{info}/RECORD")).read_text()
    outside = sorted({r.split(",")[0].split("/")[0] for r in record.splitlines()}
                     - {"clawtower", info, ".."})
    if outside:
        raise Failed(f"site-packages: the wheel installed more than clawtower: {outside}")
    where = step("python imports clawtower from site-packages, not the checkout",
                 [str(bin_dir / "python"), "-c",
                  "import clawtower, importlib.util as u\n"
                  "from clawtower.core.assets import asset\n"
                  "print(clawtower.__file__); print(asset('themes'))\n"
                  "print([m for m in ('core', 'cli', 'tui') if u.find_spec(m)])"],
                 cwd=work, env=env)
    lines = where.splitlines()
    if not all("site-packages" in x for x in lines[:2]) or str(REPO) in where \
            or lines[2] != "[]":
        raise Failed(f"imports: {where}")
    version = step("clawtower --version", ["clawtower", "--version"], cwd=work, env=env)
    if not re.fullmatch(r"clawtower \d+\.\d+\.\d+\S*\n", version):
        raise Failed(f"--version printed {version!r}")
    demo = step("clawtower demo --headless --speed 0",
                ["clawtower", "demo", "--headless", "--speed", "0"], cwd=work, env=env,
                timeout=600)
    if "T-4" not in demo:
        raise Failed(f"demo: no T-4 in its summary:\n{demo[-2000:]}")
    printed = step("clawtower init proj", ["clawtower", "init", "proj"], cwd=work, env=env)
    proj = work / "proj"
    penv = {**env, "CLAWTOWER_HOME": str(proj)}
    commands = init_commands(printed)
    flows = [c for c in commands if " flow run " in c]
    workflows = [c for c in commands if " workflow run " in c]
    if not flows or not workflows:
        raise Failed(f"init: no flow or workflow command among what it printed:\n{printed}")
    for command in commands:
        if " workflow run " in command:
            continue
        for part in command.split(" && "):
            step(part, ["/bin/sh", "-c", part], cwd=proj, env=penv, timeout=300)
    paused = step(workflows[0], ["/bin/sh", "-c", workflows[0]], cwd=proj, env=penv,
                  timeout=300)
    envelope = json.loads(paused)
    approval = (envelope.get("requiresApproval") or {}).get("approvalId")
    if envelope.get("status") != "needs_approval" or not approval:
        raise Failed(f"workflow: did not pause at its approval gate: {paused[-2000:]}")
    step(f"clawtower approve {approval}", ["clawtower", "approve", approval], cwd=proj,
         env=penv, timeout=300)
    runs = json.loads(step("clawtower workflow list --json",
                           ["clawtower", "workflow", "list", "--json"], cwd=proj, env=penv))
    statuses = {r.get("name"): r.get("status") for r in runs}
    if statuses.get("publish") != "ok" or set(statuses.values()) != {"ok"}:
        raise Failed(f"workflow: not every run finished ok after the approval: {statuses}")
    console_first_paint(penv, proj, bin_dir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path, help="test this wheel instead of building one")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args()
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="clawtower-wheel-"))
    try:
        run(tmp, args.wheel.resolve() if args.wheel else None)
    except (Failed, subprocess.TimeoutExpired) as exc:
        print(f"FAILED {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"wheel smoke passed in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
