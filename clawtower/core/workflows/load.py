"""Read and validate a Lobster workflow file (.lobster, .yaml, .yml, .json).

The checks, their order and their messages follow Lobster's loader exactly, because a
workflow author (and the differential corpus) sees them verbatim. The file is kept as the
plain mapping it parsed to: Lobster's semantics are defined on that shape (a key that is
absent differs from one that is null), so a typed model would only blur them.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..errors import ValidationError
from ..limits import (
    MAX_RETRY_ATTEMPTS,
    MAX_RETRY_DELAY_MS,
    MAX_SUBWORKFLOW_DEPTH,
    printable,
    read_file,
)
from . import yaml12
from .jsvalues import copy_plain, freeze, parse_json, truthy

EXTENSIONS = (".lobster", ".yaml", ".yml", ".json")
MAX_TIMEOUT_MS = 2_147_483_647

Workflow = dict[str, Any]
Step = dict[str, Any]


class WorkflowError(Exception):
    """A workflow failed: `kind` is Lobster's envelope error type."""

    def __init__(self, message: str, kind: str = "runtime_error") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def resolve_workflow_file(candidate: str, cwd: str | None = None) -> Path:
    """The `--file` argument as Lobster's CLI checks it (a parse_error when it fails)."""
    p = Path(candidate)
    if not p.is_absolute():
        p = Path(cwd or Path.cwd()) / p
    p = Path(_normpath(str(p)))
    if not p.exists():
        raise WorkflowError(f"ENOENT: no such file or directory, stat '{p}'", "parse_error")
    # Lobster's messages, plus the path (it names none: deviation 11)
    if not p.is_file():
        raise WorkflowError(f"Workflow path is not a file: {printable(str(p))}",
                            "parse_error")
    if p.suffix.lower() not in EXTENSIONS:
        raise WorkflowError("Workflow file must end in .lobster, .yaml, .yml, or .json:"
                            f" {printable(str(p))}", "parse_error")
    return p


def _normpath(path: str) -> str:
    import os.path

    return os.path.normpath(path)


def _read_bytes(p: Path) -> bytes:
    """The file's bytes, read incrementally up to MAX_FILE_BYTES (`_decode` makes them
    text: one read serves the parse and the hash); errors name the file."""
    try:
        return read_file(p)
    except ValidationError as exc:
        if not p.exists():
            raise WorkflowError(f"ENOENT: no such file or directory, open '{p}'") from None
        raise WorkflowError(str(exc)) from None


def _decode(p: Path, raw: bytes) -> str:
    """`raw` as UTF-8, refused as `read_text` refuses it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkflowError(f"{printable(str(p))}: not UTF-8 text (byte {exc.start})"
                            ) from None


def read_workflow_file(path: str | Path) -> Any:
    p = Path(path)
    return _parse_text(p, _decode(p, _read_bytes(p)))


def _parse_text(p: Path, text: str) -> Any:
    if p.suffix.lower() == ".json":
        try:
            return parse_json(text)
        except ValueError as exc:
            raise WorkflowError(str(exc)) from None  # V8's own words, as Lobster shows them
    try:
        return yaml12.loads(text, p.name)
    except ValidationError as exc:
        raise WorkflowError(str(exc)) from None


# Validated workflows by (path, sha256 of the file's bytes). The file is still read and
# hashed on every load (a resume sees the file as it is now, as Lobster's does); only an
# unchanged file skips the parse, which dominates a gate's round trip (pure-Python YAML:
# ~10 ms for 20 steps). Each entry is the parse made read-only (`freeze`; None for a YAML
# alias that contains itself) and whether a step names a sub-workflow (checked per load).
_PARSED: OrderedDict[tuple[str, str], _Parsed] = OrderedDict()
_PARSED_MAX = 64


class _Parsed:
    __slots__ = ("frozen", "plain", "subworkflows")

    def __init__(self, plain: Workflow) -> None:
        self.plain = plain
        try:
            self.frozen: Workflow | None = freeze(plain)
        except RecursionError:  # a YAML alias that contains itself: copied per load
            self.frozen = None
        self.subworkflows = any("workflow" in step for step in plain["steps"])

    def copy(self) -> Workflow:
        try:  # callers may not share (or mutate) the cached one
            return copy_plain(self.plain)  # type: ignore[no-any-return]
        except RecursionError:  # a YAML alias that contains itself: deepcopy keeps the cycle
            return copy.deepcopy(self.plain)


def load_workflow(path: str | Path) -> Workflow:
    """Parse and validate; raise WorkflowError with Lobster's message on the first problem.
    Sub-workflows named by a literal path are loaded too, so a cycle (or one of them that
    does not load) is refused before the run starts, not after its first steps ran.
    Returns a copy the caller may change."""
    p = Path(path)
    parsed, _digest = _load_one(p)
    _check_subworkflows_of(p, parsed)
    return parsed.copy()


def load_workflow_shared(path: str | Path) -> tuple[Workflow, str]:
    """`load_workflow` without the copy: the cached parse itself, read-only (a change
    raises TypeError), and the sha256 of the file's bytes as they were read (the run's
    `digest`: no second read of the file). For a run's start and a resume (issue 36)."""
    p = Path(path)
    parsed, digest = _load_one(p)
    _check_subworkflows_of(p, parsed)
    return (parsed.frozen if parsed.frozen is not None else parsed.copy()), digest


