"""`clawtower expert`: install, list, show, remove, validate, prompt, bind, compile, run.

`validate PATH|NAME` prints every problem as `file:field: message` and exits 2 on errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from clawtower.core.errors import ValidationError

from . import boundary
from .common import add_config_option, db_parent, nothing_yet
from .expert_chat import chat as _chat
from .stores import cli_store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    e = subparsers.add_parser("expert", help="expert packages (openexperts): install,"
                              " validate, bind, compile, run")
    sub = e.add_subparsers(dest="expert_cmd", metavar="ACTION", parser_class=type(e),
                           required=True)
    c = [db_parent()]
    i = sub.add_parser("install", parents=c, help="copy a package dir or clone a git URL")
    i.add_argument("source", metavar="PATH|GIT_URL",
                   help="a package directory, or a git URL (file:// works offline)")
    i.set_defaults(handler=_install)
    ls = sub.add_parser("list", parents=c, help="installed experts")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=_list)
    sh = sub.add_parser("show", parents=c, help="one expert: processes, tools, bindings")
    sh.add_argument("name", help="installed expert")
    sh.add_argument("--json", action="store_true", help="print JSON")
    sh.set_defaults(handler=_show)
    up = sub.add_parser("update", parents=c, help="fetch again; a breaking change needs --force")
    up.add_argument("name", nargs="?", help="installed expert (or --all)")
    up.add_argument("--all", action="store_true", help="update every installed expert")
    up.add_argument("--force", action="store_true",
                    help="accept a major version or changed tools/triggers")
    up.add_argument("--json", action="store_true", help="print JSON")
    up.set_defaults(handler=_update)
    rm = sub.add_parser("remove", parents=c, help="uninstall (state and bindings are kept)")
    rm.add_argument("name", help="installed expert")
    rm.set_defaults(handler=_remove)
    v = sub.add_parser("validate", parents=c, help="check a package (and its bindings)")
    v.add_argument("target", metavar="PATH|NAME",
                   help="a package directory, or an installed expert (bindings checked too)")
    v.add_argument("--json", action="store_true", help="print JSON")
    v.set_defaults(handler=_validate)
    p = sub.add_parser("prompt", parents=c, help="the assembled system prompt, tokens per part")
    p.add_argument("name", help="installed expert")
    p.set_defaults(handler=_prompt)
    b = sub.add_parser("bind", parents=c, help="bind an abstract tool to an MCP server")
    b.add_argument("name", help="installed expert")
    b.add_argument("tool", help="abstract tool (from requires.tools)")
    b.add_argument("--mcp", metavar="COMMAND", help="stdio command of the MCP server")
    b.add_argument("--arg", action="append", default=[],
                   help="server argument (repeat; a relative path to an existing file is"
                        " recorded absolute)")
    b.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable for the server (repeat): its environment is otherwise"
                        " scrubbed")
    b.add_argument("--skill", metavar="NAME", help="bind to a skill instead (not executable by"
                   " compiled workflows here)")
    b.add_argument("--op", action="append", default=[], metavar="ABSTRACT=CONCRETE",
                   help="operation mapping (repeat)")
    b.add_argument("--arg-map", action="append", default=[], metavar="OP.ARG=NAME",
                   help="pass the operation's argument ARG to the server as NAME (repeat)")
    b.add_argument("--input-map", action="append", default=[], metavar="OP.INPUT=SOURCE",
                   help="where the compiled workflow takes the operation's INPUT from when no"
                        " earlier value has that name: a process input or an earlier value"
                        " (repeat)")
    b.set_defaults(handler=_bind)
    co = sub.add_parser("compile", parents=c, help="processes -> .lobster workflows")
    co.add_argument("name", help="installed expert")
    co.add_argument("--out", default=None, metavar="DIR",
                    help="where to write (default: $CLAWTOWER_HOME/expert-compiled/NAME)")
    co.set_defaults(handler=_compile)
    r = sub.add_parser("run", parents=c, help="run a process as a workflow run")
    r.add_argument("name", help="installed expert")
    r.add_argument("process", help="process name")
    r.add_argument("--input", action="append", default=[], metavar="K=V",
                   help="a process input (repeat)")
    r.set_defaults(handler=_run)
    le = sub.add_parser("learn", parents=c, help="propose a learning (learning.approval"
                        " decides: auto persists, confirm asks, manual drafts)")
    le.add_argument("name", help="installed expert")
    le.add_argument("--scope", default="package", help="package or a function name")
    le.add_argument("--title", required=True, help="one line naming the learning")
    le.add_argument("--observation", required=True, help="what happened")
    le.add_argument("--correction", required=True, help="what to do instead")
    le.add_argument("--source", default="", help="where it came from (process, step)")
    le.add_argument("--confidence", default="medium", choices=("high", "medium", "low"),
                    help="how sure the proposer is")
    le.set_defaults(handler=_learn)
    ln = sub.add_parser("learnings", parents=c, help="rebuild and list the learnings files")
    ln.add_argument("name", help="installed expert")
    ln.add_argument("--json", action="store_true", help="print JSON")
    ln.set_defaults(handler=_learnings)
    st = sub.add_parser("state", parents=c, help="record new state notes and rebuild the"
                        " state files from their events")
    st.add_argument("name", help="installed expert")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(handler=_state)
    tm = sub.add_parser("timeouts", parents=c, help="apply policy.approval.timeout to"
                        " overdue confirm gates (run it from cron or a loop)")
    tm.add_argument("--json", action="store_true", help="print JSON")
    tm.set_defaults(handler=_timeouts)
    ch = sub.add_parser("chat", parents=c, help="a session with the expert (its prompt and"
                        " bound tools): one --message, or one message per stdin line")
    ch.add_argument("name", help="installed expert")
    ch.add_argument("--message", "-m", default=None, metavar="TEXT",
                    help="send one message, print the reply and exit")
    ch.add_argument("--model", default=None, metavar="PROVIDER/MODEL",
                    help="model override for the session")
    ch.add_argument("--timeout", type=float, default=600.0, metavar="S",
                    help="seconds to wait for each reply (default 600)")
    ch.add_argument("--json", action="store_true",
                    help="print each reply as a JSON line {session, reply, status, ...}")
    add_config_option(ch)
    ch.set_defaults(handler=_chat)
    rg = sub.add_parser("registry", parents=c, help="experts for routing: names, outputs")
    rg.add_argument("--json", action="store_true", help="print JSON")
    rg.set_defaults(handler=_registry)


def _install(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home

    pkg = home.install(args.source)
    print(f"installed {pkg.name} {pkg.version} at {pkg.root}")
    for w in pkg.warnings:
        print(str(w), file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home

    rows = [{"name": p.name, "version": p.version, "description": p.description,
             "errors": len(p.errors), "warnings": len(p.warnings)} for p in home.installed()]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        nothing_yet("experts installed", "clawtower expert install DIR")
    else:
        for r in rows:
            status = "ok" if not r["errors"] else f"{r['errors']} errors"
            print(f"{r['name']}\t{r['version']}\t{status}\t{r['description']}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.bindings import bindings_path, load_bindings
    from clawtower.core.experts.package import load_package
    from clawtower.core.experts.prompt import resolved_tiers

    pkg = load_package(home.package_dir(args.name))
    binds = load_bindings(bindings_path(args.name))
    out: dict[str, Any] = {
        "name": pkg.name, "version": pkg.version, "description": pkg.description,
        "root": str(pkg.root), "workspace": str(home.workspace(pkg.name)),
        "processes": {n: d.description for n, d in pkg.processes.items()},
        "functions": {n: d.description for n, d in pkg.functions.items()},
        "tools": {t: _bound(binds.get(t)) for t in pkg.required_tools()},
        "approval": resolved_tiers(pkg), "problems": [str(p) for p in pkg.problems]}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(_show_text(out))
    return 0


def _show_text(out: dict[str, Any]) -> str:
    """`expert show` for a reader: a heading, then one indented line per process, function,
    tool binding, approval tier and problem (`--json` has the same fields as data)."""
    lines = [f"{out['name']} {out['version']}  {out['description']}",
             f"  root: {out['root']}", f"  workspace: {out['workspace']}"]

    def section(title: str, rows: list[str], none: str = "none") -> None:
        lines.append(f"{title}:")
        lines.extend(f"  {r}" for r in rows) if rows else lines.append(f"  ({none})")

    section("processes", [f"{n}: {d}" for n, d in out["processes"].items()])
    section("functions", [f"{n}: {d}" for n, d in out["functions"].items()])
    bind = f"not bound (clawtower expert bind {out['name']}"
    section("tools", [f"{t}: {b or f'{bind} {t} ...)'}" for t, b in out["tools"].items()],
            "none required")
    section("approval", [f"{tier}: {', '.join(names)}"
                         for tier, names in out["approval"].items() if names])
    section("problems", list(out["problems"]))
    return "\n".join(lines)


def _bound(b: Any) -> str | None:
    if b is None:
        return None
    return f"mcp {b.server.name}" if b.server is not None else f"skill {b.skill}"


def _update(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home

    if bool(args.name) == bool(args.all):
        raise ValidationError("expert update: give NAME or --all")
    names = [p.name for p in home.installed()] if args.all else [args.name]
    results = {n: home.update(n, force=args.force) for n in names}
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for n, d in results.items():
            print(f"updated {n}: {d['from']} -> {d['to']}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home

    home.remove(args.name)
    print(f"removed {args.name}")
    return 0


async def _validate_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.bindings import binding_problems, bindings_path, load_bindings
    from clawtower.core.experts.package import load_package, operations_named, steps_of
    from clawtower.core.experts.tiers import shared_warnings

    if not args.target.strip():
        raise ValidationError("PATH|NAME: empty (give a package directory or an installed"
                              " expert's name)")
    target = Path(args.target)
    installed = not target.exists()
    pkg = load_package(home.package_dir(args.target) if installed else target)
    lines = [str(p) for p in pkg.problems]
    shared: list[str] = []
    bad: list[str] = []  # the tools whose binding has a problem (not the package's fault)
    if installed and not pkg.errors:
        ops: dict[str, list[str]] = {}
        for proc in pkg.processes.values():
            for st in steps_of(proc.body):
                for t, o in operations_named(st.text):
                    if t in pkg.tools and o not in ops.setdefault(t, []):
                        ops[t].append(o)
        try:
            bindings = load_bindings(bindings_path(pkg.name))
            found = await binding_problems(pkg.required_tools(), ops, bindings)
            lines += [line for _, line in found]
            bad = list(dict.fromkeys(tool for tool, _ in found))
            shared = shared_warnings(pkg, bindings)  # warned, not failed (issue 34.2)
        except ValidationError as exc:  # the bindings file itself
            lines.append(str(exc))
            bad = ["bindings.yaml"]
    failed = bool(pkg.errors) or (installed and len(lines) > len(pkg.problems))
    n = len(lines)  # the problems; the warnings below do not fail the package
    lines += [f"warning: {w}" for w in shared]
    if args.json:
        print(json.dumps({"errors": [str(p) for p in pkg.errors], "problems": lines}))
    else:
        for line in lines:
            print(line)
        if not lines:
            print(f"{pkg.name}: valid")
    if failed and pkg.errors:  # the report is the output; stderr says in one line what failed
        sys.stderr.write(f"clawtower: error: {boundary.one_line(args.target)}: {n} problem"
                         f"{'' if n == 1 else 's'} (not a valid expert package)\n")
    elif failed:  # the package is valid: what fails is how its tools are bound
        which = ", ".join(bad)
        sys.stderr.write(f"clawtower: error: {boundary.one_line(args.target)}: {n} binding"
                         f" problem{'' if n == 1 else 's'} (binding {which}; the package is"
                         f" valid: fix with clawtower expert bind {pkg.name}"
                         f" {bad[0] if len(bad) == 1 else 'TOOL'} ...)\n")
    return 2 if failed else 0


def _validate(args: argparse.Namespace) -> Awaitable[int]:
    return _validate_async(args)


def _prompt(args: argparse.Namespace) -> int:
    from clawtower.core.agents.tokens import count_tokens
    from clawtower.core.experts import home
    from clawtower.core.experts.package import load_package
    from clawtower.core.experts.prompt import assemble, render

    pkg = load_package(home.package_dir(args.name))
    parts = assemble(pkg, home.workspace(pkg.name))
    print(render(parts), end="")
    total = 0
    for p in parts:
        n = count_tokens(p.text)
        total += n
        print(f"{p.title}: {n} tokens", file=sys.stderr)
    print(f"total: {total} tokens", file=sys.stderr)
    return 0


def _bind(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.bindings import load_bindings, write_binding
    from clawtower.core.experts.package import load_package
    from clawtower.core.experts.tiers import shared_warnings
    from clawtower.core.limits import printable

    declared = load_package(home.package_dir(args.name)).required_tools()
    if args.tool not in declared:  # a binding for a name the package never uses
        raise ValidationError(
            f"expert bind: {args.name} declares no tool {printable(args.tool, 80)!r}"
            f" (requires.tools: {', '.join(declared) or 'none'})")
    ops: dict[str, str] = {}
    for item in args.op:
        k, sep, v = item.partition("=")
        if not sep or not k or not v:
            raise ValidationError(f"--op {item!r}: expected ABSTRACT=CONCRETE")
        ops[k] = v
    if bool(args.mcp) == bool(args.skill):
        raise ValidationError("expert bind: give exactly one of --mcp COMMAND or --skill NAME")
    raw: dict[str, Any] = ({"type": "mcp", "command": args.mcp, "args": args.arg}
                           if args.mcp else {"type": "skill", "skill": args.skill})
    if args.env:
        if not args.mcp:
            raise ValidationError("expert bind: --env is for an MCP server (--mcp)")
        raw["env"] = {}
        for item in args.env:
            k, sep, v = item.partition("=")
            if not sep or not k:
                raise ValidationError(f"--env {printable(item, 80)!r}: expected NAME=VALUE")
            raw["env"][k] = v
    maps = {"args": _op_maps("--arg-map", args.arg_map),
            "inputs": _op_maps("--input-map", args.input_map)}
    if ops or any(maps.values()):
        raw["operations"] = _operations(ops, maps)
    p = write_binding(args.name, args.tool, raw)
    print(f"bound {args.name}:{args.tool} in {p}")
    pkg = load_package(home.package_dir(args.name))
    for w in shared_warnings(pkg, {k: b for k, b in load_bindings(p).items()
                                   if k == args.tool}):
        print(f"warning: {w}", file=sys.stderr)  # several operations on one tool (34.2)
    if home.compiled_dir(args.name).exists():  # compiled steps carry its input sources
        for path in home.compile_all(args.name):
            print(f"recompiled {path}")
    return 0


def _op_maps(option: str, items: list[str]) -> dict[str, dict[str, str]]:
    """`OP.KEY=VALUE` items -> {op: {key: value}}; a malformed one names the option."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        left, sep, value = item.partition("=")
        op, dot, key = left.partition(".")
        if not (sep and dot and op and key and value):
            raise ValidationError(f"{option} {item!r}: expected OP.NAME=VALUE")
        out.setdefault(op, {})[key] = value
    return out


