"""A small expert package with webhook, cron and channel triggers whose one process needs no
tools (its one step is an llm-task the simulator answers): shared by the trigger tests and
the trigger benchmark."""

from __future__ import annotations

from pathlib import Path

from clawtower.core.experts import home

TOKEN = "test-token-0123456789abcdef"
SECRET = "test-secret-0123456789abcdef"

MANIFEST = """spec: "1.0"
name: hook-expert
version: "1.0.0"
description: Notes events per contact
concurrency:
  default: serial_per_key
  key: contact_id
{extra}components:
  orchestrator: orchestrator.md
  persona: [persona/identity.md]
  functions: [functions/noop.md]
  processes: [processes/note.md]
triggers:
{triggers}"""

TRIGGERS = """  - name: inbound
    type: webhook
    dedupe_key: event_id
    payload_mapping:
      contact_id: contact_id
    process: note
  - name: mail
    type: webhook
    preset: gmail
    dedupe_key: message_id
    concurrency: serial_per_key
    concurrency_key: contact_id
    payload_mapping:
      contact_id: contact_id
    process: note
  - name: tick
    type: cron
    expr: "{cron}"
    tz: Europe/Berlin
    concurrency: serial
    process: note
  - name: chat
    type: channel
    channel: cli
    match: "(?i)urgent"
    concurrency: serial_per_key
    concurrency_key: sender_id
    payload_mapping:
      contact_id: sender_id
    process: note
"""

FILES = {
    "README.md": "# Hook\n", "orchestrator.md": "Note events.\n",
    "persona/identity.md": "You note events.\n",
    "functions/noop.md": "---\nname: noop\ndescription: Nothing\n---\nDo nothing.\n",
    "processes/note.md": "---\nname: note\ndescription: One note\ntrigger: inbound\ninputs:\n"
                         "  - name: contact_id\n    type: string\n{proc_extra}---\n"
                         "- [ ] Summarise the event for the contact.\n",
}


def write_hook_expert(root: Path, *, extra: str = "", cron: str = "0 8 * * 1-5",
                      triggers: str | None = None, proc_extra: str = "") -> Path:
    pkg = root / "hook-expert-src"
    manifest = MANIFEST.format(extra=extra, triggers=(triggers or TRIGGERS).format(cron=cron))
    files = {**FILES, "expert.yaml": manifest}
    files["processes/note.md"] = files["processes/note.md"].format(proc_extra=proc_extra)
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def install_hook_expert(root: Path, **kw: str) -> str:
    """Write and install hook-expert under CLAWTOWER_HOME (the caller sets it), with a
    bearer token and an HMAC secret for its webhook triggers."""
    from clawtower.core.triggers import hookauth

    pkg = home.install(str(write_hook_expert(root, **kw)))
    assert not pkg.errors, pkg.errors
    for t in ("inbound", "mail"):
        hookauth.write("hook-expert", t, token=TOKEN, secret=SECRET)
    return pkg.name
