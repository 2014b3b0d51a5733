"""`clawtower agents spec ...`: the store's agent specs, the registry sessions, flows and
experts resolve an agent name through (core/sessions/specs.py).

    agents spec list|show REF [--json]       agents spec set NAME [--file F] [--provider ...]
    agents spec import [NAME ...] [--config F]
    agents spec import --openclaw [PATH] [ID ...] [--gateway URL --token-file F] [--json]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ValidationError

from . import output
from .common import nothing_yet
from .session import _common, _config, _operator
from .stores import cli_store

if TYPE_CHECKING:
    from clawtower.core.sessions.specs import AgentSpecConfig
    from clawtower.core.store import Store


OPENCLAW_DEFAULT = "~/.openclaw/openclaw.json"  # core/sessions/openclaw.DEFAULT_PATH


def add_spec_parser(agents_sub: Any) -> None:
    """`agents spec ...` (called by cli/agents.py)."""
    sp = agents_sub.add_parser("spec", help="agent specs of sessions (the store's registry)")
    sub = sp.add_subparsers(dest="spec_cmd", metavar="ACTION", parser_class=type(sp),
                            required=True)
    c = [_common()]
    ls = sub.add_parser("list", help="every agent spec", parents=c)
    ls.add_argument("--json", action="store_true", help="print a JSON list")
    sh = sub.add_parser("show", help="one agent spec", parents=c)
    sh.add_argument("ref", metavar="REF", help="agent id or name")
    sh.add_argument("--json", action="store_true", help="print the spec as JSON")
    st = sub.add_parser("set", help="create or change a spec (fields not given are kept)",
                        parents=c)
    st.add_argument("name", metavar="NAME", help="the spec's name (created if new)")
    st.add_argument("--file", metavar="F.yaml", help="the whole spec config (YAML/JSON)")
    st.add_argument("--provider", help="defaults.provider (simulator, or one of the config)")
    st.add_argument("--model", help="defaults.model")
    st.add_argument("--temperature", type=float, help="defaults.temperature (0-2)")
    st.add_argument("--system", metavar="TEXT", help="system prompt")
    st.add_argument("--tools", metavar="A,B", help="tool allow-list ('*' all, '' none)")
    st.add_argument("--skills", metavar="A,B", help="skill allow-list ('*' all, '' none)")
    st.add_argument("--subagents", metavar="A,B",
                    help="specs it may spawn or delegate to ('*' any, itself included; '' none)")
    im = sub.add_parser("import", help="specs from the agents of clawtower.yaml (or of an"
                        " OpenClaw config: --openclaw)", parents=c)
    im.add_argument("names", nargs="*", metavar="NAME",
                    help="the agents to import (default: every agent of the config)")
    # no value: the default path (typed '' - an unset variable - is refused as a path)
    im.add_argument("--openclaw", nargs="?", const=OPENCLAW_DEFAULT, default=None,
                    metavar="PATH",
                    help="import OpenClaw's agents (JSON5; default ~/.openclaw/openclaw.json)")
    im.add_argument("--gateway", metavar="URL",
                    help="with --openclaw: run the imported agents on this Gateway"
                         " (ws://HOST:PORT) through `openclaw acp`")
    im.add_argument("--token-file", metavar="F", help="with --gateway: the Gateway's token file")
    im.add_argument("--openclaw-command", default="openclaw", metavar="CMD",
                    help="with --gateway: the openclaw binary (default: openclaw on PATH)")
    im.add_argument("--json", action="store_true", help="print what was imported as JSON")


def _names(value: str | None) -> list[str] | bool | None:
    """--tools a,b -> [a, b]; '*' -> None (no filtering); '' -> []; not given -> False."""
    if value is None:
        return False
    if value.strip() == "*":
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


async def cmd_spec(args: argparse.Namespace) -> int:
    from clawtower.core.safe_yaml import load_file
    from clawtower.core.sessions.service import Sessions
    from clawtower.core.sessions.specs import AgentSpecConfig, check_name, parse_config

    sc = args.spec_cmd
    if sc == "import" and args.openclaw is not None:
        return await _import_openclaw(args)
    if sc == "import" and (args.gateway or args.token_file or args.json):
        raise ValidationError("agents spec import: --gateway, --token-file and --json go with"
                              " --openclaw")
    read_only = sc in ("list", "show")
    cfg = _config(args) if sc == "import" else None
    new_config: dict[str, Any] | None = None
    if sc == "set":
        check_name(args.name)
        if args.file:
            new_config = parse_config(load_file(args.file), args.file).model_dump(mode="json")

    async def run(store: Store) -> int:
        sessions = Sessions(store)
        if sc == "list":
            specs = await sessions.specs()
            if args.json:
                output.emit_json([s.as_json() for s in specs])
            elif not specs:
                nothing_yet("agent specs", "`clawtower agents spec import` or `... set NAME`")
            else:
                print(output.table([_spec_row(s.as_json()) for s in specs],
                                   ["ID", "NAME", "RUNS ON", "TOOLS", "SKILLS", "SOURCE"]))
            return 0
        if sc == "show":
            s = await sessions.spec(args.ref)
            if args.json:
                output.emit_json(s.as_json())
            else:
                import yaml

                from clawtower.core.sessions.reads import executor_label

                print(f"{s.name} ({s.agent_id}) from {s.source}; runs on"
                      f" {executor_label(s.config.defaults.model_dump(mode='json'))}")
                print(yaml.safe_dump(s.config.model_dump(mode="json"), sort_keys=False)
                      .rstrip())
            return 0
        if sc == "import":
            assert cfg is not None
            done = await sessions.import_specs(cfg, args.names or None, by=_operator())
            for name, agent_id in done.items():
                print(f"{name}: {agent_id} (from {cfg.source})")
            return 0
        if sc == "set":
            data = new_config
            if data is None:
                rows = await store.fetchall("SELECT * FROM agent_specs WHERE name=?",
                                            (args.name,))
                base = AgentSpecConfig.model_validate_json(rows[0]["config_json"]) \
                    if rows else AgentSpecConfig()
                data = base.model_dump(mode="json")
            d, p = data["defaults"], data["policy"]
            for fld, val in (("provider", args.provider), ("model", args.model),
                             ("temperature", args.temperature), ("system_prompt", args.system)):
                if val is not None:
                    d[fld] = val
            for fld in ("tools", "skills", "subagents"):
                names = _names(getattr(args, fld))
                if names is None and fld == "subagents":
                    names = ["*"]  # any spec, itself included (unset: any but itself)
                if names is not False:
                    p[fld] = names
            config = parse_config(data, f"agents spec set {args.name}")
            _check_credentials(args.name, config)
            agent_id = await sessions.set_spec(args.name, config, by=_operator())
            print(f"{args.name}: {agent_id}")
            for warning in [*await _approval_warnings(store, args.name, config),
                            *_skill_warnings(args.name, config)]:
                sys.stderr.write(f"clawtower: warning: {warning}\n")
            return 0
        raise ValidationError(f"agents spec: unknown action {sc!r}")

    async with cli_store(args.db, read_only=read_only) as store:
        return await run(store)


async def _import_openclaw(args: argparse.Namespace) -> int:
    """`agents spec import --openclaw`: every check before one write (core/sessions/openclaw)."""
    from clawtower.core.sessions import openclaw
    from clawtower.core.tools.builtin import builtin_tools

    if args.gateway is not None and not args.gateway.strip():
        raise ValidationError("--gateway: empty (an unset variable?)")
    if bool(args.gateway) != bool(args.token_file):
        raise ValidationError("agents spec import --openclaw: --gateway and --token-file go"
                              " together (the Gateway, and the file holding its token)")
    gateway = openclaw.Gateway(args.gateway, os.path.abspath(args.token_file),
                               args.openclaw_command) \
        if args.gateway else None
    if gateway is not None:  # the same checks as an acp_agents entry's `openclaw:`
        from clawtower.core.acp.config import harness_from_data
        from clawtower.core.limits import read_secret

        harness_from_data({"openclaw": {"url": gateway.url, "token_file": gateway.token_file,
                                        "command": gateway.command}}, "openclaw", "--gateway")
        read_secret(gateway.token_file, "--token-file")  # there, one line, not empty
    path, data = openclaw.read_config(args.openclaw)
    cfg = _config(args)
    async with cli_store(args.db) as store:
        known = set(builtin_tools()) | {r["name"] for r in await store.fetchall(
            "SELECT name FROM tool_pins")}
        imp = openclaw.build(path, data, cfg, only=args.names or None, gateway=gateway,
                             known_tools=known)
        rows = await openclaw.apply(store, imp, by=_operator())
    notes = {a.name: a.notes for a in imp.agents}
    if args.json:
        output.emit_json({"file": path, "agents": [{**r, "notes": notes[r["name"]]}
                                                   for r in rows], "unmapped": imp.unmapped})
        return 0
    for r in rows:
        print(f"{r['name']}: {r['status']} ({r['agent_id']}) from {path}")
        for note in notes[r["name"]]:
            print(f"  {note}")
        for line in r["diff"]:
            print(f"  {line}")
        for u in r["unmapped"]:
            print(f"  not mapped: {u}")
    for u in imp.unmapped:
        print(f"not mapped: {u}")
    return 0


async def _approval_warnings(store: Store, name: str, config: AgentSpecConfig) -> list[str]:
    """Approval rules that match no tool the spec can see (the built-in tools, the tools the
    store has seen, the allow-list's exact names): most likely a typo."""
    from clawtower.core.tools.approval import is_glob
    from clawtower.core.tools.builtin import builtin_tools

    ap = config.policy.approval
    if ap is None or not ap.tools:
        return []
    allow = config.policy.tools
    known = set(builtin_tools()) | {r["name"] for r in await store.fetchall(
        "SELECT name FROM tool_pins")} | {t for t in allow or [] if not is_glob(t)}
    visible = sorted(n for n in known if allow is None or any(
        fnmatch.fnmatchcase(n, p) for p in allow))
    return [f"agent spec {name}: policy.approval.tools.{rule!r} matches no tool it can see"
            f" (known: {', '.join(visible) or 'none'})" for rule in ap.unmatched(visible)
            if rule not in (allow or [])]


def _check_credentials(name: str, config: AgentSpecConfig) -> None:
    """A Gateway credentials file (`defaults.acp.openclaw.token_file`) that is not there is
    refused now, not at the spec's first turn."""
    from clawtower.core.acp.config import harness_from_data

    acp = config.defaults.acp
    if isinstance(acp, dict):
        harness = harness_from_data(acp, str(acp.get("name") or "inline"), "acp")
        if harness.openclaw is not None and (why := harness.openclaw.preflight(name)):
            raise ValidationError(f"agent spec {name}: {why}")


def _skill_warnings(name: str, config: AgentSpecConfig) -> list[str]:
    """Allowed skills that no SKILL.md of the skills folder defines: most likely a typo (as
    unmatched approval rules, a warning: the skill may be written later)."""
    from clawtower.core.sessions.skills import load_skills

    allow = config.policy.skills
    if not allow:
        return []
    known = load_skills().skills
    return [f"agent spec {name}: policy.skills {skill!r}: no such skill"
            f" (known: {', '.join(sorted(known)) or 'none'})"
            for skill in allow if skill != "*" and skill not in known]


def _spec_row(s: dict[str, Any]) -> list[str]:
    d, p = s["config"]["defaults"], s["config"]["policy"]

    def names(v: list[str] | None) -> str:
        return "all" if v is None else ",".join(v) or "none"

    from clawtower.core.sessions.reads import executor_label

    return [s["agent_id"], s["name"], executor_label(d),
            names(p["tools"]), names(p["skills"]), s["source"]]


__all__ = ["add_spec_parser", "cmd_spec"]
