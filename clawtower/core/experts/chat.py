"""An expert as a session: an agent spec made from the package (the assembled prompt, the
bound tools as the allow-list), then an ordinary session with it active.

Nothing here runs turns or calls tools: the session machinery does (`core.sessions`), so the
session shows in the console and takes `session send` like any other.

Tool names: each bound abstract tool is an MCP server named after it (`helpdesk`), so the
model sees `<tool>.<operation>` as the prompt's approval policy names them; an operation the
binding maps to a differently named MCP tool keeps the server's name for it
(`get_customer: lookup_customer` -> `helpdesk.lookup_customer`), with the server's own input
schema. `policy.tools` lists exactly the declared operations of the bound tools (all of a
tool's operations, `<tool>.*`, when the package declares none), and `policy.approval` maps
the package's `policy.approval` onto the turn's gate (openexperts "Approval Enforcement"):
each declared operation at its tier (overrides, then the package default, then confirm;
several operations bound onto one server tool give it the strictest of theirs: tiers.py),
the package's timeout and on_timeout. So a confirm-tier call waits in the approvals list
until an operator decides it, and a manual-tier call is a draft that is never executed,
whichever process runs the turn (core/sessions/gate.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ValidationError
from ..memory.policy import RecallPolicy
from ..sessions.service import Sessions
from ..sessions.specs import (
    AgentSpecConfig,
    ContextPolicy,
    SpecDefaults,
    SpecPolicy,
    check_model,
)
from ..store.interface import Store
from ..tools.approval import ToolApprovalPolicy
from ..tools.config import McpServerConfig
from . import home
from .bindings import ToolBinding, bindings_path, load_bindings
from .checks import duration_problem, duration_seconds
from .package import Package, load_package
from .prompt import assemble, render
from .tiers import concrete_tiers

if TYPE_CHECKING:
    from ..agents.config import ClawtowerConfig

SPEC_PREFIX = "expert."  # spec names: expert.<name> (':' is not a spec-name character)
SOURCE_PREFIX = "expert:"  # spec source: expert:<name>; the runner finds the bindings by it


def spec_name(expert: str) -> str:
    return f"{SPEC_PREFIX}{expert}"


def _mcp(pkg: Package, bindings: dict[str, ToolBinding]) -> dict[str, ToolBinding]:
    """The bindings of every required tool; an unbound one (or a skill binding, which has no
    runtime here) is a ValidationError naming it."""
    out: dict[str, ToolBinding] = {}
    for tool in pkg.required_tools():
        b = bindings.get(tool)
        if b is None:
            raise ValidationError(f"expert {pkg.name}: bindings.yaml:tools.{tool}: not bound"
                                  f" (clawtower expert bind {pkg.name} {tool} --mcp ...)")
        if b.type != "mcp" or b.server is None:
            raise ValidationError(f"expert {pkg.name}: bindings.yaml:tools.{tool}: a skill"
                                  " binding cannot serve a chat (no skill runtime); bind an"
                                  " MCP server")
        out[tool] = b
    return out


def exposed_tools(pkg: Package, bindings: dict[str, ToolBinding]) -> list[str]:
    """The allow-list: `<tool>.<bound op>` for every declared operation (see module)."""
    return list(approval_policy(pkg, bindings).tools) + [
        f"{tool}.*" for tool in _undeclared(pkg, bindings)]


def _undeclared(pkg: Package, bindings: dict[str, ToolBinding]) -> list[str]:
    out = []
    for tool in _mcp(pkg, bindings):
        decl = pkg.tools.get(tool)
        if decl is None or not list(decl.operations()):
            out.append(tool)
    return out


def approval_policy(pkg: Package, bindings: dict[str, ToolBinding]) -> ToolApprovalPolicy:
    """The package's `policy.approval` as the turn's gate: every declared operation under
    its bound name at its tier (the strictest of the operations bound onto one server
    tool); the package default (confirm when unset) for the rest."""
    bound = _mcp(pkg, bindings)
    # several operations on one server tool: the strictest tier wins (issue 34.2)
    tiers = {name: tier for name, tier in concrete_tiers(pkg, bound).items()
             if name.partition(".")[0] in bound}
    ap = pkg.section("policy").get("approval")
    ap = ap if isinstance(ap, dict) else {}
    timeout = ap.get("timeout")
    return ToolApprovalPolicy.model_validate({
        "default": ap.get("default") if ap.get("default") in ("auto", "confirm", "manual")
        else "confirm",
        "tools": tiers,
        "timeout_s": duration_seconds(timeout) if isinstance(timeout, str)
        and duration_problem(timeout) is None else None,
        "on_timeout": ap.get("on_timeout") if ap.get("on_timeout") in ("reject", "escalate")
        else "reject"})


def servers_for(expert: str) -> dict[str, McpServerConfig]:
    """The MCP servers a chat with `expert` uses, keyed by abstract tool name. A binding
    without `pin:` trusts its server's definitions on first sight (the operator chose the
    server with `expert bind`); a changed definition still waits for approval."""
    pkg = load_package(home.package_dir(expert))
    out: dict[str, McpServerConfig] = {}
    for tool, b in _mcp(pkg, load_bindings(bindings_path(expert))).items():
        assert b.server is not None
        update: dict[str, object] = {"name": tool}
        if "pin" not in b.server.model_fields_set:
            update["pin"] = "auto"
        out[tool] = b.server.model_copy(update=update)
    return out


def chat_config(pkg: Package, bindings: dict[str, ToolBinding]) -> AgentSpecConfig:
    """The chat's spec: the package's prompt and tools; it reads (and recalls before each
    turn) only its own memories, `expert:<name>` (its learnings and state: memory.py)."""
    from .memory import namespace  # (learnings and memory load with a chat, not before)

    prompt = render(assemble(pkg, home.workspace(pkg.name)))
    own = [namespace(pkg.name)]
    return AgentSpecConfig(
        defaults=SpecDefaults(system_prompt=prompt),
        policy=SpecPolicy(tools=exposed_tools(pkg, bindings), skills=[], subagents=[],
                          approval=approval_policy(pkg, bindings), memory=own),
        context_policy=ContextPolicy(recall=RecallPolicy(namespaces=own)))


async def open_chat(store: Store, expert: str, *, title: str = "", model: str | None = None,
                    cfg: ClawtowerConfig | None = None, channel: str = "cli",
                    by: str = "operator") -> str:
    """Register (or update) the agent spec `expert.<name>` from the installed package and its
    bindings, and open a new session with it active; returns the session id. Everything is
    checked before anything is written: a bad expert or binding creates no session."""
    pkg = load_package(home.package_dir(expert))
    if pkg.errors:
        raise ValidationError(str(pkg.errors[0]))
    config = chat_config(pkg, load_bindings(bindings_path(expert)))
    if model is not None:  # checked before the spec is written
        check_model(model, cfg)
    sessions = Sessions(store)
    home.init_state(pkg, new_session=True)  # a chat is a session: reset session-scoped state
    if pkg.section("learning").get("enabled") is True:
        from .learning import project

        await project(store, pkg, home.workspace(pkg.name))  # approved since the last use
    from .state import sync

    await sync(store, pkg, home.workspace(pkg.name), reset=True, by=by)
    from .memory import sync as sync_memories

    await sync_memories(store, pkg, home.workspace(pkg.name), by=by)  # what it recalls
    name = spec_name(expert)
    await sessions.set_spec(name, config, source=f"{SOURCE_PREFIX}{expert}", by=by)
    return await sessions.create(agent=name, title=title or f"chat with {expert}",
                                 model=model, cfg=cfg, channel=channel, by=by)


__all__ = ["SOURCE_PREFIX", "SPEC_PREFIX", "approval_policy", "chat_config", "exposed_tools",
           "open_chat",
           "servers_for", "spec_name"]
