"""The durable store: an append-only event log plus projections derived from it."""

from .interface import Command, Store, WriteTx
from .open import open_store
from .sqlite import SQLiteStore

__all__ = ["Command", "SQLiteStore", "Store", "WriteTx", "open_store"]

# Every feature's events and projections register themselves when first needed, not here:
# decoding a stored event loads the payload module its type's first word names
# (core.events.PAYLOAD_MODULE_OF) and applying one the projections that word names
# (handlers.PROJECTORS_OF; an unknown word loads them all), so any process that opens a
# store can decode and replay them, and one that only reads tables builds no model.
