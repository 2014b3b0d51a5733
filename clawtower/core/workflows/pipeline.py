"""`pipeline:` steps: Lobster's pipeline syntax, with the commands clawtower supports.

Supported: `exec` (argv, `--shell`, `--json`, `--stdin raw|json|jsonl`), `json` (render),
`llm.invoke` / `llm_task.invoke` (through clawtower's agent providers, via an `LlmCall` the
service supplies). Every other Lobster command fails with a clear "not supported" error naming
the step, never silently.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .cost import CURRENT_COST
from .jsvalues import UNDEFINED, parse_json, parse_stdout_json, serialize_for_stdout, to_json
from .shell import ShellNotFound, run_argv, run_shell

KNOWN_COMMANDS = frozenset({
    "approve", "ask", "dedupe", "diff.last", "email.triage", "exec", "gog.gmail.search",
    "gog.gmail.send", "groupBy", "head", "json", "llm.invoke", "llm_task.invoke", "map",
    "openclaw.agent", "openclaw.invoke", "pick", "sort", "state.get", "state.set", "table",
    "template", "where", "commands.list", "workflows.list", "workflows.run",
})
SUPPORTED = ("exec", "json", "llm.invoke", "llm_task.invoke")


class PipelineParseError(Exception):
    pass


class PipelineFailure(Exception):
    pass


@dataclass(frozen=True)
class Stage:
    name: str
    args: dict[str, Any]
    raw: str


@dataclass
class LlmAnswer:
    data: Any
    text: str
    model: str
    usage: dict[str, Any] = field(default_factory=dict)
    cost_usd: float = 0.0  # priced by the answering agent (0 when it has no price)


# (prompt, input items, output schema or None, model or "") -> answer
LlmCall = Callable[[str, list[Any], dict[str, Any] | None, str], Awaitable[LlmAnswer]]


def _split_pipes(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                cur.append(ch + text[i + 1])
                i += 2
                continue
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch == "|":
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if quote:
        raise PipelineParseError("Unclosed quote")
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _tokenize(stage: str) -> list[str]:
    tokens: list[str] = []
    cur: list[str] = []
    started = False
    quote: str | None = None
    i = 0
    while i < len(stage):
        ch = stage[i]
        nxt = stage[i + 1] if i + 1 < len(stage) else ""
        if quote == "'":
            if ch == "\\" and nxt == "'":
                cur.append("'")
                i += 2
                continue
            if ch == "'":
                quote = None
            else:
                cur.append(ch)
        elif quote == '"':
            if ch == "\\" and nxt in ('"', "\\", "$", "`"):
                cur.append(nxt)
                i += 2
                continue
            if ch == "\\" and nxt == "\n":
                i += 2
                continue
            if ch == '"':
                quote = None
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
            started = True
        elif ch in " \t\n\r":
            if started:
                tokens.append("".join(cur))
            cur, started = [], False
        else:
            started = True
            cur.append(ch)
        i += 1
    if quote:
        raise PipelineParseError("Unclosed quote")
    if started:
        tokens.append("".join(cur))
    return tokens


def _parse_args(tokens: list[str], boolean: tuple[str, ...]) -> dict[str, Any]:
    args: dict[str, Any] = {"_": []}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            if "=" in tok:
                k, v = tok[2:].split("=", 1)
                args[k] = v
            else:
                key = tok[2:]
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                if key in boolean or nxt is None or nxt.startswith("--"):
                    args[key] = True
                else:
                    args[key] = nxt
                    i += 1
        else:
            args["_"].append(tok)
        i += 1
    return args


def parse_pipeline(text: str) -> list[Stage]:
    stages = _split_pipes(text)
    if not stages:
        raise PipelineParseError("Empty pipeline")
    out = []
    for raw in stages:
        tokens = _tokenize(raw)
        if not tokens:
            raise PipelineParseError("Empty command stage")
        name = tokens[0]
        out.append(Stage(name, _parse_args(tokens[1:], ("json",) if name == "exec" else ()), raw))
    return out


def _encode_stdin(items: list[Any], mode: str) -> str:
    if mode == "json":
        return to_json(items)
    if mode == "jsonl":
        return "".join(to_json(i) + "\n" for i in items)
    if mode == "raw":
        return "\n".join(i if isinstance(i, str) else to_json(i) for i in items)
    raise PipelineFailure(f"exec --stdin must be raw, json, or jsonl (got {mode})")


async def _exec(args: dict[str, Any], items: list[Any], env: dict[str, str],
                cwd: str, on_spawn: Callable[[int], None] | None = None) -> list[Any]:
    cmd: list[str] = args["_"]
    shell_line = args["shell"] if isinstance(args.get("shell"), str) else None
    use_shell = bool(args.get("shell")) or (len(cmd) == 1 and any(c.isspace() for c in cmd[0]))
    if not cmd and not shell_line:
        raise PipelineFailure("exec requires a command")
    mode = str(args["stdin"]).lower() if isinstance(args.get("stdin"), str) else None
    payload = _encode_stdin(items, mode) if mode else None
    if use_shell:
        line = shell_line if shell_line is not None else cmd[0]
        res = await run_shell(line, stdin=payload, env=env, cwd=cwd, on_spawn=on_spawn,
                              not_found="exec shell not found; check LOBSTER_SHELL or ComSpec")
        what = line
    else:
        res = await run_argv(cmd, stdin=payload, env=env, cwd=cwd, on_spawn=on_spawn,
                             not_found=f"exec command not found: {cmd[0]}")
        what = cmd[0]
    if res.code != 0:
        code = "null" if res.code is None else str(res.code)
        detail = res.stderr.strip() or res.stdout.strip() or what
        raise PipelineFailure(f"exec failed ({code}): {detail}")
    if args.get("json"):
        try:
            parsed = parse_json(res.stdout.strip() or "null")
        except ValueError as exc:
            raise PipelineFailure(f"exec --json could not parse stdout as JSON: {exc}") from None
        return list(parsed) if isinstance(parsed, list) else [parsed]
    return [line for line in res.stdout.splitlines() if line]


async def _llm(name: str, args: dict[str, Any], items: list[Any], llm: LlmCall | None,
               step_id: str) -> list[Any]:
    if llm is None:
        raise PipelineFailure(f"Workflow step {step_id} pipeline command {name}: no agent"
                              " provider is configured")
    prompt = str(args["prompt"]) if args.get("prompt") else " ".join(args["_"])
    if not prompt.strip():
        raise PipelineFailure(f"{name} requires --prompt")
    schema: dict[str, Any] | None = None
    raw_schema = args.get("output-schema")
    if isinstance(raw_schema, str):
        try:
            value = parse_json(raw_schema)
        except ValueError:
            raise PipelineFailure(f"{name} --output-schema must be valid JSON") from None
        if not isinstance(value, dict):
            raise PipelineFailure(f"{name} --output-schema must be a JSON object")
        schema = value
    model = str(args.get("model") or "")
    answer = await llm(prompt, items, schema, model)
    hashes = [hashlib.sha256(to_json(i).encode()).hexdigest() for i in items]
    key = hashlib.sha256(to_json({"prompt": prompt, "model": model, "schema": schema,
                                  "artifacts": hashes}).encode()).hexdigest()
    data = answer.data if schema is not None else None
    item = {
        "kind": name, "runId": None, "prompt": prompt, "model": answer.model,
        "schemaVersion": "v1", "status": "completed", "cacheKey": key,
        "artifactHashes": hashes,
        "output": {"format": "json" if data is not None else "text", "text": answer.text,
                   "data": data},
        "usage": answer.usage or None, "metadata": None, "warnings": None, "diagnostics": None,
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
        "source": "clawtower", "cached": False, "attemptCount": 1,
    }
    tracker = CURRENT_COST.get()
    if tracker is not None:  # billed at the agent's price, never again from Lobster's table
        tracker.charge_agent(step_id, answer.model, answer.usage, answer.cost_usd, item)
    return [item]


def _items_to_stdout(items: list[Any]) -> str:
    if not items:
        return ""
    if all(isinstance(i, str) for i in items):
        return "\n".join(items)
    if len(items) == 1:
        return serialize_for_stdout(items[0])
    return to_json(items)


async def run_pipeline(step_id: str, text: str, data: Any, env: dict[str, str], cwd: str,
                       llm: LlmCall | None = None, *,
                       on_spawn: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run a pipeline step; the step result is Lobster's `{id, stdout, json}`. `on_spawn` is
    told each `exec` stage's process group, so an adopter can end what it left behind."""
    try:
        return await _run_pipeline(step_id, text, data, env, cwd, llm, on_spawn)
    except ShellNotFound as exc:
        raise PipelineFailure(str(exc)) from None


