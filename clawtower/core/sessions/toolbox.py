"""The tools one session turn sees: the registry's, filtered by the spec's allow-list, the
spawn tools and the memory tools (core/memory/tools.py). Tiers (auto | confirm | manual)
are not applied here: the turn loop resolves every call through `resolve` and asks the
spec's gate for that concrete tool's tier before any call reaches `call` (core/agents/
turns.py); an approved call is run through `call_approved`, which records its
intent and result around it (core/sessions/gate.py), so it runs once even across a crash.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from .. import events as ev
from ..agents.provider import ToolCall, ToolSpec
from ..errors import ClawError
from ..events import NewEvent
from ..memory import tools as memory_tools
from ..tools.registry import allowed
from ..tools.types import ToolBox, ToolResult
from . import gate

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig
    from ..memory.embeddings import Embedder
    from ..store.interface import Store, WriteTx
    from ..tools.registry import ToolRegistry
    from .claims import Claim
    from .service import Sessions
    from .specs import AgentSpec

SPAWN_TOOL = "spawn_subagent"
SPAWN_SPEC = ToolSpec(
    name=SPAWN_TOOL,
    description=("Start a subagent: a child session that works on `task` in parallel and"
                 " reports back when it is done (its result reaches you on a later turn)."
                 " Returns at once with the child's session id and run id."),
    parameters={"type": "object", "properties": {
        "task": {"type": "string", "description": "what the subagent should do"},
        "agent": {"type": "string", "description": "agent spec name (optional)"},
        "label": {"type": "string", "description": "a short label (optional)"}},
        "required": ["task"], "additionalProperties": False})
SPAWN_MANY_TOOL = "spawn_subagents"
SPAWN_MANY_SPEC = ToolSpec(
    name=SPAWN_MANY_TOOL,
    description=("Start several subagents at once (one commit): `tasks` is a list of"
                 " {task, agent?, label?}. Each is accepted or refused on its own; results"
                 " reach you on a later turn."),
    parameters={"type": "object", "properties": {"tasks": {
        "type": "array", "minItems": 1, "maxItems": 10_000, "items": {
            "type": "object", "properties": {
                "task": {"type": "string"}, "agent": {"type": "string"},
                "label": {"type": "string"}},
            "required": ["task"], "additionalProperties": False}}},
        "required": ["tasks"], "additionalProperties": False})

class TurnHost(Protocol):
    """What a turn's tool box needs of the worker running the turn (core/sessions/runner.py's
    SessionRunner, which passes itself in): its store, lease owner, project config, embedder,
    session commands, a spec's tool registry and the lease-fenced append."""

    @property
    def store(self) -> Store: ...
    @property
    def owner(self) -> str: ...
    @property
    def config(self) -> ClawtowerConfig: ...
    @property
    def embedder(self) -> Embedder | None: ...
    @property
    def sessions(self) -> Sessions: ...
    def registry_for(self, spec: AgentSpec) -> ToolRegistry | None: ...
    async def fenced_append(self, claim: Claim, events: list[NewEvent]) -> bool: ...
    # children claimed in the command that spawns them (see SessionRunner.reserve)
    def reserve(self) -> bool: ...
    def claim_fresh_in(self, tx: WriteTx, creation: NewEvent) -> Claim | None: ...
    def adopt(self, claim: Claim | None) -> None: ...


