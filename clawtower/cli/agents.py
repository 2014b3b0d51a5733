"""`clawtower agents` and `clawtower llm`: configured agents and direct model calls.

Agents come from the project config (core/agents/config.py: `--config FILE`, else
$CLAWTOWER_CONFIG, else $CLAWTOWER_HOME/clawtower.yaml); with no file, the built-in
simulator cast answers, so `llm ask` works offline with zero config.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from clawtower.core.errors import ClawError, ValidationError

if TYPE_CHECKING:  # loaded by the handlers: other commands start without pydantic's models
    from clawtower.core.agents.config import AgentConfig, ClawtowerConfig
    from clawtower.core.agents.provider import ChatRequest

from . import agent_specs, output
from . import llm_task as llm_task_cli
from .common import add_config_option, db_parent

Handler = Callable[[argparse.Namespace], Awaitable[int]]
ASK_SUBJECT = "llm-ask"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_agents_parser(subparsers)
    llm = subparsers.add_parser(
        "llm", help="direct model calls: streamed answers, structured JSON tasks")
    llm.set_defaults(handler=cmd_llm)
    llm_sub = llm.add_subparsers(dest="llm_cmd", metavar="ACTION", parser_class=type(llm),
                                 required=True)
    _add_ask_parser(llm_sub)
    # `llm task` lives in cli/llm_task.py; other `llm` actions are added beside it.
    llm_task_cli.add_task_parser(llm_sub, [db_parent()])


def _config_option() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_config_option(common)
    return common


async def cmd_llm(args: argparse.Namespace) -> int:
    actions: dict[str, Handler] = {"ask": cmd_llm_ask, "task": llm_task_cli.cmd_llm_task}
    return await actions[args.llm_cmd](args)



# --------------------------------------------------------------------------- agents


def _add_agents_parser(
        subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = subparsers.add_parser("agents", help="configured agents: provider, model, tools, budgets")
    a.set_defaults(handler=cmd_agents)
    asub = a.add_subparsers(dest="agents_cmd", metavar="ACTION", parser_class=type(a),
                            required=True)
    al = asub.add_parser("list", help="every agent of the config", parents=[_config_option()])
    al.add_argument("--json", action="store_true", help="print a JSON list")
    ash = asub.add_parser("show", help="one agent in full", parents=[_config_option()])
    ash.add_argument("name", metavar="NAME", help="the agent")
    ash.add_argument("--json", action="store_true", help="print the agent as JSON")
    agent_specs.add_spec_parser(asub)  # `agents spec ...`: the store's spec registry


def _budgets(a: AgentConfig) -> str:
    b = a.budgets
    return (f"rounds {b.max_tool_rounds}, tokens {b.max_tokens if b.max_tokens else '-'},"
            f" wall {b.max_wall_s:g}s")


def agent_json(cfg: ClawtowerConfig, name: str) -> dict[str, Any]:
    """One agent as `agents list/show --json` print it (a key's variable, never its value)."""
    a = cfg.agent(name)
    out: dict[str, Any] = {"name": name, **a.model_dump(), "config": cfg.source}
    p = cfg.providers.get(a.provider)
    if p is None:
        out["provider_detail"] = {"kind": "simulator"}
    else:
        out["provider_detail"] = {
            "kind": p.kind, "base_url": p.base_url, "api_key_env": p.api_key_env,
            "key_set": bool(p.api_key_env and os.environ.get(p.api_key_env)),
            "models": p.models, "timeout_s": p.timeout_s, "retries": p.retries.model_dump(),
            "max_concurrency": p.max_concurrency}
    return out


def _agent_detail(cfg: ClawtowerConfig, name: str) -> str:
    a = cfg.agent(name)
    p = cfg.providers.get(a.provider)
    if p is None:
        provider = f"{a.provider} (built-in, offline)"
    else:
        key = "no key" if not p.api_key_env else (
            f"key from ${p.api_key_env} ({'set' if os.environ.get(p.api_key_env) else 'NOT set'})")
        provider = (f"{a.provider} ({p.kind}, {p.base_url}, {key}; timeout {p.timeout_s:g}s,"
                    f" {p.retries.max} retries, at most {p.max_concurrency} in flight)")
    models = f" (provider's models: {', '.join(p.models)})" if p is not None and p.models else ""
    lines = [name, f"  config: {cfg.source}", f"  provider: {provider}",
             f"  model: {a.model}{models}", f"  role: {a.role}",
             f"  tools: {', '.join(a.tools) if a.tools else '(none)'}",
             f"  budgets: {_budgets(a)}"]
    if a.escalation_model:
        lines.append(f"  escalation model: {a.escalation_model}")
    if a.price is not None:
        lines.append(f"  price: ${a.price.prompt:g} prompt, ${a.price.completion:g} completion"
                     " per 1M tokens")
    if a.max_output_tokens is not None or a.temperature is not None:
        lines.append(f"  per call: max_output_tokens {a.max_output_tokens or '-'},"
                     f" temperature {a.temperature if a.temperature is not None else '-'}")
    system = " ".join(a.system.split())
    lines.append(f"  system: {system or '(none)'}")
    return "\n".join(lines)


async def cmd_agents(args: argparse.Namespace) -> int:
    from clawtower.core.agents.config import load_config

    if args.agents_cmd == "spec":
        return await agent_specs.cmd_spec(args)
    cfg = load_config(args.config)
    if args.agents_cmd == "show":
        cfg.agent(args.name)  # an unknown name: exit 2 naming the config and the known ones
        if args.json:
            output.emit_json(agent_json(cfg, args.name))
        else:
            print(_agent_detail(cfg, args.name))
        return 0
    names = sorted(cfg.agents)
    if args.json:
        output.emit_json([agent_json(cfg, n) for n in names])
        return 0
    rows = [[n, a.provider, a.model, a.role, ",".join(a.tools) or "-", _budgets(a)]
            for n in names for a in [cfg.agents[n]]]
    print(output.table(rows, ["NAME", "PROVIDER", "MODEL", "ROLE", "TOOLS", "BUDGETS"]))
    return 0


# --------------------------------------------------------------------------- llm ask


def _add_ask_parser(llm_sub: Any) -> None:
    a = llm_sub.add_parser("ask", parents=[db_parent(), _config_option()],
                           help="stream one agent's reply to TEXT; usage goes to the store")
    a.add_argument("--agent", required=True, metavar="NAME", help="the agent that answers")
    a.add_argument("text", metavar="TEXT", help="the question ('-' reads it from stdin)")
    a.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="cap on the reply (default: the agent's max_output_tokens)")
    a.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="0 to 2 (default: the agent's temperature)")
    a.add_argument("--subject", default=ASK_SUBJECT, metavar="ID",
                   help=f"what the usage is recorded under (default {ASK_SUBJECT})")
    a.add_argument("--tools", action="store_true",
                   help="a turn with the agent's allow-listed tools: model -> tools -> model"
                        " within its budgets; every call and result is recorded")


