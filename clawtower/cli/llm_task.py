"""`clawtower llm task --agent A --schema S.json [--input I.json] [--prompt TEXT]`.

One structured call (core/agents/llm_task.py): prints the validated JSON on stdout. Exit 1
with OpenClaw's wording when the model's reply is unusable after the repair attempt
(`LLM returned invalid JSON`, `LLM JSON did not match schema: ...`) or the provider fails;
exit 2 for a bad schema or input file (the message names the file) or an unknown agent.

The `llm` command group is built in cli/agents.py, which calls `add_task_parser` for its
`task` action and `cmd_llm_task` to run it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clawtower.core.errors import ValidationError

from .common import add_config_option

SUBJECT = "llm-task"
DEFAULT_PROMPT = ("Return the JSON value for INPUT_JSON that the task needs; it must match the"
                  " JSON Schema you were given.")


def add_task_parser(llm_sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add `task` to the `llm` subcommands (`llm_sub` is its add_subparsers() action)."""
    t = llm_sub.add_parser("task", parents=parents,
                           help="one JSON-only call validated against a JSON Schema")
    t.add_argument("--agent", required=True, metavar="NAME", help="the agent that answers")
    t.add_argument("--schema", required=True, metavar="S.json", help="JSON Schema file")
    t.add_argument("--input", default=None, metavar="I.json",
                   help="input JSON file (default: null)")
    t.add_argument("--prompt", default=None, metavar="TEXT", help="what to do with the input")
    add_config_option(t, "--agents-file")
    t.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds per model call (default 60)")
    t.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="per call (default: the agent's max_output_tokens)")
    t.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="default: the agent's temperature")
    t.add_argument("--subject", default=SUBJECT, metavar="ID",
                   help=f"record the calls' usage (tokens, cost) under this task, session or"
                        f" workflow run id (default {SUBJECT})")
    t.add_argument("--details", action="store_true",
                   help="print {json, provider, model, usage, cost_usd, repaired, calls} instead")


def _read_json(path: str, what: str) -> Any:
    """A JSON file through the one boundary: read incrementally up to MAX_FILE_BYTES, strict
    JSON (duplicate keys refused); errors name the file."""
    from clawtower.core.limits import parse_json, printable, read_text

    if not Path(path).exists():
        raise ValidationError(f"{printable(path)}: {what} file not found")
    return parse_json(read_text(path), f"{printable(path)}: {what} file")


async def cmd_llm_task(args: argparse.Namespace) -> int:
    # imported here, not at the top: every other command starts without jsonschema/providers
    from clawtower.core.agents.config import load_config
    from clawtower.core.agents.llm_task import LlmTaskError, check_schema, run_llm_task
    from clawtower.core.agents.usage import UsageRecorder
    from clawtower.core.store import open_store

    schema = _read_json(args.schema, "schema")
    if not isinstance(schema, dict):
        raise ValidationError(f"{args.schema}: schema file must hold a JSON object")
    try:
        check_schema(schema)
    except ValidationError as exc:
        raise ValidationError(f"{args.schema}: {str(exc).removeprefix('schema: ')}") from None
    data = _read_json(args.input, "input") if args.input else None
    if args.timeout <= 0:
        raise ValidationError("--timeout: must be positive")
    cfg = load_config(args.config)
    agent = cfg.agent(args.agent)
    provider = cfg.provider_for(args.agent)
    store = await open_store(args.db)
    try:
        recorder = UsageRecorder(store, args.subject, args.agent, agent.unit_price)
        result = await run_llm_task(
            provider, model=agent.model, prompt=args.prompt or DEFAULT_PROMPT, input=data,
            schema=schema, max_tokens=args.max_tokens or agent.max_output_tokens,
            timeout_s=args.timeout,
            temperature=args.temperature if args.temperature is not None
            else agent.temperature,
            metadata={"agent": args.agent}, recorder=recorder)
    except LlmTaskError as exc:
        if exc.text:
            sys.stderr.write(f"clawtower: the model's last reply: {exc.text[:500]}\n")
        raise
    finally:
        await store.close()
    if args.details:
        out: Any = {**result.details(), "usage": result.usage.model_dump(),
                    "cost_usd": result.cost_usd, "repaired": result.repaired,
                    "calls": result.calls}
    else:
        out = result.data
    print(json.dumps(out, indent=2))
    return 0


__all__ = ["add_task_parser", "cmd_llm_task"]