def _check_subworkflows_of(p: Path, parsed: _Parsed) -> None:
    if parsed.subworkflows:  # only then the file's canonical path is needed
        _check_subworkflows(p, parsed.plain, (_canonical(p),))


def _canonical(p: Path) -> str:
    try:
        return str(p.resolve(strict=True))
    except (OSError, RuntimeError):
        return str(p)


def _check_subworkflows(p: Path, workflow: Workflow, chain: tuple[str, ...]) -> None:
    """Follow each `workflow:` step whose path has no `${arg}` or `$step` in it (those are
    known only at run time); the runner's own check still covers those."""
    for step in workflow["steps"]:
        target = step.get("workflow")
        if not isinstance(target, str) or not target.strip() or "$" in target:
            continue
        full = Path(os.path.normpath(Path(target) if os.path.isabs(target)
                                     else p.parent / target))
        if not full.is_file():
            continue  # the runner reports it when (and if) the step runs
        canonical = _canonical(full)
        if canonical in chain:
            raise WorkflowError(f"Workflow step {step['id']} creates a cycle: {canonical} is"
                                " already being executed")
        if len(chain) >= MAX_SUBWORKFLOW_DEPTH:
            raise WorkflowError(f"Workflow step {step['id']}: sub-workflows nested deeper than"
                                f" {MAX_SUBWORKFLOW_DEPTH} (MAX_SUBWORKFLOW_DEPTH)")
        try:
            child, _digest = _load_one(full)
        except WorkflowError as exc:
            raise WorkflowError(f"Workflow step {step['id']} sub-workflow {full}:"
                                f" {exc.message}") from None
        _check_subworkflows(full, child.plain, (*chain, canonical))


def _load_one(p: Path) -> tuple[_Parsed, str]:
    """The file's validated parse (cached) and the sha256 of its bytes. The bytes are
    hashed as read; only a file not seen with that hash is decoded and parsed (a file that
    is not UTF-8 is never cached, so it is refused with its message on every load)."""
    raw = _read_bytes(p)
    digest = hashlib.sha256(raw).hexdigest()
    key = (str(p), digest)
    hit = _PARSED.get(key)
    if hit is None:
        hit = _Parsed(validate_workflow(_parse_text(p, _decode(p, raw))))
        _PARSED[key] = hit
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    else:
        _PARSED.move_to_end(key)
    return hit, digest


def is_approval_step(approval: Any) -> bool:
    if approval is True:
        return True
    if isinstance(approval, str) and approval.strip():
        return True
    return isinstance(approval, dict)


def is_input_step(value: Any) -> bool:
    return isinstance(value, dict)


def shell_command(step: Step) -> Any:
    """`typeof step.run === "string" ? step.run : step.command` (may be any value)."""
    run = step.get("run")
    return run if isinstance(run, str) else step.get("command")


def step_execution(step: Step) -> tuple[str, Any]:
    """What a step executes: (kind, value); kind is parallel|workflow|pipeline|shell|none."""
    par = step.get("parallel")
    if isinstance(par, dict):
        return "parallel", par
    wf = step.get("workflow")
    if isinstance(wf, str) and wf.strip():
        return "workflow", wf
    pipe = step.get("pipeline")
    if isinstance(pipe, str) and pipe.strip():
        return "pipeline", pipe
    cmd = shell_command(step)
    if isinstance(cmd, str) and cmd.strip():
        return "shell", cmd
    return "none", None


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return _is_number(v) and math.isfinite(v)


def js_to_number(v: Any) -> float:
    """`Number(v)` for the values a YAML file can hold."""
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if not s:
            return 0.0
        try:
            return float(int(s, 0)) if s.lower().startswith(("0x", "0o", "0b")) else float(s)
        except ValueError:
            return math.nan
    if isinstance(v, list):
        if not v:
            return 0.0
        return js_to_number(v[0]) if len(v) == 1 else math.nan
    return math.nan


