"""`--dry-run`: print Lobster's plan to stderr, run nothing, answer `ok` with no output."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

from .conditions import ConditionError, evaluate_condition, step_condition
from .load import Step, WorkflowError, is_approval_step, is_input_step, loop_vars, step_execution
from .pipeline import KNOWN_COMMANDS, PipelineParseError, parse_pipeline
from .refs import RefError, Results, resolve_args_template, resolve_input_value
from .runner import _retry_config

_OUT_REF = re.compile(r"\$[A-Za-z0-9_-]+\.(stdout|json)")


def _stdin_note(stdin: Any) -> str | None:
    if not isinstance(stdin, str):
        return None
    t = stdin.strip()
    if re.fullmatch(r"\$[A-Za-z0-9_-]+\.(stdout|json)", t):
        return f"{t}  [output unknown at plan time]"
    if _OUT_REF.search(t):
        return f"{t}  [contains step output refs — unknown at plan time]"
    return None


def _template_note(text: str) -> str | None:
    return "[contains step output refs — unknown at plan time]" if _OUT_REF.search(text) else None


def _resolve(text: str, args: dict[str, Any], results: Results) -> str:
    with_args = resolve_args_template(text, args)

    def sub(m: re.Match[str]) -> str:
        sid, fld = m.group(1), m.group(2)
        if fld == "approved":
            step = results.get(sid)
            if step is None:
                return m.group(0)
            return "true" if step.get("approved") is True else "false"
        return m.group(0)

    return re.sub(r"\$([A-Za-z0-9_-]+)\.(stdout|json|approved)", sub, with_args)


def _check_stages(text: str, fail: Callable[[str], str]) -> bool:
    """Validate stage names; True when some are deferred (depend on step output)."""
    try:
        stages = parse_pipeline(text)
    except PipelineParseError as exc:
        raise WorkflowError(str(exc)) from None
    deferred = False
    for st in stages:
        if _OUT_REF.search(st.name):
            deferred = True
            continue
        if st.name not in KNOWN_COMMANDS:
            raise WorkflowError(fail(st.name))
    return deferred


def _cond(step: Step, results: Results) -> bool:
    try:
        return evaluate_condition(step_condition(step), results)
    except (ConditionError, RefError) as exc:
        raise WorkflowError(str(exc)) from None


def _retry_line(step: Step) -> str | None:
    if isinstance(step.get("retry"), dict):
        rc = _retry_config(step["retry"])
        if rc.max > 1:
            return (f"     retry: up to {rc.max} attempts, {rc.backoff} backoff (base:"
                    f" {_n(rc.delay_ms)}ms{', jitter' if rc.jitter else ''})")
    return None


def _n(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def dry_run(steps: list[Step], args: dict[str, Any], results: Results, start: int) -> str:
    """The plan text (what Lobster writes to stderr)."""
    lines: list[str] = []
    total = len(steps) - start
    lines.append(f"[DRY RUN] Would execute {total} step{'s' if total != 1 else ''}:\n")
    for idx in range(start, len(steps)):
        step = steps[idx]
        sid = step["id"]
        num = idx - start + 1
        if not _cond(step, results):
            results[sid] = {"id": sid, "skipped": True}
            lines.append(f"  {num}. {sid}  [skipped — condition: false]")
            continue
        if is_input_step(step.get("input")):
            lines += [f"  {num}. {sid}  [input]", f"     prompt: {step['input'].get('prompt')}",
                      "     [input required]"]
            results[sid] = {"id": sid, "response": {"pending": True}}
            continue
        if isinstance(step.get("for_each"), str) and isinstance(step.get("steps"), list):
            _for_each(step, num, args, results, lines)
            continue
        if step.get("stdin") is not None:
            try:
                resolve_input_value(step["stdin"], args, results)
            except RefError as exc:
                raise WorkflowError(f"Workflow step {sid} stdin: {exc}") from None
        kind, value = step_execution(step)
        stdin_note = _stdin_note(step.get("stdin"))
        if kind == "parallel":
            lines += [f"  {num}. {sid}  [parallel]", f"     wait: {value.get('wait') or 'all'}"]
            if value.get("timeout_ms"):
                lines.append(f"     timeout: {value['timeout_ms']}ms")
            for b in value.get("branches", []):
                lines.append(_branch_line(b, args, results))
                results[b["id"]] = {"id": b["id"]}
        elif kind == "workflow":
            path = _resolve(value, args, results)
            note = _template_note(path)
            lines += [f"  {num}. {sid}  [workflow]",
                      f"     workflow: {path}{'  ' + note if note else ''}"]
            wa = step.get("workflow_args")
            if isinstance(wa, dict) and wa:
                lines.append(f"     args: {', '.join(wa)}")
        elif kind == "shell":
            cmd = _resolve(value, args, results)
            note = _template_note(cmd)
            lines += [f"  {num}. {sid}  [shell]", f"     run: {cmd}{'  ' + note if note else ''}"]
        elif kind == "pipeline":
            text = _resolve(value, args, results)
            note = _template_note(text)
            deferred = _check_stages(text, partial(
                "Workflow step {0} pipeline references unknown command: {1}".format, sid))
            lines += [f"  {num}. {sid}  [pipeline]",
                      f"     pipeline: {text}{'  ' + note if note else ''}"]
            if deferred:
                lines.append("     [command validation deferred — stage name depends on step"
                             " output]")
        else:
            lines.append(f"  {num}. {sid}  [no-op]")
        if stdin_note:
            lines.append(f"     stdin: {stdin_note}")
        _tail(step, lines)
        if is_approval_step(step.get("approval")):
            lines.append("     [approval required]")
        results[sid] = ({"id": sid, "approved": True} if is_approval_step(step.get("approval"))
                        else {"id": sid})
    lines.append("")
    return "\n".join(lines)


def _tail(step: Step, lines: list[str]) -> None:
    if step.get("timeout_ms"):
        lines.append(f"     timeout: {step['timeout_ms']}ms")
    if step.get("on_error") and step["on_error"] != "stop":
        lines.append(f"     on_error: {step['on_error']}")
    r = _retry_line(step)
    if r:
        lines.append(r)


def _branch_line(b: dict[str, Any], args: dict[str, Any], results: Results) -> str:
    bid = b["id"]
    pipe = b.get("pipeline")
    run = b.get("run") if isinstance(b.get("run"), str) else b.get("command")
    if isinstance(pipe, str) and pipe.strip():
        text = _resolve(pipe, args, results)
        note = _template_note(text)
        _check_stages(text, lambda name: (
            f"Parallel branch {bid} pipeline references unknown command: {name}"))
        return f"     branch {bid}: [pipeline] {text}{'  ' + note if note else ''}"
    if isinstance(run, str) and run.strip():
        cmd = _resolve(run, args, results)
        note = _template_note(cmd)
        return f"     branch {bid}: [shell] {cmd}{'  ' + note if note else ''}"
    return f"     branch {bid}: [no-op]"


def _for_each(step: Step, num: int, args: dict[str, Any], results: Results,
              lines: list[str]) -> None:
    sid = step["id"]
    ref = step["for_each"]
    note = _template_note(ref)
    lines += [f"  {num}. {sid}  [for_each]", f"     for_each: {ref}{'  ' + note if note else ''}"]
    if ref.strip().startswith("$"):
        try:
            resolve_input_value(ref, args, results)
        except RefError as exc:
            raise WorkflowError(f"Workflow step {sid} for_each: {exc}") from None
    item, index = loop_vars(step)
    lines.append(f"     item_var: {item}, index_var: {index}")
    if step.get("batch_size"):
        lines.append(f"     batch_size: {step['batch_size']}")
    if step.get("pause_ms"):
        lines.append(f"     pause_ms: {step['pause_ms']}")
    lines.append(f"     sub-steps: {len(step['steps'])}")
    scoped: Results = dict(results)
    scoped[item] = {"id": item, "json": {"_placeholder": True}}
    scoped[index] = {"id": index, "json": 0}
    for i, sub in enumerate(step["steps"]):
        sub_id = sub["id"]
        if not _cond(sub, scoped):
            lines.append(f"       {i + 1}. {sub_id}  [skipped — condition: false]")
            scoped[sub_id] = {"id": sub_id, "skipped": True}
            continue
        if sub.get("stdin") is not None:
            try:
                resolve_input_value(sub["stdin"], args, scoped)
            except RefError as exc:
                raise WorkflowError(f"Workflow step {sid} for_each sub-step {sub_id} stdin:"
                                    f" {exc}") from None
        kind, value = step_execution(sub)
        if kind == "shell":
            lines.append(f"       {i + 1}. {sub_id}  [shell] run: {_resolve(value, args, scoped)}")
        elif kind == "pipeline":
            text = _resolve(value, args, scoped)
            _check_stages(text, partial(
                "Workflow step {0} for_each sub-step {1} pipeline: unknown command: {2}".format,
                sid, sub_id))
            lines.append(f"       {i + 1}. {sub_id}  [pipeline] pipeline: {text}")
        else:
            lines.append(f"       {i + 1}. {sub_id}  [no-op]")
        scoped[sub_id] = {"id": sub_id}
    _tail(step, lines)
    results[sid] = {"id": sid}
