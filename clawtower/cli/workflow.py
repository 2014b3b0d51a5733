"""`clawtower workflow`: Lobster-compatible workflow runs (run, resume, list, show, graph).

`run` and `resume` mirror `lobster run --mode tool` / `lobster resume`: they print Lobster's
JSON envelope and exit 0 (ok, paused, cancelled), 1 (runtime error) or 2 (parse error), so
scripts written against Lobster port unchanged. `list`, `show`, `cancel` and `graph` follow
clawtower's own CLI conventions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from clawtower.core.errors import ClawError, ValidationError

# The core.workflows modules are imported by the handlers, not here: building the parser
# (every command, `--help` too) must not load the workflow engine.
from . import output
from .common import db_parent, nothing_yet
from .stores import cli_store

Handler = Callable[[argparse.Namespace], Awaitable[int]]
# core.workflows.graph.FORMATS, spelled out for the parser (tests/test_core_imports.py checks)
GRAPH_FORMATS = ("mermaid", "dot", "ascii")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    w = subparsers.add_parser(
        "workflow", help="Lobster-compatible workflows: run, resume, list, show, graph")
    sub = w.add_subparsers(dest="workflow_cmd", metavar="ACTION", parser_class=type(w),
                           required=True)
    c = [db_parent()]
    r = sub.add_parser("run", parents=c, help="run a workflow file; prints Lobster's envelope")
    r.add_argument("path", nargs="?", metavar="FILE", help="the workflow (or --file)")
    r.add_argument("--file", default=None, metavar="FILE", help="the workflow (Lobster's flag)")
    r.add_argument("--args-json", default=None, metavar="JSON",
                   help="the workflow's args, a JSON object")
    r.add_argument("--dry-run", action="store_true", help="print the plan to stderr, run nothing")
    r.add_argument("--mode", default="tool", help=argparse.SUPPRESS)  # Lobster's; always tool
    rs = sub.add_parser("resume", parents=c, help="approve, reject, answer or cancel a gate")
    rs.add_argument("--token", default=None, help="the resumeToken of the run's envelope")
    rs.add_argument("--id", default=None, metavar="APPROVAL_ID",
                    help="or the gate's approval id (see `clawtower approvals`)")
    rs.add_argument("--approve", "--decision", dest="approve", default=None, metavar="yes|no",
                    help="an approval gate: yes continues the run, no cancels it")
    rs.add_argument("--response-json", default=None, metavar="JSON",
                    help="an input gate: the answer, checked against its schema")
    rs.add_argument("--cancel", nargs="?", const="true", default=None, metavar="BOOL",
                    help="withdraw the gate and cancel the run")
    rs.add_argument("--by", default=None, metavar="NAME",
                    help="approver (default: $LOBSTER_APPROVAL_APPROVED_BY)")
    rr = sub.add_parser("rerun", parents=c, help="a new run from STEP on, reusing the recorded"
                        " outputs of the steps before it (README, Going back)")
    rr.add_argument("id", metavar="ID", help="the run to go back in, e.g. W-2")
    rr.add_argument("--from", dest="step", required=True, metavar="STEP",
                    help="the first step run again (its gates ask again)")
    rr.add_argument("--args-json", default=None, metavar="JSON",
                    help="the new run's args, a JSON object (default: the run's own)")
    ls = sub.add_parser("list", parents=c, help="workflow runs, newest first")
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    sh = sub.add_parser("show", parents=c, help="a run's steps, results and gate")
    sh.add_argument("id", metavar="ID", help="the run, e.g. W-2")
    sh.add_argument("--json", action="store_true", help="print the run as JSON")
    ca = sub.add_parser("cancel", parents=c, help="cancel a paused (or abandoned) run")
    ca.add_argument("id", metavar="ID", help="the run, e.g. W-2")
    ca.add_argument("--reason", default="", help="why (recorded on the run)")
    ca.add_argument("--by", default=None, metavar="NAME",
                    help="who cancels (default: $CLAWTOWER_OPERATOR, else your login)")
    rc = sub.add_parser("recover", parents=c,
                        help="adopt a run whose process died, or settle its interrupted step")
    rc.add_argument("id", metavar="ID", help="the run, e.g. W-2")
    what = rc.add_mutually_exclusive_group()
    what.add_argument("--retry", dest="decision", action="store_const", const="retry",
                      help="run the interrupted step again")
    what.add_argument("--skip", dest="decision", action="store_const", const="skip",
                      help="count the interrupted step as skipped and go on")
    what.add_argument("--cancel", dest="decision", action="store_const", const="cancel",
                      help="cancel the run")
    rc.add_argument("--reason", default="", help="why (recorded on the run)")
    rc.add_argument("--by", default=None, metavar="NAME",
                    help="who decides (default: $CLAWTOWER_OPERATOR, else your login)")
    g = sub.add_parser("graph", parents=c, help="draw a workflow's steps (mermaid by default)")
    g.add_argument("path", nargs="?", metavar="FILE", help="the workflow (or --file)")
    g.add_argument("--file", default=None, metavar="FILE", help="the workflow")
    g.add_argument("--format", default="mermaid", metavar="|".join(GRAPH_FORMATS),
                   help="the drawing's format (default mermaid)")
    g.add_argument("--args-json", default=None, metavar="JSON",
                   help="args to resolve conditions with, a JSON object")
    w.set_defaults(handler=cmd_workflow)


def _print(envelope: dict[str, Any]) -> int:
    from clawtower.core.workflows.service import exit_code, render

    sys.stdout.write(render(envelope) + "\n")
    sys.stdout.flush()
    return exit_code(envelope)


def _bool_arg(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v in ("1", "true", "yes", "y") else False if v in ("0", "false", "no",
                                                                      "n") else None


class _ResumeArgs:
    """`lobster resume`'s checks and messages (each a parse_error, exit 2)."""

    def __init__(self, a: argparse.Namespace) -> None:
        from clawtower.core.limits import parse_json as strict_json
        from clawtower.core.workflows.jsvalues import UNDEFINED, parse_json
        from clawtower.core.workflows.load import WorkflowError

        if not a.token and not a.id:
            raise WorkflowError("resume requires --token or --id", "parse_error")
        cancel = False
        if a.cancel is not None:
            parsed = _bool_arg(a.cancel)
            if parsed is None:
                raise WorkflowError("resume --cancel must be true or false", "parse_error")
            cancel = parsed
        intents = int(bool(a.approve)) + int(a.response_json is not None) + int(cancel)
        if intents > 1:
            raise WorkflowError("resume accepts only one of --approve, --response-json, or"
                                " --cancel", "parse_error")
        if intents == 0:
            raise WorkflowError("resume requires --approve yes|no, --response-json, or --cancel",
                                "parse_error")
        self.cancel = cancel
        self.response: Any = UNDEFINED
        self.approve: bool | None = None
        if a.response_json is not None:
            try:
                self.response = parse_json(a.response_json)
            except ValueError:
                raise WorkflowError("resume --response-json must be valid JSON",
                                    "parse_error") from None
            try:  # no duplicate keys (deviation 11); any JSON value may answer a gate
                strict_json(a.response_json, "--response-json")
            except ValidationError as exc:
                raise WorkflowError(f"resume {exc}", "parse_error") from None
        elif not cancel:
            decision = str(a.approve).lower()
            if decision not in ("yes", "y", "no", "n"):
                raise WorkflowError("resume --approve must be yes or no", "parse_error")
            self.approve = decision in ("yes", "y")