def _operations(ops: dict[str, str], maps: dict[str, dict[str, dict[str, str]]]
                ) -> dict[str, Any]:
    """The binding's `operations:`: a plain rename stays a string; an operation with argument
    or input mappings becomes `{tool, args, inputs}`."""
    out: dict[str, Any] = dict(ops)
    for field, by_op in maps.items():
        for op, mapping in by_op.items():
            entry = out.get(op)
            if not isinstance(entry, dict):
                entry = out[op] = {"tool": entry or op}
            entry[field] = mapping
    return out


def _compile(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.compile import CompileError

    try:
        paths = home.compile_all(args.name, Path(args.out) if args.out else None)
    except CompileError as exc:
        raise ValidationError(str(exc)) from None
    for p in paths:
        print(p)
    return 0


async def _run_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts.run import load_process, run_process
    from clawtower.core.workflows.service import exit_code, render

    inputs: dict[str, Any] = {}
    for item in args.input:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValidationError(f"--input {item!r}: expected KEY=VALUE")
        inputs[k] = v
    load_process(args.name, args.process)  # an unknown process fails before the store opens
    async with cli_store(args.db) as store:
        envelope = await run_process(store, args.name, args.process, inputs, by=_operator())
    print(render(envelope))
    return exit_code(envelope)


def _run(args: argparse.Namespace) -> Awaitable[int]:
    return _run_async(args)


async def _learn_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.learning import propose
    from clawtower.core.experts.package import load_package

    pkg = load_package(home.package_dir(args.name))
    async with cli_store(args.db) as store:
        out = await propose(store, pkg, home.workspace(pkg.name), scope=args.scope,
                            title=args.title, observation=args.observation,
                            correction=args.correction, source=args.source,
                            confidence=args.confidence, by=_operator())
    if out["approval_id"]:
        print(f"proposed: approval {out['approval_id']} (clawtower approve"
              f" {out['approval_id']})")
    else:
        print(f"{'persisted' if out['tier'] == 'auto' else 'drafted'} ({out['tier']})")
    return 0


def _learn(args: argparse.Namespace) -> Awaitable[int]:
    return _learn_async(args)


def _print_counts(counts: dict[str, int], as_json: bool, unit: str) -> None:
    """What a sync wrote: JSON, or a `key: n unit` line each (learnings, state)."""
    if as_json:
        print(json.dumps(counts))
    else:
        for key, n in counts.items():
            print(f"{key}: {n} {unit}")


async def _learnings_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home
    from clawtower.core.experts.learning import project
    from clawtower.core.experts.package import load_package

    pkg = load_package(home.package_dir(args.name))
    async with cli_store(args.db) as store:
        counts = await project(store, pkg, home.workspace(pkg.name))
    _print_counts(counts, args.json, "entries")
    return 0


def _learnings(args: argparse.Namespace) -> Awaitable[int]:
    return _learnings_async(args)


async def _state_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home, state
    from clawtower.core.experts.package import load_package

    pkg = load_package(home.package_dir(args.name))
    home.init_state(pkg)
    async with cli_store(args.db) as store:
        counts = await state.sync(store, pkg, home.workspace(pkg.name), by=_operator())
    _print_counts(counts, args.json, "notes")
    return 0


def _state(args: argparse.Namespace) -> Awaitable[int]:
    return _state_async(args)


def _operator() -> str:
    from .common import operator_name

    return operator_name()


async def _timeouts_async(args: argparse.Namespace) -> int:
    from clawtower.core.experts.timeouts import sweep

    async with cli_store(args.db) as store:
        done = await sweep(store)
    if args.json:
        print(json.dumps(done))
    else:
        for d in done:
            print(f"{d['approval']} ({d['run']}): {d['action']}")
    return 0


def _timeouts(args: argparse.Namespace) -> Awaitable[int]:
    return _timeouts_async(args)


def _registry(args: argparse.Namespace) -> int:
    from clawtower.core.experts import home

    reg = home.registry()
    if args.json:
        print(json.dumps(reg, indent=2))
    elif not reg:
        nothing_yet("experts installed", "clawtower expert install DIR")
    else:
        for e in reg:
            print(f"{e['name']}: {e['description']} (outputs: {', '.join(e['outputs'])})")
    return 0

