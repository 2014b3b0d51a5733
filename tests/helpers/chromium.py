"""Where Debian's Chromium is (scripts/install-peers.sh chromium) and how everything here
starts it through Playwright: the web console's tests, its benchmark, the Phoenix picture."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("CLAWTOWER_CHROMIUM", "/usr/bin/chromium")
# headless on a closed network: no sandbox (root), no GPU, none of its background traffic
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
