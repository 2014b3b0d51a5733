"""Replica snapshot folders (core/store/replica.py) are pruned: a store's folder nobody
opened for PRUNE_AFTER_S and no process holds is removed when a slot is taken; a recent
one, or one whose slot lock a live process holds, is kept."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from clawtower.core.store.replica import PRUNE_AFTER_S, Slot, prune


def _folder(root: Path, name: str, age_s: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for f in ("store.txt", "slot-0.db", "slot-0.lock"):
        (d / f).write_text("x")
    old = time.time() - age_s
    for p in (*d.iterdir(), d):
        os.utime(p, (old, old))
    return d


def test_old_unheld_folders_go_recent_or_held_ones_stay(tmp_path: Path) -> None:
    old = _folder(tmp_path, "old", PRUNE_AFTER_S + 60)
    held = _folder(tmp_path, "held", PRUNE_AFTER_S + 60)
    recent = _folder(tmp_path, "recent", 60)
    fd = os.open(held / "slot-0.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a live process's slot
    try:
        assert prune(tmp_path) == [old]
    finally:
        os.close(fd)
    assert not old.exists() and held.is_dir() and recent.is_dir()
    assert prune(tmp_path) == [held]  # released: now it goes too


def test_taking_a_slot_prunes_the_others_and_keeps_its_own(tmp_path: Path) -> None:
    stale = _folder(tmp_path, "stale", PRUNE_AFTER_S + 60)
    slot = Slot.take(tmp_path, "postgresql://x/db", "store-1", "x/db")
    assert slot is not None
    try:
        assert not stale.exists() and slot.folder.is_dir()
        assert prune(tmp_path, now=time.time() + PRUNE_AFTER_S + 60) == []  # it is held
    finally:
        slot.close()