async def cmd_workflow(args: argparse.Namespace) -> int:
    wc = args.workflow_cmd
    if wc == "graph":
        return _graph(args)
    if wc == "list":
        return await _list(args)
    from clawtower.core.limits import parse_json as strict_json
    from clawtower.core.workflows.jsvalues import parse_json
    from clawtower.core.workflows.load import WorkflowError
    from clawtower.core.workflows.service import Workflows, error_envelope, normalize_args

    if wc == "run":
        file = args.file or args.path
        if not file:
            return _print(error_envelope("parse_error", "run requires a workflow file"
                                         " (use --file <path>)"))
        provided: dict[str, Any] = {}
        if args.args_json:
            try:
                provided = normalize_args(parse_json(args.args_json))
            except ValueError:
                return _print(error_envelope("parse_error", "run --args-json must be valid JSON"))
            try:  # stricter than Lobster: an object, no duplicate keys (deviation 11)
                strict_json(args.args_json, "--args-json", want=dict)
            except ValidationError as exc:
                return _print(error_envelope("parse_error", f"run {exc}"))
        refused = _refused_file(file, args.dry_run)
        if refused is not None:  # before the store is opened: a bad file creates nothing
            return _print(refused)
    rerun_args: dict[str, Any] | None = None
    if wc == "rerun" and args.args_json:
        strict_json(args.args_json, "workflow rerun: --args-json", want=dict)
        rerun_args = normalize_args(parse_json(args.args_json))
    if wc == "resume":
        try:
            resume = _ResumeArgs(args)
        except WorkflowError as exc:
            return _print(error_envelope(exc.kind, exc.message))

    approver = None
    if wc == "resume":
        approver = args.by or os.environ.get("LOBSTER_APPROVAL_APPROVED_BY")
        if approver and not args.by:  # --by passed the boundary's check already
            from clawtower.core.limits import check_name

            check_name(approver, "$LOBSTER_APPROVAL_APPROVED_BY")
    async with cli_store(args.db, read_only=wc == "show") as store:
        wf = Workflows(store, actor=_operator())
        if wc == "run":
            return _print(await wf.run(file, provided, dry_run=args.dry_run))
        if wc == "resume":
            return _print(await wf.resume(token=args.token, approval_id=args.id,
                                          approve=resume.approve, response=resume.response,
                                          cancel=resume.cancel, approved_by=approver))
        if wc == "rerun":
            new, envelope = await wf.rerun(args.id, args.step, rerun_args, by=_operator())
            sys.stderr.write(f"{new}: rerun of {args.id} from step {args.step}\n")
            return _print(envelope)
        if wc == "show":
            run = await wf.get(args.id)
            if args.json:
                output.emit_json(run)
            else:
                print(_detail(run))
            return 0
        if wc == "recover":
            return _print(await wf.recover(args.id, args.decision, by=args.by or _operator(),
                                           reason=args.reason))
        if wc == "cancel":
            await wf.cancel(args.id, by=args.by or _operator(), reason=args.reason)
            print(f"{args.id}: cancelled")
            return 0
        raise ValidationError(f"workflow: unknown action {wc!r}")