class SessionToolBox:
    """The tools one session's turn may see and call: the registry's tools filtered by
    the spec's `policy.tools`, plus `spawn_subagent` when the policy allows it. A call
    outside the policy is refused to the model (a `policy` result) and recorded."""

    def __init__(self, runner: TurnHost, claim: Claim) -> None:
        self.runner = runner
        self.claim = claim
        self.allow = claim.spec.config.policy.tools
        registry = runner.registry_for(claim.spec)
        self.registry = registry
        self.inner: ToolBox | None = registry.toolbox(
            self.allow, agent=claim.spec.name) if registry is not None else None
        self.spawns: Counter[str] = Counter()  # the same call again in this turn

    async def specs(self) -> list[ToolSpec]:
        specs = await self.inner.specs() if self.inner is not None else []
        specs.extend(s for s in (SPAWN_SPEC, SPAWN_MANY_SPEC, *memory_tools.SPECS)
                     if allowed(s.name, self.allow))
        return specs

    async def resolve(self, name: str) -> str | ToolResult:
        """The concrete tool `name` runs (see core.tools.types.ToolBox.resolve): a spawn or
        memory tool the policy allows, else whatever the registry's tool box resolves."""
        if name in (SPAWN_TOOL, SPAWN_MANY_TOOL, *memory_tools.NAMES):
            if allowed(name, self.allow):
                return name
            return ToolResult(content=f"{name}: not allowed for {self.claim.spec.name} (not in"
                              " its tool allow-list); the call was not made", is_error=True,
                              error_kind="policy")
        if self.inner is None:
            return ToolResult(content=f"{name}: no such tool; no approval tier can be decided"
                              " for it, so the call was refused", is_error=True,
                              error_kind="policy")
        return await self.inner.resolve(name)

    def redact(self, name: str, text: str) -> str:
        """`text` (a call's arguments) with the values of the tool server's `env_from`
        secrets replaced by their names: what an approval shows an operator."""
        redact = getattr(self.registry, "redact", None)  # a test double may have none
        return str(redact(name, text)) if callable(redact) else text

    async def decided(self, call: ToolCall) -> ToolResult:
        """The result of a resumed turn's decided call: run once when approved (intent
        committed first, fenced by the job's lease; result after), a policy message when
        rejected; never run twice (a recorded result is reused, an intent without one is
        reported as interrupted)."""
        r = self.claim.resume
        assert r is not None
        if r.decision != "approved":
            return gate.rejected_result(call.name, r.decided_by, r.reason)
        if r.done is not None:
            return r.done
        if r.interrupted:
            return gate.interrupted_result(call.name)
        claim, runner = self.claim, self.runner
        intent = gate.intent_event(claim.job_id, claim.session_id, r.approval_id, call,
                                   runner.owner)
        if not await runner.fenced_append(claim, [intent]):
            claim.lost = True
            claim.cancel.cancel("lease lost")
            return ToolResult(content=f"{call.name}: not run (this worker lost the job)",
                              is_error=True, error_kind="failed")
        result = await self.call(call.name, call.arguments)
        await runner.store.append([gate.done_event(claim.job_id, claim.session_id,
                                                   r.approval_id, call, result, runner.owner)])
        r.done = result
        return result

    def _key(self, args: Any) -> str:
        """A turn re-run after its worker died makes the same calls again: the n-th
        identical spawn call of this job finds the same child(ren), never new ones."""
        same = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
        self.spawns[same] += 1
        return f"{self.claim.job_id}:{same}:{self.spawns[same]}"

    async def _spawn_many(self, sid: str, tasks: list[dict[str, Any]], key: str
                          ) -> list[dict[str, Any]]:
        """The children, each one's job claimed by this worker in the spawning commit while
        it has free slots (issue 36: no claim command per child); the others are queued
        and claimed by whichever worker has room, as before."""
        runner = self.runner
        slots = 0
        while slots < len(tasks) and runner.reserve():
            slots += 1
        if not slots:
            return await runner.sessions.spawn_many(sid, tasks, by=sid, caller="tool",
                                                    key=key)
        claims: list[Claim] = []
        try:
            many, claims = await runner.sessions.spawn_many_claimed(
                sid, tasks, runner.claim_fresh_in, slots, by=sid, caller="tool", key=key)
        finally:
            for c in claims:
                runner.adopt(c)
            for _ in range(slots - len(claims)):
                runner.adopt(None)
        return many

    async def _spawn(self, sid: str, args: dict[str, Any], key: str) -> dict[str, Any]:
        """One child, its job claimed by this worker in the spawning commit when it has a
        free slot (as `_spawn_many`'s), else queued for whichever worker has room."""
        runner = self.runner
        agent, label = args.get("agent") or None, str(args.get("label") or "")
        if not runner.reserve():
            return await runner.sessions.spawn(sid, args["task"], agent=agent, label=label,
                                               by=sid, caller="tool", key=key)
        claim: Claim | None = None
        try:
            out, claim = await runner.sessions.spawn_claimed(
                sid, args["task"], runner.claim_fresh_in, agent=agent, label=label, by=sid,
                caller="tool", key=key)
        finally:
            runner.adopt(claim)  # None gives the slot back
        return out

    async def call(self, name: str, arguments: str) -> ToolResult:
        if name in memory_tools.NAMES and allowed(name, self.allow):
            c = self.claim
            return await memory_tools.MemoryTools(
                self.runner.store, c.spec.name, c.spec.config.policy.memory, c.session_id,
                c.turn_id, self.runner.embedder, self.runner.config.memory
            ).call(name, arguments)
        if name not in (SPAWN_TOOL, SPAWN_MANY_TOOL, *memory_tools.NAMES):
            if self.inner is None:
                return ToolResult(content=f"{name}: no such tool", is_error=True,
                                  error_kind="unknown")
            return await self.inner.call(name, arguments)
        sid = self.claim.session_id
        store = self.runner.store
        if not allowed(name, self.allow):
            await store.append([NewEvent(
                entity_id=f"tool:{name}", actor=self.claim.spec.name, role="executor",
                payload=ev.PermissionRefused(action="tool.call", target=name,
                                             reason=f"{name} is not in"
                                                    f" {self.claim.spec.name}'s allow-list"))])
            return ToolResult(content=f"{name}: not allowed for {self.claim.spec.name}"
                              " (not in its tool allow-list); the call was not made",
                              is_error=True, error_kind="policy")
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if name == SPAWN_MANY_TOOL:
            tasks = args.get("tasks") if isinstance(args, dict) else None
            if not isinstance(tasks, list) or not tasks or not all(
                    isinstance(t, dict) and isinstance(t.get("task"), str) for t in tasks):
                return ToolResult(content=f"{name}: arguments must be {{\"tasks\": [{{\"task\":"
                                  " ...}, ...]}", is_error=True, error_kind="arguments")
            try:
                many = await self._spawn_many(sid, tasks, self._key(args))
            except ClawError as exc:
                return ToolResult(content=f"{name}: {exc}", is_error=True, error_kind="failed")
            return ToolResult(content=json.dumps(many, sort_keys=True), structured=many)
        if not isinstance(args, dict) or not isinstance(args.get("task"), str):
            return ToolResult(content=f"{SPAWN_TOOL}: arguments must be a JSON object with a"
                              " string 'task'", is_error=True, error_kind="arguments")
        try:
            out = await self._spawn(sid, args, self._key(args))
        except ClawError as exc:
            kind = "policy" if "refused" in str(exc) or "may not" in str(exc) else "failed"
            return ToolResult(content=f"{SPAWN_TOOL}: {exc}", is_error=True, error_kind=kind)
        return ToolResult(content=json.dumps(out, sort_keys=True), structured=out)


__all__ = ["SPAWN_MANY_SPEC", "SPAWN_MANY_TOOL", "SPAWN_SPEC", "SPAWN_TOOL", "SessionToolBox",
           "TurnHost"]
