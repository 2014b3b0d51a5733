"""Where installed experts live and what installing, compiling and running one does.

Packages: `$CLAWTOWER_HOME/experts/<name>/` (copied, or cloned from a git URL; `file://`
works offline). Runtime workspace (state, scratch, learnings):
`$CLAWTOWER_HOME/expert-state/<name>/`. Compiled workflows:
`$CLAWTOWER_HOME/expert-compiled/<name>/<process>.lobster`. A package with validation errors
is never installed; a symlink anywhere in it is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .. import config, files
from ..errors import NotFound, ValidationError
from .bindings import bindings_path, load_bindings
from .compile import compile_process, dump, write
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


def _stage(source: str, stage: Path, shown: str | None = None) -> Package:
    """Clone or copy `source` to `stage` and load it; raise ValidationError if it has errors
    or symlinks. Errors name the source as the user wrote it (`shown`), not as resolved."""
    shown = source if shown is None else shown
    if _is_git(source):
        r = subprocess.run(["git", "clone", "-q", "--", source, str(stage)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise ValidationError(f"{source}: git clone failed: "
                                  f"{(r.stderr or r.stdout).strip()[:300]}")
    else:
        src = Path(source)
        if not src.exists():
            raise ValidationError(f"{shown}: no such directory")
        if not src.is_dir():
            raise ValidationError(f"{shown}: not a directory (an expert package is a"
                                  " directory holding expert.yaml)")
        if not (src / "expert.yaml").is_file():
            raise ValidationError(f"{shown}:expert.yaml: missing (not an expert package)")
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
    return pkg


def _source_file(name: str) -> Path:
    return config.home() / "expert-config" / name / "source.json"


def install(source: str) -> Package:
    """Validate then copy/clone into the experts directory; raise ValidationError (naming
    every error) and leave nothing behind if the package does not load."""
    if not source.strip():
        raise ValidationError("PATH|GIT_URL: empty (give a package directory or a git URL)")
    made = [p for p in (experts_dir(), *experts_dir().parents) if not p.exists()]
    experts_dir().mkdir(parents=True, exist_ok=True)
    shown = source
    if not _is_git(source):
        source = str(Path(source).resolve())
    try:
        with tempfile.TemporaryDirectory(dir=experts_dir(), prefix=".install-") as tmp:
            stage = Path(tmp) / "pkg"
            pkg = _stage(source, stage, shown)
            dest = experts_dir() / pkg.name
            if dest.exists():
                raise ValidationError(f"expert {pkg.name!r}: already installed (clawtower"
                                      " expert update, or remove it first)")
            os.replace(stage, dest)
    except BaseException:
        # a refused install leaves the home as it was: the folders made for the staging
        # copy go again (rmdir: only while empty, so nothing anyone else put there)
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    files.write_text(_source_file(pkg.name),
                     json.dumps({"source": source, "git": _is_git(source)}),
                     check=json.loads)
    pkg = load_package(dest)
    init_state(pkg)
    write_registry()
    return pkg


def _trigger_set(pkg: Package) -> dict[str, str]:
    return {str(t.get("name")): json.dumps(t, sort_keys=True, default=str)
            for t in pkg.triggers()}


def changes(old: Package, new: Package) -> dict[str, Any]:
    """What an update changes that needs a human's --force: a major (or backwards) version,
    tools required, triggers."""
    from .checks import semver

    ov, nv = semver(old.version), semver(new.version)
    ot, nt = set(old.required_tools()), set(new.required_tools())
    otr, ntr = _trigger_set(old), _trigger_set(new)
    out: dict[str, Any] = {
        "from": old.version, "to": new.version,
        "major": ov is None or nv is None or nv[0] != ov[0] or nv < ov,
        "tools_added": sorted(nt - ot), "tools_removed": sorted(ot - nt),
        "triggers_added": sorted(set(ntr) - set(otr)),
        "triggers_removed": sorted(set(otr) - set(ntr)),
        "triggers_changed": sorted(k for k in set(otr) & set(ntr) if otr[k] != ntr[k]),
    }
    out["needs_force"] = bool(out["major"] or out["tools_added"] or out["tools_removed"]
                              or out["triggers_added"] or out["triggers_removed"]
                              or out["triggers_changed"])
    return out


def update(name: str, *, force: bool = False) -> dict[str, Any]:
    """Fetch the package's source again (git for a cloned one, the directory for a copied
    one), validate it, and replace the installed copy; a breaking change (see `changes`)
    raises ValidationError listing it unless `force`. State and bindings are kept; new state
    templates are initialised; compiled workflows are regenerated if there were any."""
    d = package_dir(name)
    old = load_package(d)
    sf = _source_file(name)
    if not sf.exists():
        raise ValidationError(f"expert {name!r}: no recorded source (installed by hand?);"
                              " remove and install it again")
    src = json.loads(sf.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(dir=experts_dir(), prefix=".update-") as tmp:
        stage = Path(tmp) / "pkg"
        new = _stage(str(src["source"]), stage)
        if new.name != name:
            raise ValidationError(f"expert.yaml:name: the update renames {name!r} to"
                                  f" {new.name!r}; install it as a new expert instead")
        diff = changes(old, new)
        if diff["needs_force"] and not force:
            what = [f"version {diff['from']} -> {diff['to']}" + (" (major)" if diff["major"]
                                                                  else "")]
            for key in ("tools_added", "tools_removed", "triggers_added", "triggers_removed",
                        "triggers_changed"):
                if diff[key]:
                    what.append(f"{key.replace('_', ' ')}: {', '.join(diff[key])}")
            raise ValidationError(f"expert {name!r}: update needs --force ({'; '.join(what)})")
        old_dir = Path(tmp) / "old"
        os.replace(d, old_dir)
        os.replace(stage, d)
    pkg = load_package(d)
    diff["state_initialised"] = init_state(pkg)
    if compiled_dir(name).exists():
        diff["compiled"] = [str(p) for p in compile_all(name)]
    write_registry()
    return diff


def remove(name: str) -> None:
    shutil.rmtree(package_dir(name))
    shutil.rmtree(compiled_dir(name), ignore_errors=True)
    write_registry()


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
        files.write_bytes(dst, (pkg.root / rel).read_bytes())  # whole, never half-copied
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


def compiled_for_run(pkg: Package, process: str) -> Path:
    """The workflow file a run of `process` executes, addressed by its content: compiled in
    memory, written once per distinct content (package version, bindings, learnings) under
    `versions/<sha256>/` and never rewritten, so runs in parallel (two servers on one store)
    never race on a file and a paused run resumes the very file it started with."""
    if pkg.errors:
        raise ValidationError("; ".join(str(p) for p in pkg.errors[:20]))
    bfile = bindings_path(pkg.name)
    wf = compile_process(pkg, process, expert=pkg.name, workspace=workspace(pkg.name).resolve(),
                         bindings_file=bfile.resolve(), bindings=load_bindings(bfile))
    text = dump(wf)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    p = compiled_dir(pkg.name) / "versions" / digest / f"{process}.lobster"
    if not p.is_file():
        files.write_text(p, text)
    return p


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


def registry_markdown(entries: list[dict[str, Any]]) -> str:
    lines = ["# Available Experts", "",
             "<!-- generated by clawtower expert install/update/remove -->", ""]
    for e in entries:
        lines += [f"## {e['name']}", f"- **Description:** {e['description']}",
                  f"- **Version:** {e['version']}" + ("" if e["valid"] else " (invalid)")]
        if e["outputs"]:
            lines.append(f"- **Outputs:** {', '.join(e['outputs'])}")
        for proc, desc in e["processes"].items():
            trig = [t for t in e["triggers"] if t["process"] == proc]
            how = f" (trigger: {', '.join(str(t['name']) for t in trig)})" if trig else ""
            lines.append(f"- **Process** `{proc}`: {desc}{how}")
        lines.append(f"- **Run:** `clawtower expert run {e['name']} PROCESS --input k=v`")
        lines.append("")
    return "\n".join(lines)


def write_registry() -> Path:
    """`$CLAWTOWER_HOME/EXPERTS.md`: the registry as text another agent's context can hold."""
    p = config.home() / "EXPERTS.md"
    files.write_text(p, registry_markdown(registry()))
    return p
