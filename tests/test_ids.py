"""Record ids (core/ids.py): their form, and no two processes forked from one repeat each
other's ids (the generator is reseeded in a forked child, as a worker pool forks)."""

from __future__ import annotations

import os
import re

from clawtower.core.ids import new_id


def test_an_id_is_its_prefix_and_twelve_hex_digits_and_ids_do_not_repeat() -> None:
    ids = [new_id("m") for _ in range(20_000)]
    assert all(re.fullmatch(r"m-[0-9a-f]{12}", i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    assert re.fullmatch(r"turn-[0-9a-f]{12}", new_id("turn"))


def test_a_forked_child_takes_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        try:
            os.write(write, " ".join(new_id("m") for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write)
    mine = [new_id("m") for _ in range(8)]
    with os.fdopen(read) as f:
        theirs = f.read().split()
    os.waitpid(pid, 0)
    assert len(theirs) == 8 and not set(theirs) & set(mine), (mine, theirs)
