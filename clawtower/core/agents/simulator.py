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
of the request's schema (`simreplies.minimal_instance`), or {"ok": true, "input": <input>}
without one.
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
names it, else answered by directives in the latest user message (`simreplies.session_reply`:
`#work N`, `#spawn N [agent]`, `#call TOOL {json}`, a `[Backlog]` resume, a synthesis of announces).

Round N of a purpose picks entry N (the last one repeats). The same request always gets the
same answer, whatever process asks: replies depend on (seed, task, purpose, round) only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ValidationError
from ..safe_yaml import load_file
from .provider import ChatRequest, ProviderError, StreamEvent, ToolCall, Usage
from .simreplies import DETAILS, OPENERS, ask_reply, llm_task_answer, session_reply, sim_summary
from .tokens import count_tokens

PURPOSES = ("execute", "spec_review", "spec_gate", "quality_gate", "meeting", "meeting_summary",
            "llm_task", "turn", "ask", "session")
MEETING_PURPOSES = ("meeting", "meeting_summary")
# replies sent as plain text
TEXT_PURPOSES = ("meeting", "meeting_summary", "llm_task", "turn", "ask", "session")
TOOL_PURPOSES = ("turn", "session")

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

    def _steps(self, labels: list[str], purpose: str) -> list[Step] | None:
        """The first label's script for `purpose`, or None when no label has one."""
        for label in labels:
            steps = self.script.scripts.get(label, {}).get(purpose)
            if steps:
                return steps
        return None

    def step_for(self, labels: list[str], purpose: str, round_: int) -> Step:
        steps = self._steps(labels, purpose)
        return steps[min(round_, len(steps) - 1)] if steps else Step()

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
        steps = self._steps(labels, purpose)  # looked up once
        if purpose == "session" and not steps:
            text, calls = session_reply(request)  # one Step, built once (a turn per node)
            return Step(tool_calls=[SimToolCall(name=n, arguments=a) for n, a in calls]), {
                "text": text}
        step = steps[min(round_, len(steps) - 1)] if steps else Step()
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
            body = {"text": step.text if step.text is not None else sim_summary(request)}
        elif purpose == "llm_task":
            body = {"text": step.text if step.text is not None else json.dumps(
                step.answer if step.answer is not None else llm_task_answer(request))}
        elif purpose in ("turn", "session"):  # a session here is scripted (else returned above)
            body = {"text": step.text if step.text is not None else (
                "" if step.tool_calls else f"{md.get('agent', 'agent')}: done")}
        elif purpose == "ask":
            body = {"text": step.text if step.text is not None else ask_reply(request)}
        else:
            body = {"verdict": step.verdict or "approved", "findings": step.findings}
        return step, body

    def _meeting_reply(self, request: ChatRequest, step: Step, round_: int) -> str:
        md = request.metadata
        agent = str(md.get("agent", "agent"))
        rng = self._rng("meeting", str(md.get("topic", "")), agent, round_)
        choices = ["AGREE", "AGREE", "NEUTRAL", "DISAGREE"]
        stance: str = step.stance if step.stance is not None else rng.choice(choices)
        opener = rng.choice(OPENERS[stance])
        detail = rng.choice(DETAILS)
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
        # streamed in pieces over the think time; with none (speed 0) the pieces would come
        # at once, so the text is one piece (a piece is an event through every consumer)
        chunks = [text[i:i + 24] for i in range(0, len(text), 24)] if delay > 0 and text \
            else [text]
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
