"""The durable store: an append-only event log plus projections derived from it."""

from .interface import Command, Store, WriteTx
from .sqlite import SQLiteStore, open_store

__all__ = ["Command", "SQLiteStore", "Store", "WriteTx", "open_store"]
