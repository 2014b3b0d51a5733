"""Compile a process's checklist into a Lobster workflow our runner executes.

One checklist line becomes one or two steps:
- a line naming a declared `tool.operation` calls it through the bindings, by its resolved
  tier: `auto` runs; `confirm` is a preview step carrying an approval gate (the prompt states
  the policy's timeout and on_timeout) followed by the call, run only if approved (a
  rejection cancels the run); `manual` prints a draft and is done without executing;
- a line naming a function is an `llm_task.invoke` stage with the function's body (plus its
  approved learnings) as prompt and its declared outputs as the JSON schema;
- the scratchpad line records the run in the scratchpad; any other line is an llm-task step
  whose notes are appended to the `state/*.md` file it names, if it names one.

Values flow by name: process inputs are workflow args; a tool's declared output properties
and a function's outputs become values later steps' inputs of the same name take (then: a
binding's `inputs`, a name ending in `_<value>`, a description naming a function, and for an
object the latest tool result). The last step prints the outputs and removes the scratchpad.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import files
from ..workflows.adoption import REPEAT_KEY
from . import checks as ck
from .bindings import ToolBinding
from .learning import learnings_for
from .package import Doc, Package, operations_named, steps_of
from .tiers import op_tier

# Steps without an outside effect of their own (a model answering, a read of the inputs, a
# preview, a draft, a note recorded as the step's result, the compiler's own `finish`) are
# marked safe to run again, so a run whose driver died inside one resumes without a person.
# Only a tool call (`call`) may have had its effect: it waits for the operator.
SAFE = {REPEAT_KEY: True}
CODE_RE = re.compile(r"`([^`]+)`")
STATE_RE = re.compile(r"`?\.?/?(state/[A-Za-z0-9_.-]+\.md)`?")


class CompileError(Exception):
    """The process cannot be compiled (`file:field: message`)."""


@dataclass
class _Val:
    ref: str
    type: str
    origin: str  # "arg" | "tool" | "function"


@dataclass
class _State:
    values: dict[str, _Val] = field(default_factory=dict)
    last_tool: str | None = None
    fn_outputs: dict[str, str] = field(default_factory=dict)  # function name -> ref
    ids: set[str] = field(default_factory=set)

    def new_id(self, base: str) -> str:
        sid = re.sub(r"[^A-Za-z0-9_]", "_", base) or "step"
        n, out = 1, sid
        while out in self.ids:
            n += 1
            out = f"{sid}_{n}"
        self.ids.add(out)
        return out


def _py() -> str:
    return f"{shlex.quote(sys.executable)} -m clawtower.core.experts.step"


def _sq(text: str) -> str:
    """One pipeline token holding exactly `text` (core/workflows/pipeline.py reads it back):
    single-quoted, where `\\'` is a quote and a backslash is itself, so a backslash (which
    would escape a quote after it) goes in a double-quoted piece of the same token."""
    out = []
    for ch in text:
        out.append("'\"\\\\\"'" if ch == "\\" else "\\'" if ch == "'" else ch)
    return "'" + "".join(out) + "'"


def output_schema(fn: Doc) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    outs = fn.meta.get("outputs")
    for o in outs if isinstance(outs, list) else []:
        if not isinstance(o, dict) or not isinstance(o.get("name"), str):
            continue
        t = o.get("type") if o.get("type") in ck.SIMPLE_TYPES else "string"
        prop: dict[str, Any] = {"type": t}
        if isinstance(o.get("enum"), list):
            prop["enum"] = o["enum"]
        if isinstance(o.get("description"), str):
            prop["description"] = o["description"]
        props[o["name"]] = prop
        required.append(o["name"])
    if not props:
        props, required = {"result": {"type": "string"}}, ["result"]
    return {"type": "object", "properties": props, "required": required}


def _pick(st: _State, name: str, typ: str, desc: str, hint: str | None) -> _Val | None:
    if hint and hint in st.values:
        return st.values[hint]
    if name in st.values:
        return st.values[name]
    for key, val in reversed(list(st.values.items())):
        if name.endswith(f"_{key}") and val.type == typ:
            return val
    for fn, ref in st.fn_outputs.items():
        if fn in desc:
            return _Val(ref, "object", "function")
    if typ == "object" and st.last_tool:
        return _Val(st.last_tool, "object", "tool")
    return None


def _env_inputs(st: _State, decls: list[tuple[str, str, str]], hints: dict[str, str]
                ) -> dict[str, str]:
    env: dict[str, str] = {}
    types: dict[str, str] = {}
    for name, typ, desc in decls:
        if not re.match(r"^[A-Za-z0-9_]+$", name):
            continue
        v = _pick(st, name, typ, desc, hints.get(name))
        if v is not None:
            env[f"EXPERT_IN_{name}"] = v.ref
            types[name] = typ
    env["EXPERT_TYPES"] = json.dumps(types, sort_keys=True)
    return env


def _props(shape: Any) -> list[tuple[str, str, str]]:
    if not isinstance(shape, dict) or not isinstance(shape.get("properties"), dict):
        return []
    return [(str(k), str(v.get("type", "string")) if isinstance(v, dict) else "string",
             str(v.get("description", "")) if isinstance(v, dict) else "")
            for k, v in shape["properties"].items()]


def _io(meta: dict[str, Any], key: str) -> list[tuple[str, str, str]]:
    v = meta.get(key)
    return [(str(x["name"]), str(x.get("type", "string")), str(x.get("description", "")))
            for x in (v if isinstance(v, list) else [])
            if isinstance(x, dict) and isinstance(x.get("name"), str)]


def _retry(pkg: Package, proc: Doc) -> dict[str, Any] | None:
    ex = {**pkg.section("execution"), **(proc.meta.get("execution") or {})}
    r = ex.get("retry")
    if not isinstance(r, dict):
        return None
    out: dict[str, Any] = {}
    if isinstance(r.get("max_attempts"), int) and not isinstance(r["max_attempts"], bool):
        out["max"] = max(1, r["max_attempts"])
    if r.get("backoff") in ("fixed", "exponential"):
        out["backoff"] = r["backoff"]
    if isinstance(r.get("delay"), str) and ck.duration_problem(r["delay"]) is None:
        out["delay_ms"] = int(ck.duration_seconds(r["delay"]) * 1000)
    return out or None


def compile_process(pkg: Package, process: str, *, expert: str, workspace: Path,
                    bindings_file: Path, bindings: dict[str, ToolBinding]) -> dict[str, Any]:
    """The workflow (a plain mapping, as `.lobster` YAML holds it) for one process."""
    proc = pkg.processes.get(process)
    if proc is None:
        raise CompileError(f"expert.yaml:components.processes: no process named {process!r}")
    steps = steps_of(proc.body)
    if not steps:
        raise CompileError(f"{proc.path}:body: no checklist steps (- [ ] ...) to compile")
    st = _State()
    args: dict[str, Any] = {}
    for name, typ, desc in _io(proc.meta, "inputs"):
        args[name] = {"type": typ, **({"description": desc} if desc else {})}
        st.values[name] = _Val("${" + name + "}", typ, "arg")
    retry = _retry(pkg, proc)
    ap = pkg.section("policy").get("approval")
    timeout = ap.get("timeout") if isinstance(ap, dict) else None
    on_timeout = ap.get("on_timeout", "reject") if isinstance(ap, dict) else "reject"
    env: dict[str, str] = {"EXPERT_BINDINGS": str(bindings_file),
                           "EXPERT_WORKSPACE": str(workspace), "EXPERT_NAME": expert,
                           "EXPERT_PROCESS": process}
    sp = proc.meta.get("scratchpad")
    if isinstance(sp, str):
        env["EXPERT_SCRATCH"] = re.sub(r"\{([A-Za-z0-9_-]+)\}", r"${\1}", sp.removeprefix("./"))
    out_steps: list[dict[str, Any]] = []
    for step in steps:
        out_steps.extend(_compile_step(pkg, proc, step.text, step.index, st, bindings, retry,
                                       timeout, on_timeout, expert, workspace))
    st.last_tool = None  # outputs take named values only, never "the latest tool result"
    fin = _env_inputs(st, _io(proc.meta, "outputs"), {})
    for fn, ref in st.fn_outputs.items():
        key = re.sub(r"[^A-Za-z0-9_]", "_", fn)
        fin[f"EXPERT_IN_{key}"] = ref
        types = json.loads(fin["EXPERT_TYPES"])
        types[key] = "object"
        fin["EXPERT_TYPES"] = json.dumps(types, sort_keys=True)
    out_steps.append({"id": st.new_id("finish"), "command": f"{_py()} finish",
                      "env": {**fin, "EXPERT_STEP": "Completion"}, **SAFE})
    wf: dict[str, Any] = {"name": f"{expert}/{process}", "description": proc.description,
                          "env": env, "steps": out_steps}
    if args:
        wf = {"name": wf["name"], "description": wf["description"], "args": args, "env": env,
              "steps": out_steps}
    return wf


def _compile_step(pkg: Package, proc: Doc, text: str, index: int, st: _State,
                  bindings: dict[str, ToolBinding], retry: dict[str, Any] | None,
                  timeout: Any, on_timeout: Any, expert: str, workspace: Path
                  ) -> list[dict[str, Any]]:
    base = {"EXPERT_STEP": text}
    ops = [(t, o) for t, o in operations_named(text)
           if t in pkg.tools and o in pkg.tools[t].operations()]
    if ops:
        tool, op = ops[0]
        opdecl = pkg.tools[tool].operations()[op]
        b = bindings.get(tool)
        hints = b.op(op).inputs if b else {}
        env = {**base, "EXPERT_OP": f"{tool}.{op}",
               **_env_inputs(st, _props(opdecl.get("input")), hints)}
        tier = op_tier(pkg, bindings, tool, op)  # its concrete tool's: the strictest
        sid = st.new_id(f"{tool}_{op}")
        out: list[dict[str, Any]] = []
        if tier == "manual":
            return [{"id": sid, "command": f"{_py()} draft", "env": env, **SAFE}]
        call: dict[str, Any] = {"id": sid, "command": f"{_py()} call", "env": env}
        if retry:
            call["retry"] = retry
        if tier == "confirm":
            gate = st.new_id(f"confirm_{tool}_{op}")
            wait = (f" Waits {timeout}, then {on_timeout}." if isinstance(timeout, str)
                    else "")
            genv = dict(env)
            if isinstance(timeout, str):  # read by core/experts/timeouts.py's sweep
                genv["EXPERT_APPROVAL_TIMEOUT"] = timeout
                genv["EXPERT_ON_TIMEOUT"] = str(on_timeout)
            out.append({"id": gate, "command": f"{_py()} preview", "env": genv, **SAFE,
                        "approval": {"prompt": f"{expert} wants to run {tool}.{op} (step"
                                               f" {index + 1} of {proc.name}): approve?"
                                               + wait}})
            call["condition"] = f"${gate}.approved"
            # the step checks it again where it runs (core/experts/step.py: issue 34)
            call["env"] = {**env, "EXPERT_APPROVED": f"${gate}.approved"}
        out.append(call)
        for name, typ, _ in _props(opdecl.get("output")):
            st.values[name] = _Val(f"${sid}.json.{name}", typ, "tool")
        st.last_tool = f"${sid}.json"
        return out
    fn = _function_named(pkg, text)
    if fn is not None:
        sid = st.new_id(fn.name.replace("-", "_"))
        env = {**base, **_env_inputs(st, _io(fn.meta, "inputs"), {})}
        learned = learnings_for(workspace, fn.name)
        prompt = (f"{fn.body.strip()}\n\n"
                  + (f"## Learnings (apply them)\n\n{learned}\n\n" if learned else "")
                  + "Answer as JSON matching the schema. The input items are the function's"
                  " inputs.")
        schema = json.dumps(output_schema(fn), sort_keys=True)
        s: dict[str, Any] = {"id": sid, "env": env, "pipeline":
                             f"exec --json --shell {_sq(_py() + ' gather')} | llm_task.invoke"
                             f" --prompt {_sq(prompt)} --output-schema {_sq(schema)}", **SAFE}
        if retry:
            s["retry"] = retry
        data = f"${sid}.json.output.data"
        for name, typ, _ in _io(fn.meta, "outputs"):
            st.values[name] = _Val(f"{data}.{name}", typ, "function")
        st.fn_outputs[fn.name] = data
        return [s]
    if "scratchpad" in text.lower():
        return [{"id": st.new_id("scratchpad"), "command": f"{_py()} gather",
                 "env": {**base, "EXPERT_TYPES": "{}"}, **SAFE}]
    sid = st.new_id(f"step_{index + 1}")
    schema = json.dumps({"type": "object", "properties": {"notes": {"type": "string"}},
                         "required": ["notes"]})
    prompt = (f"You are running step {index + 1} of the process {proc.name}: {text}\n"
              "Reply with short notes of what you did or found.")
    out = [{"id": sid, "env": {**base, "EXPERT_TYPES": "{}"}, "pipeline":
            f"exec --json --shell {_sq(_py() + ' gather')} | llm_task.invoke --prompt"
            f" {_sq(prompt)} --output-schema {_sq(schema)}", **SAFE}]
    m = STATE_RE.search(text)
    if m and m.group(1) in pkg.state:
        out.append({"id": st.new_id(f"{sid}_state"), "command": f"{_py()} state",
                    "env": {**base, "EXPERT_STATE_FILE": m.group(1), "EXPERT_TYPES": "{}",
                            "EXPERT_IN_notes": f"${sid}.json.output.data.notes"}, **SAFE})
    return out


def _function_named(pkg: Package, text: str) -> Doc | None:
    for code in CODE_RE.findall(text):
        name = code.strip().removeprefix("functions/").removesuffix(".md")
        if name in pkg.functions:
            return pkg.functions[name]
    return None


def dump(workflow: dict[str, Any]) -> str:
    import yaml

    head = "# generated by clawtower expert compile: edit the package, not this file\n"
    plain = json.loads(json.dumps(workflow))  # no shared objects: the loader refuses anchors
    return head + yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=100)


def write(workflow: dict[str, Any], out_dir: Path, process: str) -> Path:
    p = out_dir / f"{process}.lobster"
    files.write_if_changed(p, dump(workflow))
    return p
