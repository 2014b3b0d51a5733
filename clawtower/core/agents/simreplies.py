"""The simulator's unscripted answers (core/agents/simulator.py): a meeting reply's
phrases, a session turn's directives (`#work N`, `#spawn N`, `#call TOOL`), a free-form
answer, a meeting summary, an llm-task's minimal instance. Deterministic: each is a function
of the request alone."""

from __future__ import annotations

import json
import re
from typing import Any

from .provider import ChatRequest
from .tokens import truncate_tokens

OPENERS = {
    "AGREE": ["The proposal holds up.", "I am in favour.", "This is the right call."],
    "DISAGREE": ["I cannot support this yet.", "The risks outweigh the gain.",
                 "This needs another design."],
    "NEUTRAL": ["I see both sides.", "I have no strong view.", "It depends on the details."],
}
DETAILS = [
    "The rollback path is the part to watch.",
    "Latency stays within budget if the cache is kept small.",
    "The migration can run in two steps with a feature flag.",
    "Tests cover the main paths but not the failure modes.",
    "Cost is acceptable for the first quarter.",
]


_WORK = re.compile(r"#work\s+(\d+)")
_SPAWN = re.compile(r"#spawn\s+(\d+)(?:\s+([A-Za-z0-9_.-]+))?")
_CALL = re.compile(r"#call\s+([A-Za-z0-9_.-]+)(?:\s+(\{.*\}))?", re.S)
_RESUME = re.compile(r"Resume the interrupted task: (.*?) \(interrupted after (\d+) tool round",
                     re.S)
STEER_PREFIX = "[Steer]"


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def session_reply(request: ChatRequest) -> tuple[str, list[tuple[str, Any]]]:
    """The unscripted session turn (core/sessions): replies follow directives in the latest
    user message, so demos and tests are deterministic without scripts:

    - `#work N`: N tool rounds (`text.count` on "step i of N"), then "Done: ...";
    - `#spawn N [agent]`: one round of N `spawn_subagent` calls (or one `spawn_subagents`
      call when the model is offered it), then "Spawned N ...";
    - `#call TOOL {json}`: one call of TOOL, then a reply quoting its result;
    - a `[Backlog]` message resumes an interrupted `#work N` where it stopped;
    - with subagent results in the system prompt: a synthesis of them;
    - anything else: a short acknowledgement quoting the message.
    Tool rounds already made are counted from the conversation since that message."""
    msgs = request.messages
    md = request.metadata
    agent = str(md.get("agent", "agent"))
    idx = max((i for i, m in enumerate(msgs) if m.role == "user"), default=-1)
    focus = msgs[idx].content if idx >= 0 else ""
    after = msgs[idx + 1:] if idx >= 0 else []
    rounds = sum(1 for m in after if m.role == "assistant" and m.tool_calls)
    results = [m.content for m in after if m.role == "tool"]
    body = focus.partition("\n\n")[2] if focus.startswith(STEER_PREFIX) else focus
    system = msgs[0].content if msgs and msgs[0].role == "system" else ""
    if "# Subagent results" in system and not body.startswith("[Backlog]") \
            and not focus.startswith(STEER_PREFIX):
        lines = [line for line in system.splitlines() if line.startswith("- @agent:")]
        oks = sum(1 for line in lines if "-> ok:" in line)
        return (f"Synthesis of {len(lines)} subagent result(s) ({oks} ok): "
                + "; ".join(_short(line.partition(" -> ")[2], 50) for line in lines[:5])
                + (" ..." if len(lines) > 5 else "")), []
    if body.startswith("[Backlog]"):
        m = _RESUME.search(body)
        work = _WORK.search(m.group(1)) if m else None
        if m and work:
            total, done = int(work.group(1)), int(m.group(2))
            step = done + rounds
            if step < total:
                return "", [("text.count", {
                    "text": f"step {step + 1} of {total}: {_short(m.group(1))}"})]
            return (f"Resumed and finished: {_short(m.group(1))} ({total} steps; {done}"
                    " before the interruption)."), []
        return f"{agent}: handled the backlog: {_short(body[len('[Backlog]'):], 120)}", []
    spawn = _SPAWN.search(body)
    if spawn:
        n, who = int(spawn.group(1)), spawn.group(2)
        task = _short(_SPAWN.sub("", body).strip() or "a part of the work", 80)
        if rounds == 0:
            items: list[dict[str, Any]] = []
            for i in range(n):
                args: dict[str, Any] = {"task": f"part {i + 1} of {n}: {task}",
                                        "label": f"part-{i + 1}"}
                if who:
                    args["agent"] = who
                items.append(args)
            if n > 1 and any(t.name == "spawn_subagents" for t in request.tools):
                return "", [("spawn_subagents", {"tasks": items})]
            return "", [("spawn_subagent", a) for a in items]
        ok = sum(r.count('"accepted"') for r in results)
        return (f"Spawned {ok} of {n} subagent(s); their results will follow."
                + ("" if ok == n else f" Refused: {_short(results[-1], 160)}")), []
    work = _WORK.search(body)
    if work:
        total = int(work.group(1))
        if rounds < total:
            return "", [("text.count", {
                "text": f"step {rounds + 1} of {total}: {_short(body)}"})]
        return f"Done: {_short(body)} ({total} tool rounds).", []
    call = _CALL.search(body)
    if call:
        if rounds == 0:
            raw = call.group(2) or "{}"
            return "", [(call.group(1), raw)]
        return f"{call.group(1)} answered: {_short(results[-1] if results else '', 200)}", []
    return f"{agent}: got it: \"{_short(body, 120)}\"", []