async def _list(args: argparse.Namespace) -> int:
    """`workflow list`: the runs' projection read alone (core/workflows/reads.py), without
    the workflow service, its loader or the event models (issue 39: a read starts fast)."""
    from clawtower.core.workflows.reads import Reads

    reads = Reads()
    async with cli_store(args.db, read_only=True) as store:
        reads.store = store
        rows = await reads.list()
    if args.json:
        output.emit_json(rows)
    elif not rows:
        nothing_yet("workflow runs", "`clawtower workflow run FILE` starts one")
    else:
        print(output.table(
            [[r["id"], "orphaned" if r.get("driver") == "gone" else r["status"],
              f"{r['steps_done']}/{r['steps_total']}",
              r["waiting_step"] or "-", r["approval_id"] or "-",
              output.ts(r["started_at"]), r["name"]] for r in rows],
            ["ID", "STATUS", "STEPS", "WAITING", "GATE", "STARTED", "NAME"]))
    return 0


def _refused_file(file: str, dry_run: bool) -> dict[str, Any] | None:
    """The error envelope `Workflows.run` would answer for this file, found without a store
    (its own checks, in its order), or None."""
    from clawtower.core.workflows.conditions import check_workflow_conditions
    from clawtower.core.workflows.load import WorkflowError, load_workflow, resolve_workflow_file
    from clawtower.core.workflows.service import error_envelope

    try:
        path = resolve_workflow_file(file)
    except WorkflowError as exc:
        return error_envelope(exc.kind, exc.message)
    try:
        workflow = load_workflow(path)
        if not dry_run:
            check_workflow_conditions(workflow)
    except WorkflowError as exc:
        return error_envelope("runtime_error", exc.message)
    return None


