"""Where installed experts live and what installing, compiling and running one does.

Packages: `$CLAWTOWER_HOME/experts/<name>/` (copied, or cloned from a git URL; `file://`
works offline). Runtime workspace (state, scratch, learnings):
`$CLAWTOWER_HOME/expert-state/<name>/`. Compiled workflows:
`$CLAWTOWER_HOME/expert-compiled/<name>/<process>.lobster`. A package with validation errors
is never installed; a symlink anywhere in it is refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .. import config
from ..errors import NotFound, ValidationError
from .bindings import bindings_path, load_bindings
from .compile import compile_process, write
from .package import Package, load_package


def experts_dir() -> Path:
    return config.home() / "experts"


def workspace(name: str) -> Path:
    return config.home() / "expert-state" / name


def compiled_dir(name: str) -> Path:
    return config.home() / "expert-compiled" / name


def package_dir(name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValidationError(f"expert {name!r}: not an expert name")
    p = experts_dir() / name
    if not (p / "expert.yaml").is_file():
        raise NotFound(f"expert {name!r}: not installed (clawtower expert list)")
    return p


def installed() -> list[Package]:
    d = experts_dir()
    if not d.is_dir():
        return []
    return [load_package(p) for p in sorted(d.iterdir()) if (p / "expert.yaml").is_file()]


def _is_git(source: str) -> bool:
    return source.startswith(("file://", "https://", "http://", "git@", "ssh://")) or \
        source.endswith(".git")


def _symlinks(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink()]


def install(source: str) -> Package:
    """Validate then copy/clone into the experts directory; raise ValidationError (naming
    every error) and leave nothing behind if the package does not load."""
    experts_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=experts_dir(), prefix=".install-") as tmp:
        stage = Path(tmp) / "pkg"
        if _is_git(source):
            r = subprocess.run(["git", "clone", "-q", "--", source, str(stage)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise ValidationError(f"{source}: git clone failed: "
                                      f"{(r.stderr or r.stdout).strip()[:300]}")
        else:
            src = Path(source)
            if not (src / "expert.yaml").is_file():
                raise ValidationError(f"{source}:expert.yaml: missing (not an expert package)")
            links = _symlinks(src)
            if links:
                raise ValidationError(f"{links[0]}:file: symlinks are not installed (copy the"
                                      " file into the package)")
            shutil.copytree(src, stage, ignore=shutil.ignore_patterns(
                "scratch", "learnings", ".git"))
        links = _symlinks(stage)
        if links:
            raise ValidationError(f"{links[0]}:file: symlinks are not installed")
        pkg = load_package(stage)
        if pkg.errors:
            raise ValidationError("; ".join(str(p) for p in pkg.errors[:20]))
        dest = experts_dir() / pkg.name
        if dest.exists():
            raise ValidationError(f"expert {pkg.name!r}: already installed (clawtower expert"
                                  " update, or remove it first)")
        os.replace(stage, dest)
    pkg = load_package(dest)
    init_state(pkg)
    return pkg


def remove(name: str) -> None:
    shutil.rmtree(package_dir(name))
    shutil.rmtree(compiled_dir(name), ignore_errors=True)


def init_state(pkg: Package, *, new_session: bool = False) -> list[str]:
    """Copy state templates to the workspace: missing ones always, `scope: session` ones
    again when a session starts. Existing persistent state is never overwritten."""
    ws = workspace(pkg.name)
    written = []
    for rel, doc in pkg.state.items():
        dst = ws / rel
        scope = doc.meta.get("scope", "persistent")
        if dst.exists() and not (new_session and scope == "session"):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pkg.root / rel, dst)
        written.append(rel)
    (ws / "scratch").mkdir(parents=True, exist_ok=True)
    if pkg.section("learning").get("enabled") is True:
        (ws / "learnings").mkdir(parents=True, exist_ok=True)
    return written


def compile_all(name: str, out_dir: Path | None = None) -> list[Path]:
    pkg = load_package(package_dir(name))
    if pkg.errors:
        raise ValidationError("; ".join(str(p) for p in pkg.errors[:20]))
    bfile = bindings_path(name)
    bindings = load_bindings(bfile)
    out = out_dir or compiled_dir(name)
    paths = []
    for proc in pkg.processes:
        wf = compile_process(pkg, proc, expert=name, workspace=workspace(name).resolve(),
                             bindings_file=bfile.resolve(), bindings=bindings)
        paths.append(write(wf, out, proc))
    return paths


def registry() -> list[dict[str, Any]]:
    """What other agents route by: name, description, outputs, processes and triggers."""
    out = []
    for pkg in installed():
        out.append({
            "name": pkg.name, "version": pkg.version, "description": pkg.description,
            "outputs": [o for o in pkg.manifest.get("outputs") or [] if isinstance(o, str)],
            "processes": {n: d.description for n, d in pkg.processes.items()},
            "triggers": [{"name": t.get("name"), "type": t.get("type"),
                          "process": t.get("process")} for t in pkg.triggers()],
            "valid": not pkg.errors,
        })
    return out
