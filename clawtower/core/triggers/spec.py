"""A trigger's effective settings: the manifest trigger, the package defaults it inherits
(concurrency, execution, delivery) and the process's own overrides (execution, delivery).

Also dot-notation payload paths (`messages[0].id`), which payload_mapping, dedupe_key and
concurrency_key use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..experts.checks import duration_problem, duration_seconds
from ..experts.package import Package

PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
MISSING = object()
DEFAULT_DEDUPE_WINDOW_S = 24 * 3600.0  # the spec leaves the window to the framework


def resolve(payload: Any, path: str) -> Any:
    """The value at `path` (`a.b[0].c`) in `payload`, or MISSING."""
    cur = payload
    for m in PATH_PART.finditer(path):
        if m.group(1) is not None:
            if not isinstance(cur, dict) or m.group(1) not in cur:
                return MISSING
            cur = cur[m.group(1)]
        else:
            i = int(m.group(2))
            if not isinstance(cur, list) or i >= len(cur):
                return MISSING
            cur = cur[i]
    return cur


def key_text(value: Any) -> str | None:
    """A scalar payload value as a queue/dedupe key; None for missing or structured values."""
    if value is MISSING or value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return text if text and len(text) <= 512 else None


def _pick(value: Any, allowed: tuple[str, ...], default: str) -> str:
    return value if isinstance(value, str) and value in allowed else default


def _seconds(value: Any, default: float | None) -> float | None:
    return duration_seconds(value) if isinstance(value, str) and not duration_problem(
        value) else default


@dataclass(frozen=True)
class Execution:
    timeout_s: float | None = None
    max_attempts: int = 1
    backoff: str = "exponential"
    delay_s: float = 30.0
    idempotent: bool = False
    on_failure: str = "escalate"
    resume_from_execution_log: bool = False

    def delay_before(self, attempt: int) -> float:
        """The wait before attempt `attempt + 1` after attempt `attempt` failed."""
        if self.backoff == "fixed":
            return self.delay_s
        return float(self.delay_s * (2 ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Delivery:
    format: str = "both"
    channel: str = "main"
    sla_s: float | None = None
    sla: str = ""
    sla_breach: str = "warn"


@dataclass(frozen=True)
class TriggerSpec:
    expert: str
    name: str
    type: str
    process: str
    mode: str
    concurrency_key: str | None
    dedupe_key: str | None
    payload_mapping: dict[str, str]
    preset: str | None
    expr: str | None
    tz: str
    session: str
    execution: Execution
    delivery: Delivery
    requires_tool: str | None = None
    inactive: str = ""  # why the trigger cannot fire now (its requires_tool is not bound)
    channel: str | None = None  # channel triggers: the session channel to match (any if None)
    match: str | None = None  # channel triggers: a regular expression the text must match
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S
    raw: dict[str, Any] = field(default_factory=dict)


def _merged(pkg: Package, process: str, key: str) -> dict[str, Any]:
    base = pkg.section(key)
    proc = pkg.processes.get(process)
    over = proc.meta.get(key) if proc is not None else None
    out = dict(base)
    if isinstance(over, dict):
        for k, v in over.items():
            if k == "retry" and isinstance(v, dict) and isinstance(out.get("retry"), dict):
                out["retry"] = {**out["retry"], **v}
            else:
                out[k] = v
    return out


def execution_of(pkg: Package, process: str) -> Execution:
    ex = _merged(pkg, process, "execution")
    rt = ex.get("retry") if isinstance(ex.get("retry"), dict) else {}
    assert isinstance(rt, dict)
    attempts = rt.get("max_attempts", 1)
    return Execution(
        timeout_s=_seconds(ex.get("timeout"), None),
        max_attempts=attempts if isinstance(attempts, int) and attempts >= 1 else 1,
        backoff=_pick(rt.get("backoff"), ("fixed", "exponential"), "exponential"),
        delay_s=_seconds(rt.get("delay"), 30.0) or 30.0,
        idempotent=ex.get("idempotent") is True,
        on_failure=_pick(ex.get("on_failure"), ("escalate", "abandon", "dead_letter"),
                         "escalate"),
        resume_from_execution_log=ex.get("resume_from_execution_log") is True)


def delivery_of(pkg: Package, process: str) -> Delivery:
    dl = _merged(pkg, process, "delivery")
    sla = dl.get("sla") if isinstance(dl.get("sla"), str) else ""
    return Delivery(
        format=_pick(dl.get("format"), ("narrative", "structured", "both"), "both"),
        channel="main", sla=sla or "", sla_s=_seconds(sla, None) if sla else None,
        sla_breach=_pick(dl.get("sla_breach"), ("warn", "escalate"), "warn"))


def triggers_of(pkg: Package) -> list[TriggerSpec]:
    """Every well-formed trigger of a package that loaded without errors."""
    if pkg.errors:
        return []
    conc = pkg.section("concurrency")
    out = []
    for t in pkg.triggers():
        name, typ, proc = t.get("name"), t.get("type"), t.get("process")
        if not (isinstance(name, str) and isinstance(typ, str) and isinstance(proc, str)):
            continue
        mode = t.get("concurrency") or conc.get("default") or "parallel"
        key = t.get("concurrency_key") or conc.get("key")
        pm = t.get("payload_mapping") if isinstance(t.get("payload_mapping"), dict) else {}
        assert isinstance(pm, dict)
        window = t.get("dedupe_window")
        out.append(TriggerSpec(
            expert=pkg.name, name=name, type=typ, process=proc, mode=str(mode),
            concurrency_key=key if isinstance(key, str) and mode == "serial_per_key" else None,
            dedupe_key=t.get("dedupe_key") if isinstance(t.get("dedupe_key"), str) else None,
            payload_mapping={str(k): str(v) for k, v in pm.items()},
            preset=t.get("preset") if isinstance(t.get("preset"), str) else None,
            expr=t.get("expr") if isinstance(t.get("expr"), str) else None,
            tz=str(t["tz"]) if isinstance(t.get("tz"), str) else "UTC",
            session=_pick(t.get("session"), ("isolated", "main"), "isolated"),
            execution=execution_of(pkg, proc), delivery=delivery_of(pkg, proc),
            requires_tool=t.get("requires_tool") if isinstance(t.get("requires_tool"), str)
            else None,
            channel=t.get("channel") if isinstance(t.get("channel"), str) else None,
            match=t.get("match") if isinstance(t.get("match"), str) else None,
            dedupe_window_s=_seconds(window, DEFAULT_DEDUPE_WINDOW_S)
            or DEFAULT_DEDUPE_WINDOW_S,
            raw=dict(t)))
    return out