def _graph(args: argparse.Namespace) -> int:
    from clawtower.core.limits import parse_json as strict_json
    from clawtower.core.workflows.graph import FORMATS, render_graph
    from clawtower.core.workflows.jsvalues import parse_json
    from clawtower.core.workflows.load import WorkflowError, load_workflow, resolve_workflow_file
    from clawtower.core.workflows.runner import resolve_args

    file = args.file or args.path
    if not file:
        raise ValidationError("workflow graph: a workflow file is required (use --file <path>)")
    if args.format not in FORMATS:
        raise ValidationError("workflow graph: --format must be one of: mermaid, dot, ascii")
    provided: dict[str, Any] = {}
    if args.args_json:
        try:
            value = parse_json(args.args_json)
        except ValueError:
            raise ValidationError("workflow graph: --args-json must be valid JSON") from None
        strict_json(args.args_json, "workflow graph: --args-json", want=dict)
        provided = value
    try:
        path = resolve_workflow_file(file)
        workflow = load_workflow(path)
    except WorkflowError as exc:
        raise ClawError(f"{file}: {exc.message}") from None
    sys.stdout.write(render_graph(workflow, args.format,
                                  resolve_args(workflow.get("args"), provided)) + "\n")
    return 0


def _operator() -> str:
    from .common import operator_name

    return operator_name()


def _detail(run: dict[str, Any]) -> str:
    lines = [f"{run['id']}: {run['name']} ({run['file']})",
             f"  status: {run['status']}   steps: {run['steps_done']}/{run['steps_total']}"]
    if run.get("rerun_of"):
        o = run["rerun_of"]
        lines.append(f"  rerun of {o['run']} from step {o['from_step']} (by {o['by']}); the"
                     " steps before it reuse its recorded outputs")
    if run.get("driver") == "gone":
        lines.append(f"  orphaned: the process driving it is gone; `clawtower workflow recover"
                     f" {run['id']}` continues it, `clawtower workflow cancel {run['id']}` ends"
                     " it")
    if run["args"]:
        lines.append(f"  args: {json.dumps(run['args'], ensure_ascii=False)}")
    if run["error"] and (run.get("gate") or {}).get("kind") != "interrupted":
        lines.append(f"  error: {run['error']}")
    gate = run.get("gate")
    if gate:
        req = gate["request"] or {}
        if gate["kind"] == "interrupted":
            lines.append(f"  waiting for the operator at {gate['step']}: {req.get('reason', '')}")
        else:
            lines.append(f"  waiting: {gate['kind']} gate at {gate['step']} (approval"
                         f" {gate['approval_id']}): {req.get('prompt', '')}")
    for s in run["steps"]:
        extra = f"  {s['error']}" if s["error"] and s["status"] in ("failed", "retrying") else ""
        tries = f" x{s['attempts']}" if s["attempts"] > 1 else ""
        reused = " (reused)" if s.get("reused") else ""
        lines.append(f"  {s['status']:<9} {s['id']}{tries}{reused}{extra}")
        for b in s["branches"]:
            lines.append(f"    {b['status']:<9} {b['id']}")
    if run["output"] is not None and run["status"] == "ok":
        lines.append(f"  output: {json.dumps(run['output'], ensure_ascii=False)[:500]}")
    from clawtower.core.workflows.cost import describe_cost

    spend = describe_cost(run.get("cost"))
    if spend:
        lines.append(f"  cost: {spend}")
    return "\n".join(lines)
