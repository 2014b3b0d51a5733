"""The embedded deterministic simulator: agents scripted in YAML, offline and reproducible.

A script says, per task label, what each purpose answers on each round:

    seed: 7
    speed: 1.0                      # multiply every delay (0 = instant)
    agents:
      builder: {role: executor, model: sim-standard, escalation_model: sim-strong}
      checker: {role: spec_reviewer}
      critic:  {role: quality_reviewer}
    delay_ms: [150, 600]            # default think time, drawn from a seeded RNG
    scripts:
      flaky:                        # applies to tasks labelled "flaky"
        execute:
          - {fail: "integration test timed out"}
          - {ok: true}
        spec_gate:
          - {verdict: changes_requested, findings: ["src/api.py:40: no pagination"]}
          - {verdict: approved}

Meetings (core/meetings) use the purposes "meeting" (a participant's reply; scripts keyed by
the agent's name, entry N = round N+1; `stance` picks the marker, `text` replaces the whole
reply verbatim, e.g. to omit or forge a marker) and "meeting_summary" (the summarizer).

Structured calls (core/agents/llm_task.py) use the purpose "llm_task": entry N answers call N
(0 = the first call, 1 = the repair call); `answer` is a JSON value sent as JSON, `text` a raw
reply verbatim (fences, invalid JSON...). Unscripted, the simulator answers a minimal instance
of the request's schema (`minimal_instance`), or {"ok": true, "input": <input>} without one.
    scripts:
      extract:
        llm_task:
          - {text: "not json"}          # invalid first ...
          - {answer: {name: ada}}       # ... valid after the repair
Tool-calling turns (core/agents/turns.py) use the purpose "turn": entry N answers model call N
of the turn; `tool_calls: [{name, arguments}]` asks for tools, `text` is the reply. A free-form
question (`clawtower llm ask`) uses the purpose "ask": `text` is the reply; unscripted, the
reply quotes the question and says that no model wrote it. Scripts for these three purposes
are looked up by the request's labels, then by its agent's name.

Session turns (core/sessions) use the purpose "session": scripted like "turn" when a script
names it, else answered by directives in the latest user message (`session_reply`: `#work N`,
`#spawn N [agent]`, `#call TOOL {json}`, a `[Backlog]` resume, a synthesis of announces).

Round N of a purpose picks entry N (the last one repeats). The same request always gets the
same answer, whatever process asks: replies depend on (seed, task, purpose, round) only.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ValidationError
from ..safe_yaml import load_file
from .provider import ChatRequest, ProviderError, StreamEvent, ToolCall, Usage

PURPOSES = ("execute", "spec_review", "spec_gate", "quality_gate", "meeting", "meeting_summary",
            "llm_task", "turn", "ask", "session")
MEETING_PURPOSES = ("meeting", "meeting_summary")
# replies sent as plain text
TEXT_PURPOSES = ("meeting", "meeting_summary", "llm_task", "turn", "ask", "session")
TOOL_PURPOSES = ("turn", "session")
_TOKEN = re.compile(r"\w+|[^\w\s]")
# The same count for ASCII text without a match object per token (~13x faster on a node's
# 400-character prompt, which no cache holds: every node's differs): the runs of word bytes,
# plus every byte that is neither a word's nor str's whitespace (which takes \x1c-\x1f too).
_ASCII_WORD = bytes(c for c in range(128) if re.fullmatch(r"\w", chr(c)))
_ASCII_SPACE = bytes(c for c in range(128) if re.fullmatch(r"\s", chr(c)))
_RUNS = bytes(ord("a") if c in _ASCII_WORD else ord(" ") for c in range(256))
_NOT_PUNCT = _ASCII_WORD + _ASCII_SPACE


@functools.lru_cache(maxsize=1024)
def count_tokens(text: str) -> int:
    """A word-piece-ish count (words and punctuation). The simulator's usage figures.
    Remembered per text: every turn of an agent counts the same system prompt again."""
    if text.isascii():
        data = text.encode("ascii")
        runs = data.translate(_RUNS)  # word bytes -> "a", every other byte -> " "
        words = runs.count(b" a") + (runs[:1] == b"a")
        return words + len(data.translate(None, _NOT_PUNCT))
    return len(_TOKEN.findall(text))


def truncate_tokens(text: str, limit: int) -> str:
    """The longest prefix of `text` holding at most `limit` tokens (as count_tokens counts)."""
    if limit <= 0:
        return ""
    for i, match in enumerate(_TOKEN.finditer(text)):
        if i == limit:
            return text[: match.start()].rstrip()
    return text


class AgentDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal[
        "executor", "spec_reviewer", "quality_reviewer", "orchestrator", "participant",
        "summarizer",
    ]
    model: str = "sim-standard"
    escalation_model: str | None = None
    provider: str = "simulator"
    executor: str | None = None  # see core.agents.config.AgentConfig.executor
    # agents.yaml's cap on one reply (a meeting participant's, a task phase's, as a turn's);
    # None: the model's own
    max_output_tokens: int | None = Field(default=None, ge=1)


class SimToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: Any = Field(default_factory=dict)  # sent as JSON text; a str is sent verbatim


class Step(BaseModel):
    """One scripted answer. Executors use ok/fail/error; reviewers use verdict and findings."""

    model_config = ConfigDict(extra="forbid")
    ok: bool | None = None
    fail: str | None = None
    error: str | None = None  # the provider call itself fails (timeout, 500 ...)
    verdict: str | None = None
    findings: list[str] = Field(default_factory=list)
    risk: str = "low"
    maintainability: str = "readable; follows the existing module layout"
    test_gaps: list[str] = Field(default_factory=list)
    artifacts: list[dict[str, str]] = Field(default_factory=list)
    summary: str | None = None
    delay_ms: int | None = None
    heartbeats: int = 2
    stance: Literal["AGREE", "DISAGREE", "NEUTRAL"] | None = None  # meetings
    text: str | None = None  # meetings, llm_task, turn: the whole reply, verbatim
    answer: Any = None  # llm_task: a JSON value, sent as JSON
    tool_calls: list[SimToolCall] = Field(default_factory=list)  # turn: tools to call


class SimScript(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    speed: float = Field(default=1.0, ge=0)
    # retry backoffs scale with `speed` too (the demo's agents: `--speed 0` waits for
    # nothing); off, a simulated task keeps the real policy's backoff (tests of it)
    backoff_follows_speed: bool = False
    delay_ms: tuple[int, int] = (150, 600)
    agents: dict[str, AgentDef] = Field(default_factory=dict)
    scripts: dict[str, dict[str, list[Step]]] = Field(default_factory=dict)


DEFAULT_AGENTS = {
    "builder": AgentDef(role="executor", model="sim-standard", escalation_model="sim-strong"),
    "checker": AgentDef(role="spec_reviewer", model="sim-standard"),
    "critic": AgentDef(role="quality_reviewer", model="sim-standard"),
    # meeting participants and the minute-taker (`clawtower meeting run --agents ada,ben,cyd`)
    "ada": AgentDef(role="participant", model="sim-standard"),
    "ben": AgentDef(role="participant", model="sim-standard"),
    "cyd": AgentDef(role="participant", model="sim-standard"),
    "scribe": AgentDef(role="summarizer", model="sim-standard"),
}

# The default cast's meeting stances: ada and ben come round in round 2 (FULL consensus).
DEFAULT_MEETING_SCRIPTS: dict[str, dict[str, list[Step]]] = {
    "ada": {"meeting": [Step(stance="DISAGREE"), Step(stance="AGREE")]},
    "ben": {"meeting": [Step(stance="NEUTRAL"), Step(stance="AGREE")]},
    "cyd": {"meeting": [Step(stance="AGREE")]},
}


def load_script(path: str | Path) -> SimScript:
    return script_from_data(load_file(path), path)


def script_from_data(data: Any, path: str | Path, also: tuple[str, ...] = ()) -> SimScript:
    """Validate a loaded script (`path` names it in errors; `also`: the other top-level
    keys of the file, offered when a key is misspelt)."""
    try:
        script = SimScript.model_validate(data or {})
    except pydantic.ValidationError as exc:
        from ..reader import schema_problem

        loc, msg = schema_problem(exc, SimScript, also=also)
        raise ValidationError(f"{path}: field '{loc}': {msg}") from None
    for label, purposes in script.scripts.items():
        for purpose in purposes:
            if purpose not in PURPOSES:
                raise ValidationError(
                    f"{path}: field 'scripts.{label}.{purpose}': unknown purpose"
                    f" (known: {', '.join(PURPOSES)})")
    if not script.agents:
        script.agents = dict(DEFAULT_AGENTS)
        script.scripts = {**DEFAULT_MEETING_SCRIPTS, **script.scripts}
    return script


class Simulator:
    """A Provider whose replies come from a SimScript."""

    name = "simulator"

    def __init__(self, script: SimScript | None = None) -> None:
        self.script = script or SimScript()
        if not self.script.agents:  # a script that names no agents gets the default cast
            self.script = self.script.model_copy(update={
                "agents": dict(DEFAULT_AGENTS),
                "scripts": {**DEFAULT_MEETING_SCRIPTS, **self.script.scripts}})

    def _rng(self, *key: Any) -> random.Random:
        digest = hashlib.sha256(json.dumps([self.script.seed, *key]).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def step_for(self, labels: list[str], purpose: str, round_: int) -> Step:
        for label in labels:
            steps = self.script.scripts.get(label, {}).get(purpose)
            if steps:
                return steps[min(round_, len(steps) - 1)]
        return Step()

    def _scripted(self, labels: list[str], purpose: str) -> bool:
        return any(self.script.scripts.get(label, {}).get(purpose) for label in labels)

    def delay_s(self, step: Step, *key: Any) -> float:
        if self.script.speed == 0:  # no delay at any draw: the draw (a sha256) is skipped
            return 0.0
        if step.delay_ms is not None:
            ms = float(step.delay_ms)
        else:
            lo, hi = self.script.delay_ms
            ms = self._rng(*key).uniform(lo, hi)
        return ms / 1000.0 * self.script.speed

    def reply(self, request: ChatRequest) -> tuple[Step, dict[str, Any]]:
        md = request.metadata
        purpose = str(md.get("purpose", "execute"))
        labels = [str(x) for x in md.get("labels", [])]
        if purpose in ("llm_task", "turn", "ask", "session") and md.get("agent"):
            labels.append(str(md["agent"]))
        round_ = int(md.get("round", 0))
        if purpose == "session" and not self._scripted(labels, purpose):
            text, calls = session_reply(request)  # one Step, built once (a turn per node)
            return Step(tool_calls=calls), {"text": text}
        step = self.step_for(labels, purpose, round_)
        if purpose == "execute":
            failed = step.fail is not None or step.ok is False
            body: dict[str, Any] = {
                "status": "failed" if failed else "succeeded",
                "reason": step.fail or "",
                "summary": step.summary or (f"attempt failed: {step.fail}" if failed else
                                            f"implemented {md.get('title', 'the task')}"),
                "artifacts": step.artifacts or ([] if failed else [{
                    "name": f"{md.get('task', 'task')}-a{md.get('attempt', 1)}.patch",
                    "uri": f"artifact://{md.get('task', 'task')}/{md.get('attempt', 1)}/patch",
                    "summary": "the change set"}]),
                "heartbeats": step.heartbeats,
            }
        elif purpose == "quality_gate":
            rec = step.verdict or "approve"
            body = {"recommendation": rec, "risk": step.risk,
                    "maintainability": step.maintainability, "test_gaps": step.test_gaps,
                    "findings": step.findings}
        elif purpose == "meeting":
            body = {"text": step.text if step.text is not None else self._meeting_reply(
                request, step, round_)}
        elif purpose == "meeting_summary":
            body = {"text": step.text if step.text is not None else _sim_summary(request)}
        elif purpose == "llm_task":
            body = {"text": step.text if step.text is not None else json.dumps(
                step.answer if step.answer is not None else _llm_task_answer(request))}
        elif purpose == "turn":
            body = {"text": step.text if step.text is not None else (
                "" if step.tool_calls else f"{md.get('agent', 'agent')}: done")}
        elif purpose == "ask":
            body = {"text": step.text if step.text is not None else _ask_reply(request)}
        elif purpose == "session":  # scripted (the unscripted reply is returned above)
            body = {"text": step.text if step.text is not None else (
                "" if step.tool_calls else f"{md.get('agent', 'agent')}: done")}
        else:
            body = {"verdict": step.verdict or "approved", "findings": step.findings}
        return step, body

    def _meeting_reply(self, request: ChatRequest, step: Step, round_: int) -> str:
        md = request.metadata
        agent = str(md.get("agent", "agent"))
        rng = self._rng("meeting", str(md.get("topic", "")), agent, round_)
        choices = ["AGREE", "AGREE", "NEUTRAL", "DISAGREE"]
        stance: str = step.stance if step.stance is not None else rng.choice(choices)
        opener = rng.choice(_OPENERS[stance])
        detail = rng.choice(_DETAILS)
        return f"{opener} {detail}\n\n[STANCE: {stance}]"

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        md = request.metadata
        step, body = self.reply(request)
        if md.get("purpose") in MEETING_PURPOSES:
            delay = self.delay_s(step, md.get("agent"), md.get("purpose"), md.get("round"))
        else:
            delay = self.delay_s(step, md.get("task"), md.get("purpose"), md.get("round"),
                                 md.get("attempt"))
        if step.error:
            await asyncio.sleep(delay)
            raise ProviderError(self.name, f"{request.model}: {step.error}", retryable=True)
        if md.get("purpose") in TEXT_PURPOSES:
            text = str(body["text"])
        else:
            text = json.dumps(body, sort_keys=True)
        chunks = [text[i:i + 24] for i in range(0, len(text), 24)] or [""]
        per_chunk = delay / len(chunks)
        for chunk in chunks:
            if per_chunk > 0:
                await asyncio.sleep(per_chunk)
            if chunk:
                yield StreamEvent(kind="text", text=chunk)
        if md.get("purpose") in TOOL_PURPOSES:
            for i, call in enumerate(step.tool_calls):
                args = call.arguments if isinstance(call.arguments, str) else json.dumps(
                    call.arguments, sort_keys=True)
                yield StreamEvent(kind="tool_call", tool_call=ToolCall(
                    id=f"call_{md.get('round', 0)}_{i}", name=call.name, arguments=args))
        prompt = sum(count_tokens(m.content) for m in request.messages)
        yield StreamEvent(kind="usage", usage=Usage(prompt_tokens=prompt,
                                                    completion_tokens=count_tokens(text)))
        yield StreamEvent(kind="done", finish_reason="tool_calls" if md.get("purpose")
                          in TOOL_PURPOSES and step.tool_calls else "stop")


_OPENERS = {
    "AGREE": ["The proposal holds up.", "I am in favour.", "This is the right call."],
    "DISAGREE": ["I cannot support this yet.", "The risks outweigh the gain.",
                 "This needs another design."],
    "NEUTRAL": ["I see both sides.", "I have no strong view.", "It depends on the details."],
}
_DETAILS = [
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


def session_reply(request: ChatRequest) -> tuple[str, list[SimToolCall]]:
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
                return "", [SimToolCall(name="text.count", arguments={
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
                return "", [SimToolCall(name="spawn_subagents", arguments={"tasks": items})]
            return "", [SimToolCall(name="spawn_subagent", arguments=a) for a in items]
        ok = sum(r.count('"accepted"') for r in results)
        return (f"Spawned {ok} of {n} subagent(s); their results will follow."
                + ("" if ok == n else f" Refused: {_short(results[-1], 160)}")), []
    work = _WORK.search(body)
    if work:
        total = int(work.group(1))
        if rounds < total:
            return "", [SimToolCall(name="text.count", arguments={
                "text": f"step {rounds + 1} of {total}: {_short(body)}"})]
        return f"Done: {_short(body)} ({total} tool rounds).", []
    call = _CALL.search(body)
    if call:
        if rounds == 0:
            raw = call.group(2) or "{}"
            return "", [SimToolCall(name=call.group(1), arguments=raw)]
        return f"{call.group(1)} answered: {_short(results[-1] if results else '', 200)}", []
    return f"{agent}: got it: \"{_short(body, 120)}\"", []


def _ask_reply(request: ChatRequest) -> str:
    """An unscripted free-form answer: it says plainly that no model wrote it."""
    question = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    words = question.split()
    quoted = " ".join(words[:24]) + (" ..." if len(words) > 24 else "")
    agent = request.metadata.get("agent", "agent")
    return (f"(simulated reply from {agent}, {request.model}) You asked: \"{quoted}\". The"
            " built-in simulator answers offline and deterministically without a language"
            " model; configure a provider in clawtower.yaml for real answers.")


def _sim_summary(request: ChatRequest) -> str:
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


def _llm_task_answer(request: ChatRequest) -> Any:
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
