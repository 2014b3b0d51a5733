"""A small expert package whose one process writes a CRM note behind a confirm gate, bound
to the sales MCP server: shared by the timeout tests and the console's experts mode."""

from __future__ import annotations

import sys
from pathlib import Path

from clawtower.core.experts import home
from clawtower.core.experts.bindings import write_binding

SERVER = Path(__file__).resolve().parent / "sales_mcp_server.py"
MANIFEST = """spec: "1.0"
name: gate-expert
version: "{version}"
description: Writes a CRM note after approval
requires:
  tools: [crm]
{policy}components:
  orchestrator: orchestrator.md
  persona: [persona/identity.md]
  functions: [functions/noop.md]
  processes: [processes/note.md]
  tools: [tools/crm.yaml]
"""
FILES = {
    "README.md": "# Gate\n", "orchestrator.md": "Write notes.\n",
    "persona/identity.md": "You write notes.\n",
    "functions/noop.md": "---\nname: noop\ndescription: Nothing\n---\nDo nothing.\n",
    "processes/note.md": "---\nname: note\ndescription: One note\ninputs:\n  - name: contact_id\n"
                         "    type: string\n  - name: body\n    type: string\ntools: [crm]\n"
                         "---\n- [ ] Write it with `crm.create_note`.\n",
    "tools/crm.yaml": "name: crm\ndescription: CRM\noperations:\n  - name: create_note\n"
                      "    description: A note\n    input:\n      type: object\n"
                      "      properties:\n        contact_id: {type: string}\n"
                      "        body: {type: string}\n",
}


def install_gate_expert(tmp_path: Path, *, version: str = "1.0.0", policy: str = "",
                        readme: bool = True) -> Path:
    """Write, install, bind and compile gate-expert under CLAWTOWER_HOME (the caller sets
    it); `policy` is a manifest block ending in a newline. Returns the MCP server's call log
    (it exists only once the server has been called)."""
    pkg = tmp_path / "gate"
    files = {k: v for k, v in FILES.items() if readme or k != "README.md"}
    manifest = MANIFEST.format(version=version, policy=policy)
    for rel, text in {**files, "expert.yaml": manifest}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    home.install(str(pkg))
    log = tmp_path / "calls.jsonl"
    write_binding("gate-expert", "crm", {"type": "mcp", "command": sys.executable,
                                         "args": [str(SERVER)],
                                         "env": {"SALES_MCP_CALLS": str(log)}})
    home.compile_all("gate-expert")
    return log
