"""`clawtower init [DIR]`: write a starting project, the files of `clawtower/project/`
(package data), into DIR: a commented clawtower.yaml, a flow's simulator script, a Lobster
workflow with an approval gate and a small expert package.

It never writes over anything: every target is checked before the first write, and one
that exists (or a folder in the way that is a file) refuses the whole command with one line
naming it, so a refused init leaves the disk as it was (DIR is not even created).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

# The templates are found and written by the handler (core.assets, core.files): `clawtower
# --help` builds this parser and loads neither.

SKIP = frozenset({"__pycache__", ".DS_Store"})  # never part of a project, if a build left one


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "init", help="write a starting project (config, agents, a flow, a workflow, an expert)",
        description="Write a starting project into DIR (default: the current folder): a"
                    " commented clawtower.yaml, a flow, a workflow with an approval gate and"
                    " a small expert package. Nothing existing is ever overwritten.")
    p.add_argument("dir", nargs="?", default=".", metavar="DIR",
                   help="where to write it (created if missing; default: .)")
    p.set_defaults(handler=cmd_init)


def templates() -> list[Path]:
    """The project's files, relative to its folder, the config first and then in path order
    (package data: a wheel installed anywhere has them, so never a path from __file__)."""
    from clawtower.core.assets import asset

    root = asset("project")
    found = [p.relative_to(root) for p in root.rglob("*")
             if p.is_file() and not SKIP.intersection(p.relative_to(root).parts)
             and p.suffix != ".pyc"]
    return sorted(found, key=lambda rel: (rel != Path("clawtower.yaml"), rel))


def conflict(target: Path, files: list[Path]) -> str | None:
    """The first path under `target` that init would have to overwrite (a file where one of
    `files` goes, or anything not a folder where a folder goes), or None when it is free."""
    for path in (target, *target.parents):  # DIR, or the first of its folders that exists
        if path.exists():
            if not path.is_dir():
                return f"{path}: exists and is not a folder"
            break
    folders = sorted({parent for rel in files for parent in rel.parents if parent.parts})
    for rel in folders:
        path = target / rel
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            return f"{path}: exists and is not a folder"
    for rel in files:
        path = target / rel
        if path.exists() or path.is_symlink():  # a dangling symlink would be written through
            return f"{path}: already exists"
    return None


def cmd_init(args: argparse.Namespace) -> int:
    from clawtower.core.assets import asset
    from clawtower.core.errors import ValidationError
    from clawtower.core.files import write_bytes

    target = Path(args.dir).expanduser().absolute()
    files = templates()
    problem = conflict(target, files)
    if problem is not None:
        raise ValidationError(f"{problem} (clawtower init writes nothing over an existing"
                              " file; nothing was written)")
    root = asset("project")
    for n, rel in enumerate(files):
        try:  # new=True: a file that appeared since the check is never replaced either
            write_bytes(target / rel, (root / rel).read_bytes(), mode=0o644, new=True)
        except FileExistsError:
            raise ValidationError(f"{target / rel}: already exists (it appeared while init"
                                  f" wrote; {n} files were written before it)") from None
    print(f"clawtower init: wrote {len(files)} files in {target}")
    for rel in files:
        print(f"  {rel.as_posix()}")
    print(next_steps(args.dir))
    return 0


def next_steps(given: str) -> str:
    """What to try next, as commands to paste: each one is run as printed by
    tests/cli/test_cli_init.py."""
    cd = "" if Path(given) == Path(".") else f"cd {shlex.quote(given)} && "
    return "\n".join([
        "next (this folder is the project's CLAWTOWER_HOME: its store, config and experts):",
        f"  {cd}export CLAWTOWER_HOME=\"$PWD\"",
        "  clawtower agents spec import && clawtower flow run lead"
        " \"Compare three ways to cache our API\" --wait --config flows.yaml",
        "  clawtower workflow run --file workflows/publish.lobster"
        " --args-json '{\"title\": \"Hello\"}'   # then: clawtower approve ID (its approvalId)",
        "  clawtower expert install packages/standup-notes && clawtower expert run"
        " standup-notes daily-standup --input notes=\"fixed login; CI red\"",
        "  clawtower   # the console on this project (README.md here says what each file is)",
    ])
