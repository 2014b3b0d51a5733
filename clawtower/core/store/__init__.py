"""The durable store: an append-only event log plus projections derived from it."""

from .interface import Command, Store, WriteTx
from .open import open_store
from .sqlite import SQLiteStore

__all__ = ["Command", "SQLiteStore", "Store", "WriteTx", "open_store"]

# Every feature's events and projections register themselves when first needed, not here:
# decoding a stored event loads every payload module (core.events.PAYLOAD_MODULES) and
# applying one loads every projection (projections.PROJECTION_MODULES), so any process that
# opens a store can decode and replay them, and one that only reads tables builds no model.
