"""The built-in memory tools a session turn may be offered: `memory_store`,
`memory_recall`, `memory_forget`. They are offered under the spec's tool allow-list and
gated by its approval tiers like every tool (the turn loop applies both); each call is
checked against the namespaces the spec's `policy.memory` names. A refusal is a policy
result to the model, never an exception."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..agents.provider import ToolSpec
from ..errors import ClawError, ValidationError
from ..store.interface import Store
from ..tools.types import ToolResult
from .config import MemoryConfig
from .policy import may_use, own_namespace
from .service import Memories, parse_expires

if TYPE_CHECKING:
    from .embeddings import Embedder

STORE_TOOL, RECALL_TOOL, FORGET_TOOL = "memory_store", "memory_recall", "memory_forget"
_NS = {"type": "string", "description": "namespace (default: your own agent:<name>)"}
SPECS = (
    ToolSpec(name=STORE_TOOL, description=(
        "Remember a fact for later sessions: `key` names it (storing the same key again"
        " replaces it), `content` is the fact."), parameters={
        "type": "object", "properties": {
            "key": {"type": "string"}, "content": {"type": "string"},
            "category": {"type": "string"}, "namespace": _NS,
            "ttl": {"type": "string", "description": "forget it after this long (30m, 7d)"},
            "expires": {"type": "string", "description": "or at this ISO 8601 time"}},
        "required": ["key", "content"], "additionalProperties": False}),
    ToolSpec(name=RECALL_TOOL, description=(
        "Search your memories (keywords, and meaning when embeddings are configured): the"
        " best matches for `query`."), parameters={
        "type": "object", "properties": {
            "query": {"type": "string"}, "k": {"type": "integer", "minimum": 1,
                                               "maximum": 50},
            "namespace": _NS},
        "required": ["query"], "additionalProperties": False}),
    ToolSpec(name=FORGET_TOOL, description="Forget a memory by its key; say why.",
             parameters={"type": "object", "properties": {
                 "key": {"type": "string"}, "reason": {"type": "string"}, "namespace": _NS},
                 "required": ["key", "reason"], "additionalProperties": False}),
)
NAMES = frozenset(s.name for s in SPECS)


class MemoryTools:
    """The memory tools of one turn: who (spec), where from (session, turn), what it may
    touch (`policy.memory`)."""

    def __init__(self, store: Store, spec_name: str, allow: list[str] | None,
                 session_id: str, turn_id: str, embedder: Embedder | None = None,
                 config: MemoryConfig | None = None) -> None:
        e = config.embeddings if config is not None else None
        self.memories = Memories(store, embedder, weights=e.weights if e else None,
                                 candidates=e.candidates if e else 50)
        self.spec_name, self.allow = spec_name, allow
        self.session_id, self.turn_id = session_id, turn_id

    async def call(self, name: str, arguments: str) -> ToolResult:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return _error(f"{name}: arguments must be a JSON object", "arguments")
        ns = args.get("namespace") or own_namespace(self.spec_name)
        if not isinstance(ns, str) or not may_use(self.allow, self.spec_name, ns):
            return _error(f"{name}: {self.spec_name} may not use memory namespace {ns!r}"
                          " (not in its policy.memory); nothing was done", "policy")
        try:
            out = await self._run(name, ns, args)
        except ClawError as exc:
            return _error(f"{name}: {exc}", "arguments")
        return ToolResult(content=json.dumps(out, sort_keys=True), structured=out)

    async def _run(self, name: str, ns: str, args: dict[str, Any]) -> Any:
        m = self.memories
        by, sid, turn = self.spec_name, self.session_id, self.turn_id
        if name == STORE_TOOL:
            return await m.put(ns, _s(args, "key"), _s(args, "content"),
                               category=str(args.get("category") or ""), reason="tool",
                               by=by, role="executor", session=sid, turn=turn,
                               expires_at=self._expires(args))
        if name == FORGET_TOOL:
            return await m.forget(ns, _s(args, "key"), reason=_s(args, "reason"), by=by,
                                  role="executor", session=sid, turn=turn)
        k = args.get("k", 5)
        rows = await m.search([ns], _s(args, "query"), k=k if isinstance(k, int) else 5)
        return [{"key": r["key"], "content": r["content"], "category": r["category"],
                 "score": round(r["score"], 4)} for r in rows]


    def _expires(self, args: dict[str, Any]) -> float | None:
        """`ttl` (a duration) or `expires` (an ISO time), at most one; None: never."""
        given = [f for f in ("ttl", "expires") if args.get(f) is not None]
        if len(given) > 1:
            raise ValidationError("give `ttl` or `expires`, not both")
        if not given:
            return None
        return parse_expires(args[given[0]], self.memories.store.clock.now(),
                             where=given[0])


def _s(args: dict[str, Any], field: str) -> str:
    v = args.get(field)
    if not isinstance(v, str):
        raise ValidationError(f"argument {field!r} must be a string")
    return v


def _error(text: str, kind: str) -> ToolResult:
    return ToolResult(content=text, is_error=True, error_kind=kind)


__all__ = ["FORGET_TOOL", "NAMES", "RECALL_TOOL", "SPECS", "STORE_TOOL", "MemoryTools"]
