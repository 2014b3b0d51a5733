"""The turn loop: model -> tool calls -> tool results -> model, until the model answers.

One turn is one `run_turn` call. It streams every model call (text deltas go to `on_text`),
runs the tools the model asks for through a `ToolBox` (which never raises for the model's
mistakes: a bad argument, an unknown or disallowed tool come back as error results the model
reads), appends the results and calls the model again, until it answers without tool calls.

Budgets (`TurnBudget`) end a turn with a stop reason, never a hang:

- `max_tool_rounds`: the model asks for tools once more than allowed -> "max_tool_rounds"
  (those calls are not run);
- `max_tokens`: prompt + completion tokens of the whole turn; each call's completion is capped
  to what is left, and once the budget is spent the turn stops before the next model call or
  tool round -> "max_tokens" (a final answer that arrives in the call that crossed the line is
  still the answer: "completed");
- `max_wall_s`: the whole turn, model calls and tools included -> "max_wall_clock".

Cancellation: an explicit `CancelHandle.cancel()` (from any task) interrupts the turn at once,
even mid-call; the turn records `turn.finished` with stop reason "cancelled" and returns.
Cancelling the task running the turn (asyncio cancellation) records the same and re-raises.
Everything recorded before the cancellation (tool results, usage of finished calls) stays.

Approval tiers (issue 34: one gate at the point of execution, closed by default): every
call of every round is resolved by the tool box (`ToolBox.resolve`: the concrete tool it
would run, asked now, never from the list offered at the turn's start) and its tier taken
from the `gate` (core/tools/approval.py) for that concrete tool; the decision is recorded as
`tier` on `turn.tool_called`, committed before any call of the round runs. A call that
resolves to nothing the agent may run, or whose tier cannot be decided, is refused: a
`policy` result, tier `refused` and a `permission.refused` event. `auto` runs; `manual`
is drafted (`turn.tool_drafted`), never run, and the model is told so; `confirm` pauses
the turn: it stops with "awaiting_approval", the round's undecided calls in
`TurnResult.pending` and the conversation so far in `messages`, so a durable layer (the
session worker, core/sessions/gate.py) can ask an operator and later resume it with
`resume=`: the decided call's result first, then the round's other calls (each gated again),
then on as usual. Arguments over `MAX_ARGUMENT_CHARS` are refused before any tier applies.

Steering: after every tool round (the safe boundary: all results appended, no call in
flight) `steer(state)` is awaited; the messages it returns are appended before the next
model call and recorded as `turn.steered`. A durable caller gives `steer_at` instead: the
round's last result, the steer and its `turn.steered` are then one commit (a session job:
issue 36, one awaited commit fewer per round and a message taken at the result's commit).

Events (when a store is given): `turn.started`, `turn.tool_called`, `turn.tool_result`,
`turn.steered`, `turn.finished` on the turn's id, and one `agent.usage` per model call on the
subject (task, meeting, session or workflow run id), with its cost when a price is known;
the final call's usage rides in `turn.finished` (`usage`, `usage_subject`: issue 24.2, one
event where two said one fact). A session job's turn writes through `TurnRecords`
(core/sessions/records.py), which folds its start and end into the job's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..events import NewEvent
from ..store.interface import Store
from ..tools.approval import TIERS, TierGate
from ..tools.names import unwire, wire_names
from ..tools.types import ToolBox, ToolResult
from .provider import ChatMessage, ChatRequest, Provider, ProviderError, ToolCall, ToolSpec, Usage
from .tokens import count_tokens
from .turntypes import (  # re-exported: callers import them from the loop
    BoundaryHook,
    CancelHandle,
    SteeringHook,
    StopReason,
    TextCallback,
    ToolGate,
    ToolRecord,
    TurnBudget,
    TurnResult,
    TurnResume,
    TurnState,
)
from .usage import Price, UsageRecorder

if TYPE_CHECKING:
    from ..tools.registry import ToolRegistry
    from .config import ClawtowerConfig

Decision = tuple[str, ToolResult | None]  # (tier | "refused", the refusal the model reads)
CLIP = 2000  # characters of arguments, results and texts kept in events
MAX_ARGUMENT_CHARS = 256 * 1024  # a tool call's arguments (JSON text) larger than this: refused


@dataclass
class _Run:
    turn_id: str
    messages: list[ChatMessage]
    rounds: int = 0
    model_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    text: str = ""
    tools: list[ToolRecord] = field(default_factory=list)
    pending: list[ToolCall] = field(default_factory=list)
    final_usage: NewEvent | None = None  # the last call's `agent.usage`, folded into the finish


class _Stop(Exception):  # control flow inside the loop; never escapes run_turn
    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason: StopReason = reason


def _drafted(name: str) -> ToolResult:
    return ToolResult(content=f"{name}: drafted for an operator (manual tier); it was NOT"
                      " executed and will not be. Tell the user what you drafted.",
                      error_kind="draft")


def _refused(name: str, why: str) -> ToolResult:
    return ToolResult(content=f"{name}: refused by the approval policy: no tier can be decided"
                      f" for it ({why}); the call was not made", is_error=True,
                      error_kind="policy")


_RENAMED: dict[tuple[int, str], tuple[ToolSpec, ToolSpec]] = {}


def _renamed(spec: ToolSpec, name: str) -> ToolSpec:
    """`spec` under its provider-safe `name`, copied once per (spec, name): a registry hands
    every turn the same spec objects (the memo keeps each original alive, so its id stays
    its own; bounded, cleared when full)."""
    key = (id(spec), name)
    hit = _RENAMED.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_RENAMED) >= 1024:
        _RENAMED.clear()
    copy = spec.model_copy(update={"name": name})
    _RENAMED[key] = (spec, copy)
    return copy


def _clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[:limit] + f"… [{len(text) - limit} more]"


async def run_turn(
    provider: Provider,
    *,
    model: str,
    messages: list[ChatMessage],
    tools: ToolBox | None = None,
    budget: TurnBudget | None = None,
    subject: str = "adhoc",
    agent: str = "agent",
    store: Store | None = None,
    price: Price | None = None,
    steer: SteeringHook | None = None,
    steer_at: BoundaryHook | None = None,
    on_text: TextCallback | None = None,
    cancel: CancelHandle | None = None,
    temperature: float | None = None,
    first_tool_choice: str | None = None,
    max_tokens_per_call: int | None = None,
    call_timeout_s: float = 60.0,
    metadata: dict[str, Any] | None = None,
    turn_id: str | None = None,
    gate: ToolGate | None = None,
    resume: TurnResume | None = None,
    start_recorded: bool = False,
) -> TurnResult:
    """Run one turn; see the module docstring. Never raises for budgets, tool errors or
    provider errors (those are stop reasons); re-raises asyncio cancellation of its task.
    `first_tool_choice` ("required", or a tool name) forces a tool on the first call.
    `start_recorded`: the caller already recorded the turn's start (a session job's claim carries
    it: one event, issue 24.2), so no `turn.started` is written here."""
    budget = budget or TurnBudget()
    run = _Run(turn_id=turn_id or f"turn-{uuid.uuid4().hex[:12]}", messages=list(messages),
               rounds=resume.rounds if resume is not None else 0)
    recorder = UsageRecorder(store, subject, agent, price)
    loop = asyncio.get_running_loop()
    started = loop.time()

    def turn_event(payload: ev.Payload) -> NewEvent:
        return NewEvent(entity_id=run.turn_id, actor=agent, role="agent", payload=payload)

    async def emit(*payloads: ev.Payload | NewEvent) -> None:
        """Append in ONE commit (payloads become events of this turn)."""
        if store is not None and payloads:
            await store.append([p if isinstance(p, NewEvent) else turn_event(p)
                                for p in payloads])

    def state() -> TurnState:
        return TurnState(turn_id=run.turn_id, subject=subject, agent=agent, model=model,
                         rounds=run.rounds, model_calls=run.model_calls,
                         tool_calls=len(run.tools), usage=run.usage,
                         elapsed_s=loop.time() - started, messages=list(run.messages))

    def tokens_left() -> int | None:
        if budget.max_tokens is None:
            return None
        return budget.max_tokens - run.usage.total

    async def call_model(specs: list[ToolSpec]) -> tuple[str, list[ToolCall], NewEvent]:
        """One streamed call. Returns its text, tool calls and its (not yet appended)
        `agent.usage` event, which the caller commits with the round's next events."""
        left = tokens_left()
        cap = max_tokens_per_call
        if left is not None:
            cap = left if cap is None else min(cap, left)
        md = {"purpose": "turn", "agent": agent, "subject": subject, "turn": run.turn_id,
              **(metadata or {}), "round": run.model_calls}
        # a forced tool ("required" or a name) applies to the first call only: forcing every
        # call would never let the model answer
        choice = first_tool_choice if run.model_calls == 0 and specs else None
        if choice is not None:
            choice = wire.get(choice, choice)
        request = ChatRequest(model=model, messages=list(run.messages), tools=specs,
                              tool_choice=choice, max_tokens=cap, temperature=temperature,
                              timeout_s=call_timeout_s, metadata=md)
        parts: list[str] = []
        calls: list[ToolCall] = []
        usage = Usage()
        run.model_calls += 1
        try:
            async with asyncio.timeout(call_timeout_s):
                async for event in provider.stream(request):
                    if event.kind == "text" and event.text:
                        parts.append(event.text)
                        if on_text is not None:
                            on_text(event.text)
                    elif event.kind == "tool_call" and event.tool_call is not None:
                        calls.append(event.tool_call)
                    elif event.kind == "usage" and event.usage is not None:
                        usage = event.usage
        except TimeoutError:
            raise ProviderError(provider.name, f"{model}: no complete reply within"
                                f" {call_timeout_s:g} s", retryable=True) from None
        if usage.total == 0:  # the server streamed no usage (llama-cpp-python): estimate it
            usage = Usage(prompt_tokens=sum(count_tokens(m.content) for m in request.messages),
                          completion_tokens=count_tokens("".join(parts)) + sum(
                              count_tokens(c.name + c.arguments) for c in calls))
            estimated = True
        else:
            estimated = False
        run.usage = Usage(prompt_tokens=run.usage.prompt_tokens + usage.prompt_tokens,
                          completion_tokens=run.usage.completion_tokens
                          + usage.completion_tokens)
        usage_event, cost = recorder.event(model, "turn", usage, estimated=estimated)
        run.cost += cost
        return "".join(parts), calls, usage_event

    async def run_tool(call: ToolCall) -> ToolResult:
        if tools is None:
            return ToolResult(content=f"error: no tools are available (asked for {call.name!r})",
                              is_error=True, error_kind="unknown")
        try:
            return await tools.call(call.name, call.arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a ToolBox should not raise; if it does, the model is told
            return ToolResult(content=f"error: tool {call.name!r} failed: {exc}",
                              is_error=True, error_kind="failed")

    # OpenAI's and Anthropic's APIs accept only [A-Za-z0-9_-]{1,64} as a tool name; tools are
    # named <server>.<tool>. The model sees provider-safe names (and so does the history sent
    # back to it); tools, events and allow-lists keep the real ones.
    wire: dict[str, str] = {}
    real_names: dict[str, str] = {}

    def real_call(c: ToolCall) -> ToolCall:
        name = real_names.get(c.name, c.name)
        return c if name == c.name else c.model_copy(update={"name": name})

    async def decide(call: ToolCall) -> Decision:
        """The gate, at the point of execution: resolve the call to the concrete tool it
        would run (the tool box asks its server now; a tool that was not listed at the
        turn's start is no exception) and take that tool's tier from the policy. A call
        that resolves to nothing the agent may run, or whose tier cannot be decided, is
        refused; nothing here depends on what was offered to the model."""
        if tools is None:
            return "refused", ToolResult(content=f"error: no tools are available (asked for"
                                         f" {call.name!r})", is_error=True, error_kind="unknown")
        resolve = getattr(tools, "resolve", None)  # a test double may not resolve: its name
        try:
            concrete = await resolve(call.name) if resolve is not None else call.name
            if isinstance(concrete, ToolResult):
                return "refused", concrete
            tier = gate.tier(concrete) if gate is not None else "auto"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return "refused", _refused(call.name, f"{type(exc).__name__}: {exc}")
        if tier not in TIERS:
            return "refused", _refused(call.name, f"its tier {tier!r} is not one of {TIERS}")
        return tier, None

    async def record_calls(calls: list[ToolCall], decisions: list[Decision],
                           *first: NewEvent) -> None:
        """Every call with its tier decision (and a refusal event for each refused one), in
        one commit, before any of them runs."""
        refusals = [NewEvent(entity_id=f"tool:{c.name}", actor=agent, role="executor",
                             payload=ev.PermissionRefused(
                                 action="tool.call", target=c.name,
                                 reason=_clip(r.content, 500)))
                    for c, (_, r) in zip(calls, decisions, strict=True) if r is not None]
        await emit(*first, *(ev.TurnToolCalled(round=run.rounds, call_id=c.id, name=c.name,
                                               arguments=_clip(c.arguments), tier=t)
                             for c, (t, _) in zip(calls, decisions, strict=True)), *refusals)

    async def tool_round(calls: list[ToolCall], decisions: list[Decision],
                         decided: TurnResume | None) -> list[NewEvent]:
        """Run one round's calls in order, each as its decision says; a confirm-tier call
        stops the turn there (`awaiting_approval`) with it and the calls after it pending.
        Every result is appended but the last, which is returned for `boundary`."""
        last: list[NewEvent] = []
        for i, call in enumerate(calls):
            if cancel is not None and cancel.cancelled:
                raise _Stop("cancelled")
            if i == 0 and decided is not None:
                result = await decided.decided(call)
            elif len(call.arguments) > MAX_ARGUMENT_CHARS:
                result = ToolResult(content=f"{call.name}: arguments of {len(call.arguments)}"
                                    f" characters are over the limit of {MAX_ARGUMENT_CHARS};"
                                    " the call was not made", is_error=True,
                                    error_kind="arguments")
            else:
                tier, refusal = decisions[i]
                if refusal is not None:
                    result = refusal
                elif tier == "confirm":
                    run.pending = calls[i:]
                    raise _Stop("awaiting_approval")
                elif tier == "manual":
                    await emit(ev.TurnToolDrafted(round=run.rounds, call_id=call.id,
                                                  name=call.name,
                                                  arguments=_clip(call.arguments)))
                    result = _drafted(call.name)
                elif tier == "auto":
                    result = await run_tool(call)
                else:  # unreachable: decide() names a tier or refuses
                    result = _refused(call.name, f"its tier {tier!r} is not one of {TIERS}")
            run.tools.append(ToolRecord(round=run.rounds, call=call, result=result))
            run.messages.append(ChatMessage(role="tool", tool_call_id=call.id,
                                            content=result.content))
            record = turn_event(ev.TurnToolResult(round=run.rounds, call_id=call.id,
                                                  name=call.name,
                                                  content=_clip(result.content),
                                                  is_error=result.is_error,
                                                  error_kind=result.error_kind))
            if i < len(calls) - 1:
                await emit(record)
            else:  # the round's last record: committed at the boundary (see `boundary`)
                last.append(record)
        return last

    def steered(injected: list[ChatMessage]) -> NewEvent:
        return turn_event(ev.TurnSteered(round=run.rounds,
                                         messages=[_clip(m.content) for m in injected]))

    async def boundary(last: list[NewEvent]) -> None:
        """The safe boundary after a round: every result appended, no call in flight. With
        `steer_at`, the round's last result and the steer are one commit."""
        if cancel is not None and cancel.cancelled:
            await emit(*last)
            raise _Stop("cancelled")
        if steer_at is not None:
            injected = await steer_at(last, state(), steered)
            if injected:
                run.messages.extend(injected)
            return
        await emit(*last)
        if steer is not None:
            injected = await steer(state())
            if injected:
                run.messages.extend(injected)
                await emit(steered(injected))

    async def body() -> StopReason:
        nonlocal wire, real_names
        specs = await tools.specs() if tools is not None else []
        wire = wire_names(s.name for s in specs)
        real_names = unwire(wire)
        specs = [s if wire[s.name] == s.name else _renamed(s, wire[s.name]) for s in specs]
        if resume is not None and resume.pending:  # finish the paused round first
            # the decided call keeps the decision it waited on; the others are decided again
            pending = list(resume.pending)
            decisions: list[Decision] = [("confirm", None),
                                         *[await decide(c) for c in pending[1:]]]
            await record_calls(pending, decisions)
            await boundary(await tool_round(pending, decisions, resume))
        while True:
            if cancel is not None and cancel.cancelled:
                raise _Stop("cancelled")
            left = tokens_left()
            if left is not None and left <= 0:
                raise _Stop("max_tokens")
            text, calls, usage_event = await call_model(specs)
            if text:
                run.text = text
            run.messages.append(ChatMessage(role="assistant", content=text, tool_calls=calls))
            calls = [real_call(c) for c in calls]
            left = tokens_left()
            stop: StopReason | None = (
                None if not calls else "max_tool_rounds"
                if run.rounds >= budget.max_tool_rounds else "max_tokens"
                if left is not None and left <= 0 else None)
            if not calls or stop is not None:
                run.final_usage = usage_event  # recorded by `turn.finished`, one event
                if stop is not None:
                    raise _Stop(stop)
                return "completed"
            run.rounds += 1
            # the call's usage and every tool call it asked for with its tier, in one commit
            decisions = [await decide(c) for c in calls]
            await record_calls(calls, decisions, usage_event)
            await boundary(await tool_round(calls, decisions, None))

    if not start_recorded:
        await emit(ev.TurnStarted(subject=subject, agent=agent, model=model,
                                  budget=budget.as_json()))
    task = asyncio.current_task()
    if cancel is not None:
        if cancel.cancelled:
            return await _finish(run, "cancelled", "", emit, started, loop)
        cancel._task = task
    stop: StopReason
    error = ""
    try:
        try:
            async with asyncio.timeout(budget.max_wall_s):
                stop = await body()
        finally:
            if cancel is not None:
                cancel._task = None
    except _Stop as s:
        stop = s.reason
        if stop == "cancelled" and cancel is not None:
            error = cancel.reason
    except TimeoutError:
        stop = "max_wall_clock"
    except ProviderError as exc:
        stop, error = "error", str(exc)
    except Exception as exc:  # a bug below us: record the turn as failed, then raise
        with contextlib.suppress(Exception):
            await _finish(run, "error", f"{type(exc).__name__}: {exc}", emit, started, loop)
        raise
    except asyncio.CancelledError:
        if cancel is not None and cancel.cancelled and task is not None:
            task.uncancel()  # ours: the handle asked for it; the caller gets a result
            return await _finish(run, "cancelled", cancel.reason, emit, started, loop)
        # someone cancelled the task running the turn: record it, then let it propagate
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await _finish(run, "cancelled", "task cancelled", emit, started, loop)
        raise
    return await _finish(run, stop, error, emit, started, loop)


async def _finish(run: _Run, stop: StopReason, error: str,
                  emit: Callable[[ev.Payload], Awaitable[None]], started: float,
                  loop: asyncio.AbstractEventLoop) -> TurnResult:
    result = TurnResult(turn_id=run.turn_id, stop_reason=stop, text=run.text,
                        messages=run.messages, rounds=run.rounds, model_calls=run.model_calls,
                        tools=run.tools, usage=run.usage, cost_usd=run.cost,
                        elapsed_s=loop.time() - started, error=error,
                        pending=run.pending if stop == "awaiting_approval" else [])
    await emit(ev.TurnFinished(
        stop_reason=stop, rounds=run.rounds, model_calls=run.model_calls,
        tool_calls=len(run.tools), prompt_tokens=run.usage.prompt_tokens,
        completion_tokens=run.usage.completion_tokens, cost_usd=run.cost,
        text=_clip(run.text), error=_clip(error),
        **_folded(run.final_usage)))
    return result


def _folded(usage: NewEvent | None) -> dict[str, Any]:
    """The final call's usage as `turn.finished` fields (issue 24.2)."""
    if usage is None or not isinstance(usage.payload, ev.AgentUsage):
        return {}
    return {"usage": usage.payload, "usage_subject": usage.entity_id}


async def run_agent_turn(
    config: ClawtowerConfig,
    agent: str,
    messages: list[ChatMessage],
    *,
    registry: ToolRegistry | None = None,
    **kw: Any,
) -> TurnResult:
    """`run_turn` for a configured agent: its provider, model, system prompt (prepended when
    `messages` has none), budgets, price, temperature and max_output_tokens, and — given a
    tool registry — a ToolBox filtered by its allow-list (an agent with no `tools:` gets
    none). Keyword arguments override (subject, store, steer, on_text, cancel, budget...)."""
    a = config.agent(agent)
    if a.system and not any(m.role == "system" for m in messages):
        messages = [ChatMessage(role="system", content=a.system), *messages]
    tools = registry.toolbox(a.tools, agent=agent) if registry is not None and a.tools else None
    opts: dict[str, Any] = {
        "model": a.model, "tools": tools, "budget": TurnBudget.of(a.budgets),
        "gate": TierGate(a.approval),
        "agent": agent, "price": a.unit_price, "temperature": a.temperature,
        "max_tokens_per_call": a.max_output_tokens}
    opts.update(kw)
    return await run_turn(config.provider(a.provider), messages=messages, **opts)


__all__ = ["MAX_ARGUMENT_CHARS", "CancelHandle", "SteeringHook", "StopReason", "ToolGate",
           "ToolRecord", "TurnBudget", "TurnResult", "TurnResume", "TurnState",
           "run_agent_turn", "run_turn"]
