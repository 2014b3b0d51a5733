"""Provider-safe tool names.

Tools are named `<server>.<tool>` (`time.get_current_time`), but OpenAI's and Anthropic's
APIs accept only `^[a-zA-Z0-9_-]{1,64}$` as a function/tool name. A provider that talks to
such an API maps the names of one request with `wire_names` and maps the model's tool calls
back with the inverse; the registry, allow-lists, events and pins keep the real names.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable

WIRE_OK = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX = 64


def _base(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_-]", "_", name.replace(".", "__", 1)) or "tool"
    if len(s) > MAX:
        s = s[: MAX - 9] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return s


def wire_names(names: Iterable[str]) -> dict[str, str]:
    """real name -> a provider-safe name, unique within `names` and the same for the same
    set. Names that are already safe are kept as they are."""
    return dict(_wire_names(tuple(sorted(set(names)))))


@functools.lru_cache(maxsize=256)
def _wire_names(real: tuple[str, ...]) -> dict[str, str]:
    """The mapping of one sorted set of names, computed once: every turn of an agent maps
    the same set (the caller gets a copy)."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for n in real:  # safe names first keep themselves
        if WIRE_OK.match(n):
            out[n] = n
            taken.add(n)
    for n in real:
        if n in out:
            continue
        cand = _base(n)
        if cand in taken:
            h = hashlib.sha256(n.encode()).hexdigest()
            cand = (cand[: MAX - 9] + "_" + h[:8])
            i = 8
            while cand in taken:  # pragma: no cover - needs a sha256 prefix collision
                i += 1
                cand = cand[: MAX - i - 1] + "_" + h[:i]
        out[n] = cand
        taken.add(cand)
    return out


def unwire(mapping: dict[str, str]) -> dict[str, str]:
    """The inverse of `wire_names`: provider-safe name -> real name."""
    return {w: r for r, w in mapping.items()}
