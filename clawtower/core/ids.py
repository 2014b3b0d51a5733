"""Short random ids for the log's records (messages, turns, rules): one generator."""

from __future__ import annotations

import random


def new_id(prefix: str) -> str:
    """`prefix-` and 12 random hex digits (48 bits, as `uuid4().hex[:12]` gave). From the
    `random` module's generator (seeded from the OS at start-up and again in a forked child),
    not `os.urandom`: an id is no secret, and `os.urandom` lets go of the GIL for its system
    call, so each of the seven ids a subagent child takes on the store's writer thread handed
    the event loop the interpreter mid-command, and the writer waited to get it back
    (BENCHMARKS.md, issue 36: the 1,000-child fan-out 5-7% faster without it)."""
    return f"{prefix}-{random.getrandbits(48):012x}"