def _timeout_ok(v: Any) -> bool:
    return _is_int(v) and 1 <= v <= MAX_TIMEOUT_MS


def check_response_schema(schema: Any) -> str | None:
    """Why a responseSchema cannot be compiled (Ajv's words), or None."""
    from .ajv import schema_problem

    return schema_problem(schema)


def validate_workflow(parsed: Any) -> Workflow:
    if not parsed or not isinstance(parsed, (dict, list)):
        raise WorkflowError("Workflow file must be a JSON/YAML object")
    if not isinstance(parsed, dict):
        raise WorkflowError("Workflow file requires a non-empty steps array")
    steps = parsed.get("steps")
    if not isinstance(steps, list) or not steps:
        raise WorkflowError("Workflow file requires a non-empty steps array")
    if "cost_limit" in parsed:
        cl = parsed["cost_limit"]
        if not isinstance(cl, dict):
            raise WorkflowError("Workflow cost_limit must be an object")
        n = js_to_number(cl.get("max_usd"))
        if not math.isfinite(n) or n < 0:
            raise WorkflowError("Workflow cost_limit.max_usd must be a non-negative number")
        if "action" in cl and cl["action"] not in ("warn", "stop"):
            raise WorkflowError('Workflow cost_limit.action must be "warn" or "stop"')
    seen: set[str] = set()
    for step in steps:
        if not isinstance(step, (dict, list)):
            raise WorkflowError("Workflow step must be an object")
        if not isinstance(step, dict):
            raise WorkflowError("Workflow step requires an id")
        _validate_step(step, seen)
        if step["id"] in seen:
            raise WorkflowError(f"Duplicate workflow step id: {step['id']}")
        par = step.get("parallel")
        if isinstance(par, dict):
            for b in par["branches"]:
                seen.add(b["id"])
        seen.add(step["id"])
    return parsed


def _validate_step(step: Step, seen: set[str]) -> None:
    sid = step.get("id")
    if not sid or not isinstance(sid, str):
        raise WorkflowError("Workflow step requires an id")
    pre = f"Workflow step {sid}"
    if "workflow" in step and not isinstance(step["workflow"], str):
        raise WorkflowError(f"{pre} workflow must be a string (file path)")
    if isinstance(step.get("workflow"), str) and not step["workflow"].strip():
        raise WorkflowError(f"{pre} workflow path cannot be blank")
    if "workflow_args" in step and not isinstance(step["workflow_args"], dict):
        raise WorkflowError(f"{pre} workflow_args must be a plain object")
    if "parallel" in step and not isinstance(step["parallel"], dict):
        raise WorkflowError(f"{pre} parallel must be an object")
    # `{}` is falsy for nothing in JS: an empty mapping is still a parallel step
    is_parallel = isinstance(step.get("parallel"), dict)
    if is_parallel:
        _validate_parallel(step, seen)
    if "for_each" in step and not isinstance(step["for_each"], str):
        raise WorkflowError(f"{pre} for_each must be a string (step reference expression)")
    is_for_each = isinstance(step.get("for_each"), str)
    if is_for_each:
        _validate_for_each(step)
    shell = shell_command(step)
    pipeline = step.get("pipeline") if isinstance(step.get("pipeline"), str) else None
    wf = step.get("workflow")
    workflow_ref = wf if isinstance(wf, str) and wf.strip() else None
    count = (int(truthy(shell)) + int(truthy(pipeline)) + int(truthy(workflow_ref))
             + int(is_parallel) + int(is_for_each))
    approval = is_approval_step(step.get("approval"))
    is_input = is_input_step(step.get("input"))
    if count == 0 and not approval and not is_input:
        raise WorkflowError(f"{pre} requires run, command, pipeline, workflow, parallel,"
                            " for_each, approval, or input")
    if count > 1:
        raise WorkflowError(f"{pre} can only define one of run, command, pipeline, workflow,"
                            " parallel, or for_each")
    if count > 0 and is_input:
        raise WorkflowError(f"{pre} input steps cannot define run, command, pipeline, workflow,"
                            " parallel, or for_each")
    if approval and is_input:
        raise WorkflowError(f"{pre} cannot define both approval and input")
    for key in ("run", "command", "pipeline"):
        if key in step and not isinstance(step[key], str):
            raise WorkflowError(f"{pre} {key} must be a string")
    if "input" in step and not is_input:
        raise WorkflowError(f"{pre} input must be an object")
    inp = step.get("input")
    if isinstance(inp, dict):
        if not isinstance(inp.get("prompt"), str):
            raise WorkflowError(f"{pre} input.prompt must be a string")
        rs = inp.get("responseSchema")
        if "responseSchema" not in inp or not (rs is None or isinstance(rs, (dict, list))):
            raise WorkflowError(f"{pre} input.responseSchema must be an object")
        why = check_response_schema(rs)
        if why:
            raise WorkflowError(f"{pre} input.responseSchema is invalid: {why}")
    appr = step.get("approval")
    if isinstance(appr, dict):
        for key in ("initiated_by", "initiatedBy", "required_approver", "requiredApprover"):
            if key in appr and not isinstance(appr[key], str):
                raise WorkflowError(f"{pre} approval.{key} must be a string")
        for key in ("require_different_approver", "requireDifferentApprover"):
            if key in appr and not isinstance(appr[key], bool):
                raise WorkflowError(f"{pre} approval.{key} must be a boolean")
    if "timeout_ms" in step and not _timeout_ok(step["timeout_ms"]):
        raise WorkflowError(f"{pre} timeout_ms must be a positive integer between 1 and"
                            f" {MAX_TIMEOUT_MS}")
    if "on_error" in step and step["on_error"] not in ("stop", "continue", "skip_rest"):
        raise WorkflowError(f'{pre} on_error must be "stop", "continue", or "skip_rest"')
    if "retry" in step:
        _validate_retry(step, pre)


