"""Drive a workflow's steps, Lobster's semantics, one step at a time.

The runner knows nothing about the store: it reports each step to a `Recorder` and returns
an `Outcome` (finished, or paused at a gate with the request to show). `core.workflows.service`
persists both, so the state of a run is its events and a paused run resumes in any process.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..store.faults import storage_fault
from .conditions import (
    ConditionError,
    check_workflow_conditions,
    evaluate_condition,
    step_condition,
)
from .cost import CURRENT_COST, CostLimitExceeded, CostTracker, parse_limit
from .gates import approval_request, identity_of_request, input_request
from .jsvalues import (
    UNDEFINED,
    copy_plain,
    js_typeof,
    parse_stdout_json,
    serialize_for_stdout,
    to_json,
)
from .load import (
    Step,
    Workflow,
    WorkflowError,
    is_approval_step,
    is_input_step,
    load_workflow,
    loop_vars,
    shell_command,
    step_execution,
)
from .refs import (
    RefError,
    Results,
    merge_env,
    resolve_cwd,
    resolve_input_value,
    resolve_shell_stdin,
    resolve_template,
    resolve_workflow_step_args,
    synthetic_result,
)
from .shell import ShellNotFound, StepTimeout, failure_message, run_shell


class Recorder(Protocol):
    """Where step progress goes (the store, for a top-level run)."""

    async def step_started(self, step_id: str, index: int, kind: str, attempt: int) -> None: ...

    async def step_finished(self, step_id: str, index: int, result: dict[str, Any],
                            branches: dict[str, dict[str, Any]] | None, *,
                            durable: bool = True, cost: list[dict[str, Any]] | None = None
                            ) -> None:
        """`durable=False`: the caller's next write (a gate's pause) makes it durable.
        `cost`: the spend billed from this step's output (core/workflows/cost.py)."""
        ...

    async def step_skipped(self, step_id: str, index: int) -> None: ...

    async def step_failed(self, step_id: str, index: int, message: str, policy: str,
                          retrying: bool, *, cost: list[dict[str, Any]] | None = None
                          ) -> None: ...


class NullRecorder:
    """For sub-workflows and dry runs: nothing is kept."""

    async def step_started(self, step_id: str, index: int, kind: str, attempt: int) -> None:
        return None

    async def step_finished(self, step_id: str, index: int, result: dict[str, Any],
                            branches: dict[str, dict[str, Any]] | None, *,
                            durable: bool = True, cost: list[dict[str, Any]] | None = None
                            ) -> None:
        return None

    async def step_skipped(self, step_id: str, index: int) -> None:
        return None

    async def step_failed(self, step_id: str, index: int, message: str, policy: str,
                          retrying: bool, *, cost: list[dict[str, Any]] | None = None
                          ) -> None:
        return None


# A pipeline step: (step id, pipeline text, input value, env, cwd, told each `exec` stage's
# process group id) -> step result
PipelineRunner = Callable[[str, str, Any, dict[str, str], str, Callable[[int], None] | None],
                          Awaitable[dict[str, Any]]]


def write_stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


@dataclass
class Context:
    env: Mapping[str, str]
    cwd: str
    recorder: Recorder = field(default_factory=NullRecorder)
    pipeline: PipelineRunner | None = None
    stderr: Callable[[str], None] = field(default_factory=lambda: write_stderr)
    active: frozenset[str] = frozenset()
    dry_run: bool = False
    cost_parent: CostTracker | None = None  # a sub-workflow's LLM spend is its parent's too
    # told (top-level step id, pid) each time a step's process group starts (adopters kill
    # what is left of it after a crash)
    spawned: Callable[[str, int], None] | None = None


@dataclass
class Pause:
    """Where a run stopped and what it needs to continue."""

    kind: str  # approval | input
    step_id: str
    index: int
    resume_at: int
    request: dict[str, Any]  # requiresApproval / requiresInput, without token and id
    identity: dict[str, Any] = field(default_factory=dict)
    input_schema: Any = None
    subject: Any = None


@dataclass
class Outcome:
    status: str  # ok | needs_approval | needs_input | cancelled
    output: list[Any]
    results: Results
    pause: Pause | None = None
    last_step_id: str | None = None


