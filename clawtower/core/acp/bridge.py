"""One prompt turn of one harness, start to finish: spawn -> `initialize` -> `session/new`
-> `session/prompt` -> stop, with every fault turned into a reason on the run.

The harness runs in a process group of its own whose leader dies with us (the workflow
steps' death guard, core.workflows.shell); the whole group is killed when the turn ends
(some harnesses leave children behind: codex-acp's native binary under the npm shim). A
`kill -9` of clawtower leaves at most the leader's orphans: `recover()` kills what is left
of groups whose driver is gone and settles their runs and half-done writes.

Faults: a command that does not exist, `initialize`/`session/new` unanswered within
`init_timeout_s` (a hung harness, or one printing garbage on stdout), the harness exiting
or closing stdout (its stderr tail is the reason), a JSON-RPC error (`-32000
Authentication required` named as such), `turn_timeout_s`. Cancellation (local, or
`acp.cancel_requested` from any process) sends `session/cancel`, answers pending
permission requests `cancelled`, and gives the harness a grace period to stop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from acp import PROTOCOL_VERSION, Client, RequestError, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from .. import liveness
from ..aio import unless_set
from ..errors import ValidationError
from ..events import NewEvent
from ..store.interface import Store, WriteTx
from ..workflows.shell import death_guard
from . import events as aev
from .client import BridgeClient, TextSink, digest_of
from .config import HarnessConfig
from .permissions import answer_cancelled

T = TypeVar("T")
CANCEL_GRACE_S = 10.0
# the most a turn's clean-up (the client's flush and terminals; the cancelled run's last
# event) may take once the turn ended or was cancelled
CLEANUP_S = 10.0
AUTH_REQUIRED = -32000
STREAM_LIMIT = 16 * 1024 * 1024  # one JSON-RPC line (a big file's content) may be large


class HarnessFault(Exception):
    """Why a turn could not complete (the reason shown on the run and the session)."""

    def __init__(self, reason: str, stop_reason: str = "error") -> None:
        super().__init__(reason)
        self.stop_reason = stop_reason


@dataclass
class RunOutcome:
    run_id: str
    status: str  # done | failed | cancelled
    stop_reason: str
    text: str
    error: str = ""
    protocol_version: int | None = None
    agent_info: dict[str, Any] = field(default_factory=dict)
    permissions: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "done"


def new_run_id() -> str:
    return f"acp-{uuid.uuid4().hex[:12]}"


def describe(exc: BaseException) -> str:
    if isinstance(exc, RequestError):
        data = f" ({exc.data})" if exc.data else ""
        if exc.code == AUTH_REQUIRED:
            return f"authentication required (-32000): {exc}{data}"
        return f"harness error {exc.code}: {exc}{data}"
    return f"{type(exc).__name__}: {exc}"


class HarnessIO:
    """What a harness process tells us besides JSON-RPC: its stderr tail (for reasons),
    and how an awaited answer ends (answer, exit, timeout)."""

    def __init__(self) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=20)

    def tail(self) -> str:
        tail = " | ".join(line for line in self.lines if line.strip())
        return tail[-600:]

    async def drain(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        while line := await proc.stderr.readline():
            self.lines.append(line.decode("utf-8", "replace").rstrip())

    async def guard(self, step: str, aw: Awaitable[T], exited: asyncio.Task[int],
                     timeout_s: float | None) -> T:
        """`aw`, unless the harness exits first, `timeout_s` passes, or (for the prompt) the
        turn is cancelled: then a HarnessFault saying which."""
        task = asyncio.ensure_future(aw)
        try:
            async with asyncio.timeout(timeout_s):
                done, _ = await asyncio.wait({task, exited},
                                             return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise HarnessFault(f"{step}: no answer within {timeout_s:g}s (the harness hangs,"
                               " or its stdout is not ACP JSON-RPC)"
                               + (f"; stderr: {self.tail()}" if self.lines
                                  else ""), "timeout") from None
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task in done:
            try:
                return task.result()
            except ConnectionError:
                pass  # the stream closed: report how the process ended, below
            except RequestError as exc:
                raise HarnessFault(f"{step}: {describe(exc)}") from None
        await _within(asyncio.shield(exited), 2.0)
        code = exited.result() if exited.done() else None
        how = (f"exited with code {code}" if code is not None and code >= 0 else
               f"was killed by signal {-code}" if code is not None else "closed its stdout")
        raise HarnessFault(f"{step}: the harness {how}"
                           + (f"; stderr: {self.tail()}" if self.lines else ""))



class AcpTurn:
    """Run one prompt. `cancel()` (any task of this loop) or an `acp.cancel_requested`
    event (any process) ends it with `cancelled`."""

    def __init__(self, store: Store, harness: HarnessConfig, prompt: str, *,
                 workspace: str | None = None, subject: str = "", actor: str = "",
                 on_text: TextSink | None = None, run_id: str | None = None) -> None:
        self.store = store
        self.harness = harness
        self.prompt = prompt
        self.workspace = harness.workspace(workspace)
        self.subject = subject
        self.actor = actor or f"acp:{harness.name}"
        self.on_text = on_text
        self.run_id = run_id or new_run_id()
        self.proc: asyncio.subprocess.Process | None = None
        self.cancel_reason = ""
        self._cancel = asyncio.Event()
        self.io = HarnessIO()
        self.auth_methods: list[str] = []  # what `initialize` offered, for auth errors

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._cancel.is_set():
            self.cancel_reason = reason
            self._cancel.set()

    async def _emit(self, *payloads: Any) -> None:
        await self.store.append([NewEvent(entity_id=self.run_id, actor=self.actor,
                                          role="agent", payload=p) for p in payloads])

    async def _watch_cancel(self) -> None:
        """Wait for a cancel from this process or an `acp.cancel_requested` from any."""
        while not self._cancel.is_set():
            seq = await self.store.last_seq()
            row = await self.store.fetchone(
                "SELECT cancel_requested FROM acp_runs WHERE id=?", (self.run_id,))
            if row is not None and row["cancel_requested"]:
                self.cancel("cancelled by the operator")
                return
            await unless_set(self._cancel, self.store.wait_for_change(seq, 5.0))

    async def run(self) -> RunOutcome:
        h = self.harness
        argv = h.argv()
        await self._emit(aev.AcpRunStarted(harness=h.name, workspace=self.workspace,
                                           prompt=self.prompt, subject=self.subject,
                                           command=argv, driver=liveness.process_tag()))
        client: BridgeClient | None = None
        outcome: RunOutcome
        try:
            if h.openclaw is not None and (why := h.openclaw.preflight(h.name)):
                raise HarnessFault(why)
            env = h.child_env()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, env=env, cwd=self.workspace,
                    start_new_session=True, preexec_fn=death_guard(), limit=STREAM_LIMIT)
            except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
                raise HarnessFault(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
            self.proc = proc
            await self.store.execute(lambda tx: _set_group(tx, self.run_id, proc.pid))
            client = BridgeClient(self.store, run_id=self.run_id, harness=h.name,
                                  workspace=self.workspace, actor=self.actor,
                                  permission_timeout_s=h.permission_timeout_s,
                                  on_text=self.on_text, child_env=env)
            outcome = await self._converse(proc, client)
        except HarnessFault as fault:
            reason = str(fault)
            if h.openclaw is not None and not reason.startswith("acp agent "):
                reason = h.openclaw.explain(h.name, reason)
            if f"({AUTH_REQUIRED})" in reason and self.auth_methods:
                reason += ("; the harness's auth methods: " + ", ".join(self.auth_methods)
                           + " (set its credentials with `env_from:`)")
            outcome = RunOutcome(self.run_id, "failed", fault.stop_reason,
                                 "".join(client.text) if client else "", reason)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                if self.proc is not None:  # the harness first: nothing below may spare it
                    _kill_group(self.proc.pid)
                await self._stop(client)
                await _within(self._emit(aev.AcpRunFinished(
                    status="cancelled", stop_reason="cancelled",
                    error="the driver was cancelled")), CLEANUP_S)
            raise
        await self._stop(client)
        if client is not None:
            outcome.permissions = client.permissions_asked
        await self._emit(aev.AcpRunFinished(status=outcome.status,
                                            stop_reason=outcome.stop_reason,
                                            text=outcome.text[:2000], error=outcome.error))
        return outcome

    async def _converse(self, proc: asyncio.subprocess.Process, client: BridgeClient
                        ) -> RunOutcome:
        h = self.harness
        assert proc.stdin is not None and proc.stdout is not None
        stderr = asyncio.create_task(self.io.drain(proc))
        exited = asyncio.create_task(proc.wait())
        conn = ClientSideConnection(client, proc.stdin, proc.stdout)
        watcher = asyncio.create_task(self._watch_cancel())
        turn: asyncio.Future[Any] | None = None
        try:
            init = await self.io.guard("initialize", conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=True),
                client_info=Implementation(name="clawtower", title="clawtower",
                                           version="0")), exited, h.init_timeout_s)
            if init.protocol_version != PROTOCOL_VERSION:
                raise HarnessFault(f"initialize: the harness speaks ACP protocol version"
                                   f" {init.protocol_version}; clawtower speaks"
                                   f" {PROTOCOL_VERSION}")
            self.auth_methods = [m.id for m in init.auth_methods or []]
            info = init.agent_info.model_dump(mode="json", exclude_none=True) \
                if init.agent_info is not None else {}
            caps = init.agent_capabilities.model_dump(mode="json", exclude_none=True) \
                if init.agent_capabilities is not None else {}
            session = await self.io.guard("session/new", conn.new_session(
                cwd=self.workspace, mcp_servers=[]), exited, h.init_timeout_s)
            await self._emit(aev.AcpRunInitialized(
                protocol_version=init.protocol_version, agent_info=info, capabilities=caps,
                acp_session_id=session.session_id))
            prompt = asyncio.ensure_future(conn.prompt(session_id=session.session_id,
                                                       prompt=[text_block(self.prompt)]))
            turn = asyncio.ensure_future(self.io.guard("session/prompt", prompt, exited,
                                                     h.turn_timeout_s))
            await asyncio.wait({turn, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not turn.done():  # cancelled: tell the harness, answer what waits, grace
                client.cancelled.set()
                with contextlib.suppress(Exception):
                    await conn.cancel(session_id=session.session_id)
                with contextlib.suppress(Exception):
                    await self.store.execute(lambda tx: _cancel_pending(
                        tx, list(client.pending_permissions), self.actor))
                try:
                    async with asyncio.timeout(CANCEL_GRACE_S):
                        await asyncio.wait({turn})
                except TimeoutError:
                    turn.cancel()
                    with contextlib.suppress(BaseException):
                        await turn
                    await client.aclose()
                    return RunOutcome(self.run_id, "cancelled", "cancelled",
                                      "".join(client.text),
                                      f"{self.cancel_reason}; the harness did not stop within"
                                      f" {CANCEL_GRACE_S:g}s (killed)", init.protocol_version,
                                      info)
            result = turn.result()
            await client.aclose()
            stop = str(result.stop_reason)
            text = "".join(client.text)
            if stop == "cancelled" or self._cancel.is_set():
                # we asked: the turn is cancelled whatever the harness says it stopped with
                why = self.cancel_reason or "cancelled by the harness"
                if stop != "cancelled":
                    why += f" (the harness answered stopReason {stop!r})"
                return RunOutcome(self.run_id, "cancelled", "cancelled", text, why,
                                  init.protocol_version, info)
            if stop == "refusal":
                return RunOutcome(self.run_id, "failed", stop, text, "the harness refused",
                                  init.protocol_version, info)
            if h.openclaw is not None and not text.strip() and not client.tools:
                return RunOutcome(self.run_id, "failed", stop, text,
                                  h.openclaw.silent_turn(h.name), init.protocol_version, info)
            return RunOutcome(self.run_id, "done", stop, text, "", init.protocol_version,
                              info)
        finally:
            for f in (watcher, turn):
                if f is not None and not f.done():
                    f.cancel()
                    with contextlib.suppress(BaseException):
                        await f
            # bounded: a clean-up that hangs must not spare the harness below, nor keep a
            # cancelled turn waiting for ever (the body's own `aclose` reports its errors)
            await _within(client.aclose(), CLEANUP_S)
            await _within(conn.close(), CLEANUP_S)
            # the whole group, even when the leader has exited: a child it started (tsx's
            # node) can outlive it (the group was seen alive right after a turn, under load)
            _kill_group(proc.pid)
            await _within(asyncio.shield(exited), 5.0)
            await _group_gone(proc.pid, 5.0)
            stderr.cancel()
            with contextlib.suppress(BaseException):
                await stderr

    async def _stop(self, client: BridgeClient | None) -> None:
        """Kill the harness's whole group (children that outlive the leader too). The
        client's clean-up (its text flushed to the store, its terminals reaped) is bounded:
        one that hangs must not keep the turn, and whoever stops it, waiting for ever."""
        if client is not None:
            await _within(client.aclose(), CLEANUP_S)
        if self.proc is not None:
            _kill_group(self.proc.pid)
            await _within(self.proc.wait(), 5.0)


async def _within(aw: Awaitable[Any], timeout_s: float) -> None:
    """Wait up to `timeout_s` for `aw`; its outcome does not matter here."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout_s):
            await aw


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _group_gone(pgid: int, timeout_s: float) -> None:
    """Wait (up to `timeout_s`) until no process of the group is left: a SIGKILL lands when
    the member next runs, not at once, so a turn that returns does not leave it behind."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while await asyncio.to_thread(liveness._group_members, pgid):
        if loop.time() > deadline:
            return
        _kill_group(pgid)
        await asyncio.sleep(0.01)


def _set_group(tx: WriteTx, run_id: str, pid: int) -> None:
    tx.emit(NewEvent(entity_id=run_id, actor="clawtower", role="system",
                     payload=aev.AcpRunGroup(group=liveness.process_tag(pid))))


def _cancel_pending(tx: WriteTx, approvals: list[str], actor: str) -> None:
    for a in approvals:
        answer_cancelled(tx, a, "cancel", actor)


async def probe(harness: HarnessConfig, timeout_s: float | None = None) -> dict[str, Any]:
    """Start the harness, ask `initialize`, stop it: reachable or not (with the reason),
    its protocol version, name and capabilities. No session, nothing recorded."""
    out: dict[str, Any] = {"name": harness.name, "command": harness.argv(),
                           "reachable": False, "protocol_version": None, "agent": {},
                           "error": ""}
    try:
        proc = await asyncio.create_subprocess_exec(
            *harness.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=harness.child_env(),
            cwd=harness.workspace(), start_new_session=True, preexec_fn=death_guard(),
            limit=STREAM_LIMIT)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        out["error"] = f"cannot start {harness.argv()[0]!r}: {exc.strerror or exc}"
        return out
    except ValidationError as exc:
        out["error"] = str(exc)
        return out
    io = HarnessIO()
    assert proc.stdin is not None and proc.stdout is not None
    stderr = asyncio.create_task(io.drain(proc))
    exited = asyncio.create_task(proc.wait())
    conn = ClientSideConnection(cast(Client, _ProbeClient()), proc.stdin, proc.stdout)
    try:
        init = await io.guard("initialize", conn.initialize(
            protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="clawtower", version="0")), exited,
            timeout_s or harness.init_timeout_s)
        out["reachable"] = True
        out["protocol_version"] = init.protocol_version
        if init.agent_info is not None:
            out["agent"] = init.agent_info.model_dump(mode="json", exclude_none=True)
        out["auth_methods"] = [m.id for m in init.auth_methods or []]
    except HarnessFault as fault:
        out["error"] = harness.openclaw.explain(harness.name, str(fault)) \
            if harness.openclaw is not None else str(fault)
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
        _kill_group(proc.pid)
        await _within(asyncio.shield(exited), 5.0)
        stderr.cancel()
        with contextlib.suppress(BaseException):
            await stderr
    return out


class _ProbeClient:
    """A client that is asked nothing (no session is opened by a probe)."""

    def on_connect(self, conn: Any) -> None:
        return None


async def run_prompt(store: Store, harness: HarnessConfig, prompt: str, **kw: Any
                     ) -> RunOutcome:
    return await AcpTurn(store, harness, prompt, **kw).run()


def request_cancel(tx: WriteTx, run_id: str, by: str) -> dict[str, Any]:
    """`session/cancel` from anywhere: the driving process sees the event and sends it."""
    from ..errors import NotFound

    row = tx.one("SELECT status FROM acp_runs WHERE id=?", (run_id,))
    if row is None:
        raise NotFound(f"acp run {run_id!r}: no such run")
    if row["status"] != "running":
        raise ValidationError(f"acp run {run_id!r}: is {row['status']}, not running")
    tx.emit(NewEvent(entity_id=run_id, actor=by, role="operator",
                     payload=aev.AcpCancelRequested(by=by)))
    return {"run": run_id, "cancel_requested_by": by}


def _recover(tx: WriteTx, ended: dict[str, bool], actor: str) -> list[dict[str, Any]]:
    out = []
    for w in tx.all("SELECT w.* FROM acp_writes w JOIN acp_runs r ON r.id = w.run_id"
                    " WHERE w.status='intended' AND r.status='running'"):
        if w["run_id"] not in ended:
            continue
        found = digest_of(w["path"]) == w["sha256"]
        tx.emit(NewEvent(entity_id=w["run_id"], actor=actor, role="system",
                         payload=aev.AcpWriteDone(
                             idem_key=w["idem_key"],
                             outcome="found_written" if found else "abandoned")))
    for run_id, gone in ended.items():
        row = tx.one("SELECT status FROM acp_runs WHERE id=?", (run_id,))
        if row is None or row["status"] != "running":
            continue
        for p in tx.all("SELECT approval_id FROM acp_permissions WHERE run_id=? AND"
                        " status='pending'", (run_id,)):
            answer_cancelled(tx, p["approval_id"], "gone", actor)
        tx.emit(NewEvent(entity_id=run_id, actor=actor, role="system",
                         payload=aev.AcpRunFinished(
                             status="failed", stop_reason="interrupted",
                             error="interrupted: the clawtower process driving it died"
                                   + ("" if gone else "; its harness group could not be"
                                      " killed"))))
        out.append({"run": run_id, "group_gone": gone})
    return out


async def recover(store: Store, actor: str = "recovery") -> list[dict[str, Any]]:
    """Runs left `running` by a driver that is gone (kill -9): kill what is left of their
    harness group, settle their half-done writes by digest (never written twice), answer
    their pending permission requests `cancelled`, and fail them as `interrupted`."""
    rows = await store.fetchall("SELECT id, grp, driver FROM acp_runs WHERE status='running'")
    ended: dict[str, bool] = {}
    for r in rows:
        if liveness.liveness(r["driver"]) != "gone":
            continue
        ended[r["id"]] = await asyncio.to_thread(liveness.end_group, r["grp"], 10.0) \
            if r["grp"] else True
    if not ended:
        return []
    return await store.execute(lambda tx: _recover(tx, ended, actor))


__all__ = ["AcpTurn", "HarnessFault", "RunOutcome", "describe", "probe", "recover",
           "request_cancel", "run_prompt"]
