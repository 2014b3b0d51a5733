"""Plain-text rendering for the CLI (the console has its own widgets), and the stream
every command's text output goes through (`SafeStream`)."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TextIO

from clawtower.core.textsafe import safe

if TYPE_CHECKING:
    from clawtower.core.events import StoredEvent


def ts(value: float | None) -> str:
    if value is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


class SafeStream:
    """A text stream that shows untrusted text instead of letting the terminal obey it:
    every write passes through `core.textsafe.safe` (character by character, so an escape
    sequence split across writes is no more harmful than a whole one). Everything else is
    the wrapped stream's."""

    def __init__(self, raw: TextIO) -> None:
        self._raw = raw

    def write(self, text: str) -> int:
        return self._raw.write(safe(text))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@contextlib.contextmanager
def safe_output(json_mode: bool) -> Iterator[None]:
    """While a command runs, its stdout and stderr are SafeStreams, unless it prints JSON
    (`--json`): JSON escapes control characters itself and must stay lossless."""
    if json_mode:
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        for i, cell in enumerate(r):
            widths[i] = max(widths[i], len(cell))
    widths[-1] = min(widths[-1], 80)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for r in rows:
        cells = [c if i < len(r) - 1 else c[:80] for i, c in enumerate(r)]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    return "\n".join(lines)


def event_line(e: StoredEvent) -> str:
    from clawtower.core.describe import event_summary

    return (f"{e.seq:>6}  {ts(e.ts)}  {e.type:<20} {e.entity_id:<10} "
            f"{e.actor}({e.role})  {event_summary(e, arrow='->')}").rstrip()


def task_detail(t: dict[str, Any]) -> str:
    from clawtower.core.describe import verdict_label
    spec = t["spec"]
    out = [f"{t['id']}  {t['title']}",
           f"phase: {t['phase']}   attempts: {t['attempts']}   spec ok: {bool(t['spec_ok'])}"]
    if t["phase_reason"]:
        out.append(f"reason: {t['phase_reason']}")
    out.append(f"goal: {spec.get('goal', '')}")
    if spec.get("acceptance_criteria"):
        out.append("acceptance criteria:")
        out += [f"  - {c}" for c in spec["acceptance_criteria"]]
    if t["circuit"]:
        c = t["circuit"]
        out += ["circuit open:", f"  failure: {c['failure_summary']}",
                f"  attempts: {c['attempts']}",
                f"  last good artifact: {c['last_good_artifact'] or '(none)'}",
                "  unblock options:"] + [f"    - {o}" for o in c["unblock_options"]]
        if t["phase"] == "circuit_open":
            out.append(f"  act: clawtower task unblock {t['id']} retry|revise|abandon"
                       " [--reason TEXT]")
    out.append("history:")
    for h in t["history"]:
        out.append(f"  {h['seq']:>5} {ts(h['at'])} {h['from_phase']} -> {h['to_phase']}"
                   f"  [{h['actor']}] {h['reason']}")
    if t["reviews"]:
        out.append("reviews:")
        for r in t["reviews"]:
            out.append(f"  {r['seq']:>5} {r['stage']} attempt {r['attempt']}:"
                       f" {verdict_label(r['verdict'])}"
                       f" by {r['reviewer']}")
            for f in r["findings"]:
                ref = f"{f['ref']}: " if f.get("ref") else ""
                out.append(f"          - {ref}{f.get('text', '')}")
            d = r.get("details") or {}
            if d.get("risk"):
                out.append(f"          risk {d['risk']}; maintainability: "
                           f"{d.get('maintainability', '')}; test gaps: "
                           f"{', '.join(d.get('test_gaps', [])) or 'none'}")
    if t["attempt_records"]:
        out.append("attempts:")
        for a in t["attempt_records"]:
            out.append(f"  #{a['n']} {a['status']} on {a['model']}"
                       + (" (escalated)" if a["escalated"] else "")
                       + f", {a['heartbeats']} heartbeat(s)"
                       + (f": {a['reason']}" if a["reason"] else ""))
    if t["artifacts"]:
        out.append("artifacts:")
        out += [f"  attempt {a['attempt']}: {a['name']}  {a['uri']}" for a in t["artifacts"]]
    if t["side_effects"]:
        out.append("side effects:")
        out += [f"  {e['effect_id']} {e['kind']} [{e['status']}] {e['description']}"
                for e in t["side_effects"]]
    if t["approvals"]:
        out.append("approvals:")
        for a in t["approvals"]:
            by = f" by {a['decided_by']}" if a["decided_by"] else ""
            out.append(f"  {a['id']} {a['status']}{by}  {a['title']}")
    if t["usage"]:
        out.append("tokens:")
        out += [f"  {u['agent']} ({u['model']}): {u['calls']} call(s), {u['prompt_tokens']} in,"
                f" {u['completion_tokens']} out" for u in t["usage"]]
    if t["refusals"]:
        out.append("refused writes:")
        out += [f"  {r['seq']:>5} {r['actor']}({r['role']}) {r['action']}: {r['reason']}"
                for r in t["refusals"]]
    return "\n".join(out)
