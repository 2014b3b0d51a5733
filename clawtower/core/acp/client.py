"""The client side of ACP for one run: what the harness may ask of us.

- `session/update`: message chunks stream to `on_text` at once and into the log coalesced
  (`acp.text`); tool calls and their updates, plans and diffs become events;
- `session/request_permission`: an active "always" rule answers at once; otherwise an
  approval in the one list, answered by whoever decides it (any process: the store's
  wake-ups bring the answer here), `cancelled` on timeout or when the turn ends;
- `fs/*` and `terminal/*`: confined to the workspace (core.acp.sandbox); a write is an
  effect: intent committed, file replaced atomically, done committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import Client, RequestError
from acp.schema import (
    AllowedOutcome,
    CreateTerminalResponse,
    DeniedOutcome,
    EnvVariable,
    KillTerminalResponse,
    PermissionOption,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    ToolCallUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from .. import files
from ..aio import unless_set
from ..events import ApprovalDecided, ApprovalRequested, NewEvent
from ..store.interface import Store, WriteTx
from ..workflows.shell import death_guard
from . import events as aev
from .permissions import answer_cancelled, pick_option
from .sandbox import OutsideWorkspace, confine

CLIP = 4000  # characters of tool-call content kept per item
FLUSH_S = 0.1  # streamed text is committed at most this often
TextSink = Callable[[str], None]


def _dump(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.model_dump(mode="json", exclude_none=True, by_alias=False)
    return out


def _clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def content_items(content: list[Any] | None) -> list[dict[str, Any]]:
    """Tool-call content as kept in events: text, diffs (path, old, new), terminals."""
    out: list[dict[str, Any]] = []
    for item in content or []:
        d = _dump(item)
        kind = d.get("type")
        if kind == "diff":
            out.append({"type": "diff", "path": d.get("path", ""),
                        "old_text": _clip(d.get("old_text") or ""),
                        "new_text": _clip(d.get("new_text") or "")})
        elif kind == "content":
            inner = d.get("content", {})
            out.append({"type": "text", "text": _clip(str(inner.get("text", inner)))})
        elif kind == "terminal":
            out.append({"type": "terminal", "terminal_id": d.get("terminal_id", "")})
    return out


@dataclass
class _Terminal:
    proc: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    def status(self) -> TerminalExitStatus | None:
        rc = self.proc.returncode
        if rc is None:
            return None
        if rc < 0:
            return TerminalExitStatus(exit_code=None, signal=signal.Signals(-rc).name)
        return TerminalExitStatus(exit_code=rc, signal=None)


class BridgeClient(Client):
    """One run's client. `cancelled` is set when the turn ends or is cancelled: pending
    permission requests then answer `cancelled`."""

    def __init__(self, store: Store, *, run_id: str, harness: str, workspace: str,
                 actor: str, permission_timeout_s: float, on_text: TextSink | None = None,
                 child_env: dict[str, str] | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.harness = harness
        self.workspace = str(Path(workspace).resolve())
        self.actor = actor
        self.permission_timeout_s = permission_timeout_s
        self.on_text = on_text
        self.child_env = dict(child_env or {})
        self.cancelled = asyncio.Event()
        self.text: list[str] = []
        self.tools: dict[str, dict[str, Any]] = {}
        self.pending_permissions: set[str] = set()
        self.permissions_asked = 0
        self._buffer: list[str] = []
        self._flusher: asyncio.Task[None] | None = None
        self._writes = 0
        self._terminals: dict[str, _Terminal] = {}

    # ------------------------------------------------------------------ events

    async def _emit(self, *payloads: Any) -> None:
        await self.store.append([NewEvent(entity_id=self.run_id, actor=self.actor,
                                          role="agent", payload=p) for p in payloads])

    async def flush(self) -> None:
        if self._buffer:
            text, self._buffer = "".join(self._buffer), []
            await self._emit(aev.AcpText(text=text))

    async def _flush_later(self) -> None:
        await asyncio.sleep(FLUSH_S)
        self._flusher = None
        await self.flush()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        kind = getattr(update, "session_update", "")
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            block = update.content
            text = getattr(block, "text", None)
            if not isinstance(text, str):
                return
            if kind == "agent_thought_chunk":
                await self._emit(aev.AcpText(kind="thought", text=text))
                return
            self.text.append(text)
            if self.on_text is not None:
                self.on_text(text)
            self._buffer.append(text)
            if self._flusher is None:
                self._flusher = asyncio.create_task(self._flush_later())
        elif kind in ("tool_call", "tool_call_update"):
            await self.flush()
            d = _dump(update)
            call_id = d.get("tool_call_id", "")
            known = self.tools.setdefault(call_id, {})
            for key in ("title", "kind", "status"):
                if d.get(key):
                    known[key] = d[key]
            locations = [loc.get("path", "") for loc in d.get("locations") or []]
            if locations:
                known["locations"] = locations
            if isinstance(d.get("raw_input"), dict):
                known["raw_input"] = d["raw_input"]
            await self._emit(aev.AcpToolCall(
                call_id=call_id, title=d.get("title") or "", kind=d.get("kind") or "",
                status=d.get("status") or "", locations=locations,
                content=content_items(getattr(update, "content", None))))
        elif kind == "plan":
            await self.flush()
            await self._emit(aev.AcpPlan(entries=[_dump(e) for e in update.entries]))

    # ------------------------------------------------------------------ permissions

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption], **kwargs: Any
                                 ) -> RequestPermissionResponse:
        await self.flush()
        self.permissions_asked += 1
        d = _dump(tool_call)
        known = self.tools.get(d.get("tool_call_id", ""), {})
        tool_kind = d.get("kind") or known.get("kind") or "other"
        title = d.get("title") or known.get("title") or tool_kind
        locations = [loc.get("path", "") for loc in d.get("locations") or []] \
            or known.get("locations", [])
        raw = d.get("raw_input") if isinstance(d.get("raw_input"), dict) \
            else known.get("raw_input", {})
        command = str(raw.get("command", "")) if isinstance(raw, dict) else ""
        opts = [{"option_id": o.option_id, "name": o.name, "kind": str(o.kind)}
                for o in options]
        approval_id = f"A-acp-{uuid.uuid4().hex[:10]}"
        asked, request = permission_payloads(
            run_id=self.run_id, harness=self.harness, workspace=self.workspace,
            call_id=d.get("tool_call_id", ""), tool_kind=tool_kind, title=title,
            locations=locations, command=command, options=opts)
        harness, workspace, actor = self.harness, self.workspace, self.actor

        def ask(tx: WriteTx) -> dict[str, Any] | None:
            rule = tx.one("SELECT * FROM acp_rules WHERE workspace=? AND harness=? AND"
                          " tool_kind=? AND active=1", (workspace, harness, tool_kind))
            tx.emit(NewEvent(entity_id=approval_id, actor=actor, role="agent", payload=asked))
            tx.emit(NewEvent(entity_id=approval_id, actor=actor, role="agent",
                             payload=request))
            if rule is None:
                return None
            try:
                chosen = pick_option(opts, rule["decision"] == "allow", True)
            except Exception:
                return None  # the rule's side is not offered here: ask the operator
            by = f"rule:{rule['id']}"
            tx.emit(NewEvent(entity_id=approval_id, actor=by, role="system",
                             payload=ApprovalDecided(
                                 decision="approved" if rule["decision"] == "allow"
                                 else "rejected", reason=f"always ({rule['id']})")))
            tx.emit(NewEvent(entity_id=approval_id, actor=by, role="system",
                             payload=aev.AcpPermissionAnswered(
                                 outcome="selected", option_id=chosen["option_id"],
                                 option_kind=chosen["kind"], source="rule",
                                 rule_id=rule["id"])))
            return chosen

        chosen = await self.store.execute(ask)
        if chosen is not None:
            return RequestPermissionResponse(outcome=AllowedOutcome(
                option_id=chosen["option_id"], outcome="selected"))
        self.pending_permissions.add(approval_id)
        try:
            return await self._wait_answer(approval_id)
        finally:
            self.pending_permissions.discard(approval_id)

    async def _wait_answer(self, approval_id: str) -> RequestPermissionResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.permission_timeout_s
        while True:
            seq = await self.store.last_seq()
            row = await self.store.fetchone(
                "SELECT status, outcome, option_id FROM acp_permissions WHERE approval_id=?",
                (approval_id,))
            if row is not None and row["status"] != "pending":
                if row["outcome"] == "selected" and row["option_id"]:
                    return RequestPermissionResponse(outcome=AllowedOutcome(
                        option_id=row["option_id"], outcome="selected"))
                return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
            source = "cancel" if self.cancelled.is_set() else \
                "timeout" if loop.time() >= deadline else ""
            if source:
                await self.store.execute(functools.partial(
                    answer_cancelled, approval_id=approval_id, source=source, actor=self.actor))
                continue  # read what stands (an answer may have come first)
            wait = min(deadline - loop.time(), 1.0)
            await unless_set(self.cancelled, self.store.wait_for_change(seq, max(wait, 0.0)))

    # ------------------------------------------------------------------ files

    def _path(self, path: str) -> Path:
        try:
            return confine(self.workspace, path)
        except OutsideWorkspace as exc:
            raise RequestError(-32602, str(exc), {"path": path,
                                                  "workspace": self.workspace}) from None

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> ReadTextFileResponse:
        p = self._path(path)
        try:
            text = await asyncio.to_thread(p.read_text, encoding="utf-8")
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(p)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise RequestError(-32603, f"cannot read {path!r}: {exc}") from None
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            end = start + limit if limit is not None else len(lines)
            text = "".join(lines[start:end])
        return ReadTextFileResponse(content=text)

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> WriteTextFileResponse | None:
        p = self._path(path)
        data = content.encode("utf-8")
        self._writes += 1
        key = f"{self.run_id}:w{self._writes}"
        digest = hashlib.sha256(data).hexdigest()
        await self._emit(aev.AcpWriteIntended(idem_key=key, path=str(p), sha256=digest,
                                              size=len(data)))
        try:
            await asyncio.to_thread(atomic_write, p, data)
        except OSError as exc:
            raise RequestError(-32603, f"cannot write {path!r}: {exc}") from None
        await self._emit(aev.AcpWriteDone(idem_key=key))
        return WriteTextFileResponse()

    # ------------------------------------------------------------------ terminals

    async def create_terminal(self, session_id: str, command: str,
                              args: list[str] | None = None,
                              env: list[EnvVariable] | None = None, cwd: str | None = None,
                              output_byte_limit: int | None = None, **kwargs: Any
                              ) -> CreateTerminalResponse:
        where = self._path(cwd) if cwd else Path(self.workspace)
        child_env = {**self.child_env, **{e.name: e.value for e in env or []}}
        try:
            proc = await asyncio.create_subprocess_exec(
                command, *(args or []), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env=child_env, cwd=str(where), start_new_session=True,
                preexec_fn=death_guard())
        except (FileNotFoundError, PermissionError) as exc:
            raise RequestError(-32603, f"cannot run {command!r}: {exc}") from None
        term = _Terminal(proc=proc, limit=output_byte_limit or 1_000_000)
        term.reader = asyncio.create_task(self._read_terminal(term))
        tid = f"term-{uuid.uuid4().hex[:8]}"
        self._terminals[tid] = term
        return CreateTerminalResponse(terminal_id=tid)

    async def _read_terminal(self, term: _Terminal) -> None:
        assert term.proc.stdout is not None
        while chunk := await term.proc.stdout.read(65536):
            term.output.extend(chunk)
            if len(term.output) > term.limit:
                del term.output[: len(term.output) - term.limit]
                term.truncated = True
        await term.proc.wait()

    def _terminal(self, terminal_id: str) -> _Terminal:
        term = self._terminals.get(terminal_id)
        if term is None:
            raise RequestError(-32602, f"terminal {terminal_id!r}: no such terminal")
        return term

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any
                              ) -> TerminalOutputResponse:
        term = self._terminal(terminal_id)
        return TerminalOutputResponse(output=term.output.decode("utf-8", "replace"),
                                      truncated=term.truncated, exit_status=term.status())

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any
                                     ) -> WaitForTerminalExitResponse:
        term = self._terminal(terminal_id)
        if term.reader is not None:
            await asyncio.shield(term.reader)
        st = term.status()
        return WaitForTerminalExitResponse(exit_code=st.exit_code if st else None,
                                           signal=st.signal if st else None)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any
                            ) -> KillTerminalResponse | None:
        _kill_group(self._terminal(terminal_id).proc.pid)
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any
                               ) -> ReleaseTerminalResponse | None:
        term = self._terminals.pop(terminal_id, None)
        if term is not None:
            _kill_group(term.proc.pid)
        return ReleaseTerminalResponse()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        raise RequestError.method_not_found("elicitation/create")  # not offered

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        return None

    def on_connect(self, conn: Any) -> None:
        return None

    async def aclose(self) -> None:
        """The turn is over: pending requests answer `cancelled`, text is committed,
        terminals are killed."""
        self.cancelled.set()
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        await self.flush()
        for tid in list(self._terminals):
            term = self._terminals.pop(tid)
            _kill_group(term.proc.pid)
            if term.reader is not None:
                term.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await term.reader
            with contextlib.suppress(Exception):
                await term.proc.wait()


def permission_payloads(*, run_id: str, harness: str, workspace: str, call_id: str,
                        tool_kind: str, title: str, locations: list[str], command: str,
                        options: list[dict[str, str]]
                        ) -> tuple[ApprovalRequested, aev.AcpPermissionRequested]:
    """A permission request as the approvals list shows it (title, prompt, the tool call,
    its files or command, the harness's options) and its ACP details."""
    what = command or ", ".join(locations) or title
    asked = ApprovalRequested(
        kind=aev.PERMISSION_KIND, subject=run_id,
        title=f"{harness}: {tool_kind} {_clip(what, 80)}",
        prompt=f"{harness} asks to {tool_kind}: {title}",
        context={"harness": harness, "workspace": workspace, "tool_kind": tool_kind,
                 "title": title, "locations": locations, "command": command,
                 "options": options, "run_id": run_id},
        preview="\n".join([f"{tool_kind}: {title}", *locations,
                           *([f"$ {command}"] if command else []),
                           "options: " + ", ".join(f"{o['name']} [{o['kind']}]"
                                                   for o in options)]))
    request = aev.AcpPermissionRequested(
        run_id=run_id, harness=harness, workspace=workspace, call_id=call_id,
        tool_kind=tool_kind, title=title, locations=locations, command=command,
        options=options)
    return asked, request


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace the file whole (core/files.py: a crash leaves old or new)."""
    files.write_bytes(path, data)


def digest_of(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""


__all__ = ["BridgeClient", "atomic_write", "content_items", "digest_of",
           "permission_payloads"]