async def _run_pipeline(step_id: str, text: str, data: Any, env: dict[str, str], cwd: str,
                        llm: LlmCall | None,
                        on_spawn: Callable[[int], None] | None) -> dict[str, Any]:
    try:
        stages = parse_pipeline(text)
    except PipelineParseError as exc:
        raise PipelineFailure(f"Workflow step {step_id} pipeline parse failed: {exc}") from None
    for st in stages:
        if st.name not in SUPPORTED:
            raise PipelineFailure(f"Workflow step {step_id}: pipeline command '{st.name}' is not"
                                  " supported by clawtower (supported: "
                                  + ", ".join(SUPPORTED) + ")")
    items: list[Any] = ([] if data is None or data is UNDEFINED
                        else list(data) if isinstance(data, list) else [data])
    rendered = ""
    for st in stages:
        if st.name == "exec":
            items = await _exec(st.args, items, env, cwd, on_spawn)
        elif st.name == "json":
            rendered += to_json(items, indent=2)
            items = []
        else:
            items = await _llm(st.name, st.args, items, llm, step_id)
    stdout = rendered or _items_to_stdout(items)
    out: dict[str, Any] = {"id": step_id, "stdout": stdout}
    if items:
        out["json"] = items[0] if len(items) == 1 else items
    else:
        parsed = parse_stdout_json(rendered)
        if parsed is not UNDEFINED:
            out["json"] = parsed
    return out
