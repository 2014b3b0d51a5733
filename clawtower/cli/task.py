"""`clawtower task`: create, list, show, move and review tasks."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from clawtower.core.errors import ValidationError
from clawtower.core.tasks.permissions import Role, parse_role
from clawtower.core.tasks.phases import Phase, parse_phase

from . import output
from .common import nothing_yet, operator_name, with_store

if TYPE_CHECKING:
    from clawtower.core.store import Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser(
        "task", help="create, list, show, review tasks; unblock, retry or cancel them")
    tsub = t.add_subparsers(dest="task_cmd", metavar="ACTION", required=True)
    tc = tsub.add_parser("create", help="create a task from a spec file")
    tc.add_argument("spec", metavar="SPEC.yaml", help="the spec (YAML or JSON)")
    tc.add_argument("--json", action="store_true", help="print the new task as JSON")
    tc.add_argument("--executor", metavar="EXECUTOR", default=None,
                    help="who runs the implementation step: builtin, or acp:NAME (a harness"
                         " of clawtower.yaml's acp_agents); overrides the spec's executor")
    tu = tsub.add_parser("update-spec", help="replace a draft task's spec")
    tu.add_argument("id", metavar="ID", help="the task, e.g. T-5")
    tu.add_argument("spec", metavar="SPEC.yaml", help="the revised spec")
    tl = tsub.add_parser("list", help="list tasks")
    tl.add_argument("--phase", metavar="P", help="only tasks in this phase")
    tl.add_argument("--json", action="store_true", help="print a JSON list")
    tsh = tsub.add_parser("show", help="a task's history, reviews, attempts, artifacts")
    tsh.add_argument("id", metavar="ID", help="the task, e.g. T-3")
    tsh.add_argument("--json", action="store_true", help="print the task as JSON")
    for name, help_, choice in (
            ("unblock", "unblock a circuit_open task with one of its options", True),
            ("retry", "give a circuit_open task a fresh attempt budget", False),
            ("cancel", "end an unfinished task (failed); withdraws its pending approval",
             False)):
        oc = tsub.add_parser(name, help=help_ + " (the orchestrator executes it)")
        oc.add_argument("id", metavar="ID", help="the task, e.g. T-3")
        if choice:
            oc.add_argument("choice", metavar="CHOICE",
                            help="retry (execution_ready: a fresh attempt budget), revise"
                                 " (spec_draft: edit the spec, review again) or abandon"
                                 " (failed)")
        oc.add_argument("--reason", default="", help="why (recorded with the command)")
        oc.add_argument("--by", default=None, metavar="NAME",
                        help="the operator (default: $CLAWTOWER_OPERATOR, else your login)")
    tt = tsub.add_parser("transition", help="move a task's phase as a protocol role (testing;"
                         " operators use unblock, retry, cancel)")
    tt.add_argument("id", metavar="ID", help="the task")
    tt.add_argument("phase", metavar="PHASE", help="the phase to move to")
    tt.add_argument("--as", dest="role", required=True, metavar="ROLE",
                    help="the acting role; only orchestrator may move phases")
    tt.add_argument("--reason", required=True, help="why (recorded in the history)")
    tt.add_argument("--by", default=None, metavar="NAME", help="the actor's name")
    tr = tsub.add_parser("review", help="append a spec or quality review")
    tr.add_argument("id", metavar="ID", help="the task")
    tr.add_argument("--as", dest="role", required=True, metavar="ROLE",
                    help="spec_reviewer or quality_reviewer")
    tr.add_argument("--verdict", required=True,
                    help="spec: approved|changes_requested|blocked; quality: approve|rework")
    tr.add_argument("--finding", action="append", default=[], metavar="TEXT",
                    help="a finding; 'path:line: text' references a file (repeatable)")
    tr.add_argument("--risk", choices=["low", "medium", "high"], help="quality reviews")
    tr.add_argument("--maintainability", default="", help="quality reviews: a short note")
    tr.add_argument("--test-gap", action="append", default=[], metavar="TEXT",
                    help="quality reviews: a missing test (repeatable)")
    tr.add_argument("--by", default=None, metavar="NAME", help="the reviewer's name")
    t.set_defaults(handler=cmd_task)


async def cmd_task(args: argparse.Namespace) -> int:
    # Every input is checked before the store is opened: a bad spec file, phase or role
    # must not leave a store behind (nor the WAL files of a fresh one).
    from clawtower.core.tasks.service import Tasks

    tc = args.task_cmd
    spec = None
    if tc in ("create", "update-spec"):  # a read never loads the spec models (start-up)
        from clawtower.core.tasks.spec import load_spec

        spec = load_spec(args.spec)
    if spec is not None and getattr(args, "executor", None) is not None:
        from clawtower.core.tasks.spec import parse_spec

        spec = parse_spec({**spec.model_dump(exclude_none=True), "executor": args.executor},
                          "--executor")
    phase: Phase | None = None
    if tc == "list" and args.phase:
        phase = parse_phase(args.phase, "--phase")
    elif tc == "transition":
        phase = parse_phase(args.phase, "PHASE")
    role = parse_role(args.role) if tc in ("transition", "review") else None
    choice = None
    if tc == "unblock":
        from clawtower.core.tasks.operator import parse_choice

        choice = parse_choice(args.choice)
    findings = []
    if tc == "review":
        from clawtower.core.tasks.commands import parse_finding

        findings = [parse_finding(f) for f in args.finding]

    async def run(store: Store) -> int:
        from clawtower.core.errors import NotFound

        try:
            return await run_task(store)
        except NotFound:
            await _not_an_invocation(store, getattr(args, "id", None))
            raise

    async def run_task(store: Store) -> int:
        tasks = Tasks(store)
        if tc == "create":
            assert spec is not None
            tid = await tasks.create(spec, actor=operator_name(), source=str(args.spec))
            if args.json:
                output.emit_json(await tasks.get(tid))
            else:
                print(tid)
            return 0
        if tc == "update-spec":
            assert spec is not None
            problems = await tasks.update_spec(args.id, spec, actor=operator_name())
            print(f"{args.id}: spec updated" + (f"; not ready: {'; '.join(problems)}"
                                                if problems else "; ready for review"))
            return 0
        if tc == "list":
            rows = await tasks.list(phase)
            if args.json:
                output.emit_json(rows)
            elif not rows:
                nothing_yet(f"tasks in {phase.value}" if phase else "tasks",
                            "" if phase else "`clawtower task create SPEC.yaml` makes one")
            else:
                print(output.table([[r["id"], r["phase"], str(r["attempts"]), r["title"]]
                                    for r in rows], ["ID", "PHASE", "ATT", "TITLE"]))
            return 0
        if tc == "show":
            t = await tasks.get(args.id)
            if args.json:
                output.emit_json(t)
            else:
                print(output.task_detail(t))
            return 0
        if tc == "transition":
            assert phase is not None and role is not None
            r = await tasks.transition(args.id, phase, args.reason, role=role,
                                       actor=args.by or operator_name())
            print(f"{r['task']}: {r['from']} -> {r['to']}")
            return 0
        if tc in ("unblock", "retry", "cancel"):
            by = args.by or operator_name()
            r = await tasks.command(args.id, tc, by=by, choice=choice, reason=args.reason)
            print(f"{r['task']}: {r['from']} -> {r['to']} ({tc} by {by})")
            return 0
        if tc == "review":
            assert role is not None
            details = None
            if role == Role.QUALITY_REVIEWER:
                details = {"risk": args.risk or "low", "maintainability": args.maintainability,
                           "test_gaps": args.test_gap}
            seq = await tasks.review(args.id, role=role, reviewer=args.by or operator_name(),
                                     verdict=args.verdict,
                                     findings=findings,
                                     details=details)
            print(f"{args.id}: review recorded (event {seq})")
            return 0
        raise ValidationError(f"task: unknown action {tc!r}")

    return await with_store(args, run, read_only=tc in ("list", "show"))


async def _not_an_invocation(store: Store, task_id: str | None) -> None:
    """`T-<hex>` was the id of trigger invocations before they had a prefix of their own
    (`I-`): a task command given one says what it names (NotFound, exit 2, one line)."""
    from clawtower.core.errors import NotFound

    if not task_id or not task_id.startswith("T-") or task_id[2:].isdigit():
        return
    if await store.fetchone("SELECT 1 FROM trigger_items WHERE id=?", (task_id,)):
        raise NotFound(f"{task_id}: a trigger invocation (old id form), not a task; see"
                       f" clawtower triggers show {task_id}") from None
