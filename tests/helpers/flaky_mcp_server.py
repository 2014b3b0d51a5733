"""A wrapper around the sales MCP server (tests/helpers/sales_mcp_server.py) whose FIRST
start misbehaves, for the approval-gate tests (issue 34.1). A marker file tells the first
start from the later ones (every start of a server is a new process):

  FLAKY_MARKER  the marker file (required)
  FLAKY_MODE    fail-first (default): the first start exits 1 before it speaks MCP;
                slow-first: the first start's first tools/list answers only after
                FLAKY_DELAY seconds (default 5)

Everything else (SALES_MCP_CALLS, the server's own log of executed calls) passes through.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SALES = Path(__file__).resolve().parent / "sales_mcp_server.py"


def main() -> None:
    marker = Path(os.environ["FLAKY_MARKER"])
    first = not marker.exists()
    if first:
        marker.write_text("started\n")
    mode = os.environ.get("FLAKY_MODE", "fail-first")
    env = dict(os.environ)
    if first and mode == "fail-first":
        sys.stderr.write("flaky: the first start fails on purpose\n")
        sys.stderr.flush()
        sys.exit(1)
    if first and mode == "slow-first":
        env["SALES_MCP_LIST_DELAY"] = os.environ.get("FLAKY_DELAY", "5")
    os.execve(sys.executable, [sys.executable, str(SALES)], env)


if __name__ == "__main__":
    main()
