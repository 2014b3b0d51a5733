"""The migration ledger's names and checks: what `store migrations` and `store verify` say
about the migrations a file recorded (table `schema_migrations`, schema migration v11)."""

from __future__ import annotations

from typing import Any

from .schema import (
    APPROVALS_PROBE_VERSION,
    EMBEDDINGS_VERSION,
    LEDGER_VERSION,
    MEMORY_VERSION,
    MIGRATIONS,
)

MIGRATION_NAMES = {1: "log and tasks", 2: "meetings", 3: "workflows", 4: "tool pins",
                   5: "turns", 6: "sessions", 7: "flows", 8: "triggers", 9: "acp",
                   LEDGER_VERSION: "migration ledger", 12: "webhook auth failures",
                   13: "flow executors", MEMORY_VERSION: "agent memory",
                   EMBEDDINGS_VERSION: "memory embeddings",
                   APPROVALS_PROBE_VERSION: "approvals probe index"}


def migration_name(version: int) -> str:
    return MIGRATION_NAMES.get(version, f"v{version}")


def ledger_problems(ledger: list[dict[str, Any]]) -> list[str]:
    """What the ledger shows went wrong: a migration this build knows that the file never
    recorded (merged below a version the file already had: its tables are missing), or one
    applied from a different script than this build's."""
    have = {int(r["version"]): r for r in ledger}
    top = max(have, default=0)
    out = []
    for v, script in MIGRATIONS:
        row = have.get(v)
        if row is None:
            if v < top:
                out.append(f"migration v{v} ({migration_name(v)}): not in the ledger; this"
                           f" store passed v{v} without applying it")
        elif row["checksum"] != migration_checksum(script):
            out.append(f"migration v{v} ({row['name']}): applied from another script"
                       f" (checksum {str(row['checksum'])[:12]}, this build's"
                       f" {migration_checksum(script)[:12]})")
    return out


def migration_checksum(script: str) -> str:
    """The sha256 of a migration's script (what the ledger records and compares)."""
    import hashlib

    return hashlib.sha256(script.encode("utf-8")).hexdigest()
