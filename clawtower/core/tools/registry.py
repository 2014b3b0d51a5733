"""The tool registry: built-in tools and MCP tools (`<server>.<tool>`), and one ToolBox per
agent filtered by its allow-list and by pinning.

    registry = ToolRegistry.from_config(store)          # mcp_servers: of clawtower.yaml
    box = registry.toolbox(allow=["clock.*", "time.get_current_time"], agent="ada")
    specs = await box.specs()                           # what the model may see
    result = await box.call("time.get_current_time", '{"timezone": "UTC"}')
    await registry.aclose()                             # stops the MCP servers it started

An allow-list entry is an exact name or a glob (`time.*`, `*`); `allow=None` means no
filtering (every tool), `[]` means no tools; `deny` globs remove tools again. The allow-list
decides both what the model sees and what it may call: a call outside it is a `policy`
error result and never reaches a tool (the refusal is recorded as permission.refused).

Errors the model can cause come back as ToolResult(is_error=True, error_kind=...):
  policy     not in the agent's allow-list
  unknown    no such tool (or its server does not list it)
  unpinned   the definition is not pinned (first seen, changed, or rejected): hidden from
             the model; the message names the approval to decide
  arguments  not JSON, not an object, or failing the tool's input schema
  failed     the tool reported an error, or its server could not start / crashed
  timeout    the server did not answer in time
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..agents.provider import ToolSpec
from ..clock import Clock
from ..errors import ClawError, Conflict, NotFound
from ..events import NewEvent
from ..store.interface import Store
from ..tasks.permissions import Role
from . import pins
from .builtin import BuiltinTool, builtin_tools
from .config import McpServerConfig, load_mcp_servers, mcp_servers_from_data
from .mcpfaults import McpServerError, ProgressFn, ToolProgress
from .types import ToolResult

if TYPE_CHECKING:  # the MCP SDK (and jsonschema) load only when a server is configured
    import mcp_types

    from ..agents.config import ClawtowerConfig
    from .mcp import McpServer

log = logging.getLogger(__name__)

MAX_ERRORS_SHOWN = 3


@dataclass(frozen=True)
class ToolInfo:
    """One tool as the registry knows it now."""

    name: str  # the full name: clock.now, time.get_current_time
    source: str  # "builtin" or "mcp:<server>"
    description: str
    input_schema: dict[str, Any]
    status: str  # pinned | pending | changed | rejected
    approval_id: str | None = None
    sha256: str = ""
    server: str | None = None
    tool: str = ""  # the server's own name for it

    @property
    def callable(self) -> bool:
        return self.status == "pinned"

    def spec(self) -> ToolSpec:
        return self._spec

    @functools.cached_property
    def _spec(self) -> ToolSpec:
        """Built once per info (the built-ins' infos live as long as their registry): the
        model is handed the same definition at every turn. Callers copy, never change it."""
        return ToolSpec(name=self.name, description=self.description,
                        parameters=self.input_schema or {"type": "object"})

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "status": self.status,
                "approval_id": self.approval_id, "sha256": self.sha256,
                "description": self.description, "input_schema": self.input_schema}


@dataclass
class ToolListing:
    tools: list[ToolInfo] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)  # server -> why it could not list


def matches(name: str, patterns: Sequence[str]) -> bool:
    return _matches(name, tuple(patterns))


@functools.lru_cache(maxsize=4096)
def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """Remembered per (name, patterns): every turn of an agent checks the same tools
    against the same allow-list (fnmatch per pattern was ~4% of a flow node's turn)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def allowed(name: str, allow: Sequence[str] | None, deny: Sequence[str] = ()) -> bool:
    if allow is not None and not matches(name, allow):
        return False
    return not matches(name, deny)


def _could_match(server: str, pattern: str) -> bool:
    """Whether `pattern` may match some `<server>.<tool>` (judged on its literal prefix:
    over-approximates, never misses)."""
    cut = min((pattern.find(c) for c in "*?[" if c in pattern), default=len(pattern))
    prefix, full = pattern[:cut], f"{server}."
    return full.startswith(prefix) or prefix.startswith(full)


def _error(kind: str, text: str) -> ToolResult:
    return ToolResult(content=text, is_error=True, error_kind=kind)


def _hint(info: ToolInfo) -> str:
    if info.status == "rejected":
        return (f"{info.name}: its definition was rejected (approval {info.approval_id});"
                " it stays disabled until the server changes it")
    what = "changed since it was pinned" if info.status == "changed" else "not pinned yet"
    aid = info.approval_id or "?"
    return (f"{info.name}: the tool definition is {what}; re-approval requested"
            f" (approval {aid}: `clawtower approve {aid}`)" if info.status == "changed" else
            f"{info.name}: the tool definition is {what}; approval requested"
            f" (approval {aid}: `clawtower approve {aid}`)")


def parse_arguments(name: str, arguments: str | dict[str, Any] | None
                    ) -> dict[str, Any] | ToolResult:
    if isinstance(arguments, dict):
        return arguments
    text = (arguments or "").strip() or "{}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return _error("arguments", f"{name}: the arguments are not JSON ({exc.msg} at line"
                                   f" {exc.lineno} column {exc.colno}); send a JSON object")
    if not isinstance(value, dict):
        return _error("arguments", f"{name}: the arguments must be a JSON object,"
                                   f" not {type(value).__name__}")
    return value


_VALIDATORS: dict[str, Any] = {}  # a schema (canonical JSON) -> its validator, or why not
_VALIDATORS_MAX = 512


def _validator(schema: dict[str, Any]) -> Any:
    """The schema's validator, built and checked against its meta-schema once per schema (a
    check of the schema itself costs ~1 ms: it ran at every tool call, issue 36); a str
    when the schema is invalid."""
    key = json.dumps(schema, sort_keys=True, default=str)
    got = _VALIDATORS.get(key)
    if got is None:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(schema)
            got = cls(schema)
        except jsonschema.SchemaError as exc:
            got = str(exc.message)
        if len(_VALIDATORS) >= _VALIDATORS_MAX:
            _VALIDATORS.clear()
        _VALIDATORS[key] = got
    return got


def schema_errors(name: str, schema: dict[str, Any], args: dict[str, Any]) -> ToolResult | None:
    if not schema:
        return None
    validator = _validator(schema)
    if isinstance(validator, str):
        return _error("failed", f"{name}: the tool's input schema is invalid ({validator})")
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    parts = []
    for e in errors[:MAX_ERRORS_SHOWN]:
        where = "/".join(str(p) for p in e.absolute_path)
        parts.append(f"{where or '(root)'}: {e.message}")
    more = f" (+{len(errors) - MAX_ERRORS_SHOWN} more)" if len(errors) > MAX_ERRORS_SHOWN else ""
    return _error("arguments", f"{name}: invalid arguments: {'; '.join(parts)}{more}")


class ToolRegistry:
    """Built-in and MCP tools; MCP servers are started on first use and kept alive."""

    def __init__(self, store: Store | None, servers: dict[str, McpServerConfig] | None = None,
                 *, clock: Clock | None = None, on_progress: ProgressFn | None = None,
                 builtins: bool = True) -> None:
        self.store = store
        self.builtins: dict[str, BuiltinTool] = builtin_tools(clock) if builtins else {}
        self._builtin_memo: tuple[tuple[BuiltinTool, ...], list[ToolInfo]] | None = None
        self.servers: dict[str, McpServer] = {}
        if servers:
            from .mcp import McpServer

            self.servers = {name: McpServer(cfg.model_copy(update={"name": name}))
                            for name, cfg in servers.items()}
        self.on_progress = on_progress
        self._mcp: dict[str, dict[str, ToolInfo]] = {}  # server -> full name -> info
        self._listed_start: dict[str, int] = {}  # server -> the process its listing came from
        self._list_locks: dict[str, asyncio.Lock] = {n: asyncio.Lock() for n in self.servers}

    @classmethod
    def from_config(cls, store: Store | None, path: str | Path | None = None,
                    **kw: Any) -> ToolRegistry:
        """The servers of the project config file (`--config`, $CLAWTOWER_CONFIG, else
        $CLAWTOWER_HOME/clawtower.yaml); only its `mcp_servers:` key is read."""
        return cls(store, load_mcp_servers(path), **kw)

    @classmethod
    def from_project(cls, store: Store | None, project: ClawtowerConfig,
                     **kw: Any) -> ToolRegistry:
        """The servers of an already loaded project config (its raw `mcp_servers`)."""
        return cls(store, mcp_servers_from_data(project.mcp_servers, project.source), **kw)

    async def __aenter__(self) -> ToolRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.gather(*(s.aclose() for s in self.servers.values()))

    # ------------------------------------------------------------------- listing

    def _builtin_infos(self) -> list[ToolInfo]:
        """The built-in tools, each hashed once per definition: a turn lists its tools at
        every start, and hashing eight canonical schemas was ~10% of a flow node's turn on
        the event loop (issue 36). The memo holds the tool objects it was built from, so a
        built-in replaced in `self.builtins` is hashed again."""
        tools = tuple(self.builtins.values())
        memo = self._builtin_memo
        if memo is None or len(memo[0]) != len(tools) or any(
                a is not b for a, b in zip(memo[0], tools, strict=True)):
            memo = self._builtin_memo = (tools, [
                ToolInfo(t.name, "builtin", t.description, t.input_schema, "pinned",
                         sha256=pins.sha256_of(pins.definition_of(t.description,
                                                                  t.input_schema)))
                for t in tools])
        return list(memo[1])

    async def _list_server(self, name: str) -> dict[str, ToolInfo]:
        """List one server (starting it if needed) and settle every tool's pin status."""
        server = self.servers[name]
        async with self._list_locks[name]:
            tools = await server.list_tools()
            infos = await self._settle(name, tools)
            self._mcp[name] = infos
            self._listed_start[name] = server.starts
            return infos

    async def _settle(self, server: str, tools: list[mcp_types.Tool]) -> dict[str, ToolInfo]:
        auto = self.servers[server].config.pin == "auto"
        seen: list[tuple[str, str, dict[str, Any]]] = []
        for t in tools:
            seen.append((f"{server}.{t.name}", t.name,
                         pins.definition_of(t.description, dict(t.input_schema or {}))))
        rows = await pins.pin_rows(self.store) if self.store is not None else {}
        states: dict[str, pins.PinState] = {}
        news: list[tuple[str, dict[str, Any]]] = []
        for full, _, definition in seen:
            sha = pins.sha256_of(definition)
            row = rows.get(full)
            known = pins.state_from_row(row, sha)
            if known is not None and row is not None and row["seen_sha256"] == sha:
                states[full] = known
            else:
                news.append((full, definition))
        if news and self.store is not None:
            def observe_all(tx: Any) -> dict[str, pins.PinState]:
                return {full: pins.observe(tx, full, server, d, auto) for full, d in news}

            states.update(await self.store.execute(observe_all))
        elif news:  # no store: nothing can be approved; auto-pin lives in memory only
            for full, d in news:
                sha = pins.sha256_of(d)
                states[full] = pins.PinState("pinned" if auto else "pending", None, sha)
        out: dict[str, ToolInfo] = {}
        for full, tool_name, definition in seen:
            st = states[full]
            out[full] = ToolInfo(full, f"mcp:{server}", definition["description"],
                                 definition["inputSchema"], st.status, st.approval_id,
                                 st.sha256, server, tool_name)
        return out

    async def list_tools(self, servers: Sequence[str] | None = None) -> ToolListing:
        """Every tool (built-in first, then each server's, sorted), listing the servers now.
        A server that cannot list is reported in `errors`, not raised."""
        names = list(self.servers) if servers is None else [s for s in servers
                                                            if s in self.servers]
        results = await asyncio.gather(*(self._list_server(n) for n in names),
                                       return_exceptions=True)
        listing = ToolListing(tools=self._builtin_infos())
        for name, res in zip(names, results, strict=True):
            if isinstance(res, BaseException):
                if not isinstance(res, ClawError):
                    if not isinstance(res, Exception):
                        raise res
                    res = McpServerError(name, "protocol", str(res))
                listing.errors[name] = str(res)
                self._mcp.pop(name, None)
                log.info("%s", res)  # reported in the listing; callers decide
                continue
            listing.tools.extend(sorted(res.values(), key=lambda i: i.name))
        return listing

    async def request_pin(self, name: str) -> ToolInfo:
        """Ask the operator again to pin the definition `name`'s server lists now (after a
        rejection): a new `tool_pin` approval. NotFound for an unknown tool; Conflict when
        it is built in, already pinned, or a request already waits."""
        if name in self.builtins:
            raise Conflict(f"tool {name!r}: built in, always callable")
        server, dot, _ = name.partition(".")
        if not dot or server not in self.servers:
            raise NotFound(f"tool {name!r}: no such tool (servers: "
                           f"{', '.join(sorted(self.servers)) or 'none configured'})")
        if self.store is None:
            raise Conflict(f"tool {name!r}: no store to record an approval in")
        infos = await self._list_server(server)
        info = infos.get(name)
        if info is None:
            raise NotFound(f"tool {name!r}: server {server!r} lists "
                           f"{', '.join(sorted(i.tool for i in infos.values()))}")
        definition = pins.definition_of(info.description, info.input_schema)
        state = await self.store.execute(
            lambda tx: pins.rerequest(tx, name, server, definition))
        info = replace(info, status=state.status, approval_id=state.approval_id)
        infos[name] = info
        return info

    # ------------------------------------------------------------------- calling

    async def _lookup(self, name: str) -> ToolInfo | ToolResult:
        if name in self.builtins:
            t = self.builtins[name]
            return ToolInfo(t.name, "builtin", t.description, t.input_schema, "pinned")
        server, dot, _ = name.partition(".")
        if not dot or server not in self.servers:
            known = ", ".join(sorted([*self.builtins, *(f"{s}.*" for s in self.servers)]))
            return _error("unknown", f"{name}: no such tool (known: {known})")
        infos = self._mcp.get(server)
        srv = self.servers[server]
        # a listing is trusted only for the process it came from: a restarted server (or one
        # that died since) is listed again, so a definition changed meanwhile is caught
        if infos is None or name not in infos or not srv.running \
                or self._listed_start.get(server) != srv.starts:
            try:
                infos = await self._list_server(server)
            except McpServerError as exc:
                return _error("timeout" if exc.kind == "timeout" else "failed", str(exc))
            except ClawError as exc:
                return _error("failed", str(exc))
        info = infos.get(name)
        if info is None:
            return _error("unknown", f"{name}: no such tool: server {server!r} lists "
                                     f"{', '.join(sorted(i.tool for i in infos.values()))}")
        if not info.callable and self.store is not None:
            # an approval may have been decided since the listing (by another process)
            row = await self.store.fetchone("SELECT * FROM tool_pins WHERE name=?", (name,))
            st = pins.state_from_row(row, info.sha256)
            if st is not None and st.status != info.status:
                info = replace(info, status=st.status, approval_id=st.approval_id)
                infos[name] = info
        return info

    async def call(self, name: str, arguments: str | dict[str, Any] | None, *,
                   allow: Sequence[str] | None = None, deny: Sequence[str] = (),
                   caller: str = "operator", progress: ProgressFn | None = None
                   ) -> ToolResult:
        """Run a tool for `caller`. Never raises for a bad name, arguments or tool fault."""
        if not allowed(name, allow, deny):
            await self._record_refusal(caller, name)
            return _error("policy", f"{name}: not allowed for {caller} (not in its tool"
                                    " allow-list); the call was not made")
        found = await self._lookup(name)
        if isinstance(found, ToolResult):
            return found
        info = found
        if not info.callable:
            return _error("unpinned", _hint(info))
        args = parse_arguments(name, arguments)
        if isinstance(args, ToolResult):
            return args
        bad = schema_errors(name, info.input_schema, args)
        if bad is not None:
            return bad
        if info.source == "builtin":
            try:
                return self.builtins[name].run(args)
            except Exception as exc:  # a built-in's bug is the tool's failure, not a crash
                return _error("failed", f"{name}: failed: {type(exc).__name__}: {exc}")
        assert info.server is not None
        server = self.servers[info.server]
        try:
            r = await server.call_tool(info.tool, args, progress=progress or self.on_progress)
        except McpServerError as exc:
            if exc.kind == "unknown":
                self._mcp.pop(info.server, None)  # the listing is stale: list again next time
                return _error("unknown", f"{name}: {exc}")
            return _error("timeout" if exc.kind == "timeout" else "failed", str(exc))
        except ClawError as exc:
            return _error("failed", f"{name}: {exc}")
        if r.is_error:
            return ToolResult(content=r.content or f"{name}: the tool reported an error",
                              structured=r.structured, is_error=True, error_kind="failed")
        return ToolResult(content=r.content, structured=r.structured)

    def redact(self, name: str, text: str) -> str:
        """`text` without the `env_from` secrets of the server behind tool `name`."""
        server = self.servers.get(name.partition(".")[0])
        return server.redact(text) if server is not None else text

    async def _record_refusal(self, caller: str, name: str) -> None:
        if self.store is None:
            return
        await self.store.append([NewEvent(
            entity_id=f"tool:{name}", actor=caller, role=Role.EXECUTOR.value,
            payload=ev.PermissionRefused(action="tool.call", target=name,
                                         reason=f"{name} is not in {caller}'s allow-list"))])

    # ------------------------------------------------------------------- toolboxes

    def toolbox(self, allow: Sequence[str] | None = None, deny: Sequence[str] = (), *,
                agent: str = "agent", progress: ProgressFn | None = None) -> AgentToolBox:
        return AgentToolBox(self, allow, deny, agent, progress)


class AgentToolBox:
    """The ToolBox of one agent (see core.tools.types): allow-listed, pinned tools only."""

    def __init__(self, registry: ToolRegistry, allow: Sequence[str] | None,
                 deny: Sequence[str], agent: str, progress: ProgressFn | None) -> None:
        self.registry = registry
        self.allow = list(allow) if allow is not None else None
        self.deny = list(deny)
        self.agent = agent
        self.progress = progress
        self.errors: dict[str, str] = {}  # servers that could not list, at the last specs()
        self.hidden: list[ToolInfo] = []  # allowed but not callable (unpinned), last specs()

    def _servers_needed(self) -> list[str]:
        """Servers whose tools the allow-list can match (no point starting the others)."""
        if self.allow is None:
            return list(self.registry.servers)
        return [n for n in self.registry.servers if any(_could_match(n, p) for p in self.allow)]

    async def specs(self) -> list[ToolSpec]:
        listing = await self.registry.list_tools(self._servers_needed())
        self.errors = listing.errors
        visible = [t for t in listing.tools if allowed(t.name, self.allow, self.deny)]
        self.hidden = [t for t in visible if not t.callable]
        return [t.spec() for t in visible if t.callable]

    async def resolve(self, name: str) -> str | ToolResult:
        """The concrete tool `name` runs (see ToolBox.resolve): allowed for this agent and
        known now (a server that did not list at the turn's start is asked again), else a
        `policy` refusal. An unpinned tool resolves (its call is then refused as unpinned)."""
        if not allowed(name, self.allow, self.deny):
            return _error("policy", f"{name}: not allowed for {self.agent} (not in its tool"
                                    " allow-list); the call was not made")
        found = await self.registry._lookup(name)
        if isinstance(found, ToolResult):
            return _error("policy", f"{found.content}; no approval tier can be decided for"
                                    " it, so the call was refused")
        return found.name

    async def call(self, name: str, arguments: str) -> ToolResult:
        return await self.registry.call(name, arguments, allow=self.allow, deny=self.deny,
                                        caller=self.agent, progress=self.progress)


__all__ = ["AgentToolBox", "ToolInfo", "ToolListing", "ToolProgress", "ToolRegistry",
           "allowed", "matches"]