def resolve_args(arg_defs: Any, provided: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(arg_defs, dict):
        for key, d in arg_defs.items():
            if isinstance(d, dict) and "default" in d:  # a value of its own, never the
                out[str(key)] = copy_plain(d["default"])  # shared parse's (load.py)
    for key, value in (provided or {}).items():
        out[str(key)] = value
    return out


def output_items(result: Mapping[str, Any] | None) -> list[Any]:
    """The run-output rule: json, else response, else [stdout], else []."""
    if not result:
        return []
    if "json" in result:
        j = result["json"]
        return list(j) if isinstance(j, list) else [j]
    if "response" in result:
        r = result["response"]
        return list(r) if isinstance(r, list) else [r]
    if "stdout" in result:
        return [] if result["stdout"] == "" else [result["stdout"]]
    return []


def last_completed_step(steps: list[Step], results: Results) -> str | None:
    for step in reversed(steps):
        if step["id"] in results:
            return str(step["id"])
    return None


def _shell_result(step_id: str, stdout: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": step_id, "stdout": stdout}
    parsed = parse_stdout_json(stdout)
    if parsed is not UNDEFINED:
        out["json"] = parsed
    return out


class _StepFailure(Exception):
    """A step attempt failed with Lobster's message."""


@dataclass
class _Retry:
    max: int
    backoff: str
    delay_ms: float
    max_delay_ms: float
    jitter: bool

    def delay(self, attempt: int) -> int:
        d = (min(self.delay_ms * 2 ** attempt, self.max_delay_ms)
             if self.backoff == "exponential" else self.delay_ms)
        if self.jitter:
            d += (random.random() * 2 - 1) * d * 0.1
            d = min(d, self.max_delay_ms)
        return max(0, round(d))


def _retry_config(raw: Any) -> _Retry:
    r = raw if isinstance(raw, dict) else {}

    def get(key: str, default: Any) -> Any:
        v = r.get(key)
        return default if v is None else v

    return _Retry(int(get("max", 1)), str(get("backoff", "fixed")), float(get("delay_ms", 1000)),
                  float(get("max_delay_ms", 30000)), bool(get("jitter", False)))


class Runner:
    """One workflow file's run (top level or a sub-workflow)."""

    def __init__(self, workflow: Workflow, file_path: Path, args: dict[str, Any],
                 ctx: Context, cost: CostTracker | None = None) -> None:
        self.workflow = workflow
        self.file_path = file_path
        self.args = args
        self.ctx = ctx
        self.steps: list[Step] = workflow["steps"]
        self.cost = cost or CostTracker(ctx.env, ctx.stderr,
                                        parse_limit(workflow.get("cost_limit")), ctx.cost_parent)
        self._step_id = ""  # the top-level step in flight (its processes are recorded)

    # ------------------------------------------------------------------ the loop

    async def run(self, results: Results, start: int, last_step_id: str | None) -> Outcome:
        """Run from step `start`. A tripped `cost_limit: stop` raises CostLimitExceeded, which
        no on_error absorbs (not even a parent's, around a sub-workflow)."""
        token = CURRENT_COST.set(self.cost)
        try:
            return await self._run(results, start, last_step_id)
        finally:
            CURRENT_COST.reset(token)

    async def _run(self, results: Results, start: int, last_step_id: str | None) -> Outcome:
        ctx, cost = self.ctx, self.cost
        for idx in range(start, len(self.steps)):
            step = self.steps[idx]
            sid = str(step["id"])
            if not self._condition(step_condition(step), results):
                results[sid] = {"id": sid, "skipped": True}
                await ctx.recorder.step_skipped(sid, idx)
                continue
            if is_input_step(step.get("input")):
                return await self._pause_for_input(step, idx, results, last_step_id)
            try:
                result, branches = await self._execute_with_retry(step, idx, results)
            except _StepFailure as exc:
                policy = step.get("on_error") or "stop"
                message = str(exc)
                await ctx.recorder.step_failed(sid, idx, message, policy, False,
                                               cost=cost.take_unsaved())
                if policy == "stop":
                    raise WorkflowError(message) from None
                results[sid] = {"id": sid, "error": True, "errorMessage": message}
                cost.check()  # spent before failing is spent: a blown budget stops here
                if policy == "skip_rest":
                    break
                continue
            except CostLimitExceeded as exc:  # inside the step (a for_each, a sub-workflow)
                await ctx.recorder.step_failed(sid, idx, str(exc), "stop", False,
                                               cost=cost.take_unsaved())
                raise
            for bid, branch in (branches or {}).items():
                cost.track(bid, branch)
            cost.track(sid, result)
            if branches:
                results.update(branches)
            results[sid] = result
            last_step_id = sid
            if is_approval_step(step.get("approval")):
                request = approval_request(step, result, ctx.env)
                identity = identity_of_request(request)
                if identity.get("initiatedBy"):
                    result["initiatedBy"] = identity["initiatedBy"]
                # the pause written next commits it too (one commit per gate, not two)
                await ctx.recorder.step_finished(sid, idx, result, branches, durable=False,
                                                 cost=cost.take_unsaved())
                cost.check()
                return Outcome("needs_approval", [], results, Pause(
                    "approval", sid, idx, idx + 1, request, identity), last_step_id)
            await ctx.recorder.step_finished(sid, idx, result, branches,
                                             cost=cost.take_unsaved())
            cost.check()
        cost.check()
        output = output_items(results.get(last_step_id)) if last_step_id else []
        return Outcome("ok", output, results, None, last_step_id)

    def _condition(self, condition: Any, results: Results) -> bool:
        try:
            return evaluate_condition(condition, results)
        except (ConditionError, RefError) as exc:
            raise WorkflowError(str(exc)) from None

    async def _pause_for_input(self, step: Step, idx: int, results: Results,
                               last_step_id: str | None) -> Outcome:
        sid = str(step["id"])
        spec = step["input"]
        if "stdin" in step:
            try:
                subject = resolve_input_value(step["stdin"], self.args, results)
            except RefError as exc:
                raise WorkflowError(str(exc)) from None
        else:
            subject = None
            prev = results.get(last_step_id) if last_step_id else None
            if prev:
                for key in ("json", "response", "stdout"):
                    if key in prev:
                        subject = prev[key]
                        break
        if subject is UNDEFINED:
            subject = None
        max_bytes = _envelope_max(self.ctx.env)
        try:
            request = input_request(sid, spec.get("prompt"), spec.get("responseSchema"),
                                    spec.get("defaults", UNDEFINED), subject, max_bytes)
        except ValueError as exc:
            raise WorkflowError(str(exc)) from None
        await self.ctx.recorder.step_started(sid, idx, "input", 1)
        return Outcome("needs_input", [], results, Pause(
            "input", sid, idx, idx + 1, request, {}, spec.get("responseSchema"), subject),
            last_step_id)

    # ------------------------------------------------------------- one step

    async def _execute_with_retry(self, step: Step, idx: int, results: Results) -> tuple[
            dict[str, Any], dict[str, dict[str, Any]] | None]:
        retry = _retry_config(step.get("retry"))
        sid = str(step["id"])
        kind = step_kind(step)
        attempt = 0
        self._step_id = sid
        while True:
            await self.ctx.recorder.step_started(sid, idx, kind, attempt + 1)
            try:
                return await self._attempt(step, results)
            except _StepFailure as exc:
                if attempt + 1 >= retry.max:
                    raise
                delay = retry.delay(attempt)
                await self.ctx.recorder.step_failed(sid, idx, str(exc),
                                                    step.get("on_error") or "stop", True,
                                                    cost=self.cost.take_unsaved())
                if self.cost.limit is not None and self.cost.limit[1] == "stop":
                    self.cost.check()  # no retry once the budget is gone
                self.ctx.stderr(f"[RETRY] Step '{sid}' failed (attempt {attempt + 1}/"
                                f"{retry.max}): {exc}. Retrying in {delay}ms...\n")
                await asyncio.sleep(delay / 1000)
                attempt += 1

    async def _attempt(self, step: Step, results: Results) -> tuple[
            dict[str, Any], dict[str, dict[str, Any]] | None]:
        timeout_ms = step.get("timeout_ms")
        sid = str(step["id"])
        try:
            if timeout_ms:
                async with asyncio.timeout(timeout_ms / 1000):
                    return await self._attempt_body(step, results)
            return await self._attempt_body(step, results)
        except (TimeoutError, StepTimeout):
            raise _StepFailure(f"Step '{sid}' timed out after {timeout_ms}ms") from None
        except (RefError, WorkflowError, ShellNotFound, ValueError, OSError) as exc:
            raise _StepFailure(getattr(exc, "message", None) or str(exc)) from None

    async def _attempt_body(self, step: Step, results: Results) -> tuple[
            dict[str, Any], dict[str, dict[str, Any]] | None]:
        ctx, args = self.ctx, self.args
        sid = str(step["id"])
        env = merge_env(ctx.env, self.workflow.get("env"), step.get("env"), args, results)
        cwd = self._cwd(step.get("cwd"))
        if isinstance(step.get("for_each"), str) and isinstance(step.get("steps"), list):
            return await self._for_each(step, results), None
        kind, value = step_execution(step)
        if kind == "parallel":
            return await self._parallel(step, value, results)
        if kind == "workflow":
            return await self._sub_workflow(step, value, results, env, cwd), None
        if kind == "shell":
            command = resolve_template(value, args, results)
            stdin = resolve_shell_stdin(step.get("stdin"), args, results)
            return await self._shell(sid, command, stdin, env, cwd), None
        if kind == "pipeline":
            text = resolve_template(value, args, results)
            data = resolve_input_value(step.get("stdin"), args, results)
            return await self._pipeline(sid, text, data, env, cwd), None
        data = resolve_input_value(step.get("stdin"), args, results)
        return synthetic_result(sid, data), None

    def _cwd(self, *candidates: Any) -> str:
        for c in (*candidates, self.workflow.get("cwd")):
            if c is not None:
                resolved = resolve_cwd(c, self.args)
                return os.path.join(self.ctx.cwd, resolved) if resolved else self.ctx.cwd
        return self.ctx.cwd

    async def _shell(self, sid: str, command: str, stdin: str | None, env: dict[str, str],
                     cwd: str) -> dict[str, Any]:
        spawned, top = self.ctx.spawned, self._step_id
        res = await run_shell(command, stdin=stdin, env=env, cwd=cwd,
                              on_spawn=None if spawned is None else
                              (lambda pid: spawned(top or sid, pid)))
        if res.code != 0:
            raise _StepFailure(failure_message(res, command))
        return _shell_result(sid, res.stdout)

    async def _pipeline(self, sid: str, text: str, data: Any, env: dict[str, str],
                        cwd: str) -> dict[str, Any]:
        if self.ctx.pipeline is None:
            raise _StepFailure(f"Workflow step {sid} requires a command registry for pipeline"
                               " execution")
        spawned, top = self.ctx.spawned, self._step_id
        return await self.ctx.pipeline(sid, text, data, env, cwd,
                                       None if spawned is None else
                                       (lambda pid: spawned(top or sid, pid)))

    async def _for_each(self, step: Step, results: Results) -> dict[str, Any]:
        ctx, args = self.ctx, self.args
        sid = str(step["id"])
        items = resolve_input_value(step["for_each"], args, results)
        if not isinstance(items, list):
            raise _StepFailure(f"Workflow step {sid} for_each: expected array, got"
                               f" {js_typeof(items)}")
        item_var, index_var = loop_vars(step)
        batch = step.get("batch_size") or 1
        pause_ms = step.get("pause_ms")
        out: list[Any] = []
        for i, item in enumerate(items):
            if pause_ms and i > 0 and i % batch == 0:
                await asyncio.sleep(pause_ms / 1000)
            scoped: Results = dict(results)
            scoped[item_var] = {"id": item_var, "json": item,
                                "stdout": item if isinstance(item, str) else to_json(item)}
            scoped[index_var] = {"id": index_var, "json": i, "stdout": str(i)}
            for sub in step["steps"]:
                sub_id = str(sub["id"])
                if not self._condition(step_condition(sub), scoped):
                    scoped[sub_id] = {"id": sub_id, "skipped": True}
                    continue
                base = merge_env(ctx.env, self.workflow.get("env"), step.get("env"), args,
                                 scoped)
                env = (merge_env(base, None, sub["env"], args, scoped) if sub.get("env")
                       else base)
                cwd = self._cwd(sub.get("cwd"), step.get("cwd"))
                kind, value = step_execution(sub)
                if kind == "shell":
                    command = resolve_template(value, args, scoped)
                    stdin = resolve_shell_stdin(sub.get("stdin"), args, scoped)
                    scoped[sub_id] = await self._shell(sub_id, command, stdin, env, cwd)
                elif kind == "pipeline":
                    if self.ctx.pipeline is None:
                        raise _StepFailure(f"Workflow step {sid} for_each sub-step {sub_id}"
                                           " requires a command registry for pipeline execution")
                    text = resolve_template(value, args, scoped)
                    data = resolve_input_value(sub.get("stdin"), args, scoped)
                    scoped[sub_id] = await self._pipeline(sub_id, text, data, env, cwd)
                else:
                    data = resolve_input_value(sub.get("stdin"), args, scoped)
                    scoped[sub_id] = synthetic_result(sub_id, data)
                self.cost.track(f"{sid}.{sub_id}", scoped[sub_id])
                self.cost.check()
            it: dict[str, Any] = {item_var: item, index_var: i}
            for sub in step["steps"]:
                r = scoped.get(str(sub["id"]))
                if r and not r.get("skipped"):
                    if "json" in r:
                        it[str(sub["id"])] = r["json"]
                    elif "stdout" in r:
                        it[str(sub["id"])] = r["stdout"]
            out.append(it)
        return {"id": sid, "json": out, "stdout": to_json(out)}

    async def _parallel(self, step: Step, par: dict[str, Any], results: Results) -> tuple[
            dict[str, Any], dict[str, dict[str, Any]]]:
        ctx, args = self.ctx, self.args
        sid = str(step["id"])
        wait = par.get("wait") or "all"
        branches: list[dict[str, Any]] = par["branches"]

        async def run_branch(b: dict[str, Any]) -> dict[str, Any]:
            bid = str(b["id"])
            merged = {**(step.get("env") or {}), **(b.get("env") or {})}
            env = merge_env(ctx.env, self.workflow.get("env"), merged, args, results)
            cwd = self._cwd(b.get("cwd"), step.get("cwd"))
            pipe = b.get("pipeline")
            if isinstance(pipe, str) and pipe.strip():
                if ctx.pipeline is None:
                    raise _StepFailure(f"Parallel branch {bid} requires a command registry for"
                                       " pipeline execution")
                text = resolve_template(pipe, args, results)
                data = resolve_input_value(b.get("stdin"), args, results)
                return await self._pipeline(bid, text, data, env, cwd)
            shell = shell_command(b)
            if isinstance(shell, str) and shell.strip():
                command = resolve_template(shell, args, results)
                stdin = resolve_shell_stdin(b.get("stdin"), args, results)
                return await self._shell(bid, command, stdin, env, cwd)
            return {"id": bid}

        tasks = [asyncio.ensure_future(run_branch(b)) for b in branches]
        timeout_ms = par.get("timeout_ms")
        got: dict[str, dict[str, Any]] = {}
        try:
            if wait == "any":
                done, _ = await asyncio.wait(tasks, timeout=timeout_ms / 1000 if timeout_ms
                                             else None, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    raise _StepFailure(f"Parallel step {sid} timed out after {timeout_ms}ms")
                first = next(t for t in tasks if t in done)
                exc = first.exception()
                if exc is not None:
                    raise _as_failure(exc)
                result = first.result()
                got[str(result["id"])] = result
            else:
                done, pending = await asyncio.wait(
                    tasks, timeout=timeout_ms / 1000 if timeout_ms else None)
                if pending:
                    raise _StepFailure(f"Parallel step {sid} timed out after {timeout_ms}ms")
                for t in tasks:
                    exc = t.exception()
                    if exc is not None:
                        raise _StepFailure(f"Parallel branch failed: {_as_failure(exc)}")
                    r = t.result()
                    got[str(r["id"])] = r
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        merged_json = {bid: r["json"] for bid, r in got.items() if "json" in r}
        stdout = (next(iter(got.values())).get("stdout", "") if wait == "any"
                  else to_json(merged_json))
        return {"id": sid, "json": merged_json, "stdout": stdout}, got

    async def _sub_workflow(self, step: Step, path_text: str, results: Results,
                            env: dict[str, str], cwd: str) -> dict[str, Any]:
        sid = str(step["id"])
        target = resolve_template(path_text, self.args, results)
        full = Path(target) if os.path.isabs(target) else self.file_path.parent / target
        full = Path(os.path.normpath(full))
        try:
            canonical = str(full.resolve(strict=True))
        except OSError:
            raise _StepFailure(f"Workflow step {sid} workflow file not found: {full}") from None
        # the chain of files being executed, this one included: resolved here, when a step
        # runs a sub-workflow, not at every run's start and resume (issue 36)
        active = self.ctx.active | {str(self.file_path.resolve())}
        if canonical in active:
            raise _StepFailure(f"Workflow step {sid} creates a cycle: {canonical} is already"
                               " being executed")
        sub_args = resolve_workflow_step_args(step.get("workflow_args"), self.args, results)
        spawned, top = self.ctx.spawned, self._step_id or sid
        child_ctx = Context(env=env, cwd=cwd, recorder=NullRecorder(), pipeline=self.ctx.pipeline,
                            stderr=self.ctx.stderr, active=active | {canonical},
                            cost_parent=self.cost,
                            # its processes are this step's (an adopter ends them)
                            spawned=None if spawned is None else
                            (lambda _sub, pid: spawned(top, pid)))
        outcome = await run_file(full, sub_args, child_ctx)
        if outcome.status in ("needs_approval", "needs_input"):
            what = "approval" if outcome.status == "needs_approval" else "input"
            raise _StepFailure(f"Workflow step {sid} sub-workflow halted for {what}. Sub-workflow"
                               " approval/input gates are not supported in composition.")
        out = outcome.output
        data = out[0] if len(out) == 1 else out
        return {"id": sid, "stdout": serialize_for_stdout(data) if out else "", "json": data}


def _as_failure(exc: BaseException) -> _StepFailure:
    """A branch's exception as the step's failure; a storage fault is raised as it is (the
    storage failed, not the step: the run stays resumable)."""
    if isinstance(exc, _StepFailure):
        return exc
    fault = storage_fault(exc)
    if fault is not None:
        raise fault
    return _StepFailure(getattr(exc, "message", None) or str(exc))


def step_kind(step: Step) -> str:
    """What the step-started event calls the step (shell, approval, for_each, ...)."""
    if isinstance(step.get("for_each"), str):
        return "for_each"
    kind, _ = step_execution(step)
    if kind == "none":
        return "approval" if is_approval_step(step.get("approval")) else "none"
    return kind


def _envelope_max(env: Mapping[str, str]) -> int:
    try:
        v = float(env.get("LOBSTER_MAX_TOOL_ENVELOPE_BYTES", ""))
    except ValueError:
        return 512_000
    return int(v) if v >= 1024 and v == v and v != float("inf") else 512_000


async def run_file(path: Path, args: Mapping[str, Any] | None, ctx: Context) -> Outcome:
    """Load, check and run a workflow from its first step (sub-workflows; the service's run)."""
    workflow = load_workflow(path)
    resolved = resolve_args(workflow.get("args"), args)
    check_workflow_conditions(workflow)
    runner = Runner(workflow, path, resolved, Context(
        env=ctx.env, cwd=ctx.cwd, recorder=ctx.recorder, pipeline=ctx.pipeline,
        stderr=ctx.stderr, active=ctx.active | {str(path.resolve())}, dry_run=ctx.dry_run,
        cost_parent=ctx.cost_parent, spawned=ctx.spawned))
    return await runner.run({}, 0, None)