def _validate_retry(step: Step, pre: str) -> None:
    r = step["retry"]
    if not isinstance(r, dict):
        raise WorkflowError(f"{pre} retry must be an object")
    if "max" in r and not (_is_int(r["max"]) and r["max"] >= 1):
        raise WorkflowError(f"{pre} retry.max must be a positive integer")
    if "max" in r and r["max"] > MAX_RETRY_ATTEMPTS:  # Lobster has no cap: 1e9 never ends
        raise WorkflowError(f"{pre} retry.max must be at most {MAX_RETRY_ATTEMPTS}"
                            " (MAX_RETRY_ATTEMPTS)")
    if "backoff" in r and r["backoff"] not in ("fixed", "exponential"):
        raise WorkflowError(f'{pre} retry.backoff must be "fixed" or "exponential"')
    for key in ("delay_ms", "max_delay_ms"):
        if key in r and not (_finite(r[key]) and r[key] >= 0):
            raise WorkflowError(f"{pre} retry.{key} must be a finite non-negative number")
        if key in r and r[key] > MAX_RETRY_DELAY_MS:
            raise WorkflowError(f"{pre} retry.{key} must be at most {MAX_RETRY_DELAY_MS}"
                                " (MAX_RETRY_DELAY_MS)")
    if "jitter" in r and not isinstance(r["jitter"], bool):
        raise WorkflowError(f"{pre} retry.jitter must be a boolean")


def _validate_parallel(step: Step, seen: set[str]) -> None:
    sid = step["id"]
    pre = f"Workflow step {sid}"
    par = step["parallel"]
    branches = par.get("branches")
    if not isinstance(branches, list) or not branches:
        raise WorkflowError(f"{pre} parallel requires a non-empty branches array")
    if "wait" in par and par["wait"] not in ("all", "any"):
        raise WorkflowError(f'{pre} parallel wait must be "all" or "any"')
    if "timeout_ms" in par and not _timeout_ok(par["timeout_ms"]):
        raise WorkflowError(f"{pre} parallel timeout_ms must be a positive integer between 1"
                            f" and {MAX_TIMEOUT_MS}")
    ids: set[str] = set()
    for b in branches:
        if not isinstance(b, (dict, list)):
            raise WorkflowError(f"{pre} parallel branches must be objects")
        bid = b.get("id") if isinstance(b, dict) else None
        if not bid or not isinstance(bid, str):
            raise WorkflowError(f"{pre} parallel branch requires an id")
        assert isinstance(b, dict)
        if bid == sid:
            raise WorkflowError(f"{pre} parallel branch id cannot match the step id")
        if bid in ids:
            raise WorkflowError(f"{pre} duplicate parallel branch id: {bid}")
        if bid in seen:
            raise WorkflowError(f"Duplicate workflow id across steps/parallel branches: {bid}")
        ids.add(bid)
        shell = shell_command(b)
        pipe = b.get("pipeline") if isinstance(b.get("pipeline"), str) else None
        n = int(truthy(shell)) + int(truthy(pipe))
        if n == 0:
            raise WorkflowError(f"{pre} parallel branch {bid} requires run, command, or pipeline")
        if n > 1:
            raise WorkflowError(f"{pre} parallel branch {bid} can only define one of run,"
                                " command, or pipeline")
        for key in ("run", "command", "pipeline"):
            if key in b and not isinstance(b[key], str):
                raise WorkflowError(f"{pre} parallel branch {bid} {key} must be a string")