def ask_reply(request: ChatRequest) -> str:
    """An unscripted free-form answer: it says plainly that no model wrote it."""
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    words = question.split()
    quoted = " ".join(words[:24]) + (" ..." if len(words) > 24 else "")
    agent = request.metadata.get("agent", "agent")
    return (f"(simulated reply from {agent}, {request.model}) You asked: \"{quoted}\". The"
            " built-in simulator answers offline and deterministically without a language"
            " model; configure a provider in clawtower.yaml for real answers.")


def sim_summary(request: ChatRequest) -> str:
    """A deterministic "compression": this round's tally first, then the previous summary,
    cut to the request's max_tokens (newest first, so the oldest detail goes)."""
    user = request.messages[-1].content if request.messages else ""
    previous, _, this_round = user.partition("\nTHIS ROUND:\n")
    previous = previous.partition("PREVIOUS SUMMARY:\n")[2].strip()
    tally = [line[2:].strip() for line in this_round.splitlines() if line.startswith("- ")]
    text = " ".join(tally)
    if previous and previous != "(none)":
        text = f"{text} Earlier: {previous}"
    return truncate_tokens(text, request.max_tokens or 500)


def llm_task_answer(request: ChatRequest) -> Any:
    """The unscripted llm-task answer: a minimal instance of the schema, else the input echoed."""
    if request.response_schema is not None:
        return minimal_instance(request.response_schema)
    user = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    _, found, raw = user.partition("INPUT_JSON:\n")
    try:
        value: Any = json.loads(raw) if found else None
    except ValueError:
        value = None
    return {"ok": True, "input": value}


def minimal_instance(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A small deterministic value valid for common schemas: const, enum, default, examples,
    then by type (required properties only; minLength, minimum, minItems honoured); local
    `$ref`s ("#/..."), allOf (merged objects), anyOf/oneOf (the first) are followed."""
    root = schema if root is None else root
    if not isinstance(schema, dict) or depth > 32:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][0]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target: Any = root
        for part in ref.lstrip("#").strip("/").split("/"):
            if part:
                target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) \
                    if isinstance(target, dict) else {}
        return minimal_instance(target, root, depth + 1)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return minimal_instance(schema[key][0], root, depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = minimal_instance(part, root, depth + 1)
            if not isinstance(value, dict):
                return value
            merged.update(value)
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        base = minimal_instance(rest, root, depth + 1) if rest.get("type") == "object" else {}
        return {**merged, **(base if isinstance(base, dict) else {})}
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if kind == "object":
        props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
        return {name: minimal_instance(props.get(name, {}), root, depth + 1)
                for name in schema.get("required", []) if isinstance(name, str)}
    if kind == "array":
        items = schema.get("items", {})
        n = int(schema.get("minItems", 0) or 0)
        if isinstance(schema.get("prefixItems"), list):
            return [minimal_instance(s, root, depth + 1) for s in schema["prefixItems"]][
                :max(n, len(schema["prefixItems"]))]
        return [minimal_instance(items, root, depth + 1) for _ in range(n)]
    if kind == "string":
        return "x" * int(schema.get("minLength", 0) or 0)
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        if low is None and schema.get("exclusiveMinimum") is not None:
            low = schema["exclusiveMinimum"] + 1
        value = low if low is not None else 0
        if schema.get("maximum") is not None and value > schema["maximum"]:
            value = schema["maximum"]
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return {}


__all__ = ["DETAILS", "OPENERS", "STEER_PREFIX", "ask_reply", "llm_task_answer",
           "minimal_instance", "session_reply", "sim_summary"]
