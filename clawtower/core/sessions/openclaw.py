"""OpenClaw agents as agent specs (`clawtower agents spec import --openclaw [PATH]`).

Reads an OpenClaw config (JSON5, default ~/.openclaw/openclaw.json) in both shapes: the
current `agents.entries.<id>` (over `agents.defaults`) and the older `agents.list[]`. Each
agent becomes a spec named by its id:

    model "provider/model" | {primary}   -> defaults.provider/model, when clawtower.yaml has
                                            that provider (and model); else an error, unless
                                            the agent runs on its Gateway (below)
    tools.allow                           -> policy.tools: the names clawtower has a tool
                                            for; the others are listed (the list stays a
                                            restriction: none mapped = no tools;
                                            absent = every tool, said in a note)
    subagents.allowAgents                 -> policy.subagents (["*"] = any; absent = only
                                            itself, OpenClaw's default)
    workspace                             -> the Gateway harness's cwd (with --gateway)

With a Gateway (`--gateway URL --token-file F`) each spec's turns run on that OpenClaw agent
(`defaults.acp` = {openclaw: {url, token_file, agent}}, core/acp/openclaw.py). Every field
that maps to nothing is listed by its path, never dropped silently. Bad input (no file,
malformed JSON5, a wrong type, an unknown agent id, an unmappable model) is one
ValidationError naming the file and the field, raised before anything is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from .specs import (
    AgentSpecConfig,
    SpecDefaults,
    SpecPolicy,
    check_name,
    close_matches,
    known_models,
)

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig
    from ..store.interface import Store, WriteTx

DEFAULT_PATH = "~/.openclaw/openclaw.json"
# the per-agent keys read here (everything else under an agent is listed as unmapped)
MODEL_KEYS = frozenset({"primary"})
TOOLS_KEYS = frozenset({"allow"})
SUBAGENT_KEYS = frozenset({"allowAgents"})
MERGED_DEFAULTS = ("model", "tools", "subagents")  # agents.defaults.X under each agent


@dataclass(frozen=True)
class Gateway:
    """Where imported agents run: an OpenClaw Gateway and its token file."""

    url: str
    token_file: str
    command: str = "openclaw"


@dataclass
class Imported:
    name: str
    where: str  # the agent's field path: agents.entries.<id> or agents.list[i]
    config: AgentSpecConfig
    unmapped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the user should know (every_tool)


@dataclass
class OpenClawImport:
    path: str
    agents: list[Imported]
    unmapped: list[str]  # config-wide (agents.defaults.*, agents.*)


def read_config(path: str | None) -> tuple[str, dict[str, Any]]:
    """The file's path (expanded) and its top-level mapping, through the bounded reader
    (core/reader.py): at most MAX_JSON5_BYTES read (a FIFO refused, /dev/zero cut off),
    nesting, numbers and duplicate keys checked before json5 parses it."""
    from ..reader import read_json5

    p = os.path.abspath(os.path.expanduser(path or DEFAULT_PATH))
    if not os.path.lexists(p):
        raise ValidationError(f"{p}: no such OpenClaw config file")
    data = read_json5(p)
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: must be a JSON5 object, not {_kind(data)}")
    return p, data


def _kind(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def _want(v: Any, typ: type | tuple[type, ...], path: str, where: str, what: str) -> Any:
    if not isinstance(v, typ) or (isinstance(v, bool) and typ is not bool):
        raise ValidationError(f"{path}: field '{where}': must be {what}, not {_kind(v)}")
    return v


def _names(v: Any, path: str, where: str) -> list[str]:
    _want(v, list, path, where, "an array of names")
    for i, x in enumerate(v):
        _want(x, str, path, f"{where}[{i}]", "a string")
    return list(v)


def agents_of(path: str, data: dict[str, Any]) -> tuple[list[tuple[str, str, dict[str, Any]]],
                                                       dict[str, Any], list[str]]:
    """(id, field path, body) of every agent in both shapes, the defaults, and the paths of
    `agents.*` keys that are neither."""
    agents = _want(data.get("agents", {}), dict, path, "agents", "an object")
    found: list[tuple[str, str, dict[str, Any]]] = []
    entries = _want(agents.get("entries", {}), dict, path, "agents.entries", "an object")
    for aid, body in entries.items():
        where = f"agents.entries.{aid}"
        found.append((str(aid), where, _want(body, dict, path, where, "an object")))
    old = _want(agents.get("list", []), list, path, "agents.list", "an array")
    for i, body in enumerate(old):
        where = f"agents.list[{i}]"
        _want(body, dict, path, where, "an object")
        aid = _want(body.get("id"), str, path, f"{where}.id", "the agent's id (a string)")
        found.append((aid, where, body))
    seen: dict[str, str] = {}
    for aid, where, _ in found:
        if aid in seen:
            raise ValidationError(f"{path}: field '{where}': agent id {aid!r} is also"
                                  f" {seen[aid]}")
        seen[aid] = where
        check_name(aid, f"{path}: field '{where}'")
    if not found:
        raise ValidationError(f"{path}: field 'agents': no agents (neither agents.entries"
                              " nor agents.list has one)")
    defaults = _want(agents.get("defaults", {}), dict, path, "agents.defaults", "an object")
    rest = [f"agents.{k}" for k in agents if k not in ("entries", "list", "defaults")]
    return found, defaults, rest


def _model(v: Any, path: str, where: str, unmapped: list[str]) -> str | None:
    if isinstance(v, str):
        return v
    _want(v, dict, path, where, "\"provider/model\" or {primary, fallbacks}")
    unmapped += [f"{where}.{k}" for k in v if k not in MODEL_KEYS]
    primary = v.get("primary")
    return None if primary is None else _want(primary, str, path, f"{where}.primary",
                                              "\"provider/model\"")


def build(path: str, data: dict[str, Any], cfg: ClawtowerConfig | None, *,
          only: list[str] | None = None, gateway: Gateway | None = None,
          known_tools: set[str] | frozenset[str] = frozenset()) -> OpenClawImport:
    """The specs of the file's agents (all, or those named in `only`); nothing is written."""
    found, defaults, rest = agents_of(path, data)
    ids = [aid for aid, _, _ in found]
    for want in only or []:
        if want not in ids:
            raise ValidationError(f"{path}: agent {want!r}: not in agents.entries or"
                                  f" agents.list ({close_matches(want, ids)})")
    models = known_models(cfg)
    wide = [f"{k} (not agent config)" for k in data if k != "agents"] + rest + [
        f"agents.defaults.{k}" for k in defaults if k not in MERGED_DEFAULTS]
    out: list[Imported] = []
    for aid, where, body in found:
        if only and aid not in only:
            continue
        unmapped: list[str] = []
        d: dict[str, Any] = {}
        p: dict[str, Any] = {}
        # model: the agent's own, else agents.defaults.model
        src, raw = (where, body["model"]) if "model" in body else (
            "agents.defaults", defaults.get("model"))
        ref = None if raw is None else _model(raw, path, f"{src}.model", unmapped)
        if ref is not None:
            prov, slash, name = ref.partition("/")
            listed = models.get(prov)
            if slash and name and listed is not None and (not listed or name in listed):
                d["provider"], d["model"] = prov, name
            elif gateway is not None:
                unmapped.append(f"{src}.model ({ref!r}: no such provider/model in"
                                " clawtower.yaml; the Gateway runs it)")
            else:
                raise ValidationError(
                    f"{path}: field '{src}.model': {ref!r} maps to no provider of clawtower.yaml"
                    f" (providers: {', '.join(sorted(models))}); add provider {prov!r} there,"
                    " or import with --gateway URL --token-file F to run the agent on it")
        # tools.allow: the agent's tools object replaces the defaults' one
        tsrc, tools = (where, body["tools"]) if "tools" in body else (
            "agents.defaults", defaults.get("tools"))
        if tools is not None:
            _want(tools, dict, path, f"{tsrc}.tools", "an object")
            unmapped += [f"{tsrc}.tools.{k}" for k in tools if k not in TOOLS_KEYS]
            if "allow" in tools:
                allow = _names(tools["allow"], path, f"{tsrc}.tools.allow")
                p["tools"] = [t for t in allow if t in known_tools]
                unmapped += [f"{tsrc}.tools.allow[{i}] ({t!r}: no clawtower tool of that name)"
                             for i, t in enumerate(allow) if t not in known_tools]
        # subagents.allowAgents (absent: only itself, as in OpenClaw)
        ssrc, subs = (where, body["subagents"]) if "subagents" in body else (
            "agents.defaults", defaults.get("subagents"))
        allow_agents = None
        if subs is not None:
            _want(subs, dict, path, f"{ssrc}.subagents", "an object")
            unmapped += [f"{ssrc}.subagents.{k}" for k in subs if k not in SUBAGENT_KEYS]
            if "allowAgents" in subs:
                allow_agents = _names(subs["allowAgents"], path,
                                      f"{ssrc}.subagents.allowAgents")
                for i, x in enumerate(allow_agents):
                    if x != "*":
                        check_name(x, f"{path}: field '{ssrc}.subagents.allowAgents[{i}]'")
        p["subagents"] = ["*"] if allow_agents and "*" in allow_agents else \
            allow_agents if allow_agents is not None else [aid]
        # the workspace: the Gateway harness works there
        workspace = body.get("workspace")
        if workspace is not None:
            _want(workspace, str, path, f"{where}.workspace", "a path")
        if gateway is not None:
            harness: dict[str, Any] = {"name": f"openclaw-{aid}", "openclaw": {
                "url": gateway.url, "token_file": gateway.token_file, "agent": aid,
                "command": gateway.command}}
            if workspace:
                harness["cwd"] = workspace
            d["acp"] = harness
        elif workspace is not None:
            unmapped.append(f"{where}.workspace (used only when the agent runs on its"
                            " Gateway: --gateway)")
        skip = {"model", "tools", "subagents", "workspace", "id"}
        unmapped += [f"{where}.{k}" for k in body if k not in skip]
        try:
            config = AgentSpecConfig(defaults=SpecDefaults(**d), policy=SpecPolicy(**p))
        except ValueError as exc:  # pydantic's: a value the spec refuses
            raise ValidationError(f"{path}: field '{where}': {exc}") from None
        out.append(Imported(aid, where, config,
                            [u for u in unmapped if not u.startswith("agents.defaults.")],
                            every_tool(config, where)))
        wide += [u for u in unmapped if u.startswith("agents.defaults.") and u not in wide]
    return OpenClawImport(path, out, wide)