def _ask_request(args: argparse.Namespace, cfg: ClawtowerConfig) -> ChatRequest:
    """Everything checked before the store is opened: bad input writes nothing."""
    from clawtower.core.agents.provider import ChatMessage, ChatRequest

    agent = cfg.agent(args.agent)
    text = _stdin_text() if args.text == "-" else args.text
    if not text.strip():
        raise ValidationError("llm ask: TEXT is empty")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ValidationError("llm ask: --max-tokens: must be at least 1")
    if args.temperature is not None and not 0 <= args.temperature <= 2:
        raise ValidationError("llm ask: --temperature: must be between 0 and 2")
    if not args.subject.strip():
        raise ValidationError("llm ask: --subject: must not be empty")
    messages = [ChatMessage(role="user", content=text)]
    if agent.system:
        messages.insert(0, ChatMessage(role="system", content=agent.system))
    temperature = args.temperature if args.temperature is not None else agent.temperature
    metadata: dict[str, Any] = {"purpose": "ask", "agent": args.agent}
    return ChatRequest(model=agent.model, messages=messages,
                       max_tokens=args.max_tokens or agent.max_output_tokens,
                       temperature=temperature, timeout_s=agent.budgets.max_wall_s,
                       metadata=metadata)


async def _ask_turn(args: argparse.Namespace, cfg: ClawtowerConfig, request: ChatRequest,
                    store: Any) -> int:
    """`llm ask --tools`: one turn of the configured agent with its tools (core/agents/turns)."""
    from clawtower.core.agents.turns import run_agent_turn
    from clawtower.core.tools.registry import ToolRegistry

    def on_text(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    async with ToolRegistry.from_project(store, cfg) as registry:
        result = await run_agent_turn(
            cfg, args.agent, list(request.messages), registry=registry, store=store,
            subject=args.subject, on_text=on_text,
            **({"temperature": request.temperature} if request.temperature is not None
               else {}))
    if result.text and not result.text.endswith("\n"):
        sys.stdout.write("\n")
    for rec in result.tools:
        mark = f" [{rec.result.error_kind or 'error'}]" if rec.result.is_error else ""
        sys.stderr.write(f"round {rec.round}: {rec.call.name} {_clip(rec.call.arguments)}"
                         f" -> {_clip(rec.result.content)}{mark}\n")
    cost = f" · ${result.cost_usd:.6f}" if result.cost_usd > 0 else ""
    sys.stderr.write(f"{args.agent} · turn {result.turn_id}: {result.stop_reason} after"
                     f" {result.rounds} tool round(s), {result.model_calls} model call(s) ·"
                     f" {result.usage.prompt_tokens} in / {result.usage.completion_tokens} out"
                     f" tokens{cost}\n")
    if result.stop_reason == "awaiting_approval":
        sys.stderr.write(f"clawtower: error: agent {args.agent}: {result.pending[0].name} is"
                         " confirm-tier and `llm ask` cannot wait for an operator; ask in a"
                         f" session instead (clawtower session new --agent {args.agent})\n")
        return 1
    if result.stop_reason != "completed":
        why = f": {result.error}" if result.error else ""
        sys.stderr.write(f"clawtower: error: agent {args.agent}: the turn stopped early"
                         f" ({result.stop_reason}){why}\n")
        return 1
    return 0


def _clip(text: str, width: int = 100) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


async def cmd_llm_ask(args: argparse.Namespace) -> int:
    import asyncio

    from clawtower.core.agents.config import load_config
    from clawtower.core.agents.provider import Usage
    from clawtower.core.agents.tokens import count_tokens
    from clawtower.core.agents.usage import UsageRecorder
    from clawtower.core.store import open_store

    cfg = load_config(args.config)
    request = _ask_request(args, cfg)
    agent = cfg.agent(args.agent)
    if args.tools and not agent.tools:
        raise ValidationError(f"llm ask --tools: agent {args.agent} has no tools allow-list"
                              f" (`tools:` in {cfg.source})")
    provider = cfg.provider(agent.provider)
    store = await open_store(args.db)
    if args.tools:
        try:
            return await _ask_turn(args, cfg, request, store)
        finally:
            await store.close()
    try:
        parts: list[str] = []
        usage: Usage | None = None
        finish = "stop"
        try:
            async with asyncio.timeout(agent.budgets.max_wall_s):
                async for event in provider.stream(request):
                    if event.kind == "text" and event.text:
                        parts.append(event.text)
                        sys.stdout.write(event.text)
                        sys.stdout.flush()
                    elif event.kind == "usage" and event.usage is not None:
                        usage = event.usage
                    elif event.kind == "done":
                        finish = event.finish_reason or finish
        except TimeoutError:
            raise ClawError(f"agent {args.agent}: no complete reply within"
                            f" {agent.budgets.max_wall_s:g} s (budgets.max_wall_s)") from None
        finally:
            if parts and not parts[-1].endswith("\n"):
                sys.stdout.write("\n")
                sys.stdout.flush()
        text = "".join(parts)
        estimated = usage is None or usage.total == 0
        if usage is None or estimated:  # e.g. llama-cpp-python reports none on streams
            usage = Usage(prompt_tokens=sum(count_tokens(m.content) for m in request.messages),
                          completion_tokens=count_tokens(text))
        recorder = UsageRecorder(store, args.subject, args.agent, agent.unit_price)
        cost = await recorder.record(request.model, "ask", usage)
    finally:
        await store.close()
    note = " (estimated)" if estimated else ""
    price = f" · ${cost:.6f}" if cost > 0 else ""
    sys.stderr.write(f"{args.agent} · {agent.provider}/{request.model} ·"
                     f" {usage.prompt_tokens} in / {usage.completion_tokens} out tokens{note}"
                     f"{price} · {finish}\n")
    return 0


__all__ = ["agent_json", "cmd_agents", "cmd_llm", "cmd_llm_ask", "register"]


def _stdin_text() -> str:
    """`llm ask -`: the question from stdin, read up to MAX_TEXT_CHARS (the same cap as a
    TEXT argument), never more."""
    from clawtower.core.limits import MAX_TEXT_CHARS, check_text

    try:
        text = sys.stdin.read(MAX_TEXT_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"TEXT: cannot read the question from stdin ({exc})") from None
    return check_text(text, "TEXT (stdin)")