def _validate_for_each(step: Step) -> None:
    sid = step["id"]
    pre = f"Workflow step {sid}"
    subs = step.get("steps")
    if not isinstance(subs, list) or not subs:
        raise WorkflowError(f"{pre} for_each requires a non-empty steps array")
    if "batch_size" in step and not (_is_int(step["batch_size"]) and step["batch_size"] >= 1):
        raise WorkflowError(f"{pre} batch_size must be a positive integer")
    if "pause_ms" in step and not (_finite(step["pause_ms"]) and step["pause_ms"] >= 0):
        raise WorkflowError(f"{pre} pause_ms must be a finite non-negative number")
    if "pause_ms" in step and step["pause_ms"] > MAX_RETRY_DELAY_MS:
        raise WorkflowError(f"{pre} pause_ms must be at most {MAX_RETRY_DELAY_MS}"
                            " (MAX_RETRY_DELAY_MS)")
    if is_approval_step(step.get("approval")):
        raise WorkflowError(f"{pre} for_each steps cannot define approval (use a separate step"
                            " after the loop)")
    if is_input_step(step.get("input")):
        raise WorkflowError(f"{pre} for_each steps cannot define input (use a separate step"
                            " after the loop)")
    if step.get("stdin") is not None:
        raise WorkflowError(f"{pre} for_each steps cannot define stdin (loop input comes from"
                            " the for_each expression)")
    pipe = step.get("pipeline") if isinstance(step.get("pipeline"), str) else None
    if (truthy(shell_command(step)) or truthy(pipe) or truthy(step.get("workflow"))
            or truthy(step.get("parallel"))):
        raise WorkflowError(f"{pre} for_each cannot also define run, command, pipeline,"
                            " workflow, or parallel")
    for key in ("item_var", "index_var"):
        if key in step and not isinstance(step[key], str):
            raise WorkflowError(f"{pre} {key} must be a string")
    item_var = step.get("item_var", "item")
    index_var = step.get("index_var", "index")
    if item_var is None:
        item_var = "item"
    if index_var is None:
        index_var = "index"
    if item_var == index_var:
        raise WorkflowError(f"{pre} item_var and index_var cannot be the same")
    ids: set[str] = set()
    for sub in subs:
        sub_id = sub.get("id") if isinstance(sub, dict) else None
        if not sub_id or not isinstance(sub_id, str):
            raise WorkflowError(f"{pre} for_each sub-step requires an id")
        assert isinstance(sub, dict)
        if sub_id in (item_var, index_var):
            raise WorkflowError(f"{pre} for_each sub-step id '{sub_id}' conflicts with loop"
                                " variable")
        if sub_id in ids:
            raise WorkflowError(f"{pre} duplicate for_each sub-step id: {sub_id}")
        ids.add(sub_id)
        if is_approval_step(sub.get("approval")) or is_input_step(sub.get("input")):
            raise WorkflowError(f"{pre} for_each sub-steps cannot contain approval or input"
                                " steps")
        for key in ("run", "command", "pipeline"):
            if key in sub and not isinstance(sub[key], str):
                raise WorkflowError(f"{pre} for_each sub-step {sub_id} {key} must be a string")
        if truthy(sub.get("workflow")) or truthy(sub.get("parallel")) or truthy(
                sub.get("for_each")):
            raise WorkflowError(f"{pre} for_each sub-step {sub_id} cannot define workflow,"
                                " parallel, or for_each")
        run, cmd = sub.get("run"), sub.get("command")
        has_shell = (isinstance(run, str) and run.strip()) or (
            isinstance(cmd, str) and cmd.strip())
        sp = sub.get("pipeline")
        has_pipe = isinstance(sp, str) and bool(sp.strip())
        if not has_shell and not has_pipe:
            raise WorkflowError(f"{pre} for_each sub-step {sub_id} requires run, command, or"
                                " pipeline")
        if has_shell and has_pipe:
            raise WorkflowError(f"{pre} for_each sub-step {sub_id} can only define one of run,"
                                " command, or pipeline")


def loop_vars(step: Step) -> tuple[str, str]:
    item = step.get("item_var")
    index = step.get("index_var")
    return (item if isinstance(item, str) else "item",
            index if isinstance(index, str) else "index")
