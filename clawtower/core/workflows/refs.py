"""`${arg}` and `$step.path` substitution, stdin values and step environments.

Lobster's rules, kept exactly (see docs/workflow-deviations.md for what we chose to keep):
a `${name}` that is not a declared or given arg stays literal; a `$id.path` whose step id is
unknown stays literal (the shell then sees it); a known step with a missing path renders ""
(or "false" for `approved` / `skipped`); strings are inserted raw, other values as JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .jsvalues import UNDEFINED, copy_plain, js_number, js_string, parse_stdout_json, to_json

ARG_RE = re.compile(r"\$\{([A-Za-z0-9_-]+)\}")
REF_RE = re.compile(r"\$([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)")
FULL_REF_RE = re.compile(r"^\$([A-Za-z0-9_-]+)\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)$")

Results = dict[str, dict[str, Any]]


class RefError(Exception):
    """A strict reference to a step that has no result (yet)."""


def resolve_args_template(text: str, args: Mapping[str, Any]) -> str:
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        return js_string(args[key]) if key in args else m.group(0)

    return ARG_RE.sub(sub, text)


def render_value(value: Any) -> str:
    if value is UNDEFINED or value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return js_number(value)
    return to_json(value)


def value_by_path(value: Any, path: str) -> Any:
    current = value
    for field in path.split("."):
        if current is None or current is UNDEFINED:
            return UNDEFINED
        if isinstance(current, list):
            if not field.isdigit():
                return UNDEFINED
            idx = int(field)
            if idx >= len(current):
                return UNDEFINED
            current = current[idx]
            continue
        if not isinstance(current, dict):
            return UNDEFINED
        current = current.get(field, UNDEFINED)
    return current


def resolve_step_refs(text: str, results: Results) -> str:
    def sub(m: re.Match[str]) -> str:
        sid, path = m.group(1), m.group(2)
        if sid not in results:
            return m.group(0)
        value = value_by_path(results[sid], path)
        if value is UNDEFINED:
            return "false" if path in ("approved", "skipped") else ""
        return render_value(value)

    return REF_RE.sub(sub, text)


def resolve_template(text: str, args: Mapping[str, Any], results: Results) -> str:
    return resolve_step_refs(resolve_args_template(text, args), results)


def parse_step_ref(text: str) -> tuple[str, str] | None:
    m = FULL_REF_RE.match(text)
    return (m.group(1), m.group(2)) if m else None


def step_ref_value(sid: str, path: str, results: Results, strict: bool) -> Any:
    step = results.get(sid)
    if step is None:
        if strict:
            raise RefError(f"Unknown step reference: {sid}.{path}")
        return UNDEFINED
    return value_by_path(step, path)


def resolve_input_value(stdin: Any, args: Mapping[str, Any], results: Results) -> Any:
    """A step's `stdin:` value: one whole ref resolves to the value itself (strictly)."""
    if stdin is None or stdin is UNDEFINED:
        return None
    if isinstance(stdin, str):
        ref = parse_step_ref(stdin.strip())
        if ref:
            return step_ref_value(ref[0], ref[1], results, True)
        return resolve_template(stdin, args, results)
    return copy_plain(stdin)  # a literal of the workflow: a value of its own, not the parse's


def encode_shell_input(value: Any) -> str | None:
    if value is None or value is UNDEFINED:
        return None
    if isinstance(value, str):
        return value
    return to_json(value)


def resolve_shell_stdin(stdin: Any, args: Mapping[str, Any], results: Results) -> str | None:
    return encode_shell_input(resolve_input_value(stdin, args, results))


def _arg_env_key(key: str) -> str | None:
    up = str(key).strip().upper()
    if not up:
        return None
    normalized = re.sub(r"[^A-Z0-9]+", "_", up).strip("_")
    return normalized or None


def merge_env(base: Mapping[str, str], workflow_env: Any, step_env: Any,
              args: Mapping[str, Any], results: Results) -> dict[str, str]:
    """Parent env, then LOBSTER_ARGS_JSON and LOBSTER_ARG_<NAME>, then workflow env, then step
    env (string values only, templated)."""
    env = dict(base)
    env["LOBSTER_ARGS_JSON"] = to_json(dict(args))
    for key, value in args.items():
        norm = _arg_env_key(key)
        if norm:
            env[f"LOBSTER_ARG_{norm}"] = js_string(value)
    for source in (workflow_env, step_env):
        if isinstance(source, dict):
            for key, value in source.items():
                if isinstance(value, str):
                    env[str(key)] = resolve_template(value, args, results)
    return env


def resolve_cwd(cwd: Any, args: Mapping[str, Any]) -> str | None:
    if not cwd or not isinstance(cwd, str):
        return None
    return resolve_args_template(cwd, args)


def resolve_workflow_step_args(workflow_args: Any, parent_args: Mapping[str, Any],
                               results: Results) -> dict[str, Any]:
    if not isinstance(workflow_args, dict):
        return {}
    return {k: resolve_template(v, parent_args, results) if isinstance(v, str) else v
            for k, v in workflow_args.items()}


def synthetic_result(step_id: str, value: Any) -> dict[str, Any]:
    """The result of a step that runs nothing (a gate, a no-op): its stdin value."""
    if value is None or value is UNDEFINED:
        return {"id": step_id}
    if isinstance(value, str):
        out: dict[str, Any] = {"id": step_id, "stdout": value}
        parsed = parse_stdout_json(value)
        if parsed is not UNDEFINED:
            out["json"] = parsed
        return out
    return {"id": step_id, "stdout": to_json(value), "json": value}