def every_tool(config: AgentSpecConfig, where: str) -> list[str]:
    """The note an agent without an allow-list gets: its spec may call every tool (OpenClaw
    without `tools.allow` restricts nothing, and neither does a spec without policy.tools)."""
    if config.policy.tools is not None:
        return []
    return [f"may call every tool: no tools.allow in {where}.tools or agents.defaults.tools"
            " (add one, or `agents spec set NAME --tools a,b`, to restrict it)"]


def _dump(config: AgentSpecConfig) -> str:
    import yaml

    return str(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=True))


def diff(before: AgentSpecConfig | None, after: AgentSpecConfig) -> list[str]:
    """What a re-import changes: unified diff lines of the two configs (YAML)."""
    import difflib

    old = _dump(before).splitlines() if before is not None else []
    return [line for line in difflib.unified_diff(old, _dump(after).splitlines(), "before",
                                                  "after", lineterm="", n=1)]


async def apply(store: Store, imp: OpenClawImport, *, by: str) -> list[dict[str, Any]]:
    """Write the specs that are new or changed, all in one transaction (an unchanged spec
    writes nothing: re-importing is idempotent); each agent's status and diff."""
    from .registry import _set_spec

    source = f"openclaw:{imp.path}"

    def command(tx: WriteTx) -> list[dict[str, Any]]:
        rows = []
        for a in imp.agents:
            row = tx.one("SELECT agent_id, config_json, source FROM agent_specs WHERE name=?",
                         (a.name,))
            before = AgentSpecConfig.model_validate_json(row["config_json"]) if row else None
            if before is not None and before == a.config and row is not None \
                    and row["source"] == source:
                rows.append({"name": a.name, "agent_id": row["agent_id"],
                             "status": "unchanged", "diff": [], "unmapped": a.unmapped})
                continue
            agent_id = _set_spec(tx, a.name, a.config, source, by)
            rows.append({"name": a.name, "agent_id": agent_id,
                         "status": "new" if before is None else "changed",
                         "diff": (diff(before, a.config) or [
                             f"source: {row['source']} -> {source}"]) if row else [],
                         "unmapped": a.unmapped})
        return rows

    return await store.execute(command)


__all__ = ["DEFAULT_PATH", "Gateway", "Imported", "OpenClawImport", "agents_of", "apply",
           "build", "diff", "every_tool", "read_config"]
