"""`clawtower expert chat NAME`: talk to an installed expert in a session of its own (its
persona, tools and approval tiers: core/experts/chat.py); one message with `-m`, or a loop.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable
from typing import Any

from clawtower.core.errors import ValidationError

from .stores import cli_store


def _operator() -> str:
    from .common import operator_name

    return operator_name()


async def _chat_async(args: argparse.Namespace) -> int:
    from clawtower.core.agents.config import load_config
    from clawtower.core.experts.chat import open_chat

    if args.message is not None and not args.message.strip():
        raise ValidationError("expert chat: --message: the message is empty")
    if args.timeout <= 0:
        raise ValidationError("expert chat: --timeout: must be above 0")
    cfg = load_config(args.config)
    async with cli_store(args.db) as store:
        sid = await open_chat(store, args.name, model=args.model, cfg=cfg, by=_operator())
        sys.stderr.write(f"{sid}: chat with {args.name} (clawtower session show {sid};"
                         " the console lists it too)\n")
        if args.message is not None:
            return await _chat_turn(store, cfg, sid, args.message, args)
        return await _chat_loop(store, cfg, sid, args)


def chat(args: argparse.Namespace) -> Awaitable[int]:
    return _chat_async(args)


async def _chat_loop(store: Any, cfg: Any, sid: str, args: argparse.Namespace) -> int:
    """One message per stdin line (a pipe works too); `/quit` or end of input ends it. The
    session commands (`/model`, `/agents`, ...) work as in `session send`. A failed turn is
    reported and the loop goes on; the exit code is 1 if any turn failed."""
    import asyncio

    from clawtower.core.errors import ClawError
    from clawtower.core.sessions.commands import is_command, run_command
    from clawtower.core.sessions.service import Sessions

    tty = sys.stdin.isatty()
    code = 0
    while True:
        if tty:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() == "/quit":
            break
        try:
            if is_command(text):
                out = await run_command(Sessions(store), sid, text, cfg=cfg, by=_operator())
                print(out.text, flush=True)
                continue
            code = max(code, await _chat_turn(store, cfg, sid, text, args))
        except ClawError as exc:
            sys.stderr.write(f"clawtower: error: {' '.join(str(exc).split())}\n")
            code = max(code, exc.exit_code)
    return code


async def _chat_turn(store: Any, cfg: Any, sid: str, text: str,
                     args: argparse.Namespace) -> int:
    """Send one message and run the session's turn(s) here until it is quiet."""
    from clawtower.core.errors import ClawError
    from clawtower.core.sessions.service import Sessions

    from .session import _wait_reply

    sessions = Sessions(store)
    sent = await sessions.send(sid, text, sender=_operator())
    if not args.json:
        return await _wait_reply(store, cfg, sid, sent["msg_id"], args.timeout)
    from .session import run_here

    before = await store.fetchone("SELECT coalesce(max(seq), 0) AS s FROM session_messages"
                                  " WHERE session_id=?", (sid,))
    ok = await run_here(store, cfg, sid, args.timeout)
    s = await sessions.get(sid)
    after = int(before["s"]) if before else 0
    replies = [m for m in s["messages"] if m["seq"] > after and m["role"] == "assistant"]
    failed = [j for j in s["jobs"] if j["status"] == "failed"]
    error = ("" if ok else f"still busy after {args.timeout:g} s (--timeout)") or (
        failed[-1]["error"] if failed and not replies else "")
    waits = await store.fetchall("SELECT id FROM approvals WHERE kind='tool_call' AND"
                                 " subject=? AND status='pending' ORDER BY seq", (sid,))
    print(json.dumps({"session": sid, "agent": s["agent"], "reply": "\n".join(
        m["text"] for m in replies), "status": s["status"], "tokens": s["tokens"],
        "cost_usd": s["cost_usd"], "error": error or None,
        "waiting_approvals": [w["id"] for w in waits]}), flush=True)
    if error:
        raise ClawError(f"session {sid!r}: {error}")
    return 0


__all__ = ["chat"]
